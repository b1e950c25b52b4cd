//! Space management (NOVA §4.1 "NVMM space management"): per-shard pools of
//! free pages kept in DRAM as sorted, merged ranges. A pool owns a contiguous
//! slice of the data area, so frees return pages to the pool they came from
//! and merge with their neighbours; an empty pool takes from the largest one.
//! Nothing here touches the media: the state is saved to the recovery inode on
//! clean unmount (`recovery`) and rebuilt by a scan after a crash.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::lock::{Mutex, Rank};

use crate::error::{Error, Result};
use crate::layout::{PAGE_SHIFT, PAGE_SIZE};

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

    /// Takes up to `max` units from the top of the highest range: `(start, len)`.
    pub fn take_last(&mut self, max: u64) -> Option<(u64, u64)> {
        let (s, e) = self.at_or_before(u64::MAX)?;
        let n = max.min(e - s);
        self.ranges.remove(&s);
        if s < e - n {
            self.put(s, e - n);
        }
        self.total -= n;
        Some((e - n, n))
    }

    /// Takes `len` contiguous units from the top of the highest range large
    /// enough.
    pub fn take_contiguous_last(&mut self, len: u64) -> Option<u64> {
        let mut below = u64::MAX;
        let (s, e) = loop {
            let (s, e) = self.at_or_before(below)?;
            if e - s >= len {
                break (s, e);
            }
            below = s.checked_sub(1)?;
        };
        self.ranges.remove(&s);
        if s < e - len {
            self.put(s, e - len);
        }
        self.total -= len;
        Some(e - len)
    }

    /// True when some unit of `[start, end)` is in the set. O(log n).
    pub fn overlaps(&mut self, start: u64, end: u64) -> bool {
        // The last range starting before `end` reaches furthest right.
        start < end && self.at_or_before(end - 1).is_some_and(|(_, e)| e > start)
    }

    /// Takes every unit of `[start, end)` that is in the set, as ascending
    /// `(start, len)` runs, splitting ranges that straddle the window's
    /// edges. O((k + 1) log n) for k runs.
    pub fn take_within(&mut self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        if start >= end {
            return out;
        }
        let mut cur = match self.at_or_before(start) {
            Some((s, e)) if e > start => Some((s, e)),
            _ => self.at_or_after(start),
        };
        while let Some((s, e)) = cur {
            if s >= end {
                break;
            }
            let (lo, hi) = (s.max(start), e.min(end));
            self.ranges.remove(&s);
            if s < lo {
                self.put(s, lo);
            }
            if hi < e {
                self.put(hi, e);
            }
            self.total -= hi - lo;
            out.push((lo, hi - lo));
            if hi == end {
                break;
            }
            cur = self.at_or_after(hi);
        }
        out
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

/// Data pages that applied log entries left unreferenced, in runs, each
/// with the log entry that had mapped it: a page's birth epoch is that
/// entry's, which decides whether a snapshot still needs it (Fortis §3.2).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Freed(Vec<(Extent, u64)>);

impl Freed {
    /// Adds page `block`, which the entry at `entry` mapped: it extends
    /// the last run when it continues it under the same entry.
    pub fn push_page(&mut self, block: u64, entry: u64) {
        match self.0.last_mut() {
            Some((e, at)) if *at == entry && e.off + e.npages * PAGE_SIZE == block => e.npages += 1,
            _ => self.0.push((Extent { off: block, npages: 1 }, entry)),
        }
    }

    /// The runs and their entries.
    pub fn runs(&self) -> &[(Extent, u64)] {
        &self.0
    }

    /// The runs alone.
    pub fn extents(&self) -> Vec<Extent> {
        self.0.iter().map(|&(e, _)| e).collect()
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }
}

/// Who may use the last free pages (FORMAT.md "The reserve"). Part of
/// the device is held back from ordinary allocations so that a full file
/// system can always be emptied, as ext4's reserved blocks, btrfs's global
/// reserve and ZFS's slop space do: its upper part for operations that
/// free space, its lower (critical) part for what must finish even when
/// those operations have used everything else (they free nothing while a
/// snapshot keeps what they drop).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Budget {
    /// Writes, creates, links, plain renames, xattrs, snapshot creation:
    /// they stop at the reserve.
    Normal,
    /// Unlink, rmdir, rename over an existing name, truncate down, punching
    /// holes: they stop at the critical part.
    Freeing,
    /// Snapshot deletion, the reclaimer, log GC, the clean unmount's saved
    /// state, the crash scan's commits and `fsck --repair`: every page.
    Critical,
}

/// The critical part of the reserve, per shard: what one thread's
/// critical operation needs at most at once, with room to spare: two log
/// pages and their mirrors (the snapshot list's record, a GC's fresh log
/// page), and several pages of the clean unmount's saved state.
const CRITICAL_PAGES_PER_SHARD: u64 = 64;

/// The reserve as a fraction of the data area, as ZFS's slop space (1/32).
const RESERVE_DIVISOR: u64 = 32;

/// The pages held back from ordinary allocations in a data area of
/// `total` pages split in `shards`, and the critical part of them
/// ([`Budget`]): a 32nd of the area, at least enough for every shard's
/// critical operations twice over, at most a quarter of a tiny area.
pub fn reserve_pages(total: u64, shards: u64) -> (u64, u64) {
    let floor = 2 * CRITICAL_PAGES_PER_SHARD * shards;
    let reserve = (total / RESERVE_DIVISOR).max(floor).min(total / 4);
    (reserve, reserve / 2)
}

/// One shard's free pages.
#[derive(Debug, Default)]
struct Pool {
    /// Free pages handed out one by one. Replication off: every free page.
    /// On: the free pages that cannot be half of a free metadata pair —
    /// those in the dead zone and those whose mirror is in use.
    single: RangeSet,
    /// Replication on: the primaries `p` (all in the low zone) of the free
    /// pairs, `p` and `m(p)` both free. The mirror is implied and stored
    /// nowhere, so each free page is in exactly one of the two sets. Off:
    /// empty.
    pairs: RangeSet,
}

impl Pool {
    fn free(&self) -> u64 {
        self.single.total() + 2 * self.pairs.total()
    }
}

