//! The error every call returns: an errno value, as Linux gives it.

use std::fmt;

/// An errno value (`libc::ENOENT`, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

/// What every call returns.
pub type Result<T> = std::result::Result<T, Errno>;

impl From<novafs::Error> for Errno {
    fn from(e: novafs::Error) -> Errno {
        if e.errno() == libc::EIO {
            tracing::warn!("novafs: {e}");
        }
        Errno(e.errno())
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

impl std::error::Error for Errno {}
