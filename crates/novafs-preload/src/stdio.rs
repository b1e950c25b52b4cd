//! stdio on the image's files. glibc's `FILE` reads and writes its
//! descriptor with system calls the shim cannot see, so fopen and fdopen
//! of an image file make a cookie stream (fopencookie(3)) whose reads,
//! writes and seeks come back through the shim's own calls; fileno gives
//! its descriptor back.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void, CStr};

use parking_lot::Mutex;

use crate::real::next;
use crate::state::{Owner, Shim};
use crate::{as_program, enter, fail, fds, paths::at_path};

#[repr(C)]
struct CookieIo {
    read: Option<unsafe extern "C" fn(*mut c_void, *mut c_char, usize) -> isize>,
    write: Option<unsafe extern "C" fn(*mut c_void, *const c_char, usize) -> isize>,
    seek: Option<unsafe extern "C" fn(*mut c_void, *mut i64, c_int) -> c_int>,
    close: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
}

extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, io: CookieIo) -> *mut libc::FILE;
}

/// The descriptor under each cookie stream, for fileno.
static STREAMS: Mutex<BTreeMap<usize, c_int>> = Mutex::new(BTreeMap::new());

fn fd_of(cookie: *mut c_void) -> c_int {
    cookie as usize as c_int
}

unsafe extern "C" fn cookie_read(cookie: *mut c_void, buf: *mut c_char, n: usize) -> isize {
    // SAFETY: stdio's buffer of `n` bytes.
    as_program(|| unsafe { fds::read(fd_of(cookie), buf.cast(), n) })
}

unsafe extern "C" fn cookie_write(cookie: *mut c_void, buf: *const c_char, n: usize) -> isize {
    // SAFETY: stdio's `n` bytes.
    as_program(|| unsafe { fds::write(fd_of(cookie), buf.cast(), n) })
}

unsafe extern "C" fn cookie_seek(cookie: *mut c_void, off: *mut i64, whence: c_int) -> c_int {
    // SAFETY: stdio's offset, in and out.
    let at = as_program(|| unsafe { fds::lseek(fd_of(cookie), *off, whence) });
    if at < 0 {
        return -1;
    }
    // SAFETY: as above.
    unsafe { *off = at };
    0
}

unsafe extern "C" fn cookie_close(cookie: *mut c_void) -> c_int {
    // SAFETY: the stream's own descriptor, closed with it.
    as_program(|| unsafe { fds::close(fd_of(cookie)) })
}

/// open(2)'s flags for an fopen mode ("r", "w+", "ae", ...).
fn open_flags(mode: &[u8]) -> Option<c_int> {
    let mut flags = match mode.first()? {
        b'r' => libc::O_RDONLY,
        b'w' => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        b'a' => libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND,
        _ => return None,
    };
    for &c in &mode[1..] {
        match c {
            b'+' => flags = (flags & !libc::O_ACCMODE) | libc::O_RDWR,
            b'e' => flags |= libc::O_CLOEXEC,
            b'x' => flags |= libc::O_EXCL,
            _ => {}
        }
    }
    Some(flags)
}

/// A cookie stream on image descriptor `fd` (closed on failure).
fn stream(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
    let io = CookieIo {
        read: Some(cookie_read),
        write: Some(cookie_write),
        seek: Some(cookie_seek),
        close: Some(cookie_close),
    };
    // SAFETY: a cookie that is a number, stdio's mode string, and
    // callbacks of the signatures fopencookie takes.
    let f = unsafe { fopencookie(fd as usize as *mut c_void, mode, io) };
    if f.is_null() {
        // SAFETY: closing the descriptor the stream would have owned.
        as_program(|| unsafe { fds::close(fd) });
    } else {
        STREAMS.lock().insert(f as usize, fd);
    }
    f
}

fn image_fopen(s: &'static Shim, o: &Owner, d: c_int, p: &CStr, mode: *const c_char) -> *mut libc::FILE {
    // SAFETY: fopen's mode is a C string.
    let Some(flags) = open_flags(unsafe { CStr::from_ptr(mode) }.to_bytes()) else {
        return fail(libc::EINVAL);
    };
    let abs = || s.absolute_of(&s.mode.read(), p.to_bytes());
    let fd = fds::open_image(o, d, p.to_bytes(), flags, 0o666, abs);
    if fd < 0 {
        return std::ptr::null_mut();
    }
    stream(fd, mode)
}

#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    // SAFETY: libc's contract, passed on.
    let theirs =
        |p: *const c_char| unsafe { next!(fopen: fn(*const c_char, *const c_char) -> *mut libc::FILE)(p, mode) };
    if mode.is_null() {
        return theirs(path);
    }
    enter(
        |s| {
            at_path(
                s,
                libc::AT_FDCWD,
                path,
                |o, d, p| image_fopen(s, o, d, p, mode),
                |_, p| theirs(p),
            )
        },
        || theirs(path),
    )
}

#[no_mangle]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    // SAFETY: the same call.
    unsafe { fopen(path, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
    // SAFETY: libc's contract, passed on.
    let theirs = || unsafe { next!(fdopen: fn(c_int, *const c_char) -> *mut libc::FILE)(fd, mode) };
    if mode.is_null() {
        return theirs();
    }
    enter(|s| fds::on_fd(s, fd, |_| stream(fd, mode), theirs), theirs)
}

#[no_mangle]
pub unsafe extern "C" fn fileno(f: *mut libc::FILE) -> c_int {
    // SAFETY: libc's contract, passed on.
    let theirs = || unsafe { next!(fileno: fn(*mut libc::FILE) -> c_int)(f) };
    match STREAMS.lock().get(&(f as usize)) {
        Some(&fd) => fd,
        None => theirs(),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fileno_unlocked(f: *mut libc::FILE) -> c_int {
    // SAFETY: the same call.
    unsafe { fileno(f) }
}

#[no_mangle]
pub unsafe extern "C" fn fclose(f: *mut libc::FILE) -> c_int {
    // The address may be reused by the next stream: forget it first.
    STREAMS.lock().remove(&(f as usize));
    // SAFETY: libc's contract, passed on.
    unsafe { next!(fclose: fn(*mut libc::FILE) -> c_int)(f) }
}