/// Where each page of the data area `[first, last)` has its mirror when
/// metadata is replicated: `m(p) = first + last - 1 - p`, the reflection
/// about the middle of the area.
///
/// A metadata primary `p` must be at least the dead zone below its mirror,
/// `m(p) - p >= dead zone`: the primaries are the low zone `[first,
/// lo_end)`, their mirrors the high zone `[hi_start, last)`, and the pages
/// between them, the dead zone, hold data only.
#[derive(Clone, Copy, Debug)]
struct Mirror {
    first: u64,
    last: u64,
    lo_end: u64,
    hi_start: u64,
}

/// Which zone a page is in when metadata is replicated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Zone {
    /// A possible metadata primary.
    Low,
    /// Data only.
    Dead,
    /// A possible metadata mirror.
    High,
}

impl Mirror {
    fn new(first: u64, last: u64, dead_zone_pages: u64) -> Self {
        // p < m(p) always (distance at least 1), so the centre page of an
        // odd area is never paired.
        let dead = dead_zone_pages.max(1);
        let n = last.saturating_sub(first);
        // m(p) - p = first + last - 1 - 2p >= dead, with p >= first.
        let lo_end = if n == 0 || n - 1 < dead {
            first
        } else {
            (first + last - 1 - dead) / 2 + 1
        };
        Mirror {
            first,
            last,
            lo_end,
            hi_start: first + last - lo_end,
        }
    }

    /// The mirror of a page of the data area.
    fn of(&self, page: u64) -> u64 {
        self.first + self.last - 1 - page
    }

    /// The lower of a page and its mirror: pools own pairs of pages.
    fn key(&self, page: u64) -> u64 {
        page.min(self.of(page))
    }

    /// The mirror image of the pages `[a, b)`: `[m(b - 1), m(a) + 1)`.
    fn range(&self, a: u64, b: u64) -> (u64, u64) {
        (self.first + self.last - b, self.first + self.last - a)
    }

    fn contains(&self, page: u64) -> bool {
        page >= self.first && page < self.last
    }
}

/// The per-shard free-page pools.
///
/// Replication (Fortis §4.4, `PageAllocator::mirrored`): every metadata page
/// `p` has its replica at its mirror `m(p)` (see [`Mirror`]), so a
/// metadata page needs a free *pair*; data pages are single. Each pool then
/// owns a slice of the low half of the data area together with its mirror
/// image, so a pair's two pages always belong to the same pool and every
/// operation locks exactly one pool. A pool keeps its free pages as free
/// pairs (by primary) and free singles, and frees keep every pair whose
/// two pages are free paired, so metadata finds every pair that exists.
///
/// Placement, and why metadata and data do not starve each other: a data
/// page only costs metadata something when it breaks a free pair, and a
/// metadata pair costs data nothing (data can use any page). So
/// - data takes singles first, from any pool (the dead zone, and pages
///   whose mirror is in use: they are useless to metadata), and only when
///   there are none anywhere does it take pairs — both pages of each pair
///   (a primary run and its mirror run), so breaking pairs leaves at most
///   one stranded single per allocation;
/// - metadata takes its pairs from the outer end of its pool's slice
///   (lowest primaries first, whose mirrors are the highest pages: the
///   copies are as far apart as the pool allows, which beyond the
///   guaranteed dead zone further lowers the odds that a long scribble
///   hits both), while data takes pairs from the inner end, toward the
///   dead zone. The two meet inside each pool rather than interleaving,
///   which keeps long runs of pairs for inode-table chunks.
///
/// The pairs' separation is only guaranteed to be the dead zone, measured
/// between pages: `m(p) - p >= dead_zone_pages`.
///
/// Every step is a few O(log n) range operations on one pool; no free page
/// is ever visited one by one.
pub struct PageAllocator {
    pools: Vec<Mutex<Pool>>,
    /// Replication off: first page owned by each pool; pool i owns
    /// `[bounds[i], bounds[i+1])`. On: the same over keys `min(p, m(p))`.
    bounds: Vec<u64>,
    /// Free pages in all pools (a pair counts 2), kept exact under the
    /// pools' locks.
    free: AtomicU64,
    /// Pages in all pools' `single` sets: lets data allocation skip visiting
    /// the other pools for singles when there are none.
    singles: AtomicU64,
    /// Pages [`Budget::Normal`] allocations leave free.
    reserve: u64,
    /// Pages [`Budget::Freeing`] allocations leave free (`<= reserve`).
    critical: u64,
    mirror: Option<Mirror>,
}

fn adjust(counter: &AtomicU64, before: u64, after: u64) {
    if after >= before {
        counter.fetch_add(after - before, Ordering::Relaxed);
    } else {
        counter.fetch_sub(before - after, Ordering::Relaxed);
    }
}

fn extent(start: u64, n: u64) -> Extent {
    Extent {
        off: start << PAGE_SHIFT,
        npages: n,
    }
}

impl PageAllocator {
    /// Empty pools splitting the data area `[data_start, data_end)` (byte
    /// offsets, page aligned) evenly between `shards`.
    pub fn new(data_start: u64, data_end: u64, shards: usize) -> Self {
        let first = data_start >> PAGE_SHIFT;
        let last = data_end >> PAGE_SHIFT;
        Self::with_bounds(first, last, last, last, shards, None)
    }

    /// Empty pools for an image whose metadata is replicated at the mirror
    /// pages, with at least `dead_zone_pages` between a primary and its
    /// mirror (Fortis §4.4: 256 pages, 1 MiB, by default).
    pub fn mirrored(data_start: u64, data_end: u64, shards: usize, dead_zone_pages: u64) -> Self {
        let first = data_start >> PAGE_SHIFT;
        let last = data_end >> PAGE_SHIFT;
        let m = Mirror::new(first, last, dead_zone_pages);
        // Keys run over the low half, the centre of an odd area included.
        // The pools split the primaries evenly, and the last one also owns
        // the dead zone: each pool can then fit as many inode-table chunks
        // as any other (the dead zone would otherwise eat into one pool's
        // primaries, and a minimum-size image with 4 shards or more would
        // have no room for its last shard's chunk).
        let key_end = first + last.saturating_sub(first).div_ceil(2);
        Self::with_bounds(first, last, m.lo_end, key_end, shards, Some(m))
    }

