//! Directory streams: opendir(3), readdir(3), rewinddir(3), closedir(3).

use std::ffi::{c_char, c_int};

use novafs_posix::{At, Errno, FileType};

use crate::{bytes, guard, handle, number, status, Novafs, Result};

/// One entry, as readdir(3) returns it (`struct dirent`'s fields).
#[repr(C)]
pub struct NovafsDirent {
    pub d_ino: u64,
    /// Where the stream continues after this entry.
    pub d_off: u64,
    /// DT_REG, DT_DIR, …
    pub d_type: u8,
    /// The name, NUL-terminated.
    pub d_name: [c_char; 256],
}

/// An open directory stream: a descriptor on the handle's table and the
/// last entry returned.
pub struct NovafsDir {
    fs: *const Novafs,
    fd: c_int,
    entry: NovafsDirent,
}

fn dtype(kind: FileType) -> u8 {
    match kind {
        FileType::RegularFile => libc::DT_REG,
        FileType::Directory => libc::DT_DIR,
        FileType::Symlink => libc::DT_LNK,
        FileType::CharDevice => libc::DT_CHR,
        FileType::BlockDevice => libc::DT_BLK,
        FileType::NamedPipe => libc::DT_FIFO,
        FileType::Socket => libc::DT_SOCK,
    }
}

/// A stream on descriptor `fd`, which it then owns.
fn stream(fs: *const Novafs, fd: c_int) -> *mut NovafsDir {
    Box::into_raw(Box::new(NovafsDir {
        fs,
        fd,
        entry: NovafsDirent {
            d_ino: 0,
            d_off: 0,
            d_type: 0,
            d_name: [0; 256],
        },
    }))
}

pub(crate) fn set_errno(e: i32) {
    // SAFETY: errno is this thread's own variable.
    unsafe { *libc::__errno_location() = e };
}

/// opendir(3): NULL with errno set on failure (as opendir does).
#[no_mangle]
pub unsafe extern "C" fn novafs_opendir(fs: *const Novafs, path: *const c_char) -> *mut NovafsDir {
    let opened = guard(|| {
        // SAFETY: the crate's contract.
        let (posix, path) = unsafe { (&handle(fs)?.posix, bytes(path)?) };
        posix.open(At::Cwd, path, libc::O_RDONLY | libc::O_DIRECTORY, 0)
    });
    match opened {
        Ok(fd) => stream(fs, fd),
        Err(Errno(e)) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

/// fdopendir(3): a stream on descriptor `fd` (open on a directory), which
/// the stream then owns.
#[no_mangle]
pub unsafe extern "C" fn novafs_fdopendir(fs: *const Novafs, fd: c_int) -> *mut NovafsDir {
    // SAFETY: the crate's contract.
    let checked = guard(|| unsafe { handle(fs) }?.posix.fcntl(fd, libc::F_GETFD, 0));
    match checked {
        Ok(_) => stream(fs, fd),
        Err(Errno(e)) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

/// The stream behind `dir`.
unsafe fn stream_of<'a>(dir: *mut NovafsDir) -> Result<&'a mut NovafsDir> {
    // SAFETY: a stream novafs_opendir returned and not yet closed (the
    // crate's contract).
    unsafe { dir.as_mut() }.ok_or(Errno(libc::EFAULT))
}

/// readdir(3): the next entry (valid until the next call on the stream),
/// or NULL at the end (errno untouched) or on an error (errno set).
#[no_mangle]
pub unsafe extern "C" fn novafs_readdir(dir: *mut NovafsDir) -> *const NovafsDirent {
    let next = guard(|| {
        // SAFETY: the crate's contract.
        let dir = unsafe { stream_of(dir) }?;
        // SAFETY: the handle outlives its streams (the crate's contract).
        let Some(e) = unsafe { handle(dir.fs) }?.posix.readdir(dir.fd)? else {
            return Ok(std::ptr::null());
        };
        let n = e.name.len().min(255);
        dir.entry.d_ino = e.ino;
        dir.entry.d_off = e.next_offset;
        dir.entry.d_type = dtype(e.kind);
        for (d, &s) in dir.entry.d_name.iter_mut().zip(&e.name[..n]) {
            *d = s as c_char;
        }
        dir.entry.d_name[n] = 0;
        Ok(&raw const dir.entry)
    });
    next.unwrap_or_else(|Errno(e)| {
        set_errno(e);
        std::ptr::null()
    })
}

/// rewinddir(3).
#[no_mangle]
pub unsafe extern "C" fn novafs_rewinddir(dir: *mut NovafsDir) {
    let _ = guard(|| {
        // SAFETY: the crate's contract.
        let dir = unsafe { stream_of(dir) }?;
        // SAFETY: the handle outlives its streams (the crate's contract).
        unsafe { handle(dir.fs) }?.posix.lseek(dir.fd, 0, libc::SEEK_SET)
    });
}

/// dirfd(3): the stream's descriptor.
#[no_mangle]
pub unsafe extern "C" fn novafs_dirfd(dir: *mut NovafsDir) -> c_int {
    // SAFETY: the crate's contract.
    number(guard(|| unsafe { stream_of(dir) }.map(|d| d.fd))) as c_int
}

/// closedir(3): 0 or -errno; the stream is gone either way.
#[no_mangle]
pub unsafe extern "C" fn novafs_closedir(dir: *mut NovafsDir) -> c_int {
    if dir.is_null() {
        return -libc::EFAULT;
    }
    // SAFETY: a stream novafs_opendir returned, closed once (the contract).
    let dir = unsafe { Box::from_raw(dir) };
    // SAFETY: the handle outlives its streams (the crate's contract).
    status(guard(|| unsafe { handle(dir.fs) }?.posix.close(dir.fd)))
}
