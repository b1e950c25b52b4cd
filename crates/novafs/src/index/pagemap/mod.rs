//! A file's page index (NOVA §4.4, §4.7): file page → data page, and which
//! write entries still map something (an entry that maps no page is dead,
//! §4.6). Pages are kept in sorted chunks of up to 64, a small file in one,
//! a large one in a B-tree of chunks, so an append touches one chunk and a
//! delete walks a few adjacent cache lines.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::alloc::Freed;
use crate::hash::U64Map;
use crate::layout::PAGE_SIZE;
use crate::log::Log;

mod lost;
pub(crate) use lost::LostPages;

/// Whether a write of bytes `[lo, hi)` into the file page starting at
/// `pstart` leaves any byte of a file of `size` bytes in that page: only
/// then is the old page read. A write that rewrites all of a page's data
/// (a last page's, say, which scrub reported damaged) must not need it.
pub(crate) fn write_keeps_old_bytes(pstart: u64, lo: u64, hi: u64, size: u64) -> bool {
    (lo > pstart && pstart < size) || (hi < pstart + PAGE_SIZE && hi < size)
}

/// Where a file page lives and which write entry maps it.
#[derive(Clone, Copy, Debug)]
struct Mapping {
    block: u64,
    entry: u64,
}

/// Pages one chunk of the index holds at most (24 bytes each).
const CHUNK: usize = 64;

/// Mapped pages in page order, contiguous in memory.
type Chunk = Vec<(u64, Mapping)>;

/// The page index. A file of up to [`CHUNK`] pages (most files) is one
/// sorted array: lookups, appends and the walk that frees it when the file
/// is deleted touch a few adjacent cache lines and one allocation, where a
/// B-tree of single pages chases pointers through a node per few pages.
/// Larger files keep chunks of up to [`CHUNK`] pages in a B-tree, so every
/// operation is O(log n) plus a shift within one chunk, and a file written
/// in order costs little more than 24 bytes a page.
#[derive(Debug)]
enum Pages {
    Small(Chunk),
    /// Chunk `k` holds pages from `k` up to the next key. The first key is
    /// 0, so every page has a chunk to go to; no chunk is empty.
    Large {
        chunks: BTreeMap<u64, Chunk>,
        len: u64,
    },
}

impl Default for Pages {
    fn default() -> Pages {
        Pages::Small(Vec::new())
    }
}

/// What [`put`] did.
enum Put {
    Replaced(Mapping),
    Added,
    /// Added, and the chunk was full: this is its upper part.
    Split(Chunk),
}

fn find(c: &Chunk, pg: u64) -> std::result::Result<usize, usize> {
    c.binary_search_by_key(&pg, |e| e.0)
}

/// Maps `pg` in chunk `c`; `last` when no chunk follows it.
fn put(c: &mut Chunk, pg: u64, m: Mapping, last: bool) -> Put {
    match find(c, pg) {
        Ok(i) => Put::Replaced(std::mem::replace(&mut c[i].1, m)),
        Err(i) if c.len() < CHUNK => {
            if c.len() == c.capacity() {
                // Doubles, but never past a full chunk.
                c.reserve_exact(c.len().max(4).min(CHUNK - c.len()));
            }
            c.insert(i, (pg, m));
            Put::Added
        }
        Err(i) => {
            // Appending to the file starts a new chunk, so a file written
            // in order fills its chunks; other inserts split in halves.
            let at = if i == CHUNK && last { i } else { CHUNK / 2 };
            let mut upper = Vec::with_capacity(CHUNK);
            upper.extend(c.drain(at..));
            if i < at {
                c.insert(i, (pg, m));
            } else {
                upper.insert(i - at, (pg, m));
            }
            Put::Split(upper)
        }
    }
}

/// Halves the memory of a chunk under a quarter full (so shrinking it
/// again takes as many removals as this copy moved).
fn fit(c: &mut Chunk) {
    if c.len() * 4 <= c.capacity() {
        c.shrink_to(c.len() * 2);
    }
}

