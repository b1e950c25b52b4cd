//! Calls on descriptors: the image's go to libnovafs, the rest to libc.
//!
//! An image descriptor is a kernel descriptor on /dev/null (close-on-exec
//! in the kernel whatever the program asks: a program exec'd without the
//! handover gets EBADF on it, never /dev/null) under whose number
//! novafs-posix files the open file description. Closing closes both;
//! dup and fcntl(F_DUPFD) reserve the new number in the kernel first.

use std::ffi::{c_int, c_uint, c_void};

use novafs_posix::{Errno, FileType};

use crate::real::next;
use crate::state::{Mode, Owner, Shim};
use crate::{enter, fail, libc_ret};

/// The library's own descriptors (the image's, which holds its lock; the
/// clients' lock): a program's close of one, dup2 over one or
/// close_range across them leaves them be. They sit high (pm's
/// `above_program_descriptors`), where programs seldom look.
static OWN: parking_lot::Mutex<Vec<c_int>> = parking_lot::Mutex::new(Vec::new());

pub(crate) fn keep_own(fd: c_int) {
    OWN.lock().push(fd);
}

/// Forgets the image's descriptors (the owner unmounts: they close).
pub(crate) fn forget_own() {
    OWN.lock().clear();
}

fn is_own(fd: c_int) -> bool {
    OWN.lock().contains(&fd)
}

/// Runs `image` when `fd` is the image's in this process, `kernel`
/// otherwise.
pub(crate) fn on_fd<R>(s: &Shim, fd: c_int, image: impl FnOnce(&Owner) -> R, kernel: impl FnOnce() -> R) -> R {
    let mode = s.mode.read();
    match &*mode {
        Mode::Owner(o) if o.owns(fd) => image(o),
        _ => {
            drop(mode);
            kernel()
        }
    }
}

/// The library's own descriptor on /dev/null (high, kept from the
/// program) that placeholders are duplicated from: one fcntl per open,
/// no path to look up.
static NULL: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// Opens the template placeholders are made from (at the owner's mount).
pub(crate) fn open_null() {
    let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") else {
        return;
    };
    let fd = std::os::fd::IntoRawFd::into_raw_fd(pm::above_program_descriptors(null));
    keep_own(fd);
    NULL.store(fd, std::sync::atomic::Ordering::Relaxed);
}

/// A new kernel descriptor to file an image description under, at the
/// lowest free number from `min`: /dev/null, close-on-exec.
fn reserve(min: c_int) -> c_int {
    let null = NULL.load(std::sync::atomic::Ordering::Relaxed);
    if null < 0 {
        return fail(libc::EMFILE);
    }
    // SAFETY: F_DUPFD_CLOEXEC of the library's own descriptor.
    unsafe { next!(fcntl: fn(c_int, c_int, usize) -> c_int)(null, libc::F_DUPFD_CLOEXEC, min as usize) }
}

fn kernel_close(fd: c_int) -> c_int {
    // SAFETY: close(2) of a number; libc checks it.
    unsafe { next!(close: fn(c_int) -> c_int)(fd) }
}

/// Opens `path` of the image (from `dirfd`, the image's, or AT_FDCWD) and
/// files it under a kernel descriptor; `abs` is the path the program named,
/// kept for a directory (fchdir).
pub(crate) fn open_image(
    o: &Owner,
    dirfd: c_int,
    path: &[u8],
    flags: c_int,
    mode: c_uint,
    abs: impl FnOnce() -> Vec<u8>,
) -> c_int {
    let fd = reserve(0);
    if fd < 0 {
        return -1;
    }
    let at = if dirfd == libc::AT_FDCWD {
        novafs_posix::At::Cwd
    } else {
        novafs_posix::At::Fd(dirfd)
    };
    match o.posix().open_as(fd, at, path, flags, mode) {
        Ok(_) => {
            if o.posix().kind(fd).is_ok_and(|k| k == FileType::Directory) {
                o.dir_paths.lock().insert(fd, abs());
            }
            fd
        }
        Err(Errno(e)) => {
            kernel_close(fd);
            fail(e)
        }
    }
}

