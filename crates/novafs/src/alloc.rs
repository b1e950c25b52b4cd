//! Space management (NOVA §4.1 "NVMM space management"): per-shard pools of
//! free pages kept in DRAM as sorted, merged ranges. A pool owns a contiguous
//! slice of the data area, so frees return pages to the pool they came from
//! and merge with their neighbours; an empty pool takes from the largest one.
//! Nothing here touches the media: the state is saved to the recovery inode on
//! clean unmount (`recovery`) and rebuilt by a scan after a crash.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::layout::PAGE_SHIFT;

/// A sorted set of disjoint, merged `[start, end)` ranges. Units are the
/// caller's: pages for the page allocator, inode slots for inode tables.
///
/// Fortis §4.7: the allocators are long-lived DRAM state that goes back to
/// the media (saved at unmount, handed out as pages), so each range's start
/// and end carry a checksum, verified whenever the range is used. A range
/// that fails it (a stray store into this process's heap) is dropped and
/// reported: its units leak until the next crash scan rebuilds the
/// allocator, which is better than handing out pages that are in use.
#[derive(Clone, Debug, Default)]
pub struct RangeSet {
    ranges: BTreeMap<u64, Sealed>,
    total: u64,
}

/// A range's end and the checksum of (start, end).
#[derive(Clone, Copy, Debug)]
struct Sealed {
    end: u64,
    csum: u32,
}

fn seal(start: u64, end: u64) -> Sealed {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&start.to_le_bytes());
    b[8..].copy_from_slice(&end.to_le_bytes());
    Sealed {
        end,
        csum: crc32c::crc32c(&b),
    }
}

/// A range handed to [`RangeSet::insert`] overlaps one already present: a
/// double free, which the caller reports.
#[derive(Debug, PartialEq, Eq)]
pub struct Overlap;

impl RangeSet {
    /// The verified end of the range starting at `start`, or None (and the
    /// range dropped) when its checksum fails.
    fn end_of(&mut self, start: u64) -> Option<u64> {
        let v = *self.ranges.get(&start)?;
        if v.end > start && seal(start, v.end).csum == v.csum {
            return Some(v.end);
        }
        self.ranges.remove(&start);
        // Its true length is unknown: count what the valid ranges hold.
        self.total = self.iter().map(|(_, n)| n).sum();
        tracing::error!(start, end = v.end, "free range fails its DRAM checksum; dropped");
        None
    }

    /// The last valid range starting at or before `unit`.
    fn at_or_before(&mut self, unit: u64) -> Option<(u64, u64)> {
        loop {
            let (&s, _) = self.ranges.range(..=unit).next_back()?;
            if let Some(e) = self.end_of(s) {
                return Some((s, e));
            }
        }
    }

    /// The first valid range starting at or after `unit`.
    fn at_or_after(&mut self, unit: u64) -> Option<(u64, u64)> {
        loop {
            let (&s, _) = self.ranges.range(unit..).next()?;
            if let Some(e) = self.end_of(s) {
                return Some((s, e));
            }
        }
    }

    fn put(&mut self, start: u64, end: u64) {
        self.ranges.insert(start, seal(start, end));
    }

    /// Adds `[start, start + len)`, merging with adjacent ranges. O(log n).
    pub fn insert(&mut self, start: u64, len: u64) -> std::result::Result<(), Overlap> {
        if len == 0 {
            return Ok(());
        }
        let mut lo = start;
        let mut hi = start.checked_add(len).ok_or(Overlap)?;
        if let Some((ps, pe)) = self.at_or_before(start) {
            if pe > start {
                return Err(Overlap);
            }
            if pe == start {
                lo = ps;
                self.ranges.remove(&ps);
            }
        }
        if let Some((ns, ne)) = self.at_or_after(start) {
            if ns < hi {
                // Undo a merge with the predecessor before reporting.
                if lo != start {
                    self.put(lo, start);
                }
                return Err(Overlap);
            }
            if ns == hi {
                hi = ne;
                self.ranges.remove(&ns);
            }
        }
        self.put(lo, hi);
        self.total += len;
        Ok(())
    }

