//! The production [`Region`]: a shared mapping of a devdax device or a file.
//!
//! Owns the mapping's lifetime (map, lock, unmap), the decision of how durable
//! it is ([`RegionKind`], DESIGN.md §5) and every raw access into it. Reads go
//! through the error-aware copy of [`crate::sigbus`]; persist primitives come
//! from [`Persist`]. Emulated media errors come from the image's sidecar
//! bad-block list ([`BadBlocks`]), loaded at map time.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{check_range, check_u64};
use crate::prefault::Prefaulter;
use crate::protect::Guard;
use crate::{
    sigbus, stripe, BadBlocks, FlushKind, MapSource, Nvmm, Persist, PmError, Prefault, Protection, Region, WriteProtect,
};

/// Granularity of region sizes: one page.
const PAGE: u64 = 4096;

/// statfs(2) `f_type` of tmpfs.
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// How to map a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapOptions {
    /// The platform has eADR (caches are persistent): skip cache flushes.
    pub eadr: bool,
    /// When the mapping's pages are faulted in ([`Prefault`]).
    pub prefault: Prefault,
    /// Take an exclusive `flock` on the file for the region's lifetime, so a
    /// second mount or fsck of the same image fails with [`PmError::Busy`].
    pub lock: bool,
    /// Keep the mapping read-only outside the region's own stores.
    pub protect: WriteProtect,
    /// Emulate a slower NVMM's writes ([`crate::nvmm`]); DRAM speed by
    /// default.
    pub nvmm: Nvmm,
}

impl Default for MapOptions {
    fn default() -> MapOptions {
        MapOptions {
            eadr: false,
            prefault: Prefault::default(),
            lock: true,
            protect: WriteProtect::default(),
            nvmm: Nvmm::DRAM,
        }
    }
}

/// What backs a region, from strongest to weakest durability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RegionKind {
    /// A devdax character device: real PM, flushes make stores durable.
    DevDax,
    /// A file on a DAX file system mapped with MAP_SYNC: real PM, and the
    /// file system keeps its own metadata for the mapping durable.
    FsDax,
    /// A file on tmpfs (the default emulation): flushes and fences really run,
    /// data survives a crash of the process but not of the machine.
    Emulated,
    /// A file on an ordinary disk file system, through the page cache. It
    /// survives a process crash; after a power loss only what was written
    /// back with msync, which this crate does not yet issue, survives.
    PageCache,
    /// Heap memory ([`crate::MemRegion`]): tests only, not durable at all.
    Memory,
}

impl RegionKind {
    /// Whether flushed and fenced stores survive a power loss.
    pub fn is_power_safe(&self) -> bool {
        matches!(self, RegionKind::DevDax | RegionKind::FsDax)
    }
}

impl fmt::Display for RegionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RegionKind::DevDax => "devdax (persistent memory device: power-safe)",
            RegionKind::FsDax => "fsdax (DAX file mapped with MAP_SYNC: power-safe)",
            RegionKind::Emulated => "emulated (tmpfs file: survives process crashes, not power loss)",
            RegionKind::PageCache => "page cache (disk file without msync: survives process crashes, not power loss)",
            RegionKind::Memory => "heap memory (tests only, not durable)",
        })
    }
}

/// A persistent-memory region mapped from a devdax device or a file.
pub struct MmapRegion {
    base: *mut u8,
    len: u64,
    path: PathBuf,
    kind: RegionKind,
    persist: Persist,
    /// Emulated media errors from `IMAGE.badblocks`, read at map time.
    bad: BadBlocks,
    /// Write windows; dropped after the mapping (a key outlives its pages).
    guard: Guard,
    /// Kept open for the region's lifetime: it holds the `flock`.
    file: File,
    /// Builds the page tables behind the map call ([`Prefault::Background`]);
    /// stopped before the unmap.
    prefaulter: Option<Prefaulter>,
}

