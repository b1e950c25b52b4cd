//! mkstemp(3) and its kin: glibc's own make the file with a system call
//! the shim cannot see, so they are made again here over the shim's
//! openat and mkdir (which route the name like any other).

use std::ffi::{c_char, c_int, c_uint};

use crate::paths::{mkdir, openat};
use crate::{errno_is, fail};

/// Letters a unique name is made of, as glibc's.
const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// Names tried before giving up with EEXIST (glibc tries 62^3).
const ATTEMPTS: usize = 1000;

/// Fills the six X before the last `suffix` bytes of `template` with
/// random letters until `make` (of the whole name) does not fail with
/// EEXIST; `make`'s result, or -1 with errno set.
fn unique(template: *mut c_char, suffix: c_int, make: impl Fn(*const c_char) -> c_int) -> c_int {
    if template.is_null() || suffix < 0 {
        return fail(libc::EINVAL);
    }
    // SAFETY: a NUL-terminated template the caller may change (mkstemp's
    // contract).
    let len = unsafe { libc::strlen(template) };
    let suffix = suffix as usize;
    if len < 6 + suffix {
        return fail(libc::EINVAL);
    }
    // SAFETY: `len` bytes of the template, ours to change.
    let name = unsafe { std::slice::from_raw_parts_mut(template.cast::<u8>(), len) };
    let xs = len - suffix - 6..len - suffix;
    if name[xs.clone()].iter().any(|&b| b != b'X') {
        return fail(libc::EINVAL);
    }
    for _ in 0..ATTEMPTS {
        let mut random = [0u8; 6];
        // SAFETY: getrandom(2) into a buffer of its length.
        if unsafe { libc::getrandom(random.as_mut_ptr().cast(), random.len(), 0) } != 6 {
            return fail(libc::EIO);
        }
        for (to, r) in name[xs.clone()].iter_mut().zip(random) {
            *to = LETTERS[r as usize % LETTERS.len()];
        }
        let r = make(template);
        if r >= 0 || !errno_is(libc::EEXIST) {
            return r;
        }
    }
    fail(libc::EEXIST)
}

/// A new file from a template, open read-write with `flags` added.
fn new_file(template: *mut c_char, suffix: c_int, flags: c_int) -> c_int {
    let flags = (flags & !libc::O_ACCMODE) | libc::O_RDWR | libc::O_CREAT | libc::O_EXCL;
    // SAFETY: a C string the template now is.
    unsafe { unique(template, suffix, |p| openat(libc::AT_FDCWD, p, flags, 0o600)) }
}

macro_rules! temp_files {
    ($(fn $name:ident($($a:ident: $t:ty),*) = ($suffix:expr, $flags:expr);)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(template: *mut c_char $(, $a: $t)*) -> c_int {
            new_file(template, $suffix, $flags)
        }
    )*};
}

temp_files! {
    fn mkstemp() = (0, 0);
    fn mkstemp64() = (0, 0);
    fn mkostemp(flags: c_int) = (0, flags);
    fn mkostemp64(flags: c_int) = (0, flags);
    fn mkstemps(suffix: c_int) = (suffix, 0);
    fn mkstemps64(suffix: c_int) = (suffix, 0);
    fn mkostemps(suffix: c_int, flags: c_int) = (suffix, flags);
    fn mkostemps64(suffix: c_int, flags: c_int) = (suffix, flags);
}

#[no_mangle]
pub unsafe extern "C" fn mkdtemp(template: *mut c_char) -> *mut c_char {
    // SAFETY: a C string the template now is.
    let made = unique(template, 0, |p| unsafe { mkdir(p, 0o700 as c_uint) });
    if made < 0 {
        std::ptr::null_mut()
    } else {
        template
    }
}
