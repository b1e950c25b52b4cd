//! POSIX calls over the novafs library, in-process: what the C ABI
//! (`libnovafs`) and the preload shim give programs, with no kernel in the
//! data path.
//!
//! [`novafs::Fs`] speaks inode numbers, as FUSE does; a kernel adds the
//! rest, and under FUSE it still does. Here this crate does it instead:
//! - **paths** ([`path`]): absolute and relative ones, from the working
//!   directory or an open directory (the `*at` calls), `.` and `..`,
//!   symbolic links followed as the kernel follows them (ELOOP after 40),
//!   trailing slashes;
//! - **descriptors** ([`fd`]): open file descriptions with their offset and
//!   status flags, shared by `dup`, each holding its file open in the core
//!   (an unlinked file lives until its last close, as on Linux);
//! - **permissions**: every check the kernel's VFS makes before it calls a
//!   file system (search permission on each directory of a path, access
//!   at open, create and delete rights, the sticky bit, who may chmod,
//!   chown or set times, which xattr namespaces a caller may touch),
//!   through the core's checks for a [`Cred`] (`novafs::Fs::permission` and
//!   its neighbours). Under the mount the kernel makes them; here the
//!   image's own mode is the boundary (README "Trust model");
//! - **mappings**: mmap of a file's persistent-memory pages themselves
//!   (DAX), kept until munmap.
//!
//! Every call returns `Result<_, Errno>`; the C ABI returns `-errno`.

#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

mod calls;
mod dir;
mod errno;
pub mod fd;
pub mod path;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

pub use calls::attrs::Time;
pub use errno::{Errno, Result};
pub use fd::Fd;
pub use novafs::{Attr, Cred, DirEntry, FileType, Fs, Ino, ROOT_INO};
pub use path::At;

/// A process's view of one novafs file system: its descriptors, its
/// working directory, its credentials and umask. Thread-safe.
pub struct Posix {
    fs: Arc<Fs>,
    files: fd::Files,
    /// The working directory's inode (the image's root at the start).
    cwd: AtomicU64,
    cred: RwLock<Cred>,
    /// What access(2) checks with without AT_EACCESS (the real ids).
    access_cred: RwLock<Cred>,
    umask: AtomicU32,
    /// The mappings made through [`Posix::mmap`].
    maps: calls::maps::Maps,
    /// What a MAP_SHARED mapping is ([`Posix::set_map_kind`]).
    map_kind: parking_lot::Mutex<novafs::MapKind>,
}

/// Which file a call names: a path (from `at`, following a symbolic link
/// at its end when `follow`), or an open descriptor.
#[derive(Clone, Copy, Debug)]
pub enum Target<'a> {
    Path { at: At, path: &'a [u8], follow: bool },
    Fd(Fd),
}

impl Posix {
    /// A process on `fs` with credentials `cred` and umask `umask`, its
    /// working directory the image's root.
    pub fn new(fs: Arc<Fs>, cred: Cred, umask: u32) -> Posix {
        Posix {
            fs,
            files: fd::Files::default(),
            cwd: AtomicU64::new(novafs::ROOT_INO),
            access_cred: RwLock::new(cred.clone()),
            cred: RwLock::new(cred),
            umask: AtomicU32::new(umask & 0o777),
            maps: Default::default(),
            map_kind: Default::default(),
        }
    }

    /// What a MAP_SHARED mapping made from now on is: DAX (the file's own
    /// pages, the default here) or atomic (replicas committed at msync,
    /// NOVA §4.5).
    pub fn set_map_kind(&self, kind: novafs::MapKind) {
        *self.map_kind.lock() = kind;
    }

    /// The file system itself (snapshots, scrub, statistics).
    pub fn fs(&self) -> &Arc<Fs> {
        &self.fs
    }

    /// Closes every descriptor and gives back the file system (to
    /// unmount it).
    pub fn into_fs(self) -> Arc<Fs> {
        drop(self.maps);
        drop(self.files);
        self.fs
    }

    /// The credentials the checks use now.
    pub fn cred(&self) -> Cred {
        self.cred.read().clone()
    }

    /// Changes the credentials (after setuid, setgroups, capset).
    pub fn set_cred(&self, cred: Cred) {
        *self.cred.write() = cred;
    }

    /// The credentials access(2) checks with when not asked for the
    /// effective ones (`novafs::Cred::real_of_process`); the credentials
    /// given at the start until then.
    pub fn set_access_cred(&self, cred: Cred) {
        *self.access_cred.write() = cred;
    }

    fn access_cred(&self) -> Cred {
        self.access_cred.read().clone()
    }

    /// umask(2): sets the mask and returns the old one.
    pub fn umask(&self, mask: u32) -> u32 {
        self.umask.swap(mask & 0o777, Ordering::Relaxed)
    }

    fn current_umask(&self) -> u32 {
        self.umask.load(Ordering::Relaxed)
    }

    fn cwd(&self) -> Ino {
        self.cwd.load(Ordering::Relaxed)
    }
}