/// Makes every image descriptor fail (EBADF) from now on: the kernel
/// descriptor under it becomes an O_PATH one, which reads and writes
/// nothing. For when the image goes away under the program.
pub(crate) fn poison_all(o: &Owner) {
    for fd in o.posix().descriptors() {
        poison(fd);
    }
}

pub(crate) fn poison(fd: c_int) {
    // SAFETY: opens / as O_PATH and moves it over `fd`: plain system calls.
    unsafe {
        let dead = next!(open: fn(*const libc::c_char, c_int, c_uint) -> c_int)(
            c"/".as_ptr(),
            libc::O_PATH | libc::O_CLOEXEC,
            0,
        );
        if dead >= 0 {
            libc::dup3(dead, fd, libc::O_CLOEXEC);
            kernel_close(dead);
        }
    }
}

/// The calls whose libnovafs twin takes the same arguments after the
/// handle.
macro_rules! fd_calls {
    ($(fn $name:ident($fd:ident $(, $a:ident: $t:ty)*) -> $r:ty = $ours:ident;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($fd: c_int $(, $a: $t)*) -> $r {
            // SAFETY: libc's contract for this call, passed on unchanged.
            let theirs = || unsafe { next!($name: fn(c_int $(, $t)*) -> $r)($fd $(, $a)*) };
            enter(
                // SAFETY: the same arguments, which libnovafs takes with
                // libc's contract; the handle is the owner's.
                |s| on_fd(s, $fd, |o| libc_ret(unsafe { capi::$ours(o.handle(), $fd $(, $a)*) }), theirs),
                theirs,
            )
        }
    )*};
}

fd_calls! {
    fn read(fd, buf: *mut c_void, n: usize) -> isize = novafs_read;
    fn write(fd, buf: *const c_void, n: usize) -> isize = novafs_write;
    fn pread(fd, buf: *mut c_void, n: usize, off: i64) -> isize = novafs_pread;
    fn pread64(fd, buf: *mut c_void, n: usize, off: i64) -> isize = novafs_pread;
    fn pwrite(fd, buf: *const c_void, n: usize, off: i64) -> isize = novafs_pwrite;
    fn pwrite64(fd, buf: *const c_void, n: usize, off: i64) -> isize = novafs_pwrite;
    fn readv(fd, iov: *const libc::iovec, cnt: c_int) -> isize = novafs_readv;
    fn writev(fd, iov: *const libc::iovec, cnt: c_int) -> isize = novafs_writev;
    fn lseek(fd, off: i64, whence: c_int) -> i64 = novafs_lseek;
    fn lseek64(fd, off: i64, whence: c_int) -> i64 = novafs_lseek;
    fn ftruncate(fd, len: i64) -> c_int = novafs_ftruncate;
    fn ftruncate64(fd, len: i64) -> c_int = novafs_ftruncate;
    fn fallocate(fd, mode: c_int, off: i64, len: i64) -> c_int = novafs_fallocate;
    fn fallocate64(fd, mode: c_int, off: i64, len: i64) -> c_int = novafs_fallocate;
    fn fsync(fd) -> c_int = novafs_fsync;
    fn fdatasync(fd) -> c_int = novafs_fdatasync;
    fn fchmod(fd, mode: c_uint) -> c_int = novafs_fchmod;
    fn fchown(fd, uid: c_uint, gid: c_uint) -> c_int = novafs_fchown;
    fn futimens(fd, times: *const libc::timespec) -> c_int = novafs_futimens;
    fn fstat(fd, st: *mut libc::stat) -> c_int = novafs_fstat;
    fn fstat64(fd, st: *mut libc::stat) -> c_int = novafs_fstat;
    fn fgetxattr(fd, name: *const libc::c_char, value: *mut c_void, size: usize) -> isize = novafs_fgetxattr;
    fn fsetxattr(fd, name: *const libc::c_char, value: *const c_void, size: usize, flags: c_int) -> c_int = novafs_fsetxattr;
    fn flistxattr(fd, list: *mut libc::c_char, size: usize) -> isize = novafs_flistxattr;
    fn fremovexattr(fd, name: *const libc::c_char) -> c_int = novafs_fremovexattr;
}

