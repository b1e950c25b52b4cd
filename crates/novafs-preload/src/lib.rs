//! libnovafs_preload.so: unmodified programs on novafs with no kernel in
//! the data path. Preloaded (`novafs exec`, or `LD_PRELOAD` with
//! `NOVAFS_IMAGE` and `NOVAFS_PREFIX` set by hand), it takes the calls of
//! libc that name a path under the prefix, or a descriptor it opened
//! there, and serves them from the image mounted in this process through
//! libnovafs (`novafs-capi`); every other call goes on to libc.
//!
//! How it is built (PRELOAD.md has the whole design):
//! - [`state`]: who serves the image for this process: the process itself
//!   (the owner, the first one under the shim), or a novafs mount it reaches
//!   through the kernel (a client: every process after the owner's first
//!   fork or exec, see [`handover`]);
//! - [`route`]: which paths are the image's (the prefix, the working
//!   directory, `..`), and how a client's paths become the mount's;
//! - the interposed calls: [`fds`] (descriptors and I/O), [`paths`] (calls
//!   that name files), [`dirs`] (directory streams), [`stdio`] (fopen),
//!   [`process`] (fork, exec, spawn), [`temp`] (mkstemp), [`cwd`] (chdir,
//!   getcwd, realpath), [`creds`] (set*id, umask);
//! - [`real`]: libc's own functions, found once with `dlsym(RTLD_NEXT)`.
//!
//! Descriptors the owner opens on the image are real kernel descriptors
//! (placeholders on /dev/null, close-on-exec in the kernel) under which
//! novafs-posix files the open file description, so a number is never
//! both a kernel file and a novafs one.

#![allow(clippy::missing_safety_doc)] // each interposed call has libc's contract
#![deny(unsafe_op_in_unsafe_fn)]

mod creds;
mod cwd;
mod dirs;
mod fds;
mod handover;
mod paths;
mod process;
mod real;
mod realpath;
mod route;
mod state;
mod stdio;
mod temp;
mod walk;

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::ops::Neg;
use std::panic::{catch_unwind, AssertUnwindSafe};

pub(crate) use state::{shim, Shim};

thread_local! {
    /// Set while this thread runs the shim's own code: the library's own
    /// calls into libc (which reach the interposed symbols too) go
    /// straight to libc.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Runs an interposed call: `ours` with the shim's state when the shim is
/// active and this thread is not inside it already, `theirs` (libc)
/// otherwise. A panic in `ours` is answered EIO; no unwinding reaches C.
pub(crate) fn enter<R: Failure>(ours: impl FnOnce(&'static Shim) -> R, theirs: impl FnOnce() -> R) -> R {
    let Some(shim) = shim() else { return theirs() };
    if INSIDE.with(|i| i.replace(true)) {
        return theirs();
    }
    let r = catch_unwind(AssertUnwindSafe(|| ours(shim))).unwrap_or_else(|_| {
        tracing::error!("novafs preload: a panic inside an interposed call, answered EIO");
        set_errno(libc::EIO);
        R::FAILED
    });
    INSIDE.with(|i| i.set(false));
    r
}

/// Runs `f` as the shim's own code (the constructor, the destructor).
pub(crate) fn inside<R>(f: impl FnOnce() -> R) -> R {
    let was = INSIDE.with(|i| i.replace(true));
    let r = f();
    INSIDE.with(|i| i.set(was));
    r
}

/// Threads the library starts (the core's reclaimer, the unmount at
/// exit) run inside the shim from their first instruction: their calls
/// into libc must not wait for the shim's own locks.
#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: extern "C" fn(*mut c_void) -> *mut c_void,
    arg: *mut c_void,
) -> c_int {
    let real = real::next!(pthread_create: fn(
        *mut libc::pthread_t,
        *const libc::pthread_attr_t,
        extern "C" fn(*mut c_void) -> *mut c_void,
        *mut c_void,
    ) -> c_int);
    if !INSIDE.with(Cell::get) {
        // SAFETY: libc's contract, passed on.
        return unsafe { real(thread, attr, start, arg) };
    }
    let job = Box::into_raw(Box::new((start, arg)));
    // SAFETY: libc's contract, with a start routine that runs the caller's.
    let r = unsafe { real(thread, attr, start_inside, job.cast()) };
    if r != 0 {
        // SAFETY: the thread was not started: the job is still ours.
        drop(unsafe { Box::from_raw(job) });
    }
    r
}

type Job = (extern "C" fn(*mut c_void) -> *mut c_void, *mut c_void);

extern "C" fn start_inside(job: *mut c_void) -> *mut c_void {
    // SAFETY: the Box pthread_create above made for this thread.
    let (start, arg) = *unsafe { Box::from_raw(job.cast::<Job>()) };
    INSIDE.with(|i| i.set(true));
    start(arg)
}

/// Runs `f` as the program would, from inside the shim: the library's
/// own interposed calls then route again (sendfile's copy, stdio's
/// callbacks, which glibc may call from the shim's own flush at exit).
pub(crate) fn as_program<R>(f: impl FnOnce() -> R) -> R {
    let was = INSIDE.with(|i| i.replace(false));
    let r = f();
    INSIDE.with(|i| i.set(was));
    r
}

/// What a C call returns on failure, with errno set.
pub(crate) trait Failure {
    const FAILED: Self;
}

macro_rules! minus_one {
    ($($t:ty),*) => { $(impl Failure for $t { const FAILED: Self = -1; })* };
}
minus_one!(i32, i64, isize);

impl Failure for () {
    const FAILED: Self = ();
}

impl<T> Failure for *mut T {
    const FAILED: Self = std::ptr::null_mut();
}

impl<T> Failure for *const T {
    const FAILED: Self = std::ptr::null();
}

pub(crate) fn set_errno(e: c_int) {
    // SAFETY: errno is this thread's own variable.
    unsafe { *libc::__errno_location() = e };
}

/// Whether the last failure was `e`.
pub(crate) fn errno_is(e: c_int) -> bool {
    // SAFETY: errno is this thread's own variable.
    unsafe { *libc::__errno_location() == e }
}

/// A libnovafs result (`-errno` on failure) as libc returns it: -1 with
/// errno set.
pub(crate) fn libc_ret<T>(r: T) -> T
where
    T: Copy + Ord + Default + Neg<Output = T> + TryInto<c_int> + From<i8>,
{
    if r < T::default() {
        set_errno((-r).try_into().unwrap_or(libc::EIO));
        T::from(-1)
    } else {
        r
    }
}

/// Fails with `e` as libc does.
pub(crate) fn fail<R: Failure>(e: c_int) -> R {
    set_errno(e);
    R::FAILED
}