    /// Takes up to `max` units from the lowest range: `(start, len)`.
    pub fn take_first(&mut self, max: u64) -> Option<(u64, u64)> {
        let (s, e) = self.at_or_after(0)?;
        let n = max.min(e - s);
        self.ranges.remove(&s);
        if s + n < e {
            self.put(s + n, e);
        }
        self.total -= n;
        Some((s, n))
    }

    /// Takes `len` contiguous units from the first range large enough.
    pub fn take_contiguous(&mut self, len: u64) -> Option<u64> {
        let mut from = 0;
        let (s, e) = loop {
            let (s, e) = self.at_or_after(from)?;
            if e - s >= len {
                break (s, e);
            }
            from = e;
        };
        self.ranges.remove(&s);
        if s + len < e {
            self.put(s + len, e);
        }
        self.total -= len;
        Some(s)
    }

    /// Total units in the set.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// True when `unit` is in the set.
    pub fn contains(&mut self, unit: u64) -> bool {
        self.at_or_before(unit).is_some_and(|(_, e)| unit < e)
    }

    /// The valid ranges as `(start, len)`, ascending (for saving: a damaged
    /// range is never written back to the media).
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges
            .iter()
            .filter(|&(&s, v)| v.end > s && seal(s, v.end).csum == v.csum)
            .map(|(&s, v)| (s, v.end - s))
    }

    /// Overwrites the end of the range starting at `start` behind the
    /// checksum's back, as a stray store would (tests).
    #[cfg(test)]
    fn scribble(&mut self, start: u64, end: u64) {
        if let Some(v) = self.ranges.get_mut(&start) {
            v.end = end;
        }
    }
}

/// Picks this thread's shard: a round-robin slot fixed at the thread's first
/// call, the user-space stand-in for "the current CPU" (DESIGN.md §5).
pub fn current_shard(shards: usize) -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local!(static SLOT: Cell<usize> = const { Cell::new(usize::MAX) });
    SLOT.with(|slot| {
        if slot.get() == usize::MAX {
            slot.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        slot.get() % shards.max(1)
    })
}

/// Evidence that nothing durable references some pages any more (rule R3),
/// which [`PageAllocator::release`] asks for: only the commit points make
/// one — a log tail store or a journal transaction (`log::Committed`,
/// `journal::Durable`) and fast GC's relinking (`log::Unlinked`).
/// (The rule is shown not to compile when broken in `probe.rs`.)
pub trait Unreferenced {}

/// A run of contiguous pages, by byte offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub off: u64,
    pub npages: u64,
}

/// Who may use the last free pages. A few pages are held back so that
/// operations that free space (unlink, rmdir, rename, truncate, punch, log
/// GC) and the clean unmount still work on a full device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Budget {
    /// Ordinary allocations stop at the reserve.
    Normal,
    /// Operations that free space may dig into the reserve.
    Reserve,
}

/// The per-shard free-page pools.
pub struct PageAllocator {
    pools: Vec<Mutex<RangeSet>>,
    /// First page number owned by each pool; pool i owns [bounds[i], bounds[i+1]).
    bounds: Vec<u64>,
    free: AtomicU64,
    reserve: u64,
}

impl PageAllocator {
    /// Empty pools splitting the data area `[data_start, data_end)` (byte
    /// offsets, page aligned) evenly between `shards`.
    pub fn new(data_start: u64, data_end: u64, shards: usize) -> Self {
        let first = data_start >> PAGE_SHIFT;
        let last = data_end >> PAGE_SHIFT;
        let per = ((last - first) / shards as u64).max(1);
        let mut bounds: Vec<u64> = (0..shards as u64).map(|i| (first + i * per).min(last)).collect();
        bounds.push(last);
        let total = last - first;
        PageAllocator {
            pools: (0..shards).map(|_| Mutex::new(RangeSet::default())).collect(),
            bounds,
            free: AtomicU64::new(0),
            reserve: (total / 256).clamp(16, 256).min(total / 4),
        }
    }

