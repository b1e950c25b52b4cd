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

/// The backing of each page of one window, and the VMAs it makes: the
/// VMAs its pages lie in. The VMA at either edge may also take in a
/// mapping of the same kind right beside the window (another window's
/// reservation, say), which the count cannot see: the process then holds
/// one VMA fewer than its windows count, never more.
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

    /// The process's mappings, as one read of /proc/self/maps lists them:
    /// each line's range, and the line.
    fn maps() -> Vec<(Range<usize>, String)> {
        std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .lines()
            .filter_map(|l| {
                let (lo, rest) = l.split_once('-')?;
                let hi = rest.split_whitespace().next()?;
                let lo = usize::from_str_radix(lo, 16).ok()?;
                let hi = usize::from_str_radix(hi, 16).ok()?;
                Some((lo..hi, l.to_owned()))
            })
            .collect()
    }

    /// The kernel's own count: how many VMAs the pages of `at` lie in —
    /// the boundaries between mappings strictly inside `at`, plus one.
    /// Not the lines that lie wholly inside `at`: the VMA at an edge of a
    /// window joins a mapping of the same kind right beside it (another
    /// window's reservation, zeros, any private anonymous `PROT_NONE` or
    /// read-only mapping made by a test running beside this one), and its
    /// line then reaches past the window, still one VMA of the window's
    /// pages. The boundaries, not the lines, so that a VMA listed twice
    /// (the kernel lists the rest of the process from where the last
    /// `read` ended: a neighbour joining an edge VMA in between shows it
    /// again, longer) counts once.
    fn kernel_vmas(maps: &[(Range<usize>, String)], at: &Range<usize>) -> usize {
        let mut cuts: Vec<usize> = maps
            .iter()
            .filter(|(r, _)| r.start < at.end && at.start < r.end)
            .flat_map(|(r, _)| [r.start, r.end])
            .filter(|&a| at.start < a && a < at.end)
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        cuts.len() + 1
    }

    /// The lines of `maps` that reach into `at`, and one either side.
    fn around(maps: &[(Range<usize>, String)], at: &Range<usize>) -> String {
        let first = maps.iter().position(|(r, _)| r.end > at.start).unwrap_or(maps.len());
        let last = maps.iter().rposition(|(r, _)| r.start < at.end).map_or(0, |i| i + 1);
        let shown = first.saturating_sub(1)..(last + 1).min(maps.len()).max(first);
        let lines: Vec<&str> = maps[shown].iter().map(|(_, l)| l.as_str()).collect();
        format!("window {:x}-{:x}:\n{}", at.start, at.end, lines.join("\n"))
    }

    /// Asserts that `w`, spanning `span`, counts the VMAs the kernel holds.
    fn assert_kernels(w: &crate::Window, span: &Range<usize>, what: std::fmt::Arguments<'_>) {
        let maps = maps();
        let ours = w.mappings();
        let kernels = kernel_vmas(&maps, span);
        assert_eq!(
            ours,
            kernels,
            "{what}: {ours} VMAs counted, the kernel's {kernels}; {}",
            around(&maps, span)
        );
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
                assert_kernels(
                    &w,
                    &span,
                    format_args!("seed {seed}, step {step}: op {what} at {page}+{n}"),
                );
            }
        }
        drop(region);
        let _ = std::fs::remove_file(&path);
    }

    /// `len` bytes of private anonymous memory of protection `prot` at
    /// `at` (anywhere when 0), mapped with `flags` besides; None where the
    /// kernel put them elsewhere or refused.
    fn private(at: usize, len: usize, prot: libc::c_int, flags: libc::c_int) -> Option<usize> {
        // SAFETY: new memory where nothing is mapped (at 0, or
        // MAP_FIXED_NOREPLACE), or MAP_FIXED over memory the caller owns.
        let got = unsafe {
            libc::mmap(
                at as *mut libc::c_void,
                len,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | flags,
                -1,
                0,
            )
        };
        if got == libc::MAP_FAILED {
            return None;
        }
        if at != 0 && got as usize != at {
            // SAFETY: the memory just mapped, elsewhere than asked.
            unsafe { libc::munmap(got, len) };
            return None;
        }
        Some(got as usize)
    }

    /// What the random remaps meet only when a test beside them maps at
    /// the right moment (about 1 run of pm's tests in 20, on a busy
    /// 2-CPU host, once failed so): a
    /// mapping right beside the window that joins the VMA at its edge.
    /// Made here on purpose, at each edge, through remaps of the edge
    /// pages.
    #[test]
    fn a_neighbour_joining_an_edge_vma_leaves_the_count_the_kernels() {
        use crate::{MapOptions, MmapRegion, Region};
        use std::sync::Arc;
        const PAGES: usize = 8;
        let dir = tempfile::tempdir().unwrap();
        let region = MmapRegion::create(&dir.path().join("img"), 16 * P, &MapOptions::default()).unwrap();
        let src = region.map_source().expect("a file region has windows");
        let page = crate::WINDOW_PAGE;
        for low in [true, false] {
            // A window with a page of ours beside it on that side: below,
            // a free page taken; above, the top page of a reservation whose
            // other pages were just unmapped, so that the window fits
            // right below it. Where that fails (a test beside this one
            // took the page, or the kernel put the window in another hole
            // of its size) the next try takes another window, this one
            // kept till the end so that the next lands elsewhere.
            let (mut windows, mut pages) = (Vec::new(), Vec::new());
            let (w, span, at) = (0..100)
                .find_map(|_| {
                    let above = if low {
                        None
                    } else {
                        let hole = private(0, (PAGES + 1) * page, libc::PROT_READ, 0)?;
                        // SAFETY: the reservation just made, but its top page.
                        unsafe { libc::munmap(hole as *mut libc::c_void, PAGES * page) };
                        Some(hole + PAGES * page)
                    };
                    let w = crate::Window::new(src, PAGES, Arc::new(NoAccess)).unwrap();
                    let span = w.as_ptr() as usize..w.as_ptr() as usize + PAGES * page;
                    let at = match above {
                        None => private(span.start - page, page, libc::PROT_NONE, libc::MAP_FIXED_NOREPLACE),
                        Some(top) => {
                            let at = (top == span.end)
                                .then(|| private(top, page, libc::PROT_NONE, libc::MAP_FIXED))
                                .flatten();
                            if at.is_none() {
                                pages.push(top);
                            }
                            at
                        }
                    };
                    match at {
                        Some(at) => Some((w, span, at)),
                        None => {
                            windows.push(w);
                            None
                        }
                    }
                })
                .expect("a page of ours beside one of 100 windows");
            let edge = if low { 0 } else { PAGES - 1 };
            let side = if low { "low" } else { "high" };
            // The neighbour joined the reservation: one VMA reaching past
            // the window, which a count of the lines inside it misses.
            let maps = maps();
            let joined = if low { at..span.end } else { span.start..at + page };
            assert!(
                maps.iter().any(|(r, _)| r.start <= joined.start && joined.end <= r.end),
                "the neighbour joins the reservation; {}",
                around(&maps, &span)
            );
            assert_kernels(&w, &span, format_args!("{side} neighbour joined"));
            // The edge page leaves the neighbour's VMA and joins it again,
            // as zeros beside a reservation and as a reservation again.
            w.map(edge, 0, 1, false).unwrap();
            assert_kernels(&w, &span, format_args!("{side} edge mapped"));
            w.map_zero(edge, 1).unwrap();
            assert_kernels(&w, &span, format_args!("{side} edge zeros"));
            w.zap(edge, 1).unwrap();
            assert_kernels(&w, &span, format_args!("{side} edge zapped"));
            w.map(1, P, PAGES - 2, true).unwrap();
            assert_kernels(&w, &span, format_args!("{side}: the middle mapped"));
            drop((w, windows));
            for at in pages.into_iter().chain([at]) {
                // SAFETY: pages mapped above, used by nothing.
                assert_eq!(unsafe { libc::munmap(at as *mut libc::c_void, page) }, 0);
            }
        }
    }
}
