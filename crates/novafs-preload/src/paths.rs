//! Calls that name files: routed (route.rs) to the image in this process,
//! to a client's mount (the path rewritten), or to libc unchanged.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

use crate::real::next;
use crate::route::{c_path, Where};
use crate::state::{Owner, Shim};
use crate::{enter, fail, libc_ret, Failure};

/// Runs a call naming `path` from `dirfd`: `image` with the owner, the
/// image's directory descriptor and path; `kernel` with the descriptor and
/// path libc should get.
pub(crate) fn at_path<R: Failure>(
    s: &Shim,
    dirfd: c_int,
    path: *const c_char,
    image: impl FnOnce(&Owner, c_int, &CStr) -> R,
    kernel: impl FnOnce(c_int, *const c_char) -> R,
) -> R {
    // SAFETY: a path argument (libc's contract).
    let Some(p) = (unsafe { c_path(path) }) else {
        return kernel(dirfd, path);
    };
    let mode = s.mode.read();
    match s.route(&mode, dirfd, p) {
        Where::Image(o, d, ip) => image(o, d, &ip),
        Where::Kernel(d, new) => {
            drop(mode);
            kernel(d, new.as_ref().map_or(path, |n| n.as_ptr()))
        }
        Where::Gone => fail(libc::EIO),
    }
}

/// Calls with a directory descriptor and a path first, whose libnovafs
/// twin takes the same arguments after the handle.
macro_rules! at_calls {
    ($(fn $name:ident($d:ident, $p:ident $(, $a:ident: $t:ty)*) -> $r:ty = $ours:ident;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($d: c_int, $p: *const c_char $(, $a: $t)*) -> $r {
            let theirs = |d: c_int, p: *const c_char| {
                // SAFETY: libc's contract for this call, passed on.
                unsafe { next!($name: fn(c_int, *const c_char $(, $t)*) -> $r)(d, p $(, $a)*) }
            };
            enter(
                |s| at_path(s, $d, $p, |o, d, p| {
                    // SAFETY: libnovafs takes libc's contract; the handle
                    // is the owner's.
                    libc_ret(unsafe { capi::$ours(o.handle(), d, p.as_ptr() $(, $a)*) })
                }, theirs),
                || theirs($d, $p),
            )
        }
    )*};
}

/// Calls with a path first (no directory descriptor).
macro_rules! path_calls {
    ($(fn $name:ident($p:ident $(, $a:ident: $t:ty)*) -> $r:ty = $ours:ident;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($p: *const c_char $(, $a: $t)*) -> $r {
            let theirs = |_: c_int, p: *const c_char| {
                // SAFETY: libc's contract for this call, passed on.
                unsafe { next!($name: fn(*const c_char $(, $t)*) -> $r)(p $(, $a)*) }
            };
            enter(
                |s| at_path(s, libc::AT_FDCWD, $p, |o, _, p| {
                    // SAFETY: libnovafs takes libc's contract; the handle
                    // is the owner's.
                    libc_ret(unsafe { capi::$ours(o.handle(), p.as_ptr() $(, $a)*) })
                }, theirs),
                || theirs(libc::AT_FDCWD, $p),
            )
        }
    )*};
}

at_calls! {
    fn fstatat(dirfd, path, st: *mut libc::stat, flags: c_int) -> c_int = novafs_fstatat;
    fn fstatat64(dirfd, path, st: *mut libc::stat, flags: c_int) -> c_int = novafs_fstatat;
    fn statx(dirfd, path, flags: c_int, mask: c_uint, sx: *mut libc::statx) -> c_int = novafs_statx;
    fn faccessat(dirfd, path, mode: c_int, flags: c_int) -> c_int = novafs_faccessat;
    fn fchmodat(dirfd, path, mode: c_uint, flags: c_int) -> c_int = novafs_fchmodat;
    fn fchownat(dirfd, path, uid: c_uint, gid: c_uint, flags: c_int) -> c_int = novafs_fchownat;
    fn utimensat(dirfd, path, times: *const libc::timespec, flags: c_int) -> c_int = novafs_utimensat;
    fn mkdirat(dirfd, path, mode: c_uint) -> c_int = novafs_mkdirat;
    fn unlinkat(dirfd, path, flags: c_int) -> c_int = novafs_unlinkat;
    fn readlinkat(dirfd, path, buf: *mut c_char, size: usize) -> isize = novafs_readlinkat;
}

