//! The POSIX-like calls. Each returns what its system call returns, or
//! -errno; each relies on the crate's contract (lib.rs "Safety") for its
//! pointers, which is what every `SAFETY` line below refers to.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::io::{IoSlice, IoSliceMut};

use novafs_posix::{At, Errno, Posix, Target, Time};

use crate::convert::{at, copy_out, put, slice, slice_mut, stat, statx, target};
use crate::{bytes, guard, handle, number, status, Novafs, Result};

/// The POSIX view behind a handle.
unsafe fn px<'a>(fs: *const Novafs) -> Result<&'a Posix> {
    // SAFETY: the crate's contract.
    Ok(&unsafe { handle(fs) }?.posix)
}

/// A path from the working directory, following a link at its end unless
/// `nofollow`.
unsafe fn path<'a>(p: *const c_char, nofollow: bool) -> Result<Target<'a>> {
    // SAFETY: the crate's contract.
    let path = unsafe { bytes(p) }?;
    Ok(Target::Path {
        at: At::Cwd,
        path,
        follow: !nofollow,
    })
}

// ---- opening, descriptors ----

#[no_mangle]
pub unsafe extern "C" fn novafs_open(fs: *const Novafs, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the crate's contract.
    number(guard(|| unsafe { px(fs)?.open(At::Cwd, bytes(path)?, flags, mode) })) as c_int
}

#[no_mangle]
pub unsafe extern "C" fn novafs_openat(
    fs: *const Novafs,
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    // SAFETY: the crate's contract.
    number(guard(|| unsafe { px(fs)?.open(at(dirfd), bytes(path)?, flags, mode) })) as c_int
}

#[no_mangle]
pub unsafe extern "C" fn novafs_close(fs: *const Novafs, fd: c_int) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe { px(fs) }?.close(fd)))
}

#[no_mangle]
pub unsafe extern "C" fn novafs_dup(fs: *const Novafs, fd: c_int) -> c_int {
    // SAFETY: the crate's contract.
    number(guard(|| unsafe { px(fs) }?.dup(fd, None, false))) as c_int
}

/// dup2(2) and dup3(2) (`flags`: 0 or O_CLOEXEC).
#[no_mangle]
pub unsafe extern "C" fn novafs_dup3(fs: *const Novafs, fd: c_int, newfd: c_int, flags: c_int) -> c_int {
    // SAFETY: the crate's contract.
    number(guard(|| {
        unsafe { px(fs) }?.dup(fd, Some(newfd), flags & libc::O_CLOEXEC != 0)
    })) as c_int
}

/// fcntl(2): F_GETFD, F_SETFD, F_GETFL, F_SETFL.
#[no_mangle]
pub unsafe extern "C" fn novafs_fcntl(fs: *const Novafs, fd: c_int, cmd: c_int, arg: c_int) -> c_int {
    // SAFETY: the crate's contract.
    number(guard(|| unsafe { px(fs) }?.fcntl(fd, cmd, arg))) as c_int
}

// ---- reading and writing ----

#[no_mangle]
pub unsafe extern "C" fn novafs_read(fs: *const Novafs, fd: c_int, buf: *mut c_void, count: usize) -> isize {
    // SAFETY: the crate's contract.
    number(guard(|| unsafe { px(fs)?.read(fd, slice_mut(buf, count)?) })) as isize
}

#[no_mangle]
pub unsafe extern "C" fn novafs_write(fs: *const Novafs, fd: c_int, buf: *const c_void, count: usize) -> isize {
    // SAFETY: the crate's contract.
    number(guard(|| unsafe { px(fs)?.write(fd, slice(buf, count)?) })) as isize
}

#[no_mangle]
pub unsafe extern "C" fn novafs_pread(fs: *const Novafs, fd: c_int, buf: *mut c_void, count: usize, off: i64) -> isize {
    // SAFETY: the crate's contract.
    number(guard(|| unsafe { px(fs)?.pread(fd, slice_mut(buf, count)?, off) })) as isize
}