/// Unmaps the pages of `c` from `first` on; returns how many.
fn cut(c: &mut Chunk, first: u64, gone: &mut impl FnMut(Mapping)) -> u64 {
    let i = c.partition_point(|e| e.0 < first);
    let n = (c.len() - i) as u64;
    c.drain(i..).for_each(|(_, m)| gone(m));
    n
}

impl Pages {
    fn len(&self) -> u64 {
        match self {
            Pages::Small(c) => c.len() as u64,
            Pages::Large { len, .. } => *len,
        }
    }

    fn get(&self, pg: u64) -> Option<Mapping> {
        let c = match self {
            Pages::Small(c) => c,
            Pages::Large { chunks, .. } => chunks.range(..=pg).next_back()?.1,
        };
        find(c, pg).ok().map(|i| c[i].1)
    }

    /// Maps `pg` to `m`; returns the mapping it replaces.
    fn insert(&mut self, pg: u64, m: Mapping) -> Option<Mapping> {
        match self {
            Pages::Small(c) => match put(c, pg, m, true) {
                Put::Replaced(old) => Some(old),
                Put::Added => None,
                Put::Split(upper) => {
                    let lower = std::mem::take(c);
                    *self = Pages::Large {
                        chunks: BTreeMap::from([(0, lower), (upper[0].0, upper)]),
                        len: CHUNK as u64 + 1,
                    };
                    None
                }
            },
            Pages::Large { chunks, len } => {
                let last = chunks.range((Bound::Excluded(pg), Bound::Unbounded)).next().is_none();
                let c = chunks.range_mut(..=pg).next_back()?.1;
                match put(c, pg, m, last) {
                    Put::Replaced(old) => return Some(old),
                    Put::Added => {}
                    Put::Split(upper) => {
                        chunks.insert(upper[0].0, upper);
                    }
                }
                *len += 1;
                None
            }
        }
    }

    fn remove(&mut self, pg: u64) -> Option<Mapping> {
        let (key, c) = match self {
            Pages::Small(c) => (0, c),
            Pages::Large { chunks, .. } => chunks.range_mut(..=pg).next_back().map(|(&k, c)| (k, c))?,
        };
        let m = c.remove(find(c, pg).ok()?).1;
        if let Pages::Large { len, .. } = self {
            *len -= 1;
        }
        self.shrunk(key);
        Some(m)
    }

    /// Unmaps every page from `first` on, in order, passing each to `gone`.
    fn truncate(&mut self, first: u64, mut gone: impl FnMut(Mapping)) {
        let key = match self {
            Pages::Small(c) => {
                cut(c, first, &mut gone);
                0
            }
            Pages::Large { chunks, len } => {
                // The chunk `first` falls in, then those after it. With
                // `first` 0 nothing is left and the file becomes Small.
                let mut key = 0;
                if let Some((&k, c)) = chunks.range_mut(..first).next_back() {
                    *len -= cut(c, first, &mut gone);
                    key = k;
                }
                for (_, m) in chunks.split_off(&first).into_values().flatten() {
                    *len -= 1;
                    gone(m);
                }
                key
            }
        };
        self.shrunk(key);
    }

    /// After pages left the chunk at `key`: a file that fits in half a
    /// chunk becomes Small again (half, so that a file at the threshold
    /// does not switch on every write), an empty chunk goes, and one under
    /// a quarter full gives back half its memory. Each moves at most
    /// [`CHUNK`] pages. Chunks are not merged: however a file is punched,
    /// a page costs at most four times its 24 bytes plus its share of a
    /// chunk's header and B-tree slot, about what a B-tree entry per page
    /// costs.
    fn shrunk(&mut self, key: u64) {
        let chunks = match self {
            Pages::Small(c) => return fit(c),
            Pages::Large { chunks, len } if *len <= CHUNK as u64 / 2 => {
                let mut all = Vec::with_capacity(*len as usize);
                all.extend(std::mem::take(chunks).into_values().flatten());
                *self = Pages::Small(all);
                return;
            }
            Pages::Large { chunks, .. } => chunks,
        };
        match chunks.get_mut(&key) {
            Some(c) if c.is_empty() => {
                chunks.remove(&key);
                if key == 0 {
                    if let Some((_, next)) = chunks.pop_first() {
                        chunks.insert(0, next);
                    }
                }
            }
            Some(c) => fit(c),
            None => {}
        }
    }