path_calls! {
    fn truncate(path, len: i64) -> c_int = novafs_truncate;
    fn truncate64(path, len: i64) -> c_int = novafs_truncate;
    fn getxattr(path, name: *const c_char, value: *mut c_void, size: usize) -> isize = novafs_getxattr;
    fn lgetxattr(path, name: *const c_char, value: *mut c_void, size: usize) -> isize = novafs_lgetxattr;
    fn setxattr(path, name: *const c_char, value: *const c_void, size: usize, flags: c_int) -> c_int = novafs_setxattr;
    fn lsetxattr(path, name: *const c_char, value: *const c_void, size: usize, flags: c_int) -> c_int = novafs_lsetxattr;
    fn listxattr(path, list: *mut c_char, size: usize) -> isize = novafs_listxattr;
    fn llistxattr(path, list: *mut c_char, size: usize) -> isize = novafs_llistxattr;
    fn removexattr(path, name: *const c_char) -> c_int = novafs_removexattr;
    fn lremovexattr(path, name: *const c_char) -> c_int = novafs_lremovexattr;
}

/// Calls that are another's with fixed arguments.
macro_rules! same_as {
    ($(fn $name:ident($($a:ident: $t:ty),*) -> $r:ty = $body:expr;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $r {
            // SAFETY: the same contract, passed on.
            unsafe { $body }
        }
    )*};
}

const CWD: c_int = libc::AT_FDCWD;
const NOFOLLOW: c_int = libc::AT_SYMLINK_NOFOLLOW;

same_as! {
    fn stat(p: *const c_char, st: *mut libc::stat) -> c_int = fstatat(CWD, p, st, 0);
    fn stat64(p: *const c_char, st: *mut libc::stat) -> c_int = fstatat(CWD, p, st, 0);
    fn lstat(p: *const c_char, st: *mut libc::stat) -> c_int = fstatat(CWD, p, st, NOFOLLOW);
    fn lstat64(p: *const c_char, st: *mut libc::stat) -> c_int = fstatat(CWD, p, st, NOFOLLOW);
    fn __xstat(_v: c_int, p: *const c_char, st: *mut libc::stat) -> c_int = fstatat(CWD, p, st, 0);
    fn __xstat64(_v: c_int, p: *const c_char, st: *mut libc::stat) -> c_int = fstatat(CWD, p, st, 0);
    fn __lxstat(_v: c_int, p: *const c_char, st: *mut libc::stat) -> c_int = fstatat(CWD, p, st, NOFOLLOW);
    fn __lxstat64(_v: c_int, p: *const c_char, st: *mut libc::stat) -> c_int = fstatat(CWD, p, st, NOFOLLOW);
    fn __fxstatat(_v: c_int, d: c_int, p: *const c_char, st: *mut libc::stat, f: c_int) -> c_int = fstatat(d, p, st, f);
    fn __fxstatat64(_v: c_int, d: c_int, p: *const c_char, st: *mut libc::stat, f: c_int) -> c_int = fstatat(d, p, st, f);
    fn access(p: *const c_char, mode: c_int) -> c_int = faccessat(CWD, p, mode, 0);
    fn euidaccess(p: *const c_char, mode: c_int) -> c_int = faccessat(CWD, p, mode, libc::AT_EACCESS);
    fn eaccess(p: *const c_char, mode: c_int) -> c_int = faccessat(CWD, p, mode, libc::AT_EACCESS);
    fn chmod(p: *const c_char, mode: c_uint) -> c_int = fchmodat(CWD, p, mode, 0);
    fn chown(p: *const c_char, u: c_uint, g: c_uint) -> c_int = fchownat(CWD, p, u, g, 0);
    fn lchown(p: *const c_char, u: c_uint, g: c_uint) -> c_int = fchownat(CWD, p, u, g, NOFOLLOW);
    fn mkdir(p: *const c_char, mode: c_uint) -> c_int = mkdirat(CWD, p, mode);
    fn unlink(p: *const c_char) -> c_int = unlinkat(CWD, p, 0);
    fn rmdir(p: *const c_char) -> c_int = unlinkat(CWD, p, libc::AT_REMOVEDIR);
    fn readlink(p: *const c_char, buf: *mut c_char, size: usize) -> isize = readlinkat(CWD, p, buf, size);
    fn __readlink_chk(p: *const c_char, buf: *mut c_char, size: usize, _room: usize) -> isize = readlinkat(CWD, p, buf, size);
    fn __readlinkat_chk(d: c_int, p: *const c_char, buf: *mut c_char, size: usize, _room: usize) -> isize = readlinkat(d, p, buf, size);
    fn open(p: *const c_char, flags: c_int, mode: c_uint) -> c_int = openat(CWD, p, flags, mode);
    fn open64(p: *const c_char, flags: c_int, mode: c_uint) -> c_int = openat(CWD, p, flags, mode);
    fn __open_2(p: *const c_char, flags: c_int) -> c_int = openat(CWD, p, flags, 0);
    fn __open64_2(p: *const c_char, flags: c_int) -> c_int = openat(CWD, p, flags, 0);
    fn openat64(d: c_int, p: *const c_char, flags: c_int, mode: c_uint) -> c_int = openat(d, p, flags, mode);
    fn __openat_2(d: c_int, p: *const c_char, flags: c_int) -> c_int = openat(d, p, flags, 0);
    fn __openat64_2(d: c_int, p: *const c_char, flags: c_int) -> c_int = openat(d, p, flags, 0);
    fn creat(p: *const c_char, mode: c_uint) -> c_int = openat(CWD, p, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, mode);
    fn creat64(p: *const c_char, mode: c_uint) -> c_int = openat(CWD, p, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, mode);
    fn rename(o: *const c_char, n: *const c_char) -> c_int = renameat2(CWD, o, CWD, n, 0);
    fn renameat(od: c_int, o: *const c_char, nd: c_int, n: *const c_char) -> c_int = renameat2(od, o, nd, n, 0);
    fn link(o: *const c_char, n: *const c_char) -> c_int = linkat(CWD, o, CWD, n, 0);
    fn symlink(t: *const c_char, n: *const c_char) -> c_int = symlinkat(t, CWD, n);
    fn statfs64(p: *const c_char, out: *mut libc::statfs) -> c_int = statfs(p, out);
}