#[no_mangle]
pub unsafe extern "C" fn novafs_pwrite(
    fs: *const Novafs,
    fd: c_int,
    buf: *const c_void,
    count: usize,
    off: i64,
) -> isize {
    // SAFETY: the crate's contract.
    number(guard(|| unsafe { px(fs)?.pwrite(fd, slice(buf, count)?, off) })) as isize
}

/// The `cnt` iovecs at `iov`.
unsafe fn iovecs<'a>(iov: *const libc::iovec, cnt: c_int) -> Result<&'a [libc::iovec]> {
    let n = usize::try_from(cnt)
        .ok()
        .filter(|&n| n <= 1024)
        .ok_or(Errno(libc::EINVAL))?;
    if n == 0 {
        return Ok(&[]);
    }
    if iov.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: `cnt` iovecs at a non-null `iov` (the crate's contract).
    Ok(unsafe { std::slice::from_raw_parts(iov, n) })
}

#[no_mangle]
pub unsafe extern "C" fn novafs_readv(fs: *const Novafs, fd: c_int, iov: *const libc::iovec, cnt: c_int) -> isize {
    number(guard(|| {
        // SAFETY: the crate's contract: each iovec names writable bytes.
        let mut bufs = unsafe { iovecs(iov, cnt) }?
            .iter()
            .map(|v| unsafe { slice_mut(v.iov_base, v.iov_len) }.map(IoSliceMut::new))
            .collect::<Result<Vec<_>>>()?;
        // SAFETY: the crate's contract.
        unsafe { px(fs) }?.readv(fd, &mut bufs)
    })) as isize
}

#[no_mangle]
pub unsafe extern "C" fn novafs_writev(fs: *const Novafs, fd: c_int, iov: *const libc::iovec, cnt: c_int) -> isize {
    number(guard(|| {
        // SAFETY: the crate's contract: each iovec names readable bytes.
        let bufs = unsafe { iovecs(iov, cnt) }?
            .iter()
            .map(|v| unsafe { slice(v.iov_base, v.iov_len) }.map(IoSlice::new))
            .collect::<Result<Vec<_>>>()?;
        // SAFETY: the crate's contract.
        unsafe { px(fs) }?.writev(fd, &bufs)
    })) as isize
}

#[no_mangle]
pub unsafe extern "C" fn novafs_lseek(fs: *const Novafs, fd: c_int, off: i64, whence: c_int) -> i64 {
    // SAFETY: the crate's contract.
    number(guard(|| unsafe { px(fs) }?.lseek(fd, off, whence)))
}

#[no_mangle]
pub unsafe extern "C" fn novafs_fallocate(fs: *const Novafs, fd: c_int, mode: c_int, off: i64, len: i64) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe { px(fs) }?.fallocate(fd, mode, off, len)))
}

#[no_mangle]
pub unsafe extern "C" fn novafs_fsync(fs: *const Novafs, fd: c_int) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe { px(fs) }?.fsync(fd)))
}

#[no_mangle]
pub unsafe extern "C" fn novafs_fdatasync(fs: *const Novafs, fd: c_int) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe { px(fs) }?.fsync(fd)))
}

#[no_mangle]
pub unsafe extern "C" fn novafs_ftruncate(fs: *const Novafs, fd: c_int, len: i64) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe { px(fs) }?.truncate(Target::Fd(fd), len).map(drop)))
}

#[no_mangle]
pub unsafe extern "C" fn novafs_truncate(fs: *const Novafs, p: *const c_char, len: i64) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe { px(fs)?.truncate(path(p, false)?, len) }.map(drop)))
}

// ---- attributes ----

#[no_mangle]
pub unsafe extern "C" fn novafs_fstat(fs: *const Novafs, fd: c_int, st: *mut libc::stat) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe { put(st, stat(&px(fs)?.stat(Target::Fd(fd))?)) }))
}

#[no_mangle]
pub unsafe extern "C" fn novafs_stat(fs: *const Novafs, p: *const c_char, st: *mut libc::stat) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe { put(st, stat(&px(fs)?.stat(path(p, false)?)?)) }))
}