// SAFETY: the mapping is shared memory owned by this value until Drop; all
// access goes through `Region`, whose contract makes concurrent use sound
// (disjoint plain writes, atomic 8-byte stores and loads).
unsafe impl Send for MmapRegion {}
// SAFETY: as above.
unsafe impl Sync for MmapRegion {}

impl MmapRegion {
    /// Creates a region of `size` bytes at `path` and maps it.
    ///
    /// A devdax character device is used as is (`size` must fit in it). A
    /// regular file is created if missing (mode 0600) and sized to `size`,
    /// with the space reserved up front: a tmpfs that ran out of memory later
    /// would otherwise kill the process with SIGBUS on a store.
    pub fn create(path: &Path, size: u64, opts: &MapOptions) -> Result<MmapRegion, PmError> {
        check_size(path, size)?;
        match std::fs::metadata(path) {
            Ok(md) if md.file_type().is_char_device() => {
                let dev_size = devdax_size(path, md.rdev())?;
                if size > dev_size {
                    return Err(PmError::invalid(
                        path,
                        format!("size {size} exceeds the device ({dev_size} bytes)"),
                    ));
                }
                let file = open_rw(path)?;
                lock(&file, path, opts)?;
                MmapRegion::map(file, path, size, true, opts)
            }
            Ok(md) if !md.is_file() => Err(not_mappable(path)),
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(PmError::io(path, e)),
            _ => {
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .mode(0o600)
                    .open(path)
                    .map_err(|e| PmError::io(path, e))?;
                // Lock before resizing: never resize an image in use.
                lock(&file, path, opts)?;
                file.set_len(size).map_err(|e| PmError::io(path, e))?;
                reserve(&file, path, size)?;
                MmapRegion::map(file, path, size, false, opts)
            }
        }
    }

    /// Maps the whole of an existing file or devdax device.
    ///
    /// Both `open` and [`MmapRegion::create`] load the emulated bad-block
    /// list `<path>.badblocks` when it exists ([`BadBlocks`]): reads of a
    /// listed byte then fail with [`PmError::Media`], as on a PM namespace
    /// with poisoned lines. Writes do not clear it; `rm <path>.badblocks`
    /// does, for the next mapping.
    pub fn open(path: &Path, opts: &MapOptions) -> Result<MmapRegion, PmError> {
        let file = open_rw(path)?;
        lock(&file, path, opts)?;
        let md = file.metadata().map_err(|e| PmError::io(path, e))?;
        let (size, devdax) = if md.file_type().is_char_device() {
            (devdax_size(path, md.rdev())?, true)
        } else if md.is_file() {
            (md.len(), false)
        } else {
            return Err(not_mappable(path));
        };
        check_size(path, size)?;
        MmapRegion::map(file, path, size, devdax, opts)
    }