/// openat(2); the mode is read only with O_CREAT or O_TMPFILE, as libc
/// does (a variadic argument that may be absent).
#[no_mangle]
pub unsafe extern "C" fn openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    let mode = if flags & libc::O_CREAT != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE {
        mode
    } else {
        0
    };
    let theirs = |d: c_int, p: *const c_char| {
        // SAFETY: libc's contract, passed on.
        unsafe { next!(openat: fn(c_int, *const c_char, c_int, c_uint) -> c_int)(d, p, flags, mode) }
    };
    enter(
        |s| {
            at_path(
                s,
                dirfd,
                path,
                |o, d, p| {
                    let abs = || {
                        let mode = s.mode.read();
                        s.absolute_of(&mode, p.to_bytes())
                    };
                    crate::fds::open_image(o, d, p.to_bytes(), flags, mode, abs)
                },
                |d, p| {
                    let fd = theirs(d, p);
                    if fd >= 0 && flags & (libc::O_DIRECTORY | libc::O_PATH) != 0 {
                        // SAFETY: the path libc just opened.
                        s.note_kernel_dir(fd, d, unsafe { CStr::from_ptr(p) }.to_bytes());
                    }
                    fd
                },
            )
        },
        || theirs(dirfd, path),
    )
}

/// Runs a call naming two paths: both the image's (`image`), both
/// elsewhere (`kernel`, with the paths libc should get), or one of each:
/// EXDEV, as between two file systems.
fn two_paths<R: Failure>(
    s: &Shim,
    (d1, p1): (c_int, *const c_char),
    (d2, p2): (c_int, *const c_char),
    image: impl FnOnce(&Owner, (c_int, &CStr), (c_int, &CStr)) -> R,
    kernel: impl FnOnce((c_int, *const c_char), (c_int, *const c_char)) -> R,
) -> R {
    // SAFETY: path arguments (libc's contract).
    let (c1, c2) = unsafe { (c_path(p1), c_path(p2)) };
    let mode = s.mode.read();
    let (c1, c2) = match (c1, c2) {
        (Some(c1), Some(c2)) => (c1, c2),
        (None, None) => {
            drop(mode);
            return kernel((d1, p1), (d2, p2));
        }
        // One path the kernel will answer EFAULT for: the other one goes
        // where it leads, so that the kernel sees it as through the mount
        // (it may look that one up first); the image has no EFAULT path.
        (Some(c), None) | (None, Some(c)) => {
            let first = c1.is_some();
            let (d, p) = if first { (d1, p1) } else { (d2, p2) };
            return match s.route(&mode, d, c) {
                Where::Kernel(d, n) => {
                    drop(mode);
                    let k = n.as_ref().map_or(p, |n| n.as_ptr());
                    if first {
                        kernel((d, k), (d2, p2))
                    } else {
                        kernel((d1, p1), (d, k))
                    }
                }
                Where::Image(..) => fail(libc::EFAULT),
                Where::Gone => fail(libc::EIO),
            };
        }
    };
    match (s.route(&mode, d1, c1), s.route(&mode, d2, c2)) {
        (Where::Image(o, d1, i1), Where::Image(_, d2, i2)) => image(o, (d1, &i1), (d2, &i2)),
        (Where::Kernel(d1, n1), Where::Kernel(d2, n2)) => {
            drop(mode);
            let k1 = n1.as_ref().map_or(p1, |n| n.as_ptr());
            let k2 = n2.as_ref().map_or(p2, |n| n.as_ptr());
            kernel((d1, k1), (d2, k2))
        }
        (Where::Gone, _) | (_, Where::Gone) => fail(libc::EIO),
        _ => fail(libc::EXDEV),
    }
}