#[no_mangle]
pub unsafe extern "C" fn novafs_lstat(fs: *const Novafs, p: *const c_char, st: *mut libc::stat) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe { put(st, stat(&px(fs)?.stat(path(p, true)?)?)) }))
}

/// fstatat(2): AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH.
#[no_mangle]
pub unsafe extern "C" fn novafs_fstatat(
    fs: *const Novafs,
    dirfd: c_int,
    p: *const c_char,
    st: *mut libc::stat,
    flags: c_int,
) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe {
        put(st, stat(&px(fs)?.stat(target(dirfd, p, flags)?)?))
    }))
}

/// statx(2): the basic fields, whatever `mask` asks.
#[no_mangle]
pub unsafe extern "C" fn novafs_statx(
    fs: *const Novafs,
    dirfd: c_int,
    p: *const c_char,
    flags: c_int,
    _mask: c_uint,
    sx: *mut libc::statx,
) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe {
        put(sx, statx(&px(fs)?.stat(target(dirfd, p, flags)?)?))
    }))
}

#[no_mangle]
pub unsafe extern "C" fn novafs_access(fs: *const Novafs, p: *const c_char, mode: c_int) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe { px(fs)?.access(At::Cwd, bytes(p)?, mode, 0) }))
}

#[no_mangle]
pub unsafe extern "C" fn novafs_faccessat(
    fs: *const Novafs,
    dirfd: c_int,
    p: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe { px(fs)?.access(at(dirfd), bytes(p)?, mode, flags) }))
}

#[no_mangle]
pub unsafe extern "C" fn novafs_chmod(fs: *const Novafs, p: *const c_char, mode: c_uint) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe { px(fs)?.chmod(path(p, false)?, mode) }.map(drop)))
}

#[no_mangle]
pub unsafe extern "C" fn novafs_fchmod(fs: *const Novafs, fd: c_int, mode: c_uint) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe { px(fs) }?.chmod(Target::Fd(fd), mode).map(drop)))
}

#[no_mangle]
pub unsafe extern "C" fn novafs_fchmodat(
    fs: *const Novafs,
    dirfd: c_int,
    p: *const c_char,
    mode: c_uint,
    flags: c_int,
) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| {
        unsafe { px(fs)?.chmod(target(dirfd, p, flags)?, mode) }.map(drop)
    }))
}

/// An id chown(2) takes: -1 leaves it alone.
fn id(v: c_uint) -> Option<u32> {
    (v != u32::MAX).then_some(v)
}

#[no_mangle]
pub unsafe extern "C" fn novafs_chown(fs: *const Novafs, p: *const c_char, uid: c_uint, gid: c_uint) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| {
        unsafe { px(fs)?.chown(path(p, false)?, id(uid), id(gid)) }.map(drop)
    }))
}

#[no_mangle]
pub unsafe extern "C" fn novafs_lchown(fs: *const Novafs, p: *const c_char, uid: c_uint, gid: c_uint) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| {
        unsafe { px(fs)?.chown(path(p, true)?, id(uid), id(gid)) }.map(drop)
    }))
}

#[no_mangle]
pub unsafe extern "C" fn novafs_fchown(fs: *const Novafs, fd: c_int, uid: c_uint, gid: c_uint) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| {
        unsafe { px(fs) }?.chown(Target::Fd(fd), id(uid), id(gid)).map(drop)
    }))
}

#[no_mangle]
pub unsafe extern "C" fn novafs_fchownat(
    fs: *const Novafs,
    dirfd: c_int,
    p: *const c_char,
    uid: c_uint,
    gid: c_uint,
    flags: c_int,
) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| {
        unsafe { px(fs)?.chown(target(dirfd, p, flags)?, id(uid), id(gid)) }.map(drop)
    }))
}