/// preadv(2) and pwritev(2) on an image descriptor: one buffer after the
/// other from `off`, stopping at a short transfer (what the kernel's
/// loop over the vector gives a file too).
fn vectored(o: &Owner, fd: c_int, iov: *const libc::iovec, cnt: c_int, off: i64, write: bool) -> isize {
    if cnt < 0 || (cnt > 0 && iov.is_null()) {
        return fail(libc::EINVAL);
    }
    if off == -1 {
        // preadv2/pwritev2's "at the file offset": readv/writev.
        // SAFETY: the call's iovecs; the owner's handle.
        return libc_ret(unsafe {
            if write {
                capi::novafs_writev(o.handle(), fd, iov, cnt)
            } else {
                capi::novafs_readv(o.handle(), fd, iov, cnt)
            }
        });
    }
    let mut done = 0isize;
    for i in 0..cnt as usize {
        // SAFETY: `cnt` iovecs (the call's contract).
        let v = unsafe { *iov.add(i) };
        let at = off + done as i64;
        // SAFETY: each iovec's buffer of its length; the owner's handle.
        let n = unsafe {
            if write {
                capi::novafs_pwrite(o.handle(), fd, v.iov_base, v.iov_len, at)
            } else {
                capi::novafs_pread(o.handle(), fd, v.iov_base, v.iov_len, at)
            }
        };
        if n < 0 {
            return if done > 0 { done } else { libc_ret(n) };
        }
        done += n;
        if (n as usize) < v.iov_len {
            break;
        }
    }
    done
}

macro_rules! vectored_calls {
    ($(fn $name:ident($($extra:ident: $t:ty),*) = $write:expr;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: i64 $(, $extra: $t)*) -> isize {
            // SAFETY: libc's contract, passed on.
            let theirs = || unsafe { next!($name: fn(c_int, *const libc::iovec, c_int, i64 $(, $t)*) -> isize)(fd, iov, cnt, off $(, $extra)*) };
            enter(|s| on_fd(s, fd, |o| vectored(o, fd, iov, cnt, off, $write), theirs), theirs)
        }
    )*};
}

vectored_calls! {
    fn preadv() = false;
    fn preadv64() = false;
    fn pwritev() = true;
    fn pwritev64() = true;
    fn preadv2(_flags: c_int) = false;
    fn preadv64v2(_flags: c_int) = false;
    fn pwritev2(_flags: c_int) = true;
    fn pwritev64v2(_flags: c_int) = true;
}

/// glibc before 2.33 compiled fstat into this.
#[no_mangle]
pub unsafe extern "C" fn __fxstat(ver: c_int, fd: c_int, st: *mut libc::stat) -> c_int {
    // SAFETY: libc's contract for this call, passed on unchanged.
    let theirs = || unsafe { next!(__fxstat: fn(c_int, c_int, *mut libc::stat) -> c_int)(ver, fd, st) };
    // SAFETY: as fstat.
    enter(
        |s| {
            on_fd(
                s,
                fd,
                |o| libc_ret(unsafe { capi::novafs_fstat(o.handle(), fd, st) }),
                theirs,
            )
        },
        theirs,
    )
}