#[no_mangle]
pub unsafe extern "C" fn renameat2(od: c_int, o: *const c_char, nd: c_int, n: *const c_char, flags: c_uint) -> c_int {
    let theirs = |(od, o): (c_int, *const c_char), (nd, n): (c_int, *const c_char)| {
        // SAFETY: libc's contract, passed on.
        unsafe {
            next!(renameat2: fn(c_int, *const c_char, c_int, *const c_char, c_uint) -> c_int)(od, o, nd, n, flags)
        }
    };
    let image = |ow: &Owner, (od, o): (c_int, &CStr), (nd, n): (c_int, &CStr)| {
        // SAFETY: C strings; the owner's handle.
        libc_ret(unsafe { capi::novafs_renameat2(ow.handle(), od, o.as_ptr(), nd, n.as_ptr(), flags) })
    };
    enter(
        |s| two_paths(s, (od, o), (nd, n), image, theirs),
        || theirs((od, o), (nd, n)),
    )
}

#[no_mangle]
pub unsafe extern "C" fn linkat(od: c_int, o: *const c_char, nd: c_int, n: *const c_char, flags: c_int) -> c_int {
    let theirs = |(od, o): (c_int, *const c_char), (nd, n): (c_int, *const c_char)| {
        // SAFETY: libc's contract, passed on.
        unsafe { next!(linkat: fn(c_int, *const c_char, c_int, *const c_char, c_int) -> c_int)(od, o, nd, n, flags) }
    };
    let image = |ow: &Owner, (od, o): (c_int, &CStr), (nd, n): (c_int, &CStr)| {
        // SAFETY: C strings; the owner's handle.
        libc_ret(unsafe { capi::novafs_linkat(ow.handle(), od, o.as_ptr(), nd, n.as_ptr(), flags) })
    };
    enter(
        |s| two_paths(s, (od, o), (nd, n), image, theirs),
        || theirs((od, o), (nd, n)),
    )
}

/// symlinkat(2): the target is the link's contents, not a path to route.
#[no_mangle]
pub unsafe extern "C" fn symlinkat(target: *const c_char, dirfd: c_int, path: *const c_char) -> c_int {
    let theirs = |d: c_int, p: *const c_char| {
        // SAFETY: libc's contract, passed on.
        unsafe { next!(symlinkat: fn(*const c_char, c_int, *const c_char) -> c_int)(target, d, p) }
    };
    // SAFETY: C strings; the owner's handle.
    let image =
        |o: &Owner, d: c_int, p: &CStr| libc_ret(unsafe { capi::novafs_symlinkat(o.handle(), target, d, p.as_ptr()) });
    enter(|s| at_path(s, dirfd, path, image, theirs), || theirs(dirfd, path))
}

/// mknod(2) and mkfifo(3) in the image: novafs in-process serves no
/// special files (EOPNOTSUPP); elsewhere, libc's.
#[no_mangle]
pub unsafe extern "C" fn mknodat(dirfd: c_int, path: *const c_char, mode: c_uint, dev: u64) -> c_int {
    let theirs = |d: c_int, p: *const c_char| {
        // SAFETY: libc's contract, passed on.
        unsafe { next!(mknodat: fn(c_int, *const c_char, c_uint, u64) -> c_int)(d, p, mode, dev) }
    };
    enter(
        |s| at_path(s, dirfd, path, |_, _, _| fail(libc::EOPNOTSUPP), theirs),
        || theirs(dirfd, path),
    )
}

