//! Descriptors and open file descriptions, as the kernel keeps them: a
//! descriptor names a description (and carries its own close-on-exec
//! flag); `dup` gives a second descriptor for the same description, whose
//! offset and status flags both then share.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use novafs::{Attr, FileType, Fs, Ino};
use parking_lot::{Mutex, RwLock};

use crate::dir::Listing;
use crate::errno::{Errno, Result};

/// A descriptor number.
pub type Fd = i32;

/// The status flags fcntl(F_SETFL) may change (Linux's SETFL_MASK, less
/// the ones that mean nothing here).
const SETFL: i32 = libc::O_APPEND | libc::O_NONBLOCK | libc::O_NOATIME | libc::O_DIRECT;

/// An open file description: one open(2).
pub(crate) struct Open {
    fs: Arc<Fs>,
    pub(crate) ino: Ino,
    pub(crate) kind: FileType,
    pub(crate) readable: bool,
    pub(crate) writable: bool,
    /// O_PATH: names the file for the `*at` calls and fstat, nothing else.
    pub(crate) path_only: bool,
    /// The open flags as F_GETFL shows them.
    flags: AtomicI32,
    /// The file offset, locked across a read or write that moves it (as
    /// Linux's f_pos_lock), so that two threads sharing it never both
    /// read or write at the same place.
    pub(crate) pos: Mutex<u64>,
    /// A directory's listing in progress.
    pub(crate) listing: Mutex<Listing>,
}

impl Open {
    /// Registers an open handle with the core: the file outlives its names
    /// until the description is gone.
    pub(crate) fn new(fs: &Arc<Fs>, attr: &Attr, flags: i32) -> Result<Open> {
        fs.open_handle(attr.ino)?;
        Ok(Open::adopt(fs, attr, flags))
    }

    /// The description of a file whose open handle the core registered
    /// already (made by open with O_CREAT).
    pub(crate) fn adopt(fs: &Arc<Fs>, attr: &Attr, flags: i32) -> Open {
        let mode = flags & libc::O_ACCMODE;
        let path_only = flags & libc::O_PATH != 0;
        Open {
            fs: fs.clone(),
            ino: attr.ino,
            kind: attr.kind,
            readable: !path_only && (mode == libc::O_RDONLY || mode == libc::O_RDWR),
            writable: !path_only && (mode == libc::O_WRONLY || mode == libc::O_RDWR),
            path_only,
            flags: AtomicI32::new(flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC | libc::O_CLOEXEC)),
            pos: Mutex::new(0),
            listing: Mutex::new(Listing::default()),
        }
    }

    pub(crate) fn flags(&self) -> i32 {
        self.flags.load(Ordering::Relaxed)
    }

    pub(crate) fn appending(&self) -> bool {
        self.flags() & libc::O_APPEND != 0
    }

    /// fcntl(F_SETFL): only the flags Linux lets change.
    pub(crate) fn set_flags(&self, flags: i32) {
        let keep = self.flags() & !SETFL;
        self.flags.store(keep | (flags & SETFL), Ordering::Relaxed);
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        if let Err(e) = self.fs.release_handle(self.ino) {
            tracing::warn!(ino = self.ino, "novafs: releasing a closed file: {e}");
        }
    }
}

/// One slot of the table: the description and the descriptor's own flag.
#[derive(Clone)]
struct Slot {
    open: Arc<Open>,
    cloexec: bool,
}

/// The descriptor table. Numbers are the lowest free ones, from 0, unless
/// the caller names one (the preload shim uses the numbers of kernel
/// descriptors it reserves, so that a number is never both).
#[derive(Default)]
pub(crate) struct Files {
    slots: RwLock<Vec<Option<Slot>>>,
}

impl Files {
    pub(crate) fn get(&self, fd: Fd) -> Result<Arc<Open>> {
        let slots = self.slots.read();
        usize::try_from(fd)
            .ok()
            .and_then(|i| slots.get(i))
            .and_then(|s| s.as_ref())
            .map(|s| s.open.clone())
            .ok_or(Errno(libc::EBADF))
    }

    /// Installs `open` at the lowest free number, or at `at` (EBADF if it
    /// is taken: the caller must close it first).
    pub(crate) fn install(&self, open: Arc<Open>, cloexec: bool, at: Option<Fd>) -> Result<Fd> {
        let mut slots = self.slots.write();
        let idx = match at {
            Some(fd) => {
                let i = usize::try_from(fd).map_err(|_| Errno(libc::EBADF))?;
                if slots.get(i).is_some_and(Option::is_some) {
                    return Err(Errno(libc::EBADF));
                }
                i
            }
            None => slots.iter().position(Option::is_none).unwrap_or(slots.len()),
        };
        if idx >= slots.len() {
            slots.resize(idx + 1, None);
        }
        slots[idx] = Some(Slot { open, cloexec });
        Fd::try_from(idx).map_err(|_| Errno(libc::EMFILE))
    }

    /// Removes descriptor `fd`; the description goes with its last
    /// descriptor (after any call using it returns).
    pub(crate) fn remove(&self, fd: Fd) -> Result<Arc<Open>> {
        let mut slots = self.slots.write();
        usize::try_from(fd)
            .ok()
            .and_then(|i| slots.get_mut(i))
            .and_then(Option::take)
            .map(|s| s.open)
            .ok_or(Errno(libc::EBADF))
    }

    pub(crate) fn cloexec(&self, fd: Fd) -> Result<bool> {
        let slots = self.slots.read();
        usize::try_from(fd)
            .ok()
            .and_then(|i| slots.get(i))
            .and_then(|s| s.as_ref())
            .map(|s| s.cloexec)
            .ok_or(Errno(libc::EBADF))
    }

    pub(crate) fn set_cloexec(&self, fd: Fd, on: bool) -> Result<()> {
        let mut slots = self.slots.write();
        let slot = usize::try_from(fd)
            .ok()
            .and_then(|i| slots.get_mut(i))
            .and_then(|s| s.as_mut())
            .ok_or(Errno(libc::EBADF))?;
        slot.cloexec = on;
        Ok(())
    }

    /// The descriptors open now.
    pub(crate) fn numbers(&self) -> Vec<Fd> {
        let slots = self.slots.read();
        (0..slots.len())
            .filter(|&i| slots[i].is_some())
            .filter_map(|i| Fd::try_from(i).ok())
            .collect()
    }
}
