//! Which pages of a range the program has stored to, learnt from the
//! kernel with no fault of ours: a userfaultfd in asynchronous
//! write-protect mode (`UFFD_FEATURE_WP_ASYNC`, Linux 6.7) marks every
//! registered page write-protected, and the kernel itself lifts the mark
//! at a page's first store (under a microsecond, no signal, no thread of
//! ours); `PAGEMAP_SCAN` on `/proc/self/pagemap` then lists the pages
//! whose mark is gone and puts it back, in one call. Atomic mappings use
//! it to find the pages an msync must commit (`Window::written`).
//!
//! The kernel's ABI is declared here: Debian 12's headers predate it.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::PmError;

/// `_IOWR(0xAA, nr, size)`.
const fn uffd_iowr(nr: u64, size: u64) -> u64 {
    (3 << 30) | (size << 16) | (0xAA << 8) | nr
}

const UFFD_API: u64 = 0xAA;
const UFFD_USER_MODE_ONLY: libc::c_int = 1;
const UFFD_FEATURE_WP_HUGETLBFS_SHMEM: u64 = 1 << 12;
const UFFD_FEATURE_WP_UNPOPULATED: u64 = 1 << 13;
const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;
const UFFDIO_API: u64 = uffd_iowr(0x3F, 24);
const UFFDIO_REGISTER: u64 = uffd_iowr(0x00, 32);
const UFFDIO_WRITEPROTECT: u64 = uffd_iowr(0x06, 24);
const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1 << 0;
/// `_IOWR('f', 16, struct pm_scan_arg)`.
const PAGEMAP_SCAN: u64 = (3 << 30) | ((std::mem::size_of::<ScanArg>() as u64) << 16) | ((b'f' as u64) << 8) | 16;
const PM_SCAN_WP_MATCHING: u64 = 1 << 0;
const PM_SCAN_CHECK_WPASYNC: u64 = 1 << 1;
const PAGE_IS_WRITTEN: u64 = 1 << 1;

#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioRange {
    start: u64,
    len: u64,
}

#[repr(C)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioWriteprotect {
    range: UffdioRange,
    mode: u64,
}

/// `struct pm_scan_arg`.
#[repr(C)]
struct ScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `struct page_region`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

const _: () = assert!(std::mem::size_of::<UffdioApi>() == 24);
const _: () = assert!(std::mem::size_of::<UffdioRegister>() == 32);
const _: () = assert!(std::mem::size_of::<UffdioWriteprotect>() == 24);
const _: () = assert!(std::mem::size_of::<ScanArg>() == 96);
const _: () = assert!(std::mem::size_of::<PageRegion>() == 24);

/// Runs of written pages one scan call returns at most.
const SCAN_RUNS: usize = 64;

/// The kernel's record of stores to registered ranges.
pub(crate) struct Tracker {
    uffd: OwnedFd,
    pagemap: &'static File,
}

/// `/proc/self/pagemap` as opened by process `pid`.
struct Pagemap {
    pid: u32,
    file: File,
}

/// The process's pagemap, opened by its first tracker and shared by all:
/// null until then. Never freed, so a reference to it lives forever.
static PAGEMAP: AtomicPtr<Pagemap> = AtomicPtr::new(ptr::null_mut());

/// This process's `/proc/self/pagemap`, opened once. Lock-free, so a child
/// forked while another thread opens it cannot deadlock; and a child's
/// "self" is not its parent's, so it opens its own.
fn pagemap() -> Result<&'static File, PmError> {
    let pid = std::process::id();
    let mut cur = PAGEMAP.load(Ordering::Acquire);
    // SAFETY: a non-null pointer is a leaked Box, never freed.
    if let Some(p) = unsafe { cur.as_ref() }.filter(|p| p.pid == pid) {
        return Ok(&p.file);
    }
    let file = File::open("/proc/self/pagemap").map_err(|source| PmError::Io {
        path: "/proc/self/pagemap".into(),
        source,
    })?;
    let mine = Box::into_raw(Box::new(Pagemap { pid, file }));
    loop {
        match PAGEMAP.compare_exchange(cur, mine, Ordering::AcqRel, Ordering::Acquire) {
            // A parent's value replaced here stays leaked: an inherited
            // tracker may still use it.
            // SAFETY: `mine` is published, so never freed.
            Ok(_) => return Ok(unsafe { &(*mine).file }),
            Err(now) => {
                // SAFETY: as above, a published pointer is never freed.
                match unsafe { now.as_ref() }.filter(|p| p.pid == pid) {
                    Some(p) => {
                        // SAFETY: `mine` was never published.
                        drop(unsafe { Box::from_raw(mine) });
                        return Ok(&p.file);
                    }
                    None => cur = now,
                }
            }
        }
    }
}