/// utimensat(2)'s two times (NULL: both now).
unsafe fn times(t: *const libc::timespec) -> Result<(Time, Time)> {
    if t.is_null() {
        return Ok((Time::Now, Time::Now));
    }
    // SAFETY: two timespecs at a non-null `t` (the crate's contract).
    let [a, m] = unsafe { *t.cast::<[libc::timespec; 2]>() };
    let one = |ts: libc::timespec| match ts.tv_nsec {
        libc::UTIME_NOW => Ok(Time::Now),
        libc::UTIME_OMIT => Ok(Time::Omit),
        ns if (0..1_000_000_000).contains(&ns) => ts
            .tv_sec
            .checked_mul(1_000_000_000)
            .and_then(|s| s.checked_add(ns))
            .map(Time::At)
            .ok_or(Errno(libc::EINVAL)),
        _ => Err(Errno(libc::EINVAL)),
    };
    Ok((one(a)?, one(m)?))
}

/// utimensat(2): AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH.
#[no_mangle]
pub unsafe extern "C" fn novafs_utimensat(
    fs: *const Novafs,
    dirfd: c_int,
    p: *const c_char,
    t: *const libc::timespec,
    flags: c_int,
) -> c_int {
    status(guard(|| {
        // SAFETY: the crate's contract.
        let (a, m) = unsafe { times(t) }?;
        // SAFETY: the crate's contract.
        unsafe { px(fs)?.utimens(target(dirfd, p, flags)?, a, m) }.map(drop)
    }))
}

#[no_mangle]
pub unsafe extern "C" fn novafs_futimens(fs: *const Novafs, fd: c_int, t: *const libc::timespec) -> c_int {
    status(guard(|| {
        // SAFETY: the crate's contract.
        let (a, m) = unsafe { times(t) }?;
        // SAFETY: the crate's contract.
        unsafe { px(fs) }?.utimens(Target::Fd(fd), a, m).map(drop)
    }))
}

// ---- names ----

#[no_mangle]
pub unsafe extern "C" fn novafs_mkdir(fs: *const Novafs, p: *const c_char, mode: c_uint) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe { px(fs)?.mkdir(At::Cwd, bytes(p)?, mode) }))
}

#[no_mangle]
pub unsafe extern "C" fn novafs_mkdirat(fs: *const Novafs, dirfd: c_int, p: *const c_char, mode: c_uint) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe { px(fs)?.mkdir(at(dirfd), bytes(p)?, mode) }))
}

#[no_mangle]
pub unsafe extern "C" fn novafs_rmdir(fs: *const Novafs, p: *const c_char) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe {
        px(fs)?.unlink(At::Cwd, bytes(p)?, libc::AT_REMOVEDIR)
    }))
}

#[no_mangle]
pub unsafe extern "C" fn novafs_unlink(fs: *const Novafs, p: *const c_char) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe { px(fs)?.unlink(At::Cwd, bytes(p)?, 0) }))
}

/// unlinkat(2): AT_REMOVEDIR.
#[no_mangle]
pub unsafe extern "C" fn novafs_unlinkat(fs: *const Novafs, dirfd: c_int, p: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe { px(fs)?.unlink(at(dirfd), bytes(p)?, flags) }))
}

#[no_mangle]
pub unsafe extern "C" fn novafs_rename(fs: *const Novafs, old: *const c_char, new: *const c_char) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe {
        px(fs)?.rename(At::Cwd, bytes(old)?, At::Cwd, bytes(new)?, 0)
    }))
}

/// renameat2(2): RENAME_NOREPLACE, RENAME_EXCHANGE, RENAME_WHITEOUT.
#[no_mangle]
pub unsafe extern "C" fn novafs_renameat2(
    fs: *const Novafs,
    olddirfd: c_int,
    old: *const c_char,
    newdirfd: c_int,
    new: *const c_char,
    flags: c_uint,
) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe {
        px(fs)?.rename(at(olddirfd), bytes(old)?, at(newdirfd), bytes(new)?, flags)
    }))
}

