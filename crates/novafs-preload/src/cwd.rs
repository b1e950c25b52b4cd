//! The working directory: chdir into the prefix moves the image's (the
//! kernel's stays where it was), and getcwd answers with the paths the
//! program knows (never a client's mount point).

use std::ffi::{c_char, c_int, CStr};

use crate::real::next;
use crate::state::{kernel_cwd, Mode, Shim};
use crate::{enter, fail, paths::at_path};

#[no_mangle]
pub unsafe extern "C" fn chdir(path: *const c_char) -> c_int {
    // SAFETY: libc's contract, passed on.
    let kernel = |p: *const c_char| unsafe { next!(chdir: fn(*const c_char) -> c_int)(p) };
    let ours = |s: &'static Shim| {
        at_path(
            s,
            libc::AT_FDCWD,
            path,
            |o, _, p| {
                // SAFETY: a C string; the owner's handle.
                let r = crate::libc_ret(unsafe { capi::novafs_chdir(o.handle(), p.as_ptr()) });
                if r == 0 {
                    // SAFETY: checked non-null by at_path.
                    let named = unsafe { CStr::from_ptr(path) }.to_bytes();
                    let mode = s.mode.read();
                    let abs = s.absolute_of(&mode, named);
                    *o.cwd.lock() = Some(abs);
                }
                r
            },
            |_, p| kernel_moved(s, kernel(p)),
        )
    };
    enter(ours, || kernel(path))
}

/// After a chdir the kernel made: the image's working directory is no
/// longer the process's.
fn kernel_moved(s: &Shim, r: c_int) -> c_int {
    if r == 0 {
        *s.kernel_cwd.lock() = crate::inside(kernel_cwd);
        if let Mode::Owner(o) = &*s.mode.read() {
            *o.cwd.lock() = None;
        }
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn fchdir(fd: c_int) -> c_int {
    // SAFETY: libc's contract, passed on.
    let kernel = || unsafe { next!(fchdir: fn(c_int) -> c_int)(fd) };
    let ours = |s: &'static Shim| {
        crate::fds::on_fd(
            s,
            fd,
            |o| {
                let Some(abs) = o.dir_paths.lock().get(&fd).cloned() else {
                    return fail(libc::ENOTDIR);
                };
                // SAFETY: the owner's handle.
                let r = crate::libc_ret(unsafe { capi::novafs_fchdir(o.handle(), fd) });
                if r == 0 {
                    *o.cwd.lock() = Some(abs);
                }
                r
            },
            || kernel_moved(s, kernel()),
        )
    };
    enter(ours, kernel)
}

/// Copies `path` out as getcwd(3) does (a NULL `buf` is allocated, of
/// `size` bytes or as needed when `size` is 0).
pub(crate) fn copy_path_out(path: &[u8], buf: *mut c_char, size: usize) -> *mut c_char {
    let need = path.len() + 1;
    let buf = if buf.is_null() {
        let room = if size == 0 { need } else { size };
        if room < need {
            return fail(libc::ERANGE);
        }
        // SAFETY: malloc of a size; the caller frees it (getcwd's contract).
        let b = unsafe { libc::malloc(room) }.cast::<c_char>();
        if b.is_null() {
            return fail(libc::ENOMEM);
        }
        b
    } else if size < need {
        return fail(libc::ERANGE);
    } else {
        buf
    };
    // SAFETY: `buf` has room for the path and its NUL, checked above.
    unsafe {
        std::ptr::copy_nonoverlapping(path.as_ptr(), buf.cast::<u8>(), path.len());
        *buf.add(path.len()) = 0;
    }
    buf
}

#[no_mangle]
pub unsafe extern "C" fn getcwd(buf: *mut c_char, size: usize) -> *mut c_char {
    // SAFETY: libc's contract, passed on.
    let theirs = || unsafe { next!(getcwd: fn(*mut c_char, usize) -> *mut c_char)(buf, size) };
    let ours = |s: &'static Shim| {
        let mode = s.mode.read();
        let path = match &*mode {
            Mode::Owner(o) => o.cwd.lock().clone(),
            Mode::Client(_) => Some(s.shown_path(&mode, &kernel_cwd())),
            Mode::Closed => None,
        };
        drop(mode);
        match path {
            Some(p) => copy_path_out(&p, buf, size),
            None => theirs(),
        }
    };
    enter(ours, theirs)
}

#[no_mangle]
pub unsafe extern "C" fn __getcwd_chk(buf: *mut c_char, size: usize, _room: usize) -> *mut c_char {
    // SAFETY: the same contract, passed on.
    unsafe { getcwd(buf, size) }
}

#[no_mangle]
pub unsafe extern "C" fn get_current_dir_name() -> *mut c_char {
    // SAFETY: getcwd allocating its buffer.
    unsafe { getcwd(std::ptr::null_mut(), 0) }
}