    /// Pools splitting the keys `[first, split_end)` evenly, the last one
    /// taking the rest up to `key_end`.
    fn with_bounds(first: u64, last: u64, split_end: u64, key_end: u64, shards: usize, mirror: Option<Mirror>) -> Self {
        let per = (split_end.saturating_sub(first) / shards as u64).max(1);
        let mut bounds: Vec<u64> = (0..shards as u64).map(|i| (first + i * per).min(split_end)).collect();
        bounds.push(key_end);
        let (reserve, critical) = reserve_pages(last.saturating_sub(first), shards as u64);
        PageAllocator {
            pools: (0..shards)
                .map(|_| Mutex::new(Rank::AllocPool, Pool::default()))
                .collect(),
            bounds,
            free: AtomicU64::new(0),
            singles: AtomicU64::new(0),
            reserve,
            critical,
            mirror,
        }
    }

    fn pool_of(&self, page: u64) -> usize {
        let key = match self.mirror {
            Some(m) if m.contains(page) => m.key(page),
            _ => page,
        };
        let i = self.bounds.partition_point(|&b| b <= key);
        i.saturating_sub(1).min(self.pools.len() - 1)
    }

    /// Runs `f` on pool `i` under its lock, keeping the counters exact
    /// (including when a range fails its checksum and is dropped).
    fn with_pool<R>(&self, i: usize, f: impl FnOnce(&mut Pool) -> R) -> R {
        let mut p = self.pools[i].lock();
        let (free, single) = (p.free(), p.single.total());
        let r = f(&mut p);
        adjust(&self.free, free, p.free());
        adjust(&self.singles, single, p.single.total());
        r
    }

    /// Replication on: the pool, zone and end of the run of pages from
    /// `page` (in the data area) that share both. The run's mirror image is
    /// in the same pool, and in the opposite zone.
    fn cell(&self, m: &Mirror, page: u64) -> (usize, Zone, u64) {
        let pool = self.pool_of(page);
        if page <= m.of(page) {
            let end = self.bounds[pool + 1];
            if page < m.lo_end {
                (pool, Zone::Low, end.min(m.lo_end))
            } else {
                (pool, Zone::Dead, end)
            }
        } else {
            // The slice's mirror image ends at the mirror of its first key.
            let end = m.first + m.last - self.bounds[pool];
            if page >= m.hi_start {
                (pool, Zone::High, end)
            } else {
                (pool, Zone::Dead, end.min(m.hi_start))
            }
        }
    }

    /// Returns pages that nothing durable references any more (rule R3):
    /// `_proof` is the commit that dropped the last reference, durable.
    /// A double free is a bug or corruption: it is reported and the range
    /// is left as it was.
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

    /// [`Self::release`] for metadata primaries from [`Self::alloc_meta`] or
    /// [`Self::alloc_contiguous_meta`]: returns them and their mirrors.
    pub fn release_meta(&self, _proof: &impl Unreferenced, extents: &[Extent]) {
        self.put_back_meta(extents);
    }

    /// [`Self::abandon`] for metadata primaries: returns them and their
    /// mirrors.
    pub fn abandon_meta(&self, extents: &[Extent]) {
        self.put_back_meta(extents);
    }

    /// Adds pages known to be free while the allocator is being built
    /// (mkfs, the saved state of a clean unmount, the recovery scan). With
    /// replication on, a free page whose mirror is free too (added before or
    /// after) makes a free pair.
    pub fn add_free(&self, off: u64, npages: u64) {
        self.put_back(off, npages);
    }

    fn put_back(&self, off: u64, npages: u64) {
        let mut page = off >> PAGE_SHIFT;
        let end = page.saturating_add(npages);
        let Some(m) = self.mirror else {
            while page < end {
                let pool = self.pool_of(page);
                let stop = end.min(self.bounds[pool + 1]).max(page + 1);
                let n = stop - page;
                if self.with_pool(pool, |p| p.single.insert(page, n)).is_err() {
                    tracing::error!(page, n, "double free of pages; left allocated");
                    debug_assert!(false, "double free of pages {page}+{n}");
                }
                page = stop;
            }
            return;
        };
        if page < m.first || end > m.last {
            tracing::error!(page, npages, "freeing pages outside the data area; ignored");
            debug_assert!(false, "freeing pages {page}+{npages} outside the data area");
            return;
        }
        while page < end {
            let (pool, zone, stop) = self.cell(&m, page);
            let stop = stop.min(end);
            if self.with_pool(pool, |p| free_cell(&m, p, zone, page, stop)).is_err() {
                let n = stop - page;
                tracing::error!(page, n, "double free of pages; left allocated");
                debug_assert!(false, "double free of pages {page}+{n}");
            }
            page = stop;
        }
    }

    fn put_back_meta(&self, extents: &[Extent]) {
        let Some(m) = self.mirror else {
            return self.abandon(extents);
        };
        for e in extents {
            let mut page = e.off >> PAGE_SHIFT;
            let end = page.saturating_add(e.npages);
            if page < m.first || end > m.lo_end {
                tracing::error!(
                    page,
                    n = e.npages,
                    "freeing metadata pages that cannot be primaries; ignored"
                );
                debug_assert!(false, "metadata pages {page}+{} are not primaries", e.npages);
                continue;
            }
            while page < end {
                let (pool, _, stop) = self.cell(&m, page);
                let stop = stop.min(end);
                if self.with_pool(pool, |p| free_pair_cell(&m, p, page, stop)).is_err() {
                    let n = stop - page;
                    tracing::error!(page, n, "double free of metadata pages; left allocated");
                    debug_assert!(false, "double free of metadata pages {page}+{n}");
                }
                page = stop;
            }
        }
    }