impl Tracker {
    /// A tracker, or the reason the kernel offers none (older than 6.7,
    /// userfaultfd refused, or no pagemap to scan).
    pub(crate) fn new() -> Result<Tracker, PmError> {
        let uffd = Self::uffd().map_err(|source| PmError::Io {
            path: "userfaultfd".into(),
            source,
        })?;
        Ok(Tracker {
            uffd,
            pagemap: pagemap()?,
        })
    }

    /// A userfaultfd with asynchronous write-protect.
    fn uffd() -> io::Result<OwnedFd> {
        // SAFETY: the system call takes flags only and returns a new
        // descriptor or -1.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_userfaultfd,
                libc::O_CLOEXEC | libc::O_NONBLOCK | UFFD_USER_MODE_ONLY,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor just returned, owned from here on.
        let uffd = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
        let mut api = UffdioApi {
            api: UFFD_API,
            features: UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED | UFFD_FEATURE_WP_HUGETLBFS_SHMEM,
            ioctls: 0,
        };
        ioctl(uffd.as_raw_fd(), UFFDIO_API, &mut api)?;
        Ok(uffd)
    }

    /// Registers `[start, start + len)` (one new mapping, shared memory)
    /// and marks every page of it write-protected: its next store is
    /// recorded. A mapping replaced over the range must be registered
    /// again.
    pub(crate) fn track(&self, start: usize, len: usize) -> io::Result<()> {
        let range = || UffdioRange {
            start: start as u64,
            len: len as u64,
        };
        let mut reg = UffdioRegister {
            range: range(),
            mode: UFFDIO_REGISTER_MODE_WP,
            ioctls: 0,
        };
        ioctl(self.uffd.as_raw_fd(), UFFDIO_REGISTER, &mut reg)?;
        let mut wp = UffdioWriteprotect {
            range: range(),
            mode: UFFDIO_WRITEPROTECT_MODE_WP,
        };
        ioctl(self.uffd.as_raw_fd(), UFFDIO_WRITEPROTECT, &mut wp).map(drop)
    }

    /// The pages of `[start, start + len)` (registered, page-aligned)
    /// stored to since they were registered or last scanned, as runs of
    /// byte addresses; their marks are put back in the same call, so a
    /// store after it is recorded for the next scan.
    pub(crate) fn written(&self, start: usize, len: usize, out: &mut Vec<(usize, usize)>) -> io::Result<()> {
        let end = (start + len) as u64;
        let mut from = start as u64;
        let mut regions = [PageRegion::default(); SCAN_RUNS];
        while from < end {
            let mut arg = ScanArg {
                size: std::mem::size_of::<ScanArg>() as u64,
                flags: PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
                start: from,
                end,
                walk_end: 0,
                vec: regions.as_mut_ptr() as u64,
                vec_len: SCAN_RUNS as u64,
                max_pages: 0,
                category_inverted: 0,
                category_mask: PAGE_IS_WRITTEN,
                category_anyof_mask: 0,
                return_mask: PAGE_IS_WRITTEN,
            };
            let n = ioctl(self.pagemap.as_raw_fd(), PAGEMAP_SCAN, &mut arg)?;
            out.extend(regions[..n as usize].iter().map(|r| (r.start as usize, r.end as usize)));
            if arg.walk_end <= from {
                return Err(io::Error::other("PAGEMAP_SCAN made no progress"));
            }
            from = arg.walk_end;
        }
        Ok(())
    }
}

/// One ioctl with an argument struct; its non-negative result.
fn ioctl<T>(fd: libc::c_int, request: u64, arg: &mut T) -> io::Result<libc::c_int> {
    // SAFETY: `arg` is the #[repr(C)] struct `request` reads and writes,
    // alive and exclusively borrowed for the call; the scan's `vec`
    // points at a live array of `vec_len` regions (`written`).
    let got = unsafe { libc::ioctl(fd, request as libc::c_ulong, std::ptr::from_mut(arg)) };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    #[test]
    fn trackers_share_one_pagemap() {
        let a = super::pagemap().unwrap();
        let b = super::pagemap().unwrap();
        assert!(std::ptr::eq(a, b), "opened once per process");
    }
}