    fn pool_of(&self, page: u64) -> usize {
        let i = self.bounds.partition_point(|&b| b <= page);
        i.saturating_sub(1).min(self.pools.len() - 1)
    }

    /// Returns pages to their pools. A double free is a bug or corruption: it
    /// is reported and the range is left as it was.
    /// Returns pages that nothing durable references any more (rule R3):
    /// `_proof` is the commit that dropped the last reference, durable.
    pub fn release(&self, _proof: &impl Unreferenced, extents: &[Extent]) {
        for e in extents {
            self.put_back(e.off, e.npages);
        }
    }

    /// Returns pages this operation allocated and never linked into
    /// anything a commit made reachable (its commit failed, or never ran).
    pub fn abandon(&self, extents: &[Extent]) {
        for e in extents {
            self.put_back(e.off, e.npages);
        }
    }

    /// Adds pages known to be free while the allocator is being built
    /// (mkfs, the saved state of a clean unmount, the recovery scan).
    pub fn add_free(&self, off: u64, npages: u64) {
        self.put_back(off, npages);
    }

    fn put_back(&self, off: u64, npages: u64) {
        let mut page = off >> PAGE_SHIFT;
        let end = page + npages;
        while page < end {
            let pool = self.pool_of(page);
            let stop = end.min(self.bounds[pool + 1]).max(page + 1);
            let n = stop - page;
            if self.pools[pool].lock().insert(page, n).is_err() {
                tracing::error!(page, n, "double free of pages; left allocated");
                debug_assert!(false, "double free of pages {page}+{n}");
            } else {
                self.free.fetch_add(n, Ordering::Relaxed);
            }
            page = stop;
        }
    }

    /// Allocates `npages` pages, possibly as several extents, from this
    /// thread's pool first, then from the largest pools. All or nothing:
    /// `NoSpace` leaves the pools as they were.
    pub fn alloc(&self, npages: u64, budget: Budget) -> Result<Vec<Extent>> {
        if budget == Budget::Normal && self.free_pages() < npages + self.reserve {
            return Err(Error::NoSpace);
        }
        let mut got = Vec::new();
        let mut need = npages;
        let home = current_shard(self.pools.len());
        need = self.take_from(home, need, &mut got);
        while need > 0 {
            let Some(pool) = self.largest_pool() else {
                break;
            };
            let before = need;
            need = self.take_from(pool, need, &mut got);
            if need == before {
                break;
            }
        }
        if need > 0 {
            self.abandon(&got);
            return Err(Error::NoSpace);
        }
        Ok(got)
    }

    fn take_from(&self, pool: usize, mut need: u64, got: &mut Vec<Extent>) -> u64 {
        let mut set = self.pools[pool].lock();
        while need > 0 {
            let Some((start, n)) = set.take_first(need) else {
                break;
            };
            got.push(Extent {
                off: start << PAGE_SHIFT,
                npages: n,
            });
            self.free.fetch_sub(n, Ordering::Relaxed);
            need -= n;
        }
        need
    }

    fn largest_pool(&self) -> Option<usize> {
        (0..self.pools.len())
            .map(|i| (self.pools[i].lock().total(), i))
            .filter(|&(t, _)| t > 0)
            .max()
            .map(|(_, i)| i)
    }

    /// Allocates `npages` physically contiguous pages (inode-table chunks).
    pub fn alloc_contiguous(&self, npages: u64) -> Result<u64> {
        if self.free_pages() < npages + self.reserve {
            return Err(Error::NoSpace);
        }
        let home = current_shard(self.pools.len());
        let order = std::iter::once(home).chain((0..self.pools.len()).filter(|&i| i != home));
        for pool in order {
            if let Some(start) = self.pools[pool].lock().take_contiguous(npages) {
                self.free.fetch_sub(npages, Ordering::Relaxed);
                return Ok(start << PAGE_SHIFT);
            }
        }
        Err(Error::NoSpace)
    }

    /// Free pages ordinary allocations may still use.
    pub fn available_pages(&self) -> u64 {
        self.free_pages().saturating_sub(self.reserve)
    }