    /// The chunks that may hold pages from `pg` on, in order.
    fn chunks_from(&self, pg: u64) -> impl Iterator<Item = &Chunk> {
        let (small, large) = match self {
            Pages::Small(c) => (Some(c), None),
            Pages::Large { chunks, .. } => (None, Some(chunks)),
        };
        small.into_iter().chain(large.into_iter().flat_map(move |chunks| {
            let first = chunks.range(..=pg).next_back();
            first
                .into_iter()
                .chain(chunks.range((Bound::Excluded(pg), Bound::Unbounded)))
                .map(|(_, c)| c)
        }))
    }

    /// Mapped pages from `pg` on, in order.
    fn iter_from(&self, pg: u64) -> impl Iterator<Item = (u64, Mapping)> + '_ {
        self.chunks_from(pg)
            .flat_map(move |c| &c[c.partition_point(|e| e.0 < pg)..])
            .copied()
    }

    fn last(&self) -> Option<u64> {
        let c = match self {
            Pages::Small(c) => c,
            Pages::Large { chunks, .. } => chunks.values().next_back()?,
        };
        c.last().map(|e| e.0)
    }

    fn into_mappings(self) -> impl Iterator<Item = (u64, Mapping)> {
        let (small, large) = match self {
            Pages::Small(c) => (Some(c), None),
            Pages::Large { chunks, .. } => (None, Some(chunks)),
        };
        small
            .into_iter()
            .chain(large.into_iter().flat_map(BTreeMap::into_values))
            .flatten()
    }
}

/// The write entries that map pages, to tell when one dies (NOVA §4.6:
/// once it maps no page).
#[derive(Debug, Default)]
struct Entries {
    /// Pages still mapped by each live entry of more than one page.
    multi: U64Map<u32>,
    /// Live single-page entries: dead exactly when their page is unmapped,
    /// so they need no count (a 4 KiB write costs no hash insert).
    single: u64,
}

impl Entries {
    fn release(&mut self, log: &mut Log, m: Mapping, freed: &mut Freed) {
        freed.push_page(m.block, m.entry);
        match self.multi.get_mut(&m.entry) {
            Some(r) if *r > 1 => *r -= 1,
            Some(_) => {
                self.multi.remove(&m.entry);
                log.kill(m.entry);
            }
            None => {
                self.single -= 1;
                log.kill(m.entry);
            }
        }
    }
}

/// File page → data page index, which write entries are still live, and
/// which file pages are lost (neither mapped nor a hole).
#[derive(Debug, Default)]
pub(crate) struct FileMap {
    pages: Pages,
    entries: Entries,
    lost: LostPages,
}

impl FileMap {
    /// Applies a write entry at `entry`: maps `npages` pages from `pgoff` to
    /// `block`, or unmaps them when `block` is 0. Hole entries stay live
    /// until thorough GC: dropping one early would resurrect older pages.
    pub(crate) fn apply_write(
        &mut self,
        log: &mut Log,
        entry: u64,
        pgoff: u64,
        block: u64,
        npages: u64,
        freed: &mut Freed,
    ) {
        // Whatever it writes, data or a hole, replaces lost bytes.
        self.lost.remove(pgoff..pgoff.saturating_add(npages));
        if block == 0 {
            self.unmap(log, pgoff, npages, freed);
            return;
        }
        if npages == 1 {
            self.entries.single += 1;
        } else {
            self.entries.multi.insert(entry, npages as u32);
        }
        for i in 0..npages {
            let m = Mapping {
                block: block + i * PAGE_SIZE,
                entry,
            };
            if let Some(old) = self.pages.insert(pgoff + i, m) {
                self.entries.release(log, old, freed);
            }
        }
    }

    /// Unmaps the pages mapped in `pgoff..pgoff + npages`: visits only
    /// those, however wide the range is.
    fn unmap(&mut self, log: &mut Log, pgoff: u64, npages: u64, freed: &mut Freed) {
        let end = pgoff.saturating_add(npages);
        let mapped: Vec<u64> = self
            .pages
            .iter_from(pgoff)
            .map(|(p, _)| p)
            .take_while(|&p| p < end)
            .collect();
        for p in mapped {
            if let Some(m) = self.pages.remove(p) {
                self.entries.release(log, m, freed);
            }
        }
    }