    /// Allocates `npages` pages, possibly as several extents, from this
    /// thread's pool first, then from the largest pools. All or nothing:
    /// `NoSpace` leaves the pools as they were. With replication on, pages
    /// that cannot be metadata come first, from any pool (see the type's
    /// placement notes).
    pub fn alloc(&self, npages: u64, budget: Budget) -> Result<Vec<Extent>> {
        self.within_budget(npages, budget)?;
        let mut got = Vec::new();
        let mut need = npages;
        let home = current_shard(self.pools.len());
        if let Some(m) = self.mirror {
            need = self.with_pool(home, |p| take_singles(p, need, &mut got));
            let others = (1..self.pools.len()).map(|k| (home + k) % self.pools.len());
            for pool in others {
                if need == 0 || self.singles.load(Ordering::Relaxed) == 0 {
                    break;
                }
                need = self.with_pool(pool, |p| take_singles(p, need, &mut got));
            }
            if need > 0 {
                need = self.with_pool(home, |p| take_data(&m, p, need, &mut got));
            }
        } else {
            need = self.take_from(home, need, &mut got);
        }
        while need > 0 {
            let Some(pool) = self.largest_pool(Pool::free) else {
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

    fn take_from(&self, pool: usize, need: u64, got: &mut Vec<Extent>) -> u64 {
        match self.mirror {
            Some(m) => self.with_pool(pool, |p| take_data(&m, p, need, got)),
            None => self.with_pool(pool, |p| take_singles(p, need, got)),
        }
    }

    fn largest_pool(&self, size: impl Fn(&Pool) -> u64) -> Option<usize> {
        (0..self.pools.len())
            .map(|i| (size(&self.pools[i].lock()), i))
            .filter(|&(t, _)| t > 0)
            .max()
            .map(|(_, i)| i)
    }

    /// Allocates `npages` metadata pages, possibly as several extents, and
    /// their mirrors; returns the primaries (the mirrors are
    /// [`Self::mirror`]). A pair counts two pages against the budget. All or
    /// nothing. With replication off, exactly [`Self::alloc`].
    pub fn alloc_meta(&self, npages: u64, budget: Budget) -> Result<Vec<Extent>> {
        if self.mirror.is_none() {
            return self.alloc(npages, budget);
        }
        self.within_budget(npages.checked_mul(2).ok_or(Error::NoSpace)?, budget)?;
        let mut got = Vec::new();
        let home = current_shard(self.pools.len());
        let mirror = self.mirror;
        let take = |p: &mut Pool, need: u64, got: &mut Vec<Extent>| match &mirror {
            Some(m) => take_pairs(m, p, need, got),
            None => need,
        };
        let mut need = self.with_pool(home, |p| take(p, npages, &mut got));
        if need > 0 {
            // Pairs a data batch broke and did not use count again.
            for pool in 0..self.pools.len() {
                self.with_pool(pool, |p| mirror.iter().for_each(|m| pair_singles(m, p)));
            }
        }
        while need > 0 {
            let Some(pool) = self.largest_pool(|p| p.pairs.total()) else {
                break;
            };
            let before = need;
            need = self.with_pool(pool, |p| take(p, need, &mut got));
            if need == before {
                break;
            }
        }
        if need > 0 {
            self.abandon_meta(&got);
            return Err(Error::NoSpace);
        }
        Ok(got)
    }

    /// Allocates `npages` physically contiguous pages (inode-table chunks).
    /// With replication on, free singles are tried before pairs (and a pair
    /// whose primary is taken leaves its mirror single).
    pub fn alloc_contiguous(&self, npages: u64, budget: Budget) -> Result<u64> {
        self.within_budget(npages, budget)?;
        for pool in self.home_first() {
            let taken = self.with_pool(pool, |p| {
                // A fragmented pool is not scanned when it cannot fit.
                (p.single.total() >= npages).then(|| p.single.take_contiguous(npages))?
            });
            if let Some(start) = taken {
                return Ok(start << PAGE_SHIFT);
            }
        }
        let Some(m) = self.mirror else {
            return Err(Error::NoSpace);
        };
        for pool in self.home_first() {
            let taken = self.with_pool(pool, |p| {
                let start = p.pairs.take_contiguous_last(npages)?;
                let (ma, mb) = m.range(start, start + npages);
                let ok = p.single.insert(ma, mb - ma).is_ok();
                debug_assert!(ok, "the mirror of a free pair was in the singles");
                Some(start)
            });
            if let Some(start) = taken {
                return Ok(start << PAGE_SHIFT);
            }
        }
        Err(Error::NoSpace)
    }

    /// Allocates `npages` contiguous metadata primaries whose mirrors (also
    /// contiguous, in reverse page order) are taken too: an inode-table
    /// chunk. Returns the first primary. With replication off, exactly
    /// [`Self::alloc_contiguous`].
    pub fn alloc_contiguous_meta(&self, npages: u64, budget: Budget) -> Result<u64> {
        if self.mirror.is_none() {
            return self.alloc_contiguous(npages, budget);
        }
        self.within_budget(npages.checked_mul(2).ok_or(Error::NoSpace)?, budget)?;
        let mirror = self.mirror;
        for pool in self.home_first() {
            let start = self.with_pool(pool, |p| {
                p.pairs.take_contiguous(npages).or_else(|| {
                    mirror.iter().for_each(|m| pair_singles(m, p));
                    p.pairs.take_contiguous(npages)
                })
            });
            if let Some(start) = start {
                return Ok(start << PAGE_SHIFT);
            }
        }
        Err(Error::NoSpace)
    }

    /// This thread's pool, then the others in ascending order.
    fn home_first(&self) -> impl Iterator<Item = usize> {
        let n = self.pools.len();
        let home = current_shard(n);
        std::iter::once(home).chain((0..n).filter(move |&i| i != home))
    }

    /// `NoSpace` unless `pages` can be taken while leaving free what
    /// `budget` must leave.
    fn within_budget(&self, pages: u64, budget: Budget) -> Result<()> {
        let keep = match budget {
            Budget::Normal => self.reserve,
            Budget::Freeing => self.critical,
            Budget::Critical => 0,
        };
        if self.free_pages() < pages.saturating_add(keep) {
            return Err(Error::NoSpace);
        }
        Ok(())
    }

    /// Pages held back from ordinary allocations ([`reserve_pages`]).
    pub fn reserved_pages(&self) -> u64 {
        self.reserve
    }

    /// Free pages ordinary allocations may still use.
    pub fn available_pages(&self) -> u64 {
        self.free_pages().saturating_sub(self.reserve)
    }

    /// Free pages in all pools.
    pub fn free_pages(&self) -> u64 {
        self.free.load(Ordering::Relaxed)
    }

    /// Every free range as `(first page, pages)`, ascending and disjoint,
    /// for saving at unmount. The mirrors of metadata in use are not free.
    pub fn export(&self) -> Vec<(u64, u64)> {
        let Some(m) = self.mirror else {
            return self
                .pools
                .iter()
                .flat_map(|p| p.lock().single.iter().collect::<Vec<_>>())
                .collect();
        };
        let mut all = Vec::new();
        for pool in &self.pools {
            let p = pool.lock();
            all.extend(p.single.iter());
            for (s, n) in p.pairs.iter() {
                let (ma, mb) = m.range(s, s + n);
                all.push((s, n));
                all.push((ma, mb - ma));
            }
        }
        all.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(all.len());
        for (s, n) in all {
            match out.last_mut() {
                Some((ps, pn)) if *ps + *pn == s => *pn += n,
                _ => out.push((s, n)),
            }
        }
        out
    }

    /// True when the page at byte offset `off` is free.
    pub fn is_free(&self, off: u64) -> bool {
        let page = off >> PAGE_SHIFT;
        match self.mirror {
            None => self.pools[self.pool_of(page)].lock().single.contains(page),
            Some(m) if m.contains(page) => {
                let mut p = self.pools[self.pool_of(page)].lock();
                p.single.contains(page) || p.pairs.contains(m.key(page))
            }
            Some(_) => false,
        }
    }
}

/// Takes up to `need` single pages from the lowest; returns what is still
/// needed.
fn take_singles(p: &mut Pool, mut need: u64, got: &mut Vec<Extent>) -> u64 {
    while need > 0 {
        let Some((start, n)) = p.single.take_first(need) else {
            break;
        };
        got.push(extent(start, n));
        need -= n;
    }
    need
}

/// Pairs broken at once for data (the primaries' run and the mirrors' run
/// become singles): a file written a page at a time then gets runs of
/// contiguous pages, which reads copy in one go, instead of pages that
/// alternate between a pair's two far-apart halves.
const DATA_BATCH_PAIRS: u64 = 32;

/// Data pages when replication is on: singles, lowest first; when none
/// are left, a batch of pairs from the dead zone outward becomes singles.
fn take_data(m: &Mirror, p: &mut Pool, need: u64, got: &mut Vec<Extent>) -> u64 {
    let mut need = take_singles(p, need, got);
    while need > 0 {
        let Some((start, n)) = p.pairs.take_last(need.div_ceil(2).max(DATA_BATCH_PAIRS)) else {
            break;
        };
        let (ma, mb) = m.range(start, start + n);
        let primaries = p.single.insert(start, n).is_ok();
        let mirrors = p.single.insert(ma, mb - ma).is_ok();
        debug_assert!(primaries && mirrors, "a free pair's pages were also single");
        need = take_singles(p, need, got);
    }
    need
}

/// Makes free pairs again of free single primaries whose mirrors are free
/// singles too (what a data batch broke and did not use).
fn pair_singles(m: &Mirror, p: &mut Pool) {
    let lows: Vec<(u64, u64)> = p
        .single
        .iter()
        .map(|(s, n)| (s, (s + n).min(m.lo_end)))
        .filter(|&(s, e)| s < e)
        .collect();
    for (a, b) in lows {
        let (ma, mb) = m.range(a, b);
        for (ms, mn) in p.single.take_within(ma, mb) {
            let (pa, pb) = m.range(ms, ms + mn);
            let primaries = p.single.take_within(pa, pb);
            debug_assert_eq!(primaries, vec![(pa, pb - pa)], "the primaries of free mirrors");
            let ok = p.pairs.insert(pa, pb - pa).is_ok();
            debug_assert!(ok, "a free single was also a free pair");
        }
    }
}

/// Metadata pairs from the outer edge inward: returns what is still needed.
fn take_pairs(m: &Mirror, p: &mut Pool, mut need: u64, got: &mut Vec<Extent>) -> u64 {
    if p.pairs.total() < need {
        pair_singles(m, p);
    }
    while need > 0 {
        let Some((start, n)) = p.pairs.take_first(need) else {
            break;
        };
        got.push(extent(start, n));
        need -= n;
    }
    need
}

/// Frees `[a, b)`, pages of one pool in one zone, pairing each with its
/// mirror when that is free (a single). Checks first: an overlap with free
/// pages changes nothing.
fn free_cell(m: &Mirror, p: &mut Pool, zone: Zone, a: u64, b: u64) -> std::result::Result<(), Overlap> {
    let (ma, mb) = m.range(a, b);
    match zone {
        Zone::Dead => p.single.insert(a, b - a),
        Zone::Low => {
            if p.single.overlaps(a, b) || p.pairs.overlaps(a, b) {
                return Err(Overlap);
            }
            // Free mirrors ascending: their primaries, descending.
            let mut paired: Vec<(u64, u64)> = p
                .single
                .take_within(ma, mb)
                .into_iter()
                .map(|(s, n)| m.range(s, s + n))
                .collect();
            paired.reverse();
            for &(s, e) in &paired {
                let ok = p.pairs.insert(s, e - s).is_ok();
                debug_assert!(ok, "checked above");
            }
            insert_gaps(&mut p.single, a, b, &paired);
            Ok(())
        }
        Zone::High => {
            if p.single.overlaps(a, b) || p.pairs.overlaps(ma, mb) {
                return Err(Overlap);
            }
            // Free primaries ascending: their mirrors, descending.
            let mut paired = Vec::new();
            for (s, n) in p.single.take_within(ma, mb) {
                let ok = p.pairs.insert(s, n).is_ok();
                debug_assert!(ok, "checked above");
                paired.push(m.range(s, s + n));
            }
            paired.reverse();
            insert_gaps(&mut p.single, a, b, &paired);
            Ok(())
        }
    }
}

/// Adds to `set` the parts of `[a, b)` outside the ascending, disjoint
/// `[start, end)` runs `taken` (all within it).
fn insert_gaps(set: &mut RangeSet, a: u64, b: u64, taken: &[(u64, u64)]) {
    let mut from = a;
    for &(s, e) in taken.iter().chain(std::iter::once(&(b, b))) {
        if from < s {
            let ok = set.insert(from, s - from).is_ok();
            debug_assert!(ok, "checked by the caller");
        }
        from = e;
    }
}

/// Frees the metadata primaries `[a, b)` (one pool, low zone) and their
/// mirrors, as free pairs. Checks first: an overlap with free pages changes
/// nothing.
fn free_pair_cell(m: &Mirror, p: &mut Pool, a: u64, b: u64) -> std::result::Result<(), Overlap> {
    let (ma, mb) = m.range(a, b);
    if p.single.overlaps(a, b) || p.single.overlaps(ma, mb) || p.pairs.overlaps(a, b) {
        return Err(Overlap);
    }
    p.pairs.insert(a, b - a)
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
        assert!(matches!(a.alloc(11, Budget::Critical), Err(Error::NoSpace)));
        // 10 pages hold back a reserve of 2 from ordinary allocations.
        assert!(matches!(a.alloc(9, Budget::Normal), Err(Error::NoSpace)));
        let eight = a.alloc(8, Budget::Normal).unwrap();
        assert_eq!(a.available_pages(), 0);
        a.abandon(&eight);
        assert_eq!(a.free_pages(), 10);
        let got = a.alloc(10, Budget::Critical).unwrap();
        assert_eq!(got.iter().map(|e| e.npages).sum::<u64>(), 10);
        assert_eq!(a.free_pages(), 0);
        a.abandon(&got);
        assert_eq!(a.export(), vec![(10, 5), (15, 5)]);
    }

    // ---- RangeSet helpers for the mirrored allocator ----

    #[test]
    fn take_within_splits_straddling_ranges() {
        let mut s = RangeSet::default();
        s.insert(0, 10).unwrap();
        s.insert(20, 5).unwrap();
        s.insert(30, 10).unwrap();
        assert!(s.overlaps(5, 6) && s.overlaps(24, 30) && !s.overlaps(10, 20) && !s.overlaps(25, 30));
        assert!(!s.overlaps(7, 7));
        assert_eq!(s.take_within(5, 35), vec![(5, 5), (20, 5), (30, 5)]);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![(0, 5), (35, 5)]);
        assert_eq!(s.total(), 10);
        assert_eq!(s.take_within(36, 38), vec![(36, 2)]);
        assert_eq!(s.take_within(10, 30), vec![]);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![(0, 5), (35, 1), (38, 2)]);
        assert_eq!(s.total(), 8);
    }