    /// Maps `len` bytes of `file` and decides the region's kind.
    fn map(file: File, path: &Path, len: u64, devdax: bool, opts: &MapOptions) -> Result<MmapRegion, PmError> {
        // Before mapping: a bad list is an error with nothing to undo.
        let bad = BadBlocks::load(path, len)?;
        sigbus::install();
        let fd = file.as_raw_fd();
        let populate = if opts.prefault == Prefault::Now {
            libc::MAP_POPULATE
        } else {
            0
        };
        let mmap = |flags: libc::c_int| {
            // SAFETY: a new mapping chosen by the kernel (no MAP_FIXED), so
            // no existing memory is affected; the result is checked.
            let base = unsafe {
                libc::mmap(
                    ptr::null_mut(),
                    len as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    flags | populate,
                    fd,
                    0,
                )
            };
            if base == libc::MAP_FAILED {
                Err(io::Error::last_os_error())
            } else {
                Ok(base.cast::<u8>())
            }
        };
        let (base, kind) = if devdax {
            // devdax mappings are synchronous by nature.
            let base = mmap(libc::MAP_SHARED).map_err(|e| PmError::io(path, e))?;
            (base, RegionKind::DevDax)
        } else {
            match mmap(libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC) {
                Ok(base) => (base, RegionKind::FsDax),
                // Not a DAX file system: EOPNOTSUPP, or EINVAL on kernels that
                // predate MAP_SHARED_VALIDATE.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) => {
                    let base = mmap(libc::MAP_SHARED).map_err(|e| PmError::io(path, e))?;
                    let kind = match is_tmpfs(&file) {
                        Ok(true) => RegionKind::Emulated,
                        Ok(false) => RegionKind::PageCache,
                        Err(e) => {
                            // SAFETY: unmapping the mapping made just above.
                            unsafe { libc::munmap(base.cast(), len as usize) };
                            return Err(PmError::io(path, e));
                        }
                    };
                    (base, kind)
                }
                Err(e) => return Err(PmError::io(path, e)),
            }
        };
        let guard = match Guard::new(base, len, opts.protect) {
            Ok(g) => g,
            Err(e) => {
                // SAFETY: unmapping the mapping made just above.
                unsafe { libc::munmap(base.cast(), len as usize) };
                return Err(PmError::io(path, e));
            }
        };
        let persist = Persist::new(opts.eadr).slowed(opts.nvmm);
        tracing::debug!(
            path = %path.display(), len, %kind, flush = %persist.kind(), nvmm = %opts.nvmm,
            "mapped persistent-memory region"
        );
        Ok(MmapRegion {
            base,
            len,
            path: path.to_path_buf(),
            kind,
            persist,
            bad,
            guard,
            file,
            prefaulter: (opts.prefault == Prefault::Background).then(|| Prefaulter::start(base, len)),
        })
    }

    /// The file or device backing the region.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The emulated media errors loaded from `<path>.badblocks`.
    pub fn bad_blocks(&self) -> &BadBlocks {
        &self.bad
    }

    /// How the mapping is protected from stray stores.
    pub fn protection(&self) -> Protection {
        self.guard.protection()
    }

    /// Runs `store`, which writes `[off, off + len)`, inside a write window.
    fn store<R>(&self, off: u64, len: u64, store: impl FnOnce() -> R) -> Result<R, PmError> {
        self.guard
            .window(off, len, store)
            .map_err(|e| PmError::io(&self.path, e))
    }

    /// The flush instruction in use ([`FlushKind::None`] with eADR).
    pub fn flush_kind(&self) -> FlushKind {
        self.persist.kind()
    }

    /// The NVMM speed emulated ([`MapOptions::nvmm`]).
    pub fn nvmm(&self) -> Nvmm {
        self.persist.nvmm()
    }

    /// Address of region offset `off`; callers check bounds first.
    fn at(&self, off: u64) -> *mut u8 {
        self.base.wrapping_add(off as usize)
    }

    /// Turns the fault address of a failed access to `[off, off + len)` into
    /// the region offset to report: the faulting byte when it lies in the
    /// range, else (a page-granular report) the start of the access.
    fn media_error(&self, addr: usize, off: u64, len: u64) -> PmError {
        let fault = (addr as u64).wrapping_sub(self.base as u64);
        let off = if (off..off + len).contains(&fault) { fault } else { off };
        PmError::Media { off }
    }
}

impl fmt::Debug for MmapRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MmapRegion")
            .field("path", &self.path)
            .field("len", &self.len)
            .field("kind", &self.kind)
            .field("flush", &self.persist.kind())
            .field("nvmm", &self.persist.nvmm())
            .finish()
    }
}

impl Drop for MmapRegion {
    fn drop(&mut self) {
        // The prefault thread may be inside the mapping: join it first.
        drop(self.prefaulter.take());
        // SAFETY: `base..base + len` is our mapping and no reference into it
        // outlives `self`.
        if unsafe { libc::munmap(self.base.cast(), self.len as usize) } != 0 {
            tracing::warn!(
                path = %self.path.display(),
                error = %io::Error::last_os_error(),
                "munmap failed"
            );
        }
    }
}