#[no_mangle]
pub unsafe extern "C" fn novafs_link(fs: *const Novafs, old: *const c_char, new: *const c_char) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe {
        px(fs)?.link(At::Cwd, bytes(old)?, At::Cwd, bytes(new)?, 0)
    }))
}

/// linkat(2): AT_SYMLINK_FOLLOW.
#[no_mangle]
pub unsafe extern "C" fn novafs_linkat(
    fs: *const Novafs,
    olddirfd: c_int,
    old: *const c_char,
    newdirfd: c_int,
    new: *const c_char,
    flags: c_int,
) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe {
        px(fs)?.link(at(olddirfd), bytes(old)?, at(newdirfd), bytes(new)?, flags)
    }))
}

#[no_mangle]
pub unsafe extern "C" fn novafs_symlink(fs: *const Novafs, target: *const c_char, p: *const c_char) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe { px(fs)?.symlink(bytes(target)?, At::Cwd, bytes(p)?) }))
}

#[no_mangle]
pub unsafe extern "C" fn novafs_symlinkat(
    fs: *const Novafs,
    target: *const c_char,
    dirfd: c_int,
    p: *const c_char,
) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe {
        px(fs)?.symlink(bytes(target)?, at(dirfd), bytes(p)?)
    }))
}

/// readlink(2): the target, cut to `size` bytes, with no NUL added.
#[no_mangle]
pub unsafe extern "C" fn novafs_readlink(fs: *const Novafs, p: *const c_char, buf: *mut c_char, size: usize) -> isize {
    // SAFETY: the crate's contract.
    number(guard(|| unsafe {
        copy_out(&px(fs)?.readlink(At::Cwd, bytes(p)?)?, buf.cast(), size, true)
    })) as isize
}

#[no_mangle]
pub unsafe extern "C" fn novafs_readlinkat(
    fs: *const Novafs,
    dirfd: c_int,
    p: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> isize {
    // SAFETY: the crate's contract.
    number(guard(|| unsafe {
        copy_out(&px(fs)?.readlink(at(dirfd), bytes(p)?)?, buf.cast(), size, true)
    })) as isize
}

#[no_mangle]
pub unsafe extern "C" fn novafs_chdir(fs: *const Novafs, p: *const c_char) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe { px(fs)?.chdir(path(p, false)?) }))
}

#[no_mangle]
pub unsafe extern "C" fn novafs_fchdir(fs: *const Novafs, fd: c_int) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe { px(fs) }?.chdir(Target::Fd(fd))))
}

/// umask(2): sets this handle's umask, returns the old one.
#[no_mangle]
pub unsafe extern "C" fn novafs_umask(fs: *const Novafs, mask: c_uint) -> c_uint {
    // SAFETY: the crate's contract.
    unsafe { px(fs) }.map_or(0, |p| p.umask(mask))
}

// ---- extended attributes ----
// Each call comes three ways, as in C: by path, by path without following
// a link at its end (l*), by descriptor (f*); one body each.

unsafe fn getx(
    fs: *const Novafs,
    t: Result<Target<'_>>,
    name: *const c_char,
    value: *mut c_void,
    size: usize,
) -> isize {
    // SAFETY: the crate's contract.
    number(guard(|| unsafe {
        copy_out(&px(fs)?.getxattr(t?, bytes(name)?)?, value, size, false)
    })) as isize
}

unsafe fn setx(
    fs: *const Novafs,
    t: Result<Target<'_>>,
    name: *const c_char,
    value: *const c_void,
    size: usize,
    flags: c_int,
) -> c_int {
    status(guard(|| {
        let flags = u32::try_from(flags).map_err(|_| Errno(libc::EINVAL))?;
        // SAFETY: the crate's contract.
        unsafe { px(fs)?.setxattr(t?, bytes(name)?, slice(value, size)?, flags) }
    }))
}

unsafe fn listx(fs: *const Novafs, t: Result<Target<'_>>, list: *mut c_char, size: usize) -> isize {
    // SAFETY: the crate's contract.
    number(guard(|| unsafe {
        copy_out(&px(fs)?.listxattr(t?)?, list.cast(), size, false)
    })) as isize
}

