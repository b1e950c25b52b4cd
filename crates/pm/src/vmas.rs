//! How many kernel mappings (VMAs) the windows hold, kept under the
//! kernel's limit.
//!
//! A window maps each run of region pages with its own `mmap`; the kernel
//! merges neighbours only when they continue the same file at the next
//! offset with the same protection. A file whose pages lie scattered over
//! the region (every copy-on-write write moves a page) therefore costs one
//! VMA a page, and a process may hold only `vm.max_map_count` of them
//! (65,530 by default): past that every `mmap` of the process fails, the
//! program's own and its allocator's too, and a fault that cannot map
//! kills the program. Measured before this module: loading every page of
//! a 100,000-page file written back to front killed the process near page
//! 65,000.
//!
//! So each window keeps a [`Layout`]: what backs each of its pages, from
//! which it counts its VMAs exactly as the kernel merges them; all
//! windows' counts add up in one counter, and a window is *crowded* while
//! that sum is past half the limit (the other half is the program's). A
//! crowded window's owner unmaps some of its pages before it maps more
//! (their next access faults them back in): a window then behaves as a
//! cache of mappings, never as a leak of them.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// A page no mapping backs (the window's `PROT_NONE` reservation): zero,
/// so that a new window's table is untouched memory until it maps.
const NONE: u64 = 0;
/// A page of zeros (anonymous, read-only): a hole read before any store.
const ZERO: u64 = 2;
/// A file page's entry is its offset plus one page (never below it, so
/// never `NONE` or `ZERO`), its low bit set when mapped writable (offsets
/// are page aligned, so the bit is free).
const FILE: u64 = crate::WINDOW_PAGE as u64;
const WRITABLE: u64 = 1;

/// What backs one window page, as the kernel sees it for merging.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backing {
    /// Nothing: the reservation.
    None,
    /// Zeros, read-only.
    Zero,
    /// The mapped file at this byte offset.
    File { off: u64, writable: bool },
}

impl Backing {
    fn encode(self) -> u64 {
        match self {
            Backing::None => NONE,
            Backing::Zero => ZERO,
            Backing::File { off, writable } => (off + FILE) | if writable { WRITABLE } else { 0 },
        }
    }
}

/// Whether a page backed by `b` right after one backed by `a` joins its VMA.
fn joins(a: u64, b: u64) -> bool {
    match (a, b) {
        (NONE, NONE) | (ZERO, ZERO) => true,
        _ if a < FILE || b < FILE => false,
        _ => {
            a & WRITABLE == b & WRITABLE
                && (a & !WRITABLE).checked_add(crate::WINDOW_PAGE as u64) == Some(b & !WRITABLE)
        }
    }
}

/// The backing of each page of one window, and the VMAs it makes.
#[derive(Debug)]
pub(crate) struct Layout {
    pages: Vec<u64>,
    vmas: usize,
}

impl Layout {
    /// `pages` pages, none mapped: the reservation, one VMA (counted).
    pub(crate) fn new(pages: usize) -> Layout {
        IN_USE.fetch_add(1, Ordering::Relaxed);
        Layout {
            pages: vec![NONE; pages],
            vmas: 1,
        }
    }

    /// Its VMAs now.
    pub(crate) fn vmas(&self) -> usize {
        self.vmas
    }

    /// Pages `at` now backed as `backing(i, old)` says for the i-th of
    /// them (`old`: what backed it); the count follows.
    pub(crate) fn set(&mut self, at: Range<usize>, backing: impl Fn(usize, Backing) -> Backing) {
        let before = self.seams(&at);
        for (i, p) in at.clone().enumerate() {
            self.pages[p] = backing(i, self.decode(p)).encode();
        }
        let after = self.seams(&at);
        self.vmas = self.vmas + after - before;
        if after >= before {
            IN_USE.fetch_add(after - before, Ordering::Relaxed);
        } else {
            IN_USE.fetch_sub(before - after, Ordering::Relaxed);
        }
    }

    fn decode(&self, p: usize) -> Backing {
        match self.pages[p] {
            NONE => Backing::None,
            ZERO => Backing::Zero,
            e => Backing::File {
                off: (e & !WRITABLE) - FILE,
                writable: e & WRITABLE != 0,
            },
        }
    }

    /// The VMA boundaries at the edges and inside of pages `at`.
    fn seams(&self, at: &Range<usize>) -> usize {
        let lo = at.start.max(1);
        let hi = at.end.min(self.pages.len().saturating_sub(1));
        (lo..=hi)
            .filter(|&i| i < self.pages.len() && !joins(self.pages[i - 1], self.pages[i]))
            .count()
    }
}

impl Drop for Layout {
    fn drop(&mut self) {
        IN_USE.fetch_sub(self.vmas, Ordering::Relaxed);
    }
}

/// VMAs held by all windows of the process.
static IN_USE: AtomicUsize = AtomicUsize::new(0);