#[no_mangle]
pub unsafe extern "C" fn __fxstat64(ver: c_int, fd: c_int, st: *mut libc::stat) -> c_int {
    // SAFETY: the same call.
    unsafe { __fxstat(ver, fd, st) }
}

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    let theirs = || kernel_close(fd);
    let kernel = |s: &Shim| {
        s.kernel_dirs.lock().remove(&fd);
        kernel_close(fd)
    };
    enter(
        |s| {
            if is_own(fd) {
                // The program's, it thinks; the library's lock, it is.
                return fail(libc::EBADF);
            }
            on_fd(
                s,
                fd,
                |o| {
                    o.dir_paths.lock().remove(&fd);
                    let r = o.posix().close(fd);
                    kernel_close(fd);
                    r.map_or_else(|Errno(e)| fail(e), |()| 0)
                },
                || kernel(s),
            )
        },
        theirs,
    )
}

/// dup3 of an image descriptor `fd` to the kernel descriptor `to`, just
/// reserved (or the program's own number).
fn dup_image(o: &Owner, fd: c_int, to: c_int, cloexec: bool) -> c_int {
    match o.posix().dup(fd, Some(to), cloexec) {
        Ok(n) => {
            let path = o.dir_paths.lock().get(&fd).cloned();
            if let Some(path) = path {
                o.dir_paths.lock().insert(n, path);
            }
            n
        }
        Err(Errno(e)) => {
            kernel_close(to);
            fail(e)
        }
    }
}

/// dup(2) and fcntl(F_DUPFD[_CLOEXEC]) of an image descriptor.
fn dup_from(o: &Owner, fd: c_int, min: c_int, cloexec: bool) -> c_int {
    if min < 0 {
        return fail(libc::EINVAL);
    }
    let to = reserve(min);
    if to < 0 {
        return -1;
    }
    dup_image(o, fd, to, cloexec)
}

#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: dup(2) of a number.
    let theirs = || unsafe { next!(dup: fn(c_int) -> c_int)(fd) };
    enter(|s| on_fd(s, fd, |o| dup_from(o, fd, 0, false), theirs), theirs)
}

#[no_mangle]
pub unsafe extern "C" fn dup2(fd: c_int, to: c_int) -> c_int {
    // SAFETY: dup2(2) of numbers.
    let theirs = || unsafe { next!(dup2: fn(c_int, c_int) -> c_int)(fd, to) };
    enter(|s| dup_to(s, fd, to, 0, true).unwrap_or_else(theirs), theirs)
}

#[no_mangle]
pub unsafe extern "C" fn dup3(fd: c_int, to: c_int, flags: c_int) -> c_int {
    // SAFETY: dup3(2) of numbers.
    let theirs = || unsafe { next!(dup3: fn(c_int, c_int, c_int) -> c_int)(fd, to, flags) };
    enter(|s| dup_to(s, fd, to, flags, false).unwrap_or_else(theirs), theirs)
}

/// dup2/dup3 when either number is the image's; None when neither is.
fn dup_to(s: &Shim, fd: c_int, to: c_int, flags: c_int, dup2: bool) -> Option<c_int> {
    if is_own(to) {
        return Some(fail(libc::EBUSY));
    }
    let mode = s.mode.read();
    let Mode::Owner(o) = &*mode else { return None };
    let (from_image, over_image) = (o.owns(fd), o.owns(to));
    if !from_image && !over_image {
        return None;
    }
    if fd == to {
        return Some(if dup2 { fd } else { fail(libc::EINVAL) });
    }
    if over_image {
        o.dir_paths.lock().remove(&to);
        let _ = o.posix().close(to);
    }
    if !from_image {
        drop(mode);
        return None; // the kernel's dup3 now puts its file over `to`
    }
    // Reserve `to` in the kernel (closing whatever it was), then file the
    // image description there.
    // SAFETY: dup3(2) of numbers.
    if unsafe { libc::dup3(fd, to, libc::O_CLOEXEC) } < 0 {
        return Some(-1);
    }
    Some(dup_image(o, fd, to, flags & libc::O_CLOEXEC != 0))
}

/// close_range(2) around the library's own descriptors.
#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    let real = |a: c_uint, b: c_uint| {
        // SAFETY: close_range(2) of numbers.
        unsafe { next!(close_range: fn(c_uint, c_uint, c_int) -> c_int)(a, b, flags) }
    };
    enter(|_| around_own(first, last, real), || real(first, last))
}

