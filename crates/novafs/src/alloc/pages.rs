//! The page allocator: per-shard pools, the shard choice, the reserve's
//! accounting, and the mirror pairing of metadata pages.

use std::sync::atomic::{AtomicU64, Ordering};

use super::budget::{reserve_pages, Budget};
use super::current_shard;
use super::mirror::{free_cell, free_pair_cell, pair_singles, take_data, take_pairs, Mirror, Zone};
use super::pool::{take_singles, Pool};
use super::proof::{Extent, Unreferenced};
use crate::error::{Error, Result};
use crate::layout::PAGE_SHIFT;
use crate::lock::{Mutex, Rank};

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
    pub(super) pools: Vec<Mutex<Pool>>,
    /// Replication off: first page owned by each pool; pool i owns
    /// `[bounds[i], bounds[i+1])`. On: the same over keys `min(p, m(p))`.
    pub(super) bounds: Vec<u64>,
    /// Free pages in all pools (a pair counts 2), kept exact under the
    /// pools' locks.
    pub(super) free: AtomicU64,
    /// Pages in all pools' `single` sets: lets data allocation skip visiting
    /// the other pools for singles when there are none.
    pub(super) singles: AtomicU64,
    /// Pages [`Budget::Normal`] allocations leave free.
    pub(super) reserve: u64,
    /// Pages [`Budget::Freeing`] allocations leave free (`<= reserve`).
    pub(super) critical: u64,
    pub(super) mirror: Option<Mirror>,
}

fn adjust(counter: &AtomicU64, before: u64, after: u64) {
    if after >= before {
        counter.fetch_add(after - before, Ordering::Relaxed);
    } else {
        counter.fetch_sub(before - after, Ordering::Relaxed);
    }
}

impl PageAllocator {
    /// Empty pools splitting the data area `[data_start, data_end)` (byte
    /// offsets, page aligned) evenly between `shards`.
    pub(crate) fn new(data_start: u64, data_end: u64, shards: usize) -> Self {
        let first = data_start >> PAGE_SHIFT;
        let last = data_end >> PAGE_SHIFT;
        Self::with_bounds(first, last, last, last, shards, None)
    }

    /// Empty pools for an image whose metadata is replicated at the mirror
    /// pages, with at least `dead_zone_pages` between a primary and its
    /// mirror (Fortis §4.4: 256 pages, 1 MiB, by default).
    pub(crate) fn mirrored(data_start: u64, data_end: u64, shards: usize, dead_zone_pages: u64) -> Self {
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
    /// anything a commit made reachable (its commit failed, or never ran):
    /// only a dropped [`super::Reserved`] does.
    pub(super) fn abandon(&self, extents: &[Extent]) {
        for e in extents {
            self.put_back(e.off, e.npages);
        }
    }

    /// [`Self::release`] for metadata primaries from [`Self::alloc_meta`] or
    /// [`Self::alloc_contiguous_meta`]: returns them and their mirrors.
    pub(crate) fn release_meta(&self, _proof: &impl Unreferenced, extents: &[Extent]) {
        self.put_back_meta(extents);
    }

    /// [`Self::abandon`] for metadata primaries: returns them and their
    /// mirrors.
    pub(super) fn abandon_meta(&self, extents: &[Extent]) {
        self.put_back_meta(extents);
    }

    /// Adds pages known to be free while the allocator is being built
    /// (mkfs, the saved state of a clean unmount, the recovery scan). With
    /// replication on, a free page whose mirror is free too (added before or
    /// after) makes a free pair.
    pub(crate) fn add_free(&self, off: u64, npages: u64) {
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
    pub(crate) fn alloc(&self, npages: u64, budget: Budget) -> Result<Vec<Extent>> {
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
    pub(super) fn alloc_meta(&self, npages: u64, budget: Budget) -> Result<Vec<Extent>> {
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
    pub(super) fn alloc_contiguous(&self, npages: u64, budget: Budget) -> Result<u64> {
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
    pub(super) fn alloc_contiguous_meta(&self, npages: u64, budget: Budget) -> Result<u64> {
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
    pub(crate) fn reserved_pages(&self) -> u64 {
        self.reserve
    }

    /// Free pages ordinary allocations may still use.
    pub(crate) fn available_pages(&self) -> u64 {
        self.free_pages().saturating_sub(self.reserve)
    }

    /// Free pages in all pools.
    pub(crate) fn free_pages(&self) -> u64 {
        self.free.load(Ordering::Relaxed)
    }

    /// Every free range as `(first page, pages)`, ascending and disjoint,
    /// for saving at unmount. The mirrors of metadata in use are not free.
    pub(crate) fn export(&self) -> Vec<(u64, u64)> {
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
    pub(crate) fn is_free(&self, off: u64) -> bool {
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