/// Whether the windows together hold more VMAs than their share.
pub(crate) fn crowded() -> bool {
    IN_USE.load(Ordering::Relaxed) > budget()
}

/// VMAs a window keeps however crowded the windows are: a few runs are
/// not what crowds them (a quarter of the share when that is smaller).
pub(crate) fn few() -> usize {
    64.min(budget() / 4)
}

/// The windows' share of the kernel's mappings: `NOVAFS_WINDOW_VMAS` when
/// set (a program holding many mappings itself may want a smaller share;
/// 0 makes every fault unmap what it can, which tests use), else half of
/// `vm.max_map_count` (the kernel's default when it cannot be read). Read
/// once.
fn budget() -> usize {
    static BUDGET: OnceLock<usize> = OnceLock::new();
    *BUDGET.get_or_init(|| {
        let set = std::env::var("NOVAFS_WINDOW_VMAS")
            .ok()
            .and_then(|v| v.trim().parse().ok());
        set.unwrap_or_else(|| {
            std::fs::read_to_string("/proc/sys/vm/max_map_count")
                .ok()
                .and_then(|s| s.trim().parse::<usize>().ok())
                .unwrap_or(65_530)
                / 2
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = crate::WINDOW_PAGE as u64;

    fn file(off: u64) -> Backing {
        Backing::File { off, writable: false }
    }

    #[test]
    fn counts_vmas_as_the_kernel_merges_them() {
        let mut l = Layout::new(10);
        assert_eq!(l.vmas(), 1);
        // In the middle: reservation | file | reservation.
        l.set(4..6, |i, _| file(100 * P + i as u64 * P));
        assert_eq!(l.vmas(), 3);
        // The next offset right after: joins.
        l.set(6..7, |_, _| file(102 * P));
        assert_eq!(l.vmas(), 3);
        // Not the next offset: its own VMA.
        l.set(7..8, |_, _| file(500 * P));
        assert_eq!(l.vmas(), 4);
        // Same offsets, another protection: split.
        l.set(5..6, |_, b| match b {
            Backing::File { off, .. } => Backing::File { off, writable: true },
            b => b,
        });
        assert_eq!(l.vmas(), 6);
        // Zeros beside zeros join; at the window's first page.
        l.set(0..2, |_, _| Backing::Zero);
        assert_eq!(l.vmas(), 7);
        // Everything unmapped again: one reservation.
        l.set(0..10, |_, _| Backing::None);
        assert_eq!(l.vmas(), 1);
    }

    /// Never faulted: the test only maps.
    struct NoAccess;

    impl crate::Fault for NoAccess {
        fn fault(&self, _page: usize, _write: bool) -> bool {
            false
        }
    }

    /// The kernel's own count: the lines of /proc/self/maps inside `at`.
    fn kernel_vmas(at: Range<usize>) -> usize {
        std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .lines()
            .filter_map(|l| {
                let (lo, rest) = l.split_once('-')?;
                let hi = rest.split_whitespace().next()?;
                Some((usize::from_str_radix(lo, 16).ok()?, usize::from_str_radix(hi, 16).ok()?))
            })
            .filter(|&(lo, hi)| lo >= at.start && hi <= at.end)
            .count()
    }

    #[test]
    fn a_windows_count_is_the_kernels_through_random_remaps() {
        use crate::{MapOptions, MmapRegion, Region};
        use std::sync::Arc;
        let path = std::env::temp_dir().join(format!("pm-vmas-{}", std::process::id()));
        let region = MmapRegion::create(&path, 64 * P, &MapOptions::default()).unwrap();
        let src = region.map_source().expect("a file region has windows");
        const PAGES: usize = 24;
        for seed in [1u64, 7, 12345, 987_654_321] {
            let w = crate::Window::new(src, PAGES, Arc::new(NoAccess)).unwrap();
            let span = w.as_ptr() as usize..w.as_ptr() as usize + PAGES * crate::WINDOW_PAGE;
            let mut x = seed;
            let mut next = |n: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % n
            };
            for step in 0..300 {
                let page = next(PAGES as u64) as usize;
                let n = 1 + next((PAGES - page).min(4) as u64) as usize;
                let what = next(5);
                match what {
                    // Mostly file pages, often continuing their neighbour.
                    0 | 1 => w.map(page, (page as u64 + next(2) * 8) * P, n, next(2) == 1).unwrap(),
                    2 => w.map_zero(page, n).unwrap(),
                    3 => w.zap(page, n).unwrap(),
                    _ => {
                        // mprotect only where a file is mapped, as owners do.
                        let mapped = w.layout().pages[page..page + n].iter().all(|&e| e >= FILE);
                        if mapped {
                            w.protect(page, n, next(2) == 1).unwrap();
                        }
                    }
                }
                assert_eq!(
                    w.mappings(),
                    kernel_vmas(span.clone()),
                    "seed {seed}, step {step}: op {what} at {page}+{n}"
                );
            }
        }
        drop(region);
        let _ = std::fs::remove_file(&path);
    }
}