/// `close(from..=to)` for each run between the library's descriptors.
fn around_own(first: c_uint, last: c_uint, real: impl Fn(c_uint, c_uint) -> c_int) -> c_int {
    let mut own: Vec<c_uint> = OWN
        .lock()
        .iter()
        .map(|&fd| fd as c_uint)
        .filter(|fd| (first..=last).contains(fd))
        .collect();
    own.sort_unstable();
    let mut from = first;
    for fd in own {
        if fd > from && real(from, fd - 1) != 0 {
            return -1;
        }
        from = fd + 1;
    }
    if from <= last {
        return real(from, last);
    }
    0
}

/// closefrom(3): close_range from `low` up.
#[no_mangle]
pub unsafe extern "C" fn closefrom(low: c_int) {
    // SAFETY: as close_range.
    unsafe { close_range(low.max(0) as c_uint, c_uint::MAX, 0) };
}

/// fcntl(2); the third argument is an int or a pointer, as the command
/// says.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    // SAFETY: fcntl(2) with the program's own arguments.
    let theirs = || unsafe { next!(fcntl: fn(c_int, c_int, usize) -> c_int)(fd, cmd, arg) };
    enter(|s| on_fd(s, fd, |o| image_fcntl(o, fd, cmd, arg), theirs), theirs)
}

#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    // SAFETY: the same call.
    unsafe { fcntl(fd, cmd, arg) }
}

fn image_fcntl(o: &Owner, fd: c_int, cmd: c_int, arg: usize) -> c_int {
    match cmd {
        libc::F_DUPFD => dup_from(o, fd, arg as c_int, false),
        libc::F_DUPFD_CLOEXEC => dup_from(o, fd, arg as c_int, true),
        // Record locks: only this process reaches the image while it owns
        // it, so no lock can conflict (a process's own POSIX locks never
        // do): taking one succeeds, asking finds none.
        libc::F_SETLK | libc::F_SETLKW | libc::F_OFD_SETLK | libc::F_OFD_SETLKW => 0,
        libc::F_GETLK | libc::F_OFD_GETLK => {
            if arg == 0 {
                return fail(libc::EFAULT);
            }
            // SAFETY: the command's argument is the caller's struct flock.
            unsafe { (*(arg as *mut libc::flock)).l_type = libc::F_UNLCK as i16 };
            0
        }
        _ => o
            .posix()
            .fcntl(fd, cmd, arg as c_int)
            .unwrap_or_else(|Errno(e)| fail(e)),
    }
}

/// flock(2): no other process reaches the image while this one owns it.
#[no_mangle]
pub unsafe extern "C" fn flock(fd: c_int, op: c_int) -> c_int {
    // SAFETY: flock(2) of a number.
    let theirs = || unsafe { next!(flock: fn(c_int, c_int) -> c_int)(fd, op) };
    enter(|s| on_fd(s, fd, |_| 0, theirs), theirs)
}

/// posix_fallocate(3): the error number itself, not -1.
#[no_mangle]
pub unsafe extern "C" fn posix_fallocate(fd: c_int, off: i64, len: i64) -> c_int {
    // SAFETY: libc's contract, passed on unchanged.
    let theirs = || unsafe { next!(posix_fallocate: fn(c_int, i64, i64) -> c_int)(fd, off, len) };
    // SAFETY: libnovafs's fallocate with mode 0, as posix_fallocate.
    enter(
        |s| {
            on_fd(
                s,
                fd,
                |o| -unsafe { capi::novafs_fallocate(o.handle(), fd, 0, off, len) },
                theirs,
            )
        },
        theirs,
    )
}

#[no_mangle]
pub unsafe extern "C" fn posix_fallocate64(fd: c_int, off: i64, len: i64) -> c_int {
    // SAFETY: the same call.
    unsafe { posix_fallocate(fd, off, len) }
}