impl Region for MmapRegion {
    fn len(&self) -> u64 {
        self.len
    }

    fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), PmError> {
        let len = buf.len() as u64;
        check_range(off, len, self.len)?;
        if let Some(bad) = self.bad.first_in(off, len) {
            return Err(PmError::Media { off: bad });
        }
        self.guard.before_read();
        // SAFETY: the source is inside the mapping (checked above); `buf` is
        // ordinary memory outside it; the handler was installed by `map`.
        unsafe { sigbus::copy(buf.as_mut_ptr(), self.at(off), buf.len()) }
            .map_err(|addr| self.media_error(addr, off, len))
    }

    fn write(&self, off: u64, data: &[u8]) -> Result<(), PmError> {
        check_range(off, data.len() as u64, self.len)?;
        // SAFETY: the destination is inside the mapping (checked above) and
        // `data` cannot overlap it (no reference into the mapping escapes).
        self.store(off, data.len() as u64, || unsafe {
            ptr::copy_nonoverlapping(data.as_ptr(), self.at(off), data.len())
        })
    }

    fn write_nt(&self, off: u64, data: &[u8]) -> Result<(), PmError> {
        check_range(off, data.len() as u64, self.len)?;
        // SAFETY: as for `write`.
        self.store(off, data.len() as u64, || unsafe {
            self.persist.write_nt(self.at(off), data)
        })
    }

    fn write_nt_summed(&self, off: u64, page: &[u8; stripe::PAGE]) -> Result<stripe::PageSums, PmError> {
        check_range(off, page.len() as u64, self.len)?;
        // SAFETY: inside the mapping (checked above), and `page` cannot
        // overlap it (no reference into the mapping escapes).
        let sums = self.store(off, page.len() as u64, || unsafe {
            stripe::stream_page(self.at(off), page, &self.persist)
        })?;
        // As in `Persist::write_nt`: streamed stores are fenced before the
        // bytes are touched again, which also makes them durable.
        self.persist.fence();
        Ok(sums)
    }

    fn zero_nt(&self, off: u64, len: u64) -> Result<(), PmError> {
        check_range(off, len, self.len)?;
        // SAFETY: inside the mapping (checked above).
        self.store(off, len, || unsafe { self.persist.zero_nt(self.at(off), len as usize) })
    }

    fn flush(&self, off: u64, len: u64) -> Result<(), PmError> {
        check_range(off, len, self.len)?;
        // A cache-line write-back counts as a read for page protection.
        self.guard.before_read();
        // SAFETY: inside the mapping (checked above).
        unsafe { self.persist.flush_range(self.at(off), len as usize) };
        Ok(())
    }

    fn fence(&self) {
        self.persist.fence();
    }

    fn store_u64(&self, off: u64, val: u64) -> Result<(), PmError> {
        check_u64(off, self.len)?;
        // SAFETY: in bounds and 8-aligned (the mapping is page-aligned), and
        // AtomicU64 has the layout of u64; shared memory may be viewed so.
        let word = unsafe { &*(self.at(off) as *const AtomicU64) };
        self.store(off, 8, || word.store(val, Ordering::Release))
    }

    fn load_u64(&self, off: u64) -> Result<u64, PmError> {
        check_u64(off, self.len)?;
        if let Some(bad) = self.bad.first_in(off, 8) {
            return Err(PmError::Media { off: bad });
        }
        self.guard.before_read();
        // SAFETY: in bounds and 8-aligned (checked above); handler installed.
        unsafe { sigbus::load_u64(self.at(off).cast::<u64>()) }.map_err(|addr| self.media_error(addr, off, 8))
    }

    fn kind(&self) -> RegionKind {
        self.kind
    }

    /// devdax maps in 2 MiB units: no page-by-page windows.
    fn map_source(&self) -> Option<MapSource<'_>> {
        (self.kind != RegionKind::DevDax).then(|| MapSource {
            fd: self.file.as_fd(),
            sync: self.kind == RegionKind::FsDax,
        })
    }
}