same_as! {
    fn mknod(p: *const c_char, mode: c_uint, dev: u64) -> c_int = mknodat(CWD, p, mode, dev);
    fn mkfifo(p: *const c_char, mode: c_uint) -> c_int = mknodat(CWD, p, mode | libc::S_IFIFO, 0);
    fn mkfifoat(d: c_int, p: *const c_char, mode: c_uint) -> c_int = mknodat(d, p, mode | libc::S_IFIFO, 0);
}

/// utimes(2), utime(2), lutimes(3): their times as utimensat's.
fn timevals(tv: *const libc::timeval) -> Option<[libc::timespec; 2]> {
    if tv.is_null() {
        return None;
    }
    // SAFETY: two timevals (the calls' contract).
    let tv = unsafe { [*tv, *tv.add(1)] };
    Some(tv.map(|t| libc::timespec {
        tv_sec: t.tv_sec,
        tv_nsec: t.tv_usec * 1000,
    }))
}

fn times_ptr(ts: &Option<[libc::timespec; 2]>) -> *const libc::timespec {
    ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr())
}

#[no_mangle]
pub unsafe extern "C" fn utimes(p: *const c_char, tv: *const libc::timeval) -> c_int {
    let ts = timevals(tv);
    // SAFETY: the same contract, passed on.
    unsafe { utimensat(CWD, p, times_ptr(&ts), 0) }
}

#[no_mangle]
pub unsafe extern "C" fn lutimes(p: *const c_char, tv: *const libc::timeval) -> c_int {
    let ts = timevals(tv);
    // SAFETY: the same contract, passed on.
    unsafe { utimensat(CWD, p, times_ptr(&ts), NOFOLLOW) }
}

#[no_mangle]
pub unsafe extern "C" fn futimes(fd: c_int, tv: *const libc::timeval) -> c_int {
    let ts = timevals(tv);
    // SAFETY: the same contract, passed on.
    unsafe { crate::fds::futimens(fd, times_ptr(&ts)) }
}

#[no_mangle]
pub unsafe extern "C" fn utime(p: *const c_char, times: *const libc::utimbuf) -> c_int {
    let ts = (!times.is_null()).then(|| {
        // SAFETY: a utimbuf (utime's contract).
        let t = unsafe { &*times };
        [t.actime, t.modtime].map(|s| libc::timespec { tv_sec: s, tv_nsec: 0 })
    });
    // SAFETY: the same contract, passed on.
    unsafe { utimensat(CWD, p, times_ptr(&ts), 0) }
}

#[no_mangle]
pub unsafe extern "C" fn statfs(path: *const c_char, out: *mut libc::statfs) -> c_int {
    let theirs = |_: c_int, p: *const c_char| {
        // SAFETY: libc's contract, passed on.
        unsafe { next!(statfs: fn(*const c_char, *mut libc::statfs) -> c_int)(p, out) }
    };
    enter(
        |s| at_path(s, CWD, path, |o, _, _| crate::fds::image_statfs(o, out), theirs),
        || theirs(CWD, path),
    )
}

/// remove(3): glibc's unlinks and removes directories with calls the shim
/// cannot see.
#[no_mangle]
pub unsafe extern "C" fn remove(p: *const c_char) -> c_int {
    // SAFETY: the same contract, passed on.
    let r = unsafe { unlinkat(CWD, p, 0) };
    if r < 0 && crate::errno_is(libc::EISDIR) {
        // SAFETY: as above.
        return unsafe { unlinkat(CWD, p, libc::AT_REMOVEDIR) };
    }
    r
}

/// statvfs(3): glibc's asks statfs(2) by a call the shim cannot see.
#[no_mangle]
pub unsafe extern "C" fn statvfs(p: *const c_char, out: *mut libc::statvfs) -> c_int {
    // SAFETY: a struct statfs to fill, then statvfs's own output.
    unsafe { crate::fds::statvfs_from(|f| statfs(p, f), out) }
}

#[no_mangle]
pub unsafe extern "C" fn statvfs64(p: *const c_char, out: *mut libc::statvfs) -> c_int {
    // SAFETY: the same call.
    unsafe { statvfs(p, out) }
}
