//! Between the library's types and C's: attributes to `struct stat` and
//! `struct statx`, descriptors and paths from their C forms.

use std::ffi::{c_char, c_int};

use core_fs::Attr;
use novafs_posix::{At, Errno, Target};

use crate::{bytes, Result};

/// Device number reported for every file (no kernel device backs them).
const DEV: u64 = 0;

/// `dirfd` as the `*at` calls take it.
pub(crate) fn at(dirfd: c_int) -> At {
    if dirfd == libc::AT_FDCWD {
        At::Cwd
    } else {
        At::Fd(dirfd)
    }
}

/// The file a `*at` call with `flags` names: AT_EMPTY_PATH with an empty
/// path is `dirfd` itself; AT_SYMLINK_NOFOLLOW leaves a link at the end.
pub(crate) unsafe fn target<'a>(dirfd: c_int, path: *const c_char, flags: c_int) -> Result<Target<'a>> {
    // SAFETY: the crate's contract.
    let path = unsafe { bytes(path) }?;
    if path.is_empty() && flags & libc::AT_EMPTY_PATH != 0 {
        if dirfd == libc::AT_FDCWD {
            return Ok(Target::Path {
                at: At::Cwd,
                path: b".",
                follow: true,
            });
        }
        return Ok(Target::Fd(dirfd));
    }
    Ok(Target::Path {
        at: at(dirfd),
        path,
        follow: flags & libc::AT_SYMLINK_NOFOLLOW == 0,
    })
}

fn split(ns: i64) -> (i64, i64) {
    (ns.div_euclid(1_000_000_000), ns.rem_euclid(1_000_000_000))
}

/// `a` as `struct stat`.
pub(crate) fn stat(a: &Attr) -> libc::stat {
    // SAFETY: `struct stat` is plain integers: all zeroes is a value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    st.st_dev = DEV;
    st.st_ino = a.ino;
    st.st_mode = a.mode();
    st.st_nlink = a.nlink.into();
    st.st_uid = a.uid;
    st.st_gid = a.gid;
    st.st_rdev = a.rdev;
    st.st_size = i64::try_from(a.size).unwrap_or(i64::MAX);
    st.st_blksize = core_fs::PAGE_SIZE as i64;
    st.st_blocks = i64::try_from(a.blocks).unwrap_or(i64::MAX);
    (st.st_atime, st.st_atime_nsec) = split(a.atime);
    (st.st_mtime, st.st_mtime_nsec) = split(a.mtime);
    (st.st_ctime, st.st_ctime_nsec) = split(a.ctime);
    st
}

/// `a` as `struct statx` (the basic fields; no birth time).
pub(crate) fn statx(a: &Attr) -> libc::statx {
    // SAFETY: `struct statx` is plain integers: all zeroes is a value.
    let mut sx: libc::statx = unsafe { std::mem::zeroed() };
    let time = |ns: i64| {
        let (sec, nsec) = split(ns);
        // SAFETY: plain integers: all zeroes is a value.
        let mut t: libc::statx_timestamp = unsafe { std::mem::zeroed() };
        t.tv_sec = sec;
        t.tv_nsec = nsec as u32;
        t
    };
    sx.stx_mask = libc::STATX_BASIC_STATS;
    sx.stx_blksize = core_fs::PAGE_SIZE as u32;
    sx.stx_nlink = a.nlink;
    sx.stx_uid = a.uid;
    sx.stx_gid = a.gid;
    sx.stx_mode = a.mode() as u16;
    sx.stx_ino = a.ino;
    sx.stx_size = a.size;
    sx.stx_blocks = a.blocks;
    sx.stx_atime = time(a.atime);
    sx.stx_mtime = time(a.mtime);
    sx.stx_ctime = time(a.ctime);
    sx.stx_rdev_major = libc::major(a.rdev) as u32;
    sx.stx_rdev_minor = libc::minor(a.rdev) as u32;
    sx
}

/// Writes `value` through `out`.
pub(crate) unsafe fn put<T>(out: *mut T, value: T) -> Result<()> {
    if out.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: non-null and valid for writes (the crate's contract).
    unsafe { out.write(value) };
    Ok(())
}

/// The `len` bytes at `buf`.
pub(crate) unsafe fn slice<'a>(buf: *const std::ffi::c_void, len: usize) -> Result<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if buf.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: `len` readable bytes at a non-null `buf` (the contract).
    Ok(unsafe { std::slice::from_raw_parts(buf.cast(), len) })
}

/// The `len` bytes at `buf`, to write.
pub(crate) unsafe fn slice_mut<'a>(buf: *mut std::ffi::c_void, len: usize) -> Result<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if buf.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: `len` writable bytes at a non-null `buf` (the contract).
    Ok(unsafe { std::slice::from_raw_parts_mut(buf.cast(), len) })
}

/// Copies `value` out as getxattr(2) and readlink(2) do: with `size` 0
/// only its length; ERANGE when it does not fit (`truncate`: readlink
/// cuts it instead).
pub(crate) unsafe fn copy_out(value: &[u8], buf: *mut std::ffi::c_void, size: usize, truncate: bool) -> Result<usize> {
    if size == 0 && !truncate {
        return Ok(value.len());
    }
    let n = if value.len() > size {
        if !truncate {
            return Err(Errno(libc::ERANGE));
        }
        size
    } else {
        value.len()
    };
    // SAFETY: the crate's contract.
    let out = unsafe { slice_mut(buf, n) }?;
    out.copy_from_slice(&value[..n]);
    Ok(n)
}