/// posix_fadvise(2): advice novafs has no use for (the data is in memory).
#[no_mangle]
pub unsafe extern "C" fn posix_fadvise(fd: c_int, off: i64, len: i64, advice: c_int) -> c_int {
    // SAFETY: libc's contract, passed on unchanged.
    let theirs = || unsafe { next!(posix_fadvise: fn(c_int, i64, i64, c_int) -> c_int)(fd, off, len, advice) };
    enter(|s| on_fd(s, fd, |_| 0, theirs), theirs)
}

#[no_mangle]
pub unsafe extern "C" fn posix_fadvise64(fd: c_int, off: i64, len: i64, advice: c_int) -> c_int {
    // SAFETY: the same call.
    unsafe { posix_fadvise(fd, off, len, advice) }
}

/// The image's statfs(2).
pub(crate) fn image_statfs(o: &Owner, out: *mut libc::statfs) -> c_int {
    if out.is_null() {
        return fail(libc::EFAULT);
    }
    let st = o.posix().fs().statfs();
    // SAFETY: `struct statfs` is plain integers: all zeroes is a value.
    let mut f: libc::statfs = unsafe { std::mem::zeroed() };
    f.f_type = 0x4e4f_5641; // "NOVA"
    f.f_bsize = st.block_size as i64;
    f.f_frsize = st.block_size as i64;
    f.f_blocks = st.blocks;
    f.f_bfree = st.blocks_free;
    f.f_bavail = st.blocks_avail;
    f.f_files = st.files;
    f.f_ffree = st.files_free;
    f.f_namelen = st.name_max as i64;
    // SAFETY: a valid output pointer (statfs's contract), checked non-null.
    unsafe { out.write(f) };
    0
}

#[no_mangle]
pub unsafe extern "C" fn fstatfs(fd: c_int, out: *mut libc::statfs) -> c_int {
    // SAFETY: libc's contract, passed on unchanged.
    let theirs = || unsafe { next!(fstatfs: fn(c_int, *mut libc::statfs) -> c_int)(fd, out) };
    enter(|s| on_fd(s, fd, |o| image_statfs(o, out), theirs), theirs)
}

#[no_mangle]
pub unsafe extern "C" fn fstatfs64(fd: c_int, out: *mut libc::statfs) -> c_int {
    // SAFETY: the same call.
    unsafe { fstatfs(fd, out) }
}

/// statvfs(3) from statfs(2) (`statfs` fills the one given), as glibc
/// converts it.
pub(crate) unsafe fn statvfs_from(statfs: impl FnOnce(*mut libc::statfs) -> c_int, out: *mut libc::statvfs) -> c_int {
    if out.is_null() {
        return fail(libc::EFAULT);
    }
    // SAFETY: plain integers: all zeroes is a value.
    let mut f: libc::statfs = unsafe { std::mem::zeroed() };
    let r = statfs(&mut f);
    if r < 0 {
        return r;
    }
    // SAFETY: as above.
    let mut v: libc::statvfs = unsafe { std::mem::zeroed() };
    v.f_bsize = f.f_bsize as u64;
    v.f_frsize = if f.f_frsize != 0 {
        f.f_frsize as u64
    } else {
        f.f_bsize as u64
    };
    v.f_blocks = f.f_blocks;
    v.f_bfree = f.f_bfree;
    v.f_bavail = f.f_bavail;
    v.f_files = f.f_files;
    v.f_ffree = f.f_ffree;
    v.f_favail = f.f_ffree;
    v.f_namemax = f.f_namelen as u64;
    // SAFETY: the caller's output (statvfs's contract), checked non-null.
    unsafe { out.write(v) };
    0
}

#[no_mangle]
pub unsafe extern "C" fn fstatvfs(fd: c_int, out: *mut libc::statvfs) -> c_int {
    // SAFETY: a struct statfs to fill, then statvfs's own output.
    unsafe { statvfs_from(|f| fstatfs(fd, f), out) }
}

