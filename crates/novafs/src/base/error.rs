//! The one error type of the core. Every variant maps to an errno so the FUSE
//! adapter and the C ABI can reply with it unchanged.

use pm::PmError;

/// Result of every fallible core call.
pub type Result<T> = std::result::Result<T, Error>;

/// What went wrong, as precisely as the caller needs to react to it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    Corrupt(Corruption),
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

/// The on-media structure a corruption error found damaged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Structure {
    /// A superblock copy: its checksum or its geometry.
    Superblock,
    /// An inode record: checksum, state word, mode, size or slot.
    InodeRecord,
    /// An inode table: a chunk pointer, a chunk footer, a missing table.
    InodeTable,
    /// An entry of an inode's log: length, checksum, type or contents.
    LogEntry,
    /// A chain of log pages: head, tail and the links between pages.
    LogPage,
    /// The allocator state a clean unmount saved (free pages and inodes).
    AllocatorState,
    /// The snapshot list's records.
    SnapshotList,
    /// A snapshot's manifest: what it keeps of deleted files.
    SnapshotManifest,
    /// A directory's entries, or the tree of directories.
    Directory,
    /// A symbolic link's target.
    Symlink,
    /// A file's data page, past what its checksums and parity rebuild.
    DataPage,
    /// An extended attribute's entry or value.
    Xattr,
    /// A structure the failed check cannot name (a record shorter than its
    /// type), or no structure at all (a scan thread that panicked).
    Other,
}

/// What a corruption error found damaged: the structure, where it sits on
/// the media and whose it is when that is known, and the detail a person
/// reads (the error's message).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Corruption {
    structure: Structure,
    offset: Option<u64>,
    ino: Option<u64>,
    detail: String,
}

impl Corruption {
    /// Damage to `structure`, described by `detail`.
    pub(crate) fn new(structure: Structure, offset: Option<u64>, ino: Option<u64>, detail: String) -> Self {
        Self {
            structure,
            offset,
            ino,
            detail,
        }
    }

    /// The kind of structure found damaged.
    pub fn structure(&self) -> Structure {
        self.structure
    }

    /// The structure's byte offset in the image, when known.
    pub fn offset(&self) -> Option<u64> {
        self.offset
    }

    /// The inode the structure belongs to, when known.
    pub fn ino(&self) -> Option<u64> {
        self.ino
    }

    /// What was wrong, in words (the error's message).
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// The same damage, its detail prefixed with what was being looked at.
    pub(crate) fn within(mut self, what: std::fmt::Arguments<'_>) -> Self {
        self.detail = format!("{what}: {}", self.detail);
        self
    }
}

impl std::fmt::Display for Corruption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.detail)
    }
}

/// A corruption error: the damaged [`Structure`] (by its variant's name),
/// optionally `at = offset` and `ino = inode`, then the message's format.
macro_rules! corrupt {
    ($s:ident, at = $off:expr, ino = $ino:expr, $($arg:tt)+) => {
        $crate::error::corrupt!(@ $s, Some($off), Some($ino), $($arg)+)
    };
    ($s:ident, at = $off:expr, $($arg:tt)+) => {
        $crate::error::corrupt!(@ $s, Some($off), None, $($arg)+)
    };
    ($s:ident, ino = $ino:expr, $($arg:tt)+) => {
        $crate::error::corrupt!(@ $s, None, Some($ino), $($arg)+)
    };
    (@ $s:ident, $off:expr, $ino:expr, $($arg:tt)+) => {
        $crate::error::Error::Corrupt($crate::error::Corruption::new(
            $crate::error::Structure::$s,
            $off,
            $ino,
            format!($($arg)+),
        ))
    };
    ($s:ident, $($arg:tt)+) => {
        $crate::error::corrupt!(@ $s, None, None, $($arg)+)
    };
}
pub(crate) use corrupt;
