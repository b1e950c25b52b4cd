//! The one error type of the core. Every variant maps to an errno so the FUSE
//! adapter and the C ABI can reply with it unchanged.

use pm::PmError;

/// Result of every fallible core call.
pub type Result<T> = std::result::Result<T, Error>;

/// What went wrong, as precisely as the caller needs to react to it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("directory not empty")]
    NotEmpty,
    #[error("name longer than 255 bytes")]
    NameTooLong,
    #[error("no space left on the device")]
    NoSpace,
    #[error("too many links")]
    TooManyLinks,
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    #[error("file too large")]
    FileTooBig,
    #[error("read-only file system")]
    ReadOnly,
    #[error("operation not supported: {0}")]
    NotSupported(&'static str),
    #[error("too many levels of symbolic links")]
    Loop,
    #[error("damaged on the media: {0}")]
    Corrupt(String),
    #[error("this image is not a novafs file system ({0})")]
    NotNovafs(String),
    #[error("image format version {found} is newer than this novafs supports ({supported}); upgrade novafs")]
    TooNew { found: u32, supported: u32 },
    #[error("region of {size} bytes is too small: novafs needs at least {min} bytes")]
    TooSmall { size: u64, min: u64 },
    #[error("no data or hole past the end of the file")]
    NoSuchOffset,
    #[error("in use: {0}")]
    Busy(&'static str),
    #[error("operation not permitted")]
    NotPermitted,
    #[error("permission denied: {0}")]
    Access(&'static str),
    #[error("no such attribute")]
    NoData,
    #[error("result does not fit the buffer, or the name is empty or too long")]
    Range,
    #[error("attribute value larger than 64 KiB")]
    TooBig,
    #[error(transparent)]
    Pm(#[from] PmError),
}

impl Error {
    /// The errno a POSIX caller should see.
    pub fn errno(&self) -> i32 {
        match self {
            Error::NotFound => libc::ENOENT,
            Error::Exists => libc::EEXIST,
            Error::NotDir => libc::ENOTDIR,
            Error::IsDir => libc::EISDIR,
            Error::NotEmpty => libc::ENOTEMPTY,
            Error::NameTooLong => libc::ENAMETOOLONG,
            Error::NoSpace => libc::ENOSPC,
            Error::TooManyLinks => libc::EMLINK,
            Error::Invalid(_) => libc::EINVAL,
            Error::FileTooBig => libc::EFBIG,
            Error::ReadOnly => libc::EROFS,
            Error::NotSupported(_) => libc::EOPNOTSUPP,
            Error::Loop => libc::ELOOP,
            Error::TooSmall { .. } => libc::ENOSPC,
            Error::NoSuchOffset => libc::ENXIO,
            Error::Busy(_) => libc::EBUSY,
            Error::NotPermitted => libc::EPERM,
            Error::Access(_) => libc::EACCES,
            Error::NoData => libc::ENODATA,
            Error::Range => libc::ERANGE,
            Error::TooBig => libc::E2BIG,
            Error::Corrupt(_) | Error::NotNovafs(_) | Error::TooNew { .. } => libc::EIO,
            Error::Pm(e) => e.errno(),
        }
    }
}

/// Shorthand for a corruption error with a formatted message.
macro_rules! corrupt {
    ($($arg:tt)*) => { $crate::error::Error::Corrupt(format!($($arg)*)) };
}
pub(crate) use corrupt;