    #[test]
    fn take_last_and_contiguous_last() {
        let mut s = RangeSet::default();
        s.insert(0, 10).unwrap();
        s.insert(20, 3).unwrap();
        assert_eq!(s.take_contiguous_last(5), Some(5));
        assert_eq!(s.take_contiguous_last(6), None);
        assert_eq!(s.take_last(2), Some((21, 2)));
        assert_eq!(s.take_last(9), Some((20, 1)));
        assert_eq!(s.take_last(9), Some((0, 5)));
        assert_eq!(s.take_last(1), None);
        assert_eq!(s.total(), 0);
    }

    // ---- The mirrored allocator ----

    struct Proof;
    impl Unreferenced for Proof {}

    const P: u64 = 1 << PAGE_SHIFT;

    fn pages_of(extents: &[Extent]) -> Vec<u64> {
        extents
            .iter()
            .flat_map(|e| (0..e.npages).map(move |i| (e.off >> PAGE_SHIFT) + i))
            .collect()
    }

    /// An allocator over pages [first, first + n) with all of them free.
    fn mirrored(first: u64, n: u64, shards: usize, dead: u64) -> PageAllocator {
        let a = PageAllocator::mirrored(first * P, (first + n) * P, shards, dead);
        a.add_free(first * P, n);
        a
    }