#[no_mangle]
pub unsafe extern "C" fn fstatvfs64(fd: c_int, out: *mut libc::statvfs) -> c_int {
    // SAFETY: the same call.
    unsafe { fstatvfs(fd, out) }
}

#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: i64,
) -> *mut c_void {
    // SAFETY: libc's contract, passed on unchanged.
    let theirs = || unsafe {
        next!(mmap: fn(*mut c_void, usize, c_int, c_int, c_int, i64) -> *mut c_void)(addr, len, prot, flags, fd, off)
    };
    if flags & libc::MAP_ANONYMOUS != 0 || fd < 0 {
        return theirs();
    }
    let ours = |s: &Shim| {
        on_fd(
            s,
            fd,
            |o| {
                if flags & libc::MAP_PRIVATE != 0 {
                    return private_copy(o, fd, (addr, len, prot, flags), off);
                }
                // SAFETY: libnovafs's mmap, which maps the file's own pages.
                unsafe { capi::novafs_mmap(o.handle(), addr, len, prot, flags, fd, off) }
            },
            theirs,
        )
    };
    let mapped = enter(|s| ours(s) as usize as isize, || theirs() as usize as isize);
    mapped as usize as *mut c_void
}

#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: i64,
) -> *mut c_void {
    // SAFETY: the same call.
    unsafe { mmap(addr, len, prot, flags, fd, off) }
}