    /// Applies a lost range entry: `npages` pages from `pgoff` are lost
    /// (their old data pages unreferenced, as by a hole). Like a hole
    /// entry it stays live until thorough GC, which rewrites the runs
    /// still lost: dropping it early would resurrect older pages.
    pub(crate) fn apply_lost(&mut self, log: &mut Log, pgoff: u64, npages: u64, freed: &mut Freed) {
        self.unmap(log, pgoff, npages, freed);
        self.lost.insert(pgoff..pgoff.saturating_add(npages));
    }

    /// Unmaps every page from `first` on; lost pages there go too.
    pub(crate) fn truncate(&mut self, log: &mut Log, first: u64, freed: &mut Freed) {
        self.lost.remove(first..u64::MAX);
        self.pages.truncate(first, |m| self.entries.release(log, m, freed));
    }

    /// The lost pages: they read EIO, and a write that would keep any of
    /// a lost page's bytes cannot (the rest of the page is unknown).
    pub(crate) fn lost(&self) -> &LostPages {
        &self.lost
    }

    pub(crate) fn mapped_pages(&self) -> u64 {
        self.pages.len()
    }

    /// Live write entries.
    pub(crate) fn live_entries(&self) -> u64 {
        self.entries.multi.len() as u64 + self.entries.single
    }

    pub(crate) fn lookup(&self, pg: u64) -> Option<u64> {
        self.pages.get(pg).map(|m| m.block)
    }

    /// The data page of file page `pg` and the write entry that maps it.
    pub(crate) fn lookup_entry(&self, pg: u64) -> Option<(u64, u64)> {
        self.pages.get(pg).map(|m| (m.block, m.entry))
    }

    /// Mapped runs `(pgoff, block, npages)`, contiguous in both file and
    /// media: what a compacted log records.
    pub(crate) fn runs(&self) -> Vec<(u64, u64, u64)> {
        let mut runs: Vec<(u64, u64, u64)> = Vec::new();
        for (pg, m) in self.pages.iter_from(0) {
            match runs.last_mut() {
                Some((p, b, n)) if *p + *n == pg && *b + *n * PAGE_SIZE == m.block && *n < u64::from(u32::MAX) => {
                    *n += 1
                }
                _ => runs.push((pg, m.block, 1)),
            }
        }
        runs
    }

    /// Every data page, for the recovery scan and fsck.
    pub(crate) fn blocks(&self) -> impl Iterator<Item = u64> + '_ {
        self.pages.iter_from(0).map(|(_, m)| m.block)
    }

    /// Every data page, freeing the index as it goes: one walk of it when
    /// a file is deleted instead of one to collect and one to drop.
    pub(crate) fn into_blocks(self) -> impl Iterator<Item = u64> {
        self.pages.into_mappings().map(|(_, m)| m.block)
    }

    /// One past the last mapped page (0 when none is).
    pub(crate) fn end(&self) -> u64 {
        self.pages.last().map_or(0, |p| p + 1)
    }

    /// First mapped page at or after `pg`.
    pub(crate) fn next_mapped(&self, pg: u64) -> Option<u64> {
        self.pages.iter_from(pg).next().map(|(p, _)| p)
    }

    /// First page at or after `pg` that is data: mapped, or lost (its
    /// bytes are not zeros, only unreadable, so it is no hole).
    pub(crate) fn next_data(&self, pg: u64) -> Option<u64> {
        match (self.next_mapped(pg), self.lost.next_from(pg)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// First page at or after `pg` that is a hole: neither mapped nor lost.
    pub(crate) fn next_hole(&self, mut pg: u64) -> u64 {
        loop {
            pg = self.lost.run_end(pg);
            let before = pg;
            for (p, _) in self.pages.iter_from(pg) {
                if p != pg {
                    break;
                }
                pg += 1;
            }
            if pg == before && !self.lost.contains(pg) {
                return pg;
            }
        }
    }
}

#[cfg(test)]
mod tests;
