//! Snapshots (NOVA-Fortis §3): taken in constant time, listed, opened
//! read-only beside the live file system, deleted.

use std::ffi::{c_char, c_int};
use std::sync::Arc;

use crate::convert::copy_out;
use crate::{bytes, guard, handle, new_handle, number, status, Novafs};

/// Takes a snapshot named `name` of the whole file system. 0 or -errno
/// (EEXIST: the name is taken).
#[no_mangle]
pub unsafe extern "C" fn novafs_snapshot_take(fs: *const Novafs, name: *const c_char) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe {
        Ok(handle(fs)?.posix.fs().take_snapshot(bytes(name)?).map(drop)?)
    }))
}

/// Deletes snapshot `name`; its pages come back in the background. 0 or
/// -errno (ENOENT: no such snapshot).
#[no_mangle]
pub unsafe extern "C" fn novafs_snapshot_delete(fs: *const Novafs, name: *const c_char) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe {
        Ok(handle(fs)?.posix.fs().delete_snapshot(bytes(name)?).map(drop)?)
    }))
}

/// The snapshots' names, oldest first, each ending in NUL, as
/// listxattr(2) returns names: with `size` 0 only the length needed;
/// -ERANGE if they do not fit.
#[no_mangle]
pub unsafe extern "C" fn novafs_snapshot_list(fs: *const Novafs, list: *mut c_char, size: usize) -> isize {
    number(guard(|| {
        // SAFETY: the crate's contract.
        let fs = unsafe { handle(fs) }?;
        let mut names = Vec::new();
        for s in fs.posix.fs().snapshots() {
            names.extend_from_slice(&s.name);
            names.push(0);
        }
        // SAFETY: the crate's contract.
        unsafe { copy_out(&names, list.cast(), size, false) }
    })) as isize
}

/// Opens snapshot `name` read-only, as a handle of its own (its paths,
/// descriptors and calls are those of the file system as it was; writes
/// fail with EROFS); `novafs_unmount` closes it. NULL with the errno in
/// `*err` on failure.
#[no_mangle]
pub unsafe extern "C" fn novafs_snapshot_open(fs: *const Novafs, name: *const c_char, err: *mut c_int) -> *mut Novafs {
    let opened = guard(|| {
        // SAFETY: the crate's contract.
        let (fs, name) = unsafe { (handle(fs)?, bytes(name)?) };
        let view = fs.posix.fs().open_snapshot(name)?;
        Ok(Novafs::new(Arc::new(view)))
    });
    // SAFETY: the crate's contract.
    unsafe { new_handle(opened, err) }
}