/// A MAP_PRIVATE mapping of an image file: the file's bytes copied into
/// private memory (what such a mapping is: the process's own copy, which
/// POSIX leaves free to miss later writes to the file). No pages of the
/// image are mapped, so nothing ties it to this process's mount (a
/// handover moves on with it; git maps its packs so, then forks).
fn private_copy(
    o: &Owner,
    fd: c_int,
    (addr, len, prot, flags): (*mut c_void, usize, c_int, c_int),
    off: i64,
) -> *mut c_void {
    // SAFETY: sysconf(3) has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1);
    if len == 0 || off < 0 || off % page != 0 {
        return fail(libc::EINVAL);
    }
    let keep = flags & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE | libc::MAP_NORESERVE | libc::MAP_POPULATE);
    // SAFETY: new anonymous memory (or at MAP_FIXED's address, which the
    // caller gives up, as with any mmap there).
    let mem = unsafe {
        next!(mmap: fn(*mut c_void, usize, c_int, c_int, c_int, i64) -> *mut c_void)(
            addr,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            keep | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if mem == libc::MAP_FAILED {
        return mem;
    }
    // SAFETY: `len` bytes of the memory just mapped.
    let buf = unsafe { std::slice::from_raw_parts_mut(mem.cast::<u8>(), len) };
    let mut done = 0;
    while done < len {
        match o.posix().pread(fd, &mut buf[done..], off + done as i64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(Errno(e)) => {
                // SAFETY: the memory mapped above, given back.
                unsafe { next!(munmap: fn(*mut c_void, usize) -> c_int)(mem, len) };
                return fail(e);
            }
        }
    }
    // SAFETY: mprotect(2) of the memory mapped above to what was asked.
    unsafe { libc::mprotect(mem, len, prot) };
    mem
}

/// Runs `image` when `addr` is in a mapping of the image's, `kernel`
/// otherwise.
fn on_map<R>(s: &Shim, addr: *mut c_void, image: impl FnOnce(&Owner) -> R, kernel: impl FnOnce() -> R) -> R {
    let mode = s.mode.read();
    match &*mode {
        Mode::Owner(o) if o.posix().is_mapped(addr as usize) => image(o),
        _ => {
            drop(mode);
            kernel()
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: usize) -> c_int {
    // SAFETY: libc's contract, passed on unchanged.
    let theirs = || unsafe { next!(munmap: fn(*mut c_void, usize) -> c_int)(addr, len) };
    // SAFETY: libnovafs's munmap of one of its mappings.
    enter(
        |s| {
            on_map(
                s,
                addr,
                |o| libc_ret(unsafe { capi::novafs_munmap(o.handle(), addr, len) }),
                theirs,
            )
        },
        theirs,
    )
}

#[no_mangle]
pub unsafe extern "C" fn msync(addr: *mut c_void, len: usize, flags: c_int) -> c_int {
    // SAFETY: libc's contract, passed on unchanged.
    let theirs = || unsafe { next!(msync: fn(*mut c_void, usize, c_int) -> c_int)(addr, len, flags) };
    // SAFETY: libnovafs's msync of one of its mappings.
    enter(
        |s| {
            on_map(
                s,
                addr,
                |o| libc_ret(unsafe { capi::novafs_msync(o.handle(), addr, len, flags) }),
                theirs,
            )
        },
        theirs,
    )
}

/// copy_file_range(2) to or from the image: EXDEV, so that the program
/// copies with read and write (as between two file systems).
#[no_mangle]
pub unsafe extern "C" fn copy_file_range(
    fd_in: c_int,
    off_in: *mut i64,
    fd_out: c_int,
    off_out: *mut i64,
    len: usize,
    flags: c_uint,
) -> isize {
    // SAFETY: libc's contract, passed on unchanged.
    let theirs = || unsafe {
        next!(copy_file_range: fn(c_int, *mut i64, c_int, *mut i64, usize, c_uint) -> isize)(
            fd_in, off_in, fd_out, off_out, len, flags,
        )
    };
    enter(
        |s| {
            on_fd(
                s,
                fd_in,
                |_| fail(libc::EXDEV),
                || on_fd(s, fd_out, |_| fail(libc::EXDEV), theirs),
            )
        },
        theirs,
    )
}

/// sendfile(2) with either end the image's: copied through a buffer.
#[no_mangle]
pub unsafe extern "C" fn sendfile(out_fd: c_int, in_fd: c_int, off: *mut i64, count: usize) -> isize {
    // SAFETY: libc's contract, passed on unchanged.
    let theirs = || unsafe { next!(sendfile: fn(c_int, c_int, *mut i64, usize) -> isize)(out_fd, in_fd, off, count) };
    let ours = |s: &Shim| {
        let image = on_fd(s, in_fd, |_| true, || on_fd(s, out_fd, |_| true, || false));
        if !image {
            return theirs();
        }
        crate::as_program(|| copy_through(out_fd, in_fd, off, count))
    };
    enter(ours, theirs)
}

#[no_mangle]
pub unsafe extern "C" fn sendfile64(out_fd: c_int, in_fd: c_int, off: *mut i64, count: usize) -> isize {
    // SAFETY: the same call.
    unsafe { sendfile(out_fd, in_fd, off, count) }
}

/// sendfile's copy, through this library's own read and write (so each
/// end goes where it belongs).
fn copy_through(out_fd: c_int, in_fd: c_int, off: *mut i64, count: usize) -> isize {
    let mut buf = vec![0u8; count.min(1 << 20)];
    let mut done = 0usize;
    while done < count {
        let want = (count - done).min(buf.len());
        // SAFETY: `buf` has `want` bytes; `off`, when not null, is the
        // caller's offset (sendfile's contract).
        let got = unsafe {
            if off.is_null() {
                read(in_fd, buf.as_mut_ptr().cast(), want)
            } else {
                pread(in_fd, buf.as_mut_ptr().cast(), want, *off + done as i64)
            }
        };
        if got < 0 {
            return if done > 0 { done as isize } else { -1 };
        }
        if got == 0 {
            break;
        }
        let mut put = 0;
        while put < got as usize {
            // SAFETY: the bytes just read.
            let w = unsafe { write(out_fd, buf[put..].as_ptr().cast(), got as usize - put) };
            if w < 0 {
                return if done + put > 0 { (done + put) as isize } else { -1 };
            }
            put += w as usize;
        }
        done += got as usize;
    }
    if !off.is_null() {
        // SAFETY: the caller's offset, moved past what was sent.
        unsafe { *off += done as i64 };
    }
    done as isize
}
