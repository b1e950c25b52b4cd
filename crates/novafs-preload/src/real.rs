//! libc's own functions behind the ones the shim interposes: each found
//! once, on first use, with `dlsym(RTLD_NEXT)` (the next definition after
//! this library in the lookup order: libc's).

use std::sync::atomic::{AtomicUsize, Ordering};

/// The address of libc's `name` (NUL-terminated), cached in `slot`. A
/// libc without it cannot run the program the shim was asked to serve: the
/// process stops with a message naming it.
pub(crate) fn resolve(slot: &AtomicUsize, name: &'static str) -> usize {
    let cached = slot.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    // SAFETY: `name` is NUL-terminated (every caller is the `next!` macro,
    // which appends the NUL); RTLD_NEXT is a valid pseudo-handle.
    let found = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
    if found == 0 {
        let msg = format!("novafs preload: libc has no {}\n", name.trim_end_matches('\0'));
        // SAFETY: writes a buffer of its own length to stderr, then ends the
        // process without running anything else of it.
        unsafe {
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::_exit(127);
        }
    }
    slot.store(found, Ordering::Relaxed);
    found
}

/// libc's function `name` with the given C signature:
/// `next!(read: fn(c_int, *mut c_void, usize) -> isize)(fd, buf, n)`.
macro_rules! next {
    ($name:ident: fn($($t:ty),* $(,)?) -> $r:ty) => {{
        static SLOT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let addr = $crate::real::resolve(&SLOT, concat!(stringify!($name), "\0"));
        // SAFETY: `addr` is libc's definition of this very symbol, whose C
        // signature is the one written here (as its man page gives it).
        #[allow(unused_unsafe)] // most callers are in an unsafe block already
        let f: unsafe extern "C" fn($($t),*) -> $r = unsafe { std::mem::transmute::<usize, _>(addr) };
        f
    }};
}
pub(crate) use next;