    /// Free pages in all pools.
    pub fn free_pages(&self) -> u64 {
        self.free.load(Ordering::Relaxed)
    }

    /// Every free range as `(first page, pages)`, for saving at unmount.
    pub fn export(&self) -> Vec<(u64, u64)> {
        self.pools
            .iter()
            .flat_map(|p| p.lock().iter().collect::<Vec<_>>())
            .collect()
    }

    /// True when the page at byte offset `off` is free.
    pub fn is_free(&self, off: u64) -> bool {
        let page = off >> PAGE_SHIFT;
        self.pools[self.pool_of(page)].lock().contains(page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_merges_neighbours_and_rejects_overlap() {
        let mut s = RangeSet::default();
        s.insert(10, 5).unwrap();
        s.insert(20, 5).unwrap();
        s.insert(15, 5).unwrap();
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![(10, 15)]);
        assert_eq!(s.insert(12, 1), Err(Overlap));
        assert_eq!(s.insert(5, 6), Err(Overlap));
        assert_eq!(s.insert(24, 2), Err(Overlap));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![(10, 15)]);
        assert_eq!(s.total(), 15);
    }

    #[test]
    fn overlap_after_merge_with_predecessor_restores_it() {
        let mut s = RangeSet::default();
        s.insert(0, 4).unwrap();
        s.insert(6, 2).unwrap();
        assert_eq!(s.insert(4, 3), Err(Overlap));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![(0, 4), (6, 2)]);
    }

    #[test]
    fn a_range_whose_end_is_scribbled_is_dropped_never_handed_out() {
        let mut s = RangeSet::default();
        s.insert(0, 4).unwrap();
        s.insert(10, 8).unwrap();
        s.insert(30, 2).unwrap();
        // A stray store makes [10, 18) claim [10, 25), pages it does not own.
        s.scribble(10, 25);
        assert_eq!(s.take_contiguous(6), None, "the only range of 6 was the damaged one");
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![(0, 4), (30, 2)]);
        assert!(!s.contains(12));
        assert_eq!(s.take_first(10), Some((0, 4)));
        assert_eq!(s.take_first(10), Some((30, 2)));
        assert_eq!(s.take_first(10), None);
        assert_eq!(s.total(), 0, "the dropped range's units are not counted free");
        // Its units can be freed again (after a scan finds them unused).
        s.insert(10, 8).unwrap();
        assert_eq!(s.take_contiguous(8), Some(10));
    }

    #[test]
    fn take_first_and_contiguous() {
        let mut s = RangeSet::default();
        s.insert(0, 2).unwrap();
        s.insert(10, 8).unwrap();
        assert_eq!(s.take_contiguous(5), Some(10));
        assert_eq!(s.take_first(5), Some((0, 2)));
        assert_eq!(s.take_first(5), Some((15, 3)));
        assert_eq!(s.take_first(5), None);
        assert_eq!(s.total(), 0);
    }

    #[test]
    fn allocator_is_all_or_nothing_and_frees_back() {
        let a = PageAllocator::new(4096 * 10, 4096 * 20, 2);
        a.add_free(4096 * 10, 10);
        assert_eq!(a.free_pages(), 10);
        assert!(matches!(a.alloc(11, Budget::Reserve), Err(Error::NoSpace)));
        // 10 pages hold back a reserve of 2 from ordinary allocations.
        assert!(matches!(a.alloc(9, Budget::Normal), Err(Error::NoSpace)));
        let eight = a.alloc(8, Budget::Normal).unwrap();
        assert_eq!(a.available_pages(), 0);
        a.abandon(&eight);
        assert_eq!(a.free_pages(), 10);
        let got = a.alloc(10, Budget::Reserve).unwrap();
        assert_eq!(got.iter().map(|e| e.npages).sum::<u64>(), 10);
        assert_eq!(a.free_pages(), 0);
        a.abandon(&got);
        assert_eq!(a.export(), vec![(10, 5), (15, 5)]);
    }
}
