//! libnovafs: the novafs library behind a C ABI, for C programs (and the
//! preload shim) that want the file system in-process, with no kernel in
//! the data path. The header is `include/novafs.h` (cbindgen writes it
//! from this crate; a test keeps it current).
//!
//! Every call mirrors a POSIX one, takes the file system handle first,
//! and returns what the system call returns, except that a failure is
//! `-errno` (never -1 with `errno` set), as the kernel's own interface
//! does: `novafs_open(fs, "/a", O_RDONLY, 0)` is a descriptor or
//! `-ENOENT`. Descriptors are numbers in the handle's own table, not
//! kernel descriptors. Every call is thread-safe. A write is atomic and
//! durable when it returns (strict mode, DESIGN.md); fsync only checks
//! the descriptor.
//!
//! Paths are the image's: `/` is its root. Permissions are checked for
//! the process's credentials as the kernel would check them (README
//! "Trust model"): a process that can open the image can read and change
//! every file in it, so the image's own mode is the boundary.
//!
//! # Safety
//!
//! Every function is `unsafe` to call from Rust and shares one contract:
//! a handle is one `novafs_mount` returned and not yet unmounted; a path
//! or name is a NUL-terminated string; a buffer has at least the length
//! passed with it; an output pointer is valid for writes. A null pointer
//! where one is needed gives `-EFAULT`. A panic inside the library is
//! caught and reported as `-EIO`.

#![allow(clippy::missing_safety_doc)] // the contract above covers every call
#![deny(unsafe_op_in_unsafe_fn)]

mod calls;
mod convert;
mod dir;
mod maps;
mod snapshots;

use std::ffi::{c_char, c_int, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;

use core_fs::{Cred, FormatOptions, Fs, MountOptions};
use novafs_posix::{Errno, Posix};
use pm::{MapOptions, MmapRegion, Prefault, Region};

pub use calls::*;
pub use dir::{NovafsDir, NovafsDirent};
pub use maps::{novafs_mmap, novafs_msync, novafs_munmap};

/// `novafs_mount` flag: mount read-only.
pub const NOVAFS_RDONLY: c_int = 1;

/// `novafs_mount` flag: build the whole image's page tables before the
/// mount returns (MAP_POPULATE), so that no call pays a first-touch page
/// fault; by default each page is faulted in on its first use.
pub const NOVAFS_PREFAULT: c_int = 2;

/// `novafs_mount` flag: MAP_SHARED mappings (`novafs_mmap`) are atomic
/// (NOVA §4.5): the program stores to DRAM replicas of the pages, and
/// each `novafs_msync` (and `novafs_munmap`) commits every page stored to
/// since the last one in one copy-on-write commit, so that a crash shows
/// the file as of one msync, never part of one. Reads see the stores at
/// once. Without it, mappings are DAX: the file's own pages, stores
/// durable once flushed, a crash may show some of them.
pub const NOVAFS_MMAP_ATOMIC: c_int = 4;

/// A mounted image (or a snapshot of one, read-only): the file system and
/// this process's descriptors, working directory and umask on it.
pub struct Novafs {
    posix: Posix,
}

type Result<T> = std::result::Result<T, Errno>;

/// Runs `f`, turning a panic into EIO: no unwinding crosses into C.
fn guard<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        tracing::error!("novafs: a panic inside a C call, answered EIO");
        Err(Errno(libc::EIO))
    })
}

/// 0 or -errno.
fn status(r: Result<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(Errno(e)) => -e,
    }
}

/// A non-negative number or -errno.
fn number<T: TryInto<i64>>(r: Result<T>) -> i64 {
    match r.and_then(|n| n.try_into().map_err(|_| Errno(libc::EOVERFLOW))) {
        Ok(n) => n,
        Err(Errno(e)) => -i64::from(e),
    }
}

/// The handle behind `fs`.
unsafe fn handle<'a>(fs: *const Novafs) -> Result<&'a Novafs> {
    // SAFETY: the caller passes a handle novafs_mount returned and has not
    // unmounted (the crate's contract); null is refused.
    unsafe { fs.as_ref() }.ok_or(Errno(libc::EFAULT))
}

/// The bytes of a NUL-terminated string.
unsafe fn bytes<'a>(s: *const c_char) -> Result<&'a [u8]> {
    if s.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: non-null and NUL-terminated (the crate's contract).
    Ok(unsafe { std::ffi::CStr::from_ptr(s) }.to_bytes())
}

fn path_of(bytes: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(bytes))
}

/// Makes a novafs image of `size` bytes at `image` (a new file, or a
/// devdax device), as `novafs mkfs` does with its defaults. 0 or -errno
/// (EEXIST: the file exists; EINVAL: too small, see
/// `novafs_minimum_size`).
#[no_mangle]
pub unsafe extern "C" fn novafs_format(image: *const c_char, size: u64) -> c_int {
    status(guard(|| {
        // SAFETY: the crate's contract.
        let path = path_of(unsafe { bytes(image) }?);
        if size < novafs_minimum_size() {
            return Err(Errno(libc::EINVAL));
        }
        let region: Arc<dyn Region> =
            Arc::new(MmapRegion::create(path, size, &MapOptions::default()).map_err(pm_errno)?);
        Ok(Fs::format(region, &FormatOptions::default())?)
    }))
}