unsafe fn removex(fs: *const Novafs, t: Result<Target<'_>>, name: *const c_char) -> c_int {
    // SAFETY: the crate's contract.
    status(guard(|| unsafe { px(fs)?.removexattr(t?, bytes(name)?) }))
}

#[no_mangle]
pub unsafe extern "C" fn novafs_getxattr(
    fs: *const Novafs,
    p: *const c_char,
    name: *const c_char,
    value: *mut c_void,
    size: usize,
) -> isize {
    // SAFETY: the crate's contract.
    unsafe { getx(fs, path(p, false), name, value, size) }
}

#[no_mangle]
pub unsafe extern "C" fn novafs_setxattr(
    fs: *const Novafs,
    p: *const c_char,
    name: *const c_char,
    value: *const c_void,
    size: usize,
    flags: c_int,
) -> c_int {
    // SAFETY: the crate's contract.
    unsafe { setx(fs, path(p, false), name, value, size, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn novafs_listxattr(
    fs: *const Novafs,
    p: *const c_char,
    list: *mut c_char,
    size: usize,
) -> isize {
    // SAFETY: the crate's contract.
    unsafe { listx(fs, path(p, false), list, size) }
}

#[no_mangle]
pub unsafe extern "C" fn novafs_removexattr(fs: *const Novafs, p: *const c_char, name: *const c_char) -> c_int {
    // SAFETY: the crate's contract.
    unsafe { removex(fs, path(p, false), name) }
}

#[no_mangle]
pub unsafe extern "C" fn novafs_lgetxattr(
    fs: *const Novafs,
    p: *const c_char,
    name: *const c_char,
    value: *mut c_void,
    size: usize,
) -> isize {
    // SAFETY: the crate's contract.
    unsafe { getx(fs, path(p, true), name, value, size) }
}

#[no_mangle]
pub unsafe extern "C" fn novafs_lsetxattr(
    fs: *const Novafs,
    p: *const c_char,
    name: *const c_char,
    value: *const c_void,
    size: usize,
    flags: c_int,
) -> c_int {
    // SAFETY: the crate's contract.
    unsafe { setx(fs, path(p, true), name, value, size, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn novafs_llistxattr(
    fs: *const Novafs,
    p: *const c_char,
    list: *mut c_char,
    size: usize,
) -> isize {
    // SAFETY: the crate's contract.
    unsafe { listx(fs, path(p, true), list, size) }
}

#[no_mangle]
pub unsafe extern "C" fn novafs_lremovexattr(fs: *const Novafs, p: *const c_char, name: *const c_char) -> c_int {
    // SAFETY: the crate's contract.
    unsafe { removex(fs, path(p, true), name) }
}

#[no_mangle]
pub unsafe extern "C" fn novafs_fgetxattr(
    fs: *const Novafs,
    fd: c_int,
    name: *const c_char,
    value: *mut c_void,
    size: usize,
) -> isize {
    // SAFETY: the crate's contract.
    unsafe { getx(fs, Ok(Target::Fd(fd)), name, value, size) }
}

#[no_mangle]
pub unsafe extern "C" fn novafs_fsetxattr(
    fs: *const Novafs,
    fd: c_int,
    name: *const c_char,
    value: *const c_void,
    size: usize,
    flags: c_int,
) -> c_int {
    // SAFETY: the crate's contract.
    unsafe { setx(fs, Ok(Target::Fd(fd)), name, value, size, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn novafs_flistxattr(fs: *const Novafs, fd: c_int, list: *mut c_char, size: usize) -> isize {
    // SAFETY: the crate's contract.
    unsafe { listx(fs, Ok(Target::Fd(fd)), list, size) }
}

#[no_mangle]
pub unsafe extern "C" fn novafs_fremovexattr(fs: *const Novafs, fd: c_int, name: *const c_char) -> c_int {
    // SAFETY: the crate's contract.
    unsafe { removex(fs, Ok(Target::Fd(fd)), name) }
}