fn check_size(path: &Path, size: u64) -> Result<(), PmError> {
    if size == 0 || !size.is_multiple_of(PAGE) {
        return Err(PmError::invalid(
            path,
            format!("size {size} is not a positive multiple of {PAGE}"),
        ));
    }
    if usize::try_from(size).is_err() {
        return Err(PmError::invalid(path, format!("size {size} is too large to map")));
    }
    Ok(())
}

fn not_mappable(path: &Path) -> PmError {
    PmError::invalid(path, "neither a regular file nor a devdax device")
}

/// Opens the image read-write, its descriptor moved above the numbers
/// programs pick themselves: in a program's own process (libnovafs, the
/// preload shim) a shell redirecting descriptor 3 must not close the one
/// that holds the image's lock.
fn open_rw(path: &Path) -> Result<File, PmError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| PmError::io(path, e))?;
    Ok(above_program_descriptors(file))
}

/// The lowest descriptor number [`open_rw`] moves to: 64 below the soft
/// limit on open files, or below 1024 when that is higher (a huge limit
/// would make the kernel grow the table that far), and at least 3.
fn high_descriptor_floor() -> libc::c_int {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) into a struct it fills.
    let cur = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur.min(1024)
    } else {
        1024
    };
    (cur.saturating_sub(64) as libc::c_int).max(3)
}

/// `file` under a descriptor number from [`high_descriptor_floor`] up
/// (close-on-exec); where none is free, as it is.
pub fn above_program_descriptors(file: File) -> File {
    // SAFETY: F_DUPFD_CLOEXEC of a descriptor this File owns; the new one
    // is owned by the File made of it, and the old one closes with `file`.
    let fd = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_DUPFD_CLOEXEC, high_descriptor_floor()) };
    if fd < 0 {
        return file;
    }
    // SAFETY: `fd` is a new descriptor nothing else owns.
    unsafe { File::from_raw_fd(fd) }
}

/// Takes the exclusive lock when asked. flock belongs to the open file
/// description, so it is released when the process dies: a killed daemon
/// never leaves a stale lock.
fn lock(file: &File, path: &Path, opts: &MapOptions) -> Result<(), PmError> {
    if !opts.lock {
        return Ok(());
    }
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Err(PmError::Busy {
            path: path.display().to_string(),
        })
    } else {
        Err(PmError::io(path, err))
    }
}

/// Allocates the file's blocks now, so that running out of space is an error
/// here instead of a SIGBUS on some later store.
fn reserve(file: &File, path: &Path, size: u64) -> Result<(), PmError> {
    // SAFETY: fallocate on a descriptor we own.
    if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, size as libc::off_t) } == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EOPNOTSUPP) {
        // Some file systems cannot preallocate; the mapping still works.
        tracing::debug!(path = %path.display(), "fallocate not supported");
        Ok(())
    } else {
        Err(PmError::io(path, err))
    }
}

/// Size of a devdax device, from sysfs; refuses other character devices.
fn devdax_size(path: &Path, rdev: u64) -> Result<u64, PmError> {
    let sys = format!("/sys/dev/char/{}:{}/size", libc::major(rdev), libc::minor(rdev));
    let text = match std::fs::read_to_string(&sys) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(PmError::invalid(path, "character device is not a devdax device"))
        }
        Err(e) => return Err(PmError::io(Path::new(&sys), e)),
    };
    text.trim()
        .parse()
        .map_err(|_| PmError::invalid(Path::new(&sys), format!("bad size {:?}", text.trim())))
}

fn is_tmpfs(file: &File) -> io::Result<bool> {
    // SAFETY: all-zero is a valid statfs; fstatfs fills it from our fd.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between targets
    Ok(st.f_type as i64 == TMPFS_MAGIC)
}

#[cfg(test)]
mod tests;