/// The smallest image `novafs_format` takes on this machine.
#[no_mangle]
pub extern "C" fn novafs_minimum_size() -> u64 {
    core_fs::minimum_size(core_fs::default_shards()) + (8 << 20)
}

/// Mounts the image at `image` in this process (`flags`: 0, or
/// NOVAFS_RDONLY, NOVAFS_PREFAULT and NOVAFS_MMAP_ATOMIC or'ed),
/// recovering it first if it was not unmounted cleanly.
/// The process's credentials and umask are taken now (see
/// `novafs_refresh_credentials`). Returns the handle, or NULL with the
/// errno in `*err` (EBUSY: mounted elsewhere, by a daemon or another
/// process; EINVAL: not a novafs image).
#[no_mangle]
pub unsafe extern "C" fn novafs_mount(image: *const c_char, flags: c_int, err: *mut c_int) -> *mut Novafs {
    let mounted = guard(|| {
        // SAFETY: the crate's contract.
        let path = path_of(unsafe { bytes(image) }?);
        let map = MapOptions {
            prefault: if flags & NOVAFS_PREFAULT != 0 {
                Prefault::Now
            } else {
                Prefault::OnFirstUse
            },
            ..MapOptions::default()
        };
        let region: Arc<dyn Region> = Arc::new(MmapRegion::open(path, &map).map_err(pm_errno)?);
        let opts = MountOptions::default().read_only(flags & NOVAFS_RDONLY != 0);
        let fs = Fs::open(region, opts)?;
        let handle = Novafs::new(Arc::new(fs));
        if flags & NOVAFS_MMAP_ATOMIC != 0 {
            handle.posix.set_map_kind(core_fs::MapKind::Atomic);
        }
        Ok(handle)
    });
    // SAFETY: the crate's contract.
    unsafe { new_handle(mounted, err) }
}

/// A new handle for C, or NULL with the errno in `*err` (when `err` is
/// not NULL).
unsafe fn new_handle(made: Result<Novafs>, err: *mut c_int) -> *mut Novafs {
    match made {
        Ok(fs) => Box::into_raw(Box::new(fs)),
        Err(Errno(e)) => {
            if !err.is_null() {
                // SAFETY: a valid output pointer (the crate's contract).
                unsafe { *err = e };
            }
            std::ptr::null_mut()
        }
    }
}

/// Closes every descriptor and unmounts cleanly; the handle is gone
/// whatever the result. 0 or -errno.
#[no_mangle]
pub unsafe extern "C" fn novafs_unmount(fs: *mut Novafs) -> c_int {
    if fs.is_null() {
        return -libc::EFAULT;
    }
    // SAFETY: a handle novafs_mount returned, given back once (the
    // crate's contract).
    let fs = unsafe { Box::from_raw(fs) };
    status(guard(|| {
        let fs = fs.posix.into_fs();
        match Arc::try_unwrap(fs) {
            Ok(fs) => Ok(fs.unmount()?),
            // A snapshot view, or a handle still shared: nothing to write.
            Err(_) => Ok(()),
        }
    }))
}

/// Takes the process's credentials (user, groups, capabilities) and
/// umask again, after it changed them. 0 or -errno.
#[no_mangle]
pub unsafe extern "C" fn novafs_refresh_credentials(fs: *const Novafs) -> c_int {
    status(guard(|| {
        // SAFETY: the crate's contract.
        let fs = unsafe { handle(fs) }?;
        let io = |e: std::io::Error| Errno(e.raw_os_error().unwrap_or(libc::EIO));
        fs.posix.set_cred(Cred::of_process().map_err(io)?);
        fs.posix.set_access_cred(Cred::real_of_process().map_err(io)?);
        fs.posix.umask(process_umask());
        Ok(())
    }))
}

impl Novafs {
    /// The POSIX view behind the handle: for the preload shim, which files
    /// descriptions under the kernel descriptor numbers it reserved.
    pub fn posix(&self) -> &Posix {
        &self.posix
    }

    fn new(fs: Arc<Fs>) -> Novafs {
        let cred = Cred::of_process().unwrap_or_else(|e| {
            tracing::warn!("novafs: cannot read the process's credentials ({e}); checking as nobody");
            Cred::new(65534, 65534, &[])
        });
        let posix = Posix::new(fs, cred, process_umask());
        if let Ok(real) = Cred::real_of_process() {
            posix.set_access_cred(real);
        }
        Novafs { posix }
    }
}

/// The process's umask, read without changing it (/proc/self/status).
fn process_umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

fn pm_errno(e: pm::PmError) -> Errno {
    core_fs::Error::from(e).into()
}