    fn geometry(a: &PageAllocator) -> Mirror {
        a.mirror.expect("mirrored")
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    #[test]
    fn pairs_are_mirrors_beyond_the_dead_zone_and_meta_starts_at_the_edges() {
        let a = mirrored(10, 1000, 1, 64);
        let m = geometry(&a);
        // m(p) = 1019 - p; p = 477 is the last primary: 542 - 477 = 65 >= 64.
        assert_eq!((m.lo_end, m.hi_start), (478, 542));
        assert_eq!(
            a.alloc_meta(1, Budget::Normal).unwrap(),
            vec![extent(10, 1)],
            "outer edge first"
        );
        let mut meta = vec![extent(10, 1)];
        while let Ok(got) = a.alloc_meta(1, Budget::Critical) {
            meta.extend(got);
        }
        assert_eq!(meta.len(), 468);
        for p in pages_of(&meta) {
            let q = m.of(p);
            assert!(q - p >= 64, "pair ({p}, {q}) closer than the dead zone");
            assert!(!a.is_free(p * P) && !a.is_free(q * P));
        }
        // What is left is the dead zone, for data only.
        assert_eq!(a.free_pages(), 64);
        assert_eq!(a.export(), vec![(478, 64)]);
        let data = a.alloc(64, Budget::Critical).unwrap();
        assert_eq!(data, vec![extent(478, 64)]);
        a.release_meta(&Proof, &meta);
        assert_eq!(a.free_pages(), 936);
        a.abandon(&data);
        assert_eq!(a.export(), vec![(10, 1000)]);
        assert_eq!(a.free_pages(), 1000);
    }

    #[test]
    fn data_takes_the_dead_zone_then_a_batch_of_pairs_in_two_runs() {
        let a = mirrored(10, 1000, 1, 64);
        let dead = a.alloc(64, Budget::Critical).unwrap();
        assert_eq!(dead, vec![extent(478, 64)]);
        // Then a batch of pairs nearest the middle becomes single: the
        // primaries' run [446, 478) first, then the mirrors' [542, 574),
        // so pages taken one at a time are contiguous.
        let pages: Vec<u64> = (0..40)
            .flat_map(|_| pages_of(&a.alloc(1, Budget::Critical).unwrap()))
            .collect();
        let want: Vec<u64> = (446..478).chain(542..550).collect();
        assert_eq!(pages, want);
        assert_eq!(a.free_pages(), 1000 - 64 - 40);
        // The rest of the batch is still metadata's: singles whose mirrors
        // are free pair up again when pairs run short.
        let all_pairs = (446 - 10) + (574 - 550) / 2;
        let meta = a.alloc_meta(all_pairs, Budget::Critical);
        assert!(meta.is_err(), "the batch's unused mirrors have no free primaries");
        let meta = a.alloc_meta(446 - 10, Budget::Critical).unwrap();
        assert_eq!(pages_of(&meta).len() as u64, 446 - 10);
    }

    #[test]
    fn meta_is_all_or_nothing() {
        let a = mirrored(0, 600, 2, 16);
        let m = geometry(&a);
        let pairs = m.lo_end - m.first;
        let before = a.export();
        assert!(matches!(a.alloc_meta(pairs + 1, Budget::Critical), Err(Error::NoSpace)));
        assert_eq!(a.export(), before);
        assert_eq!(a.free_pages(), 600);
        // The reserve: pairs count two pages each.
        let spare = (600 - a.reserve) / 2;
        assert!(matches!(a.alloc_meta(spare + 1, Budget::Normal), Err(Error::NoSpace)));
        let got = a.alloc_meta(spare, Budget::Normal).unwrap();
        assert_eq!(a.free_pages(), 600 - 2 * spare);
        a.abandon_meta(&got);
        assert_eq!(a.export(), before);

        // Fragment the area with data: everything used, then a few pairs
        // (in both pools) and many singles freed. More singles than pairs
        // needed is not enough.
        let all = a.alloc(600, Budget::Critical).unwrap();
        assert_eq!(a.free_pages(), 0);
        let chosen = [3, 4, 5, 100, 200, 250];
        for &p in &chosen {
            a.add_free(p * P, 1);
            a.add_free(m.of(p) * P, 1);
        }
        for p in (20..90).step_by(2) {
            a.add_free(p * P, 1);
        }
        let before = a.export();
        let free = a.free_pages();
        assert!(matches!(a.alloc_meta(7, Budget::Critical), Err(Error::NoSpace)));
        assert_eq!(a.export(), before);
        assert_eq!(a.free_pages(), free);
        let got = a.alloc_meta(6, Budget::Critical).unwrap();
        let mut primaries = pages_of(&got);
        primaries.sort_unstable();
        assert_eq!(primaries, chosen);
        a.abandon_meta(&got);
        // Return all but what was freed above, then everything is free.
        let freed: std::collections::HashSet<u64> = a.export().iter().flat_map(|&(s, n)| s..s + n).collect();
        for p in pages_of(&all) {
            if !freed.contains(&p) {
                a.abandon(&[extent(p, 1)]);
            }
        }
        assert_eq!(a.export(), vec![(0, 600)]);
        assert_eq!(a.free_pages(), 600);
    }

    #[test]
    #[should_panic(expected = "double free of metadata pages")]
    fn a_pair_freed_twice_is_caught() {
        let a = mirrored(0, 600, 2, 16);
        let got = a.alloc_meta(3, Budget::Critical).unwrap();
        a.abandon_meta(&got);
        a.abandon_meta(&got);
    }

    #[test]
    fn contiguous_meta_chunks_and_contiguous_data() {
        let a = mirrored(10, 2000, 1, 100);
        let m = geometry(&a);
        assert_eq!(m.lo_end, 960);
        let chunk = a.alloc_contiguous_meta(512, Budget::Critical).unwrap() >> PAGE_SHIFT;
        assert_eq!(chunk, 10, "chunks from the outer edge");
        for p in chunk..chunk + 512 {
            assert!(!a.is_free(p * P) && !a.is_free(m.of(p) * P));
        }
        assert_eq!(a.free_pages(), 2000 - 1024);
        // 438 pairs left: not a second chunk, and nothing changes.
        let before = a.export();
        assert!(matches!(
            a.alloc_contiguous_meta(512, Budget::Critical),
            Err(Error::NoSpace)
        ));
        assert_eq!(a.export(), before);
        // Contiguous data comes from the dead zone first.
        assert_eq!(a.alloc_contiguous(60, Budget::Critical).unwrap() >> PAGE_SHIFT, 960);
        // 40 dead pages remain: 100 takes the pairs nearest the middle,
        // leaving their mirrors single.
        assert_eq!(a.alloc_contiguous(100, Budget::Critical).unwrap() >> PAGE_SHIFT, 860);
        assert!(a.is_free(m.of(860) * P) && a.is_free(m.of(959) * P));
        assert_eq!(a.free_pages(), 2000 - 1024 - 160);
        a.release_meta(&Proof, &[extent(chunk, 512)]);
        a.abandon(&[extent(960, 60), extent(860, 100)]);
        assert_eq!(a.export(), vec![(10, 2000)]);
        assert_eq!(a.free_pages(), 2000);
    }

    #[test]
    fn the_dead_zone_takes_no_pool_s_room_for_a_chunk() {
        // Exactly 4 chunks of pairs and the dead zone: one chunk per pool.
        let a = mirrored(3, 2 * 4 * 512 + 256, 4, 256);
        let mut chunks: Vec<u64> = (0..4)
            .map(|_| a.alloc_contiguous_meta(512, Budget::Critical).unwrap() >> PAGE_SHIFT)
            .collect();
        chunks.sort_unstable();
        assert_eq!(chunks, vec![3, 515, 1027, 1539]);
        assert_eq!(a.export(), vec![(2051, 256)]);
    }

    #[test]
    fn replication_off_is_the_plain_allocator() {
        let a = PageAllocator::new(4096 * 10, 4096 * 1010, 3);
        let b = PageAllocator::new(4096 * 10, 4096 * 1010, 3);
        a.add_free(4096 * 10, 1000);
        b.add_free(4096 * 10, 1000);
        let mut rng = Rng(7);
        let (mut held_a, mut held_b) = (Vec::new(), Vec::new());
        for _ in 0..300 {
            match rng.below(4) {
                0 | 1 => {
                    let n = 1 + rng.below(40);
                    let x = a.alloc(n, Budget::Normal);
                    let y = b.alloc_meta(n, Budget::Normal);
                    assert_eq!(x.is_ok(), y.is_ok());
                    if let (Ok(x), Ok(y)) = (x, y) {
                        assert_eq!(x, y);
                        held_a.push(x);
                        held_b.push(y);
                    }
                }
                2 => {
                    let n = 1 + rng.below(30);
                    let x = a.alloc_contiguous(n, Budget::Critical).ok();
                    let y = b.alloc_contiguous_meta(n, Budget::Critical).ok();
                    assert_eq!(x, y);
                    if let (Some(x), Some(y)) = (x, y) {
                        held_a.push(vec![Extent { off: x, npages: n }]);
                        held_b.push(vec![Extent { off: y, npages: n }]);
                    }
                }
                _ if !held_a.is_empty() => {
                    let i = rng.below(held_a.len() as u64) as usize;
                    a.release(&Proof, &held_a.swap_remove(i));
                    b.release_meta(&Proof, &held_b.swap_remove(i));
                }
                _ => {}
            }
            assert_eq!(a.export(), b.export());
            assert_eq!(a.free_pages(), b.free_pages());
        }
    }

    /// Random data and metadata allocations and frees against a model of
    /// the used pages, over an odd-sized area split unevenly between pools.
    #[test]
    fn fragmented_by_data_meta_still_finds_every_pair() {
        for seed in 1..=12u64 {
            let (first, n) = (7, 2001);
            let a = mirrored(first, n, 3, 100);
            let m = geometry(&a);
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let mut used = std::collections::BTreeSet::new();
            let mut held: Vec<(bool, Vec<Extent>)> = Vec::new();
            for _ in 0..400 {
                match rng.below(8) {
                    0..=2 => {
                        if let Ok(got) = a.alloc(1 + rng.below(24), Budget::Critical) {
                            for p in pages_of(&got) {
                                assert!(used.insert(p), "data page {p} handed out twice");
                                assert!(p >= first && p < first + n);
                            }
                            held.push((false, got));
                        }
                    }
                    3 | 4 => {
                        let got = if rng.below(4) == 0 {
                            let k = 1 + rng.below(16);
                            a.alloc_contiguous_meta(k, Budget::Critical)
                                .map(|off| vec![Extent { off, npages: k }])
                        } else {
                            a.alloc_meta(1 + rng.below(12), Budget::Critical)
                        };
                        if let Ok(got) = got {
                            for p in pages_of(&got) {
                                assert!(p < m.lo_end && m.of(p) - p >= 100);
                                assert!(used.insert(p), "primary {p} handed out twice");
                                assert!(used.insert(m.of(p)), "mirror of {p} handed out twice");
                            }
                            held.push((true, got));
                        }
                    }
                    _ if !held.is_empty() => {
                        let (meta, ext) = held.swap_remove(rng.below(held.len() as u64) as usize);
                        for p in pages_of(&ext) {
                            used.remove(&p);
                            if meta {
                                used.remove(&m.of(p));
                            }
                        }
                        if meta {
                            a.release_meta(&Proof, &ext);
                        } else {
                            a.release(&Proof, &ext);
                        }
                    }
                    _ => {}
                }
                assert_eq!(a.free_pages(), n - used.len() as u64);
            }
            let free: Vec<u64> = (first..first + n).filter(|p| !used.contains(p)).collect();
            let listed: Vec<u64> = a.export().iter().flat_map(|&(s, k)| s..s + k).collect();
            assert_eq!(listed, free, "seed {seed}");
            // Data takes as many pages as cannot be metadata (which ones
            // depends on the batches it broke); then metadata finds every
            // pair that is left.
            let paired =
                |p: u64, used: &std::collections::BTreeSet<u64>| m.key(p) < m.lo_end && !used.contains(&m.of(p));
            let unpairable = free.iter().filter(|&&p| !paired(p, &used)).count() as u64;
            let got = if unpairable == 0 {
                Vec::new()
            } else {
                pages_of(&a.alloc(unpairable, Budget::Critical).unwrap())
            };
            for &p in &got {
                assert!(used.insert(p), "seed {seed}: page {p} handed out twice");
            }
            let left: Vec<u64> = (first..first + n).filter(|p| !used.contains(p)).collect();
            let pairs = left.iter().filter(|&&p| p < m.lo_end && paired(p, &used)).count() as u64;
            let meta = a.alloc_meta(pairs, Budget::Critical).unwrap();
            assert_eq!(a.free_pages(), left.len() as u64 - 2 * pairs, "seed {seed}");
            assert!(matches!(a.alloc_meta(1, Budget::Critical), Err(Error::NoSpace)));
            // Freeing everything restores the whole area.
            a.abandon_meta(&meta);
            a.abandon(&got.iter().map(|&p| extent(p, 1)).collect::<Vec<_>>());
            for (meta, ext) in held {
                if meta {
                    a.release_meta(&Proof, &ext);
                } else {
                    a.release(&Proof, &ext);
                }
            }
            assert_eq!(a.export(), vec![(first, n)], "seed {seed}");
            assert_eq!(a.free_pages(), n);
        }
    }

    #[test]
    fn a_damaged_pair_range_is_dropped_and_the_counts_stay_exact() {
        let a = mirrored(0, 600, 1, 16);
        let m = geometry(&a);
        // One run of pairs [0, lo_end): claim more than that.
        a.pools[0].lock().pairs.scribble(0, m.lo_end + 50);
        assert!(matches!(a.alloc_meta(1, Budget::Critical), Err(Error::NoSpace)));
        let listed: u64 = a.export().iter().map(|&(_, k)| k).sum();
        assert_eq!(a.free_pages(), listed);
        assert_eq!(listed, m.hi_start - m.lo_end, "only the dead zone is left");
    }

    #[test]
    fn concurrent_meta_and_data_keep_the_free_set_exact() {
        let (first, n) = (16, 4096);
        let a = std::sync::Arc::new(mirrored(first, n, 4, 256));
        let m = geometry(&a);
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let a = a.clone();
                std::thread::spawn(move || {
                    let mut rng = Rng(0x1234_5678 + t * 77);
                    let mut held: Vec<(bool, Vec<Extent>)> = Vec::new();
                    for _ in 0..3000 {
                        match rng.below(6) {
                            0 | 1 => {
                                if let Ok(got) = a.alloc(1 + rng.below(64), Budget::Normal) {
                                    held.push((false, got));
                                }
                            }
                            2 => {
                                if let Ok(got) = a.alloc_meta(1 + rng.below(64), Budget::Normal) {
                                    held.push((true, got));
                                }
                            }
                            3 => {
                                let k = 1 + rng.below(32);
                                if let Ok(off) = a.alloc_contiguous_meta(k, Budget::Critical) {
                                    held.push((true, vec![Extent { off, npages: k }]));
                                }
                            }
                            _ if !held.is_empty() => {
                                let (meta, ext) = held.swap_remove(rng.below(held.len() as u64) as usize);
                                if meta {
                                    a.release_meta(&Proof, &ext);
                                } else {
                                    a.abandon(&ext);
                                }
                            }
                            _ => {}
                        }
                    }
                    held
                })
            })
            .collect();
        let held: Vec<(bool, Vec<Extent>)> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
        let mut used = std::collections::BTreeSet::new();
        for (meta, ext) in &held {
            for p in pages_of(ext) {
                assert!(used.insert(p), "page {p} held twice");
                if *meta {
                    assert!(m.of(p) - p >= 256);
                    assert!(used.insert(m.of(p)), "mirror of {p} held twice");
                }
            }
        }
        assert_eq!(a.free_pages(), n - used.len() as u64);
        let listed: Vec<u64> = a.export().iter().flat_map(|&(s, k)| s..s + k).collect();
        let free: Vec<u64> = (first..first + n).filter(|p| !used.contains(p)).collect();
        assert_eq!(listed, free);
        for (meta, ext) in &held {
            if *meta {
                a.abandon_meta(ext);
            } else {
                a.abandon(ext);
            }
        }
        assert_eq!(a.export(), vec![(first, n)]);
        assert_eq!(a.free_pages(), n);
    }
}
