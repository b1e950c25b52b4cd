//! mmap(2), munmap(2), msync(2): a file's persistent-memory pages in the
//! process (DAX), loads and stores straight to the file; or, with
//! NOVAFS_MMAP_ATOMIC, replicas of them that msync commits atomically.

use std::ffi::{c_int, c_void};

use novafs_posix::Errno;

use crate::dir::set_errno;
use crate::{guard, handle, status, Novafs};

/// mmap(2): MAP_SHARED (read or read-write) or MAP_PRIVATE read-only
/// mappings of `len` bytes of `fd` from `off`, a multiple of the page
/// size; `addr` is a hint, ignored (MAP_FIXED is refused with EINVAL).
/// Returns the address, or MAP_FAILED with errno set, as mmap does.
#[no_mangle]
pub unsafe extern "C" fn novafs_mmap(
    fs: *const Novafs,
    _addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: i64,
) -> *mut c_void {
    let mapped = guard(|| {
        if flags & libc::MAP_FIXED != 0 || prot & libc::PROT_EXEC != 0 {
            return Err(Errno(libc::EINVAL));
        }
        let shared = match flags & (libc::MAP_SHARED | libc::MAP_PRIVATE) {
            libc::MAP_SHARED => true,
            libc::MAP_PRIVATE => false,
            _ => return Err(Errno(libc::EINVAL)),
        };
        let write = prot & libc::PROT_WRITE != 0;
        // SAFETY: the crate's contract.
        unsafe { handle(fs) }?.posix.mmap(fd, off, len, write, shared)
    });
    match mapped {
        Ok(addr) => addr as *mut c_void,
        Err(Errno(e)) => {
            set_errno(e);
            libc::MAP_FAILED
        }
    }
}

/// munmap(2) of a whole mapping novafs_mmap made (a part is EINVAL).
/// 0 or -errno.
#[no_mangle]
pub unsafe extern "C" fn novafs_munmap(fs: *const Novafs, addr: *mut c_void, len: usize) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe { handle(fs) }?.posix.munmap(addr as usize, len)))
}

/// msync(2): the pages of the mapping holding `addr` stored to since the
/// last msync are sealed (checksums, parity) and persistent (the stores
/// themselves are durable once flushed, MS_SYNC or not); of an atomic
/// mapping, committed to the file all at once. 0 or -errno.
#[no_mangle]
pub unsafe extern "C" fn novafs_msync(fs: *const Novafs, addr: *mut c_void, _len: usize, _flags: c_int) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe { handle(fs) }?.posix.msync(addr as usize)))
}
