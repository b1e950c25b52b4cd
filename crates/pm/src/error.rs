//! Errors of the `pm` layer and their errno mapping.
//!
//! Owns [`PmError`] and the range checks every [`crate::Region`] method runs
//! before touching memory: offsets and lengths come from the media and are
//! untrusted (DESIGN.md §5), so a bad one is an error value, never a panic.

use std::io;

/// What went wrong in a region access or while mapping a region.
#[derive(Debug, thiserror::Error)]
pub enum PmError {
    /// `[off, off + len)` does not lie inside the region (or overflows).
    #[error("range {off:#x}+{len:#x} is outside the region ({size:#x} bytes)")]
    OutOfBounds {
        /// Start of the requested range.
        off: u64,
        /// Length of the requested range.
        len: u64,
        /// Size of the region.
        size: u64,
    },

    /// The media could not deliver the bytes at `off` (poisoned or unbacked).
    #[error("media error at region offset {off:#x}")]
    Media {
        /// Region offset of the first unreadable byte of the access.
        off: u64,
    },

    /// An 8-byte atomic access at an offset that is not 8-aligned.
    #[error("offset {off:#x} is not 8-byte aligned")]
    Misaligned {
        /// The offending offset.
        off: u64,
    },

    /// A system call on the backing file or device failed.
    #[error("{path}: {source}")]
    Io {
        /// File or device the call was about.
        path: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// Another open file description holds the region's lock.
    #[error("{path} is in use by another novafs process (mounted or being checked)")]
    Busy {
        /// The locked file or device.
        path: String,
    },

    /// The file or device cannot back a region (wrong type or size).
    #[error("{path}: {msg}")]
    Invalid {
        /// The file or device.
        path: String,
        /// Why it was refused.
        msg: String,
    },
}

impl PmError {
    /// The errno a POSIX front end should report for this error.
    pub fn errno(&self) -> i32 {
        match self {
            // A range outside the region means corrupt metadata pointed there:
            // to the caller that is an I/O error, not a bad argument.
            PmError::OutOfBounds { .. } | PmError::Media { .. } => libc::EIO,
            PmError::Misaligned { .. } | PmError::Invalid { .. } => libc::EINVAL,
            PmError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            PmError::Busy { .. } => libc::EBUSY,
        }
    }

    pub(crate) fn io(path: &std::path::Path, source: io::Error) -> PmError {
        PmError::Io {
            path: path.display().to_string(),
            source,
        }
    }

    pub(crate) fn invalid(path: &std::path::Path, msg: impl Into<String>) -> PmError {
        PmError::Invalid {
            path: path.display().to_string(),
            msg: msg.into(),
        }
    }
}

/// Checks that `[off, off + len)` lies inside a region of `size` bytes.
pub(crate) fn check_range(off: u64, len: u64, size: u64) -> Result<(), PmError> {
    match off.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(PmError::OutOfBounds { off, len, size }),
    }
}

/// Checks an 8-byte atomic access: aligned and inside the region.
pub(crate) fn check_u64(off: u64, size: u64) -> Result<(), PmError> {
    if !off.is_multiple_of(8) {
        return Err(PmError::Misaligned { off });
    }
    check_range(off, 8, size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_check_accepts_exact_fit_and_rejects_overflow() {
        assert!(check_range(0, 4096, 4096).is_ok());
        assert!(check_range(4096, 0, 4096).is_ok());
        assert!(matches!(
            check_range(4097, 0, 4096),
            Err(PmError::OutOfBounds { off: 4097, .. })
        ));
        assert!(check_range(1, 4096, 4096).is_err());
        assert!(check_range(u64::MAX, 2, 4096).is_err());
    }

    #[test]
    fn u64_check_rejects_misaligned_before_bounds() {
        assert!(matches!(check_u64(4, 4096), Err(PmError::Misaligned { off: 4 })));
        assert!(matches!(check_u64(4096, 4096), Err(PmError::OutOfBounds { .. })));
        assert!(check_u64(4088, 4096).is_ok());
    }

    #[test]
    fn errors_map_to_errno() {
        let oob = PmError::OutOfBounds {
            off: 1,
            len: 2,
            size: 3,
        };
        assert_eq!(oob.errno(), libc::EIO);
        assert_eq!(PmError::Media { off: 0 }.errno(), libc::EIO);
        assert_eq!(PmError::Misaligned { off: 1 }.errno(), libc::EINVAL);
        let io = PmError::Io {
            path: "x".into(),
            source: io::Error::from_raw_os_error(libc::ENOENT),
        };
        assert_eq!(io.errno(), libc::ENOENT);
        let busy = PmError::Busy {
            path: "/dev/shm/img".into(),
        };
        assert_eq!(busy.errno(), libc::EBUSY);
        assert_eq!(
            busy.to_string(),
            "/dev/shm/img is in use by another novafs process (mounted or being checked)"
        );
        let inval = PmError::Invalid {
            path: "x".into(),
            msg: "y".into(),
        };
        assert_eq!(inval.errno(), libc::EINVAL);
    }
}
