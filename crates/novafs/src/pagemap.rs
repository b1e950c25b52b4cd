//! A file's page index (NOVA §4.4, §4.7): file page → data page, and which
//! write entries still map something (an entry that maps no page is dead,
//! §4.6). Pages are kept in sorted chunks of up to 64, a small file in one,
//! a large one in a B-tree of chunks, so an append touches one chunk and a
//! delete walks a few adjacent cache lines.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::alloc::Extent;
use crate::hash::U64Map;
use crate::layout::PAGE_SIZE;
use crate::log::Log;

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
    fn release(&mut self, log: &mut Log, m: Mapping, freed: &mut Vec<Extent>) {
        push_page(freed, m.block);
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

/// File page → data page index, and which write entries are still live.
#[derive(Debug, Default)]
pub struct FileMap {
    pages: Pages,
    entries: Entries,
}

fn push_page(freed: &mut Vec<Extent>, block: u64) {
    match freed.last_mut() {
        Some(e) if e.off + e.npages * PAGE_SIZE == block => e.npages += 1,
        _ => freed.push(Extent { off: block, npages: 1 }),
    }
}

impl FileMap {
    /// Applies a write entry at `entry`: maps `npages` pages from `pgoff` to
    /// `block`, or unmaps them when `block` is 0. Hole entries stay live
    /// until thorough GC: dropping one early would resurrect older pages.
    pub fn apply_write(
        &mut self,
        log: &mut Log,
        entry: u64,
        pgoff: u64,
        block: u64,
        npages: u64,
        freed: &mut Vec<Extent>,
    ) {
        if block != 0 {
            if npages == 1 {
                self.entries.single += 1;
            } else {
                self.entries.multi.insert(entry, npages as u32);
            }
        }
        for i in 0..npages {
            let old = if block != 0 {
                self.pages.insert(
                    pgoff + i,
                    Mapping {
                        block: block + i * PAGE_SIZE,
                        entry,
                    },
                )
            } else {
                self.pages.remove(pgoff + i)
            };
            if let Some(m) = old {
                self.entries.release(log, m, freed);
            }
        }
    }

    /// Unmaps every page from `first` on.
    pub fn truncate(&mut self, log: &mut Log, first: u64, freed: &mut Vec<Extent>) {
        self.pages.truncate(first, |m| self.entries.release(log, m, freed));
    }

    pub fn mapped_pages(&self) -> u64 {
        self.pages.len()
    }

    /// Live write entries.
    pub fn live_entries(&self) -> u64 {
        self.entries.multi.len() as u64 + self.entries.single
    }

    pub fn lookup(&self, pg: u64) -> Option<u64> {
        self.pages.get(pg).map(|m| m.block)
    }

    /// Mapped runs `(pgoff, block, npages)`, contiguous in both file and
    /// media: what a compacted log records.
    pub fn runs(&self) -> Vec<(u64, u64, u64)> {
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
    pub fn blocks(&self) -> impl Iterator<Item = u64> + '_ {
        self.pages.iter_from(0).map(|(_, m)| m.block)
    }

    /// Every data page, freeing the index as it goes: one walk of it when
    /// a file is deleted instead of one to collect and one to drop.
    pub fn into_blocks(self) -> impl Iterator<Item = u64> {
        self.pages.into_mappings().map(|(_, m)| m.block)
    }

    /// One past the last mapped page (0 when none is).
    pub fn end(&self) -> u64 {
        self.pages.last().map_or(0, |p| p + 1)
    }

    /// First mapped page at or after `pg`.
    pub fn next_mapped(&self, pg: u64) -> Option<u64> {
        self.pages.iter_from(pg).next().map(|(p, _)| p)
    }

    /// First unmapped page at or after `pg`.
    pub fn next_hole(&self, mut pg: u64) -> u64 {
        for (p, _) in self.pages.iter_from(pg) {
            if p != pg {
                break;
            }
            pg += 1;
        }
        pg
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::log::Committed;

    /// A log in which the entry at `off` is committed and live.
    fn commit(log: &mut Log, off: u64) {
        log.committed(&Committed::for_test(vec![off], 1));
    }

    fn contents(m: &FileMap) -> Vec<(u64, u64)> {
        m.pages.iter_from(0).map(|(p, m)| (p, m.block)).collect()
    }

    /// Chunk sizes, after checking what [`Pages`] promises.
    fn shape(m: &FileMap) -> Vec<usize> {
        let chunks: Vec<(u64, &Chunk)> = match &m.pages {
            Pages::Small(c) => {
                assert!(c.len() <= CHUNK);
                vec![(0, c)]
            }
            Pages::Large { chunks, len } => {
                assert!(*len > CHUNK as u64 / 2, "{len} pages should be Small");
                assert_eq!(chunks.keys().next(), Some(&0));
                assert_eq!(chunks.values().map(Vec::len).sum::<usize>() as u64, *len);
                chunks.iter().map(|(&k, c)| (k, c)).collect()
            }
        };
        for (i, (key, c)) in chunks.iter().enumerate() {
            assert!(c.capacity() <= CHUNK);
            assert!(c.windows(2).all(|w| w[0].0 < w[1].0), "unsorted");
            if let Some(&(next, _)) = chunks.get(i + 1) {
                // Only the last chunk may be a fresh one an append began.
                assert!(
                    c.capacity() <= 4 * c.len().max(1),
                    "{} pages in {}",
                    c.len(),
                    c.capacity()
                );
                assert!(!c.is_empty(), "empty chunk");
                assert!(c.iter().all(|e| (*key..next).contains(&e.0)), "page outside its chunk");
            }
        }
        chunks.iter().map(|(_, c)| c.len()).collect()
    }

    #[test]
    fn runs_merge_contiguous_pages_only() {
        let mut m = FileMap::default();
        let mut log = Log::default();
        let mut freed = Vec::new();
        m.apply_write(&mut log, 64, 0, 40960, 2, &mut freed);
        m.apply_write(&mut log, 128, 2, 40960 + 2 * 4096, 1, &mut freed);
        m.apply_write(&mut log, 192, 5, 8192, 1, &mut freed);
        assert_eq!(m.runs(), vec![(0, 40960, 3), (5, 8192, 1)]);
        assert!(freed.is_empty());
        m.apply_write(&mut log, 256, 1, 0, 1, &mut freed);
        assert_eq!(
            freed,
            vec![Extent {
                off: 40960 + 4096,
                npages: 1
            }]
        );
        assert_eq!(m.next_hole(0), 1);
        assert_eq!(m.next_mapped(3), Some(5));
        assert_eq!(m.live_entries(), 3);
    }

    #[test]
    fn small_file_keeps_pages_sorted_through_overwrites_holes_and_truncates() {
        let mut m = FileMap::default();
        let mut log = Log::default();
        let mut freed = Vec::new();
        for (entry, pg) in [(64, 5u64), (128, 1), (192, 9), (256, 0)] {
            m.apply_write(&mut log, entry, pg, 4096 * (100 + pg), 1, &mut freed);
        }
        m.apply_write(&mut log, 320, 3, 4096 * 200, 3, &mut freed);
        assert_eq!(
            contents(&m),
            vec![
                (0, 4096 * 100),
                (1, 4096 * 101),
                (3, 4096 * 200),
                (4, 4096 * 201),
                (5, 4096 * 202),
                (9, 4096 * 109)
            ]
        );
        assert_eq!(
            freed,
            vec![Extent {
                off: 4096 * 105,
                npages: 1
            }]
        );
        assert_eq!(m.live_entries(), 4);
        freed.clear();
        m.apply_write(&mut log, 384, 1, 0, 4, &mut freed);
        assert_eq!(contents(&m), vec![(0, 4096 * 100), (5, 4096 * 202), (9, 4096 * 109)]);
        assert_eq!(
            freed,
            vec![
                Extent {
                    off: 4096 * 101,
                    npages: 1
                },
                Extent {
                    off: 4096 * 200,
                    npages: 2
                }
            ]
        );
        assert_eq!((m.next_mapped(1), m.next_hole(0), m.end()), (Some(5), 1, 10));
        freed.clear();
        m.truncate(&mut log, 6, &mut freed);
        assert_eq!(contents(&m), vec![(0, 4096 * 100), (5, 4096 * 202)]);
        assert_eq!(
            freed,
            vec![Extent {
                off: 4096 * 109,
                npages: 1
            }]
        );
        assert_eq!((m.mapped_pages(), m.live_entries(), shape(&m)), (2, 2, vec![2]));
    }

    #[test]
    fn entries_die_when_their_last_page_is_unmapped() {
        let mut m = FileMap::default();
        let mut log = Log::default();
        let mut freed = Vec::new();
        let mut write = |m: &mut FileMap, log: &mut Log, entry, pg, block, n| {
            commit(log, entry);
            m.apply_write(log, entry, pg, block, n, &mut freed);
            (log.live_ratio().0, m.live_entries())
        };
        // (live in the log, live write entries) after each write.
        assert_eq!(write(&mut m, &mut log, 64, 0, 4096 * 10, 3), (1, 1));
        assert_eq!(write(&mut m, &mut log, 128, 3, 4096 * 20, 1), (2, 2));
        // Overwriting a single page kills its entry.
        assert_eq!(write(&mut m, &mut log, 192, 3, 4096 * 21, 1), (2, 2));
        // A three-page entry lives while any of its pages is mapped.
        assert_eq!(write(&mut m, &mut log, 256, 0, 4096 * 30, 2), (3, 3));
        // A hole entry stays live in the log but maps nothing.
        assert_eq!(write(&mut m, &mut log, 320, 2, 0, 1), (3, 2));
        m.truncate(&mut log, 1, &mut freed);
        assert_eq!((log.live_ratio().0, m.live_entries()), (2, 1));
        m.truncate(&mut log, 0, &mut freed);
        assert_eq!((log.live_ratio().0, m.live_entries(), m.mapped_pages()), (1, 0, 0));
    }

    #[test]
    fn appends_fill_whole_chunks_and_truncate_makes_the_file_small_again() {
        let mut m = FileMap::default();
        let mut log = Log::default();
        let mut freed = Vec::new();
        let n = 3 * CHUNK as u64 + 1;
        for pg in 0..n {
            commit(&mut log, 64 * (pg + 1));
            m.apply_write(&mut log, 64 * (pg + 1), pg, 4096 * (1000 + pg), 1, &mut freed);
        }
        assert_eq!(shape(&m), vec![CHUNK, CHUNK, CHUNK, 1]);
        assert_eq!(m.runs(), vec![(0, 4096 * 1000, n)]);
        assert_eq!(m.lookup(CHUNK as u64), Some(4096 * (1000 + CHUNK as u64)));
        m.truncate(&mut log, CHUNK as u64 + 3, &mut freed);
        assert_eq!(shape(&m), vec![CHUNK, 3]);
        commit(&mut log, 1 << 20);
        m.apply_write(&mut log, 1 << 20, 10, 0, 20, &mut freed);
        assert_eq!(shape(&m), vec![CHUNK - 20, 3]);
        assert!(matches!(m.pages, Pages::Large { .. }));
        m.truncate(&mut log, CHUNK as u64 / 2, &mut freed);
        assert!(matches!(m.pages, Pages::Small(_)));
        let left: Vec<u64> = (0..10).chain(30..CHUNK as u64 / 2).collect();
        assert_eq!(
            contents(&m),
            left.iter().map(|&p| (p, 4096 * (1000 + p))).collect::<Vec<_>>()
        );
        assert_eq!(m.live_entries(), left.len() as u64);
        assert_eq!(log.live_ratio().0, left.len() as u64 + 1);
        let extent = |from: u64, to: u64| Extent {
            off: 4096 * (1000 + from),
            npages: to - from,
        };
        let (half, cut) = (CHUNK as u64 / 2, CHUNK as u64 + 3);
        assert_eq!(freed, vec![extent(cut, n), extent(10, 30), extent(half, cut)]);
    }

    /// The previous index, one B-tree entry per page: the reference.
    #[derive(Default)]
    struct Reference {
        pages: BTreeMap<u64, Mapping>,
        refs: HashMap<u64, u32>,
    }

    impl Reference {
        fn release(&mut self, m: Mapping, freed: &mut Vec<Extent>) {
            push_page(freed, m.block);
            let r = self.refs.get_mut(&m.entry).expect("live entry");
            *r -= 1;
            if *r == 0 {
                self.refs.remove(&m.entry);
            }
        }
    }

    #[test]
    fn random_writes_holes_and_truncates_match_a_page_per_entry_index() {
        let (mut m, mut r) = (FileMap::default(), Reference::default());
        let mut log = Log::default();
        let mut holes = 0;
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut rand = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut was_large = false;
        for i in 1..50_000u64 {
            let (entry, block) = (64 * i, 4096 * 8 * i);
            let (mut freed, mut want) = (Vec::new(), Vec::new());
            commit(&mut log, entry);
            let span = if was_large { 400 } else { 100 };
            match rand(100) {
                0 => {
                    let first = rand(span);
                    m.truncate(&mut log, first, &mut freed);
                    for (_, p) in r.pages.split_off(&first) {
                        r.release(p, &mut want);
                    }
                    log.kill(entry);
                }
                k @ 1..=10 => {
                    let (pg, n) = (rand(span), 1 + rand(if k < 4 { 150 } else { 20 }));
                    m.apply_write(&mut log, entry, pg, 0, n, &mut freed);
                    for p in pg..pg + n {
                        if let Some(p) = r.pages.remove(&p) {
                            r.release(p, &mut want);
                        }
                    }
                    holes += 1;
                }
                k => {
                    let (pg, n) = (rand(span), if k < 70 { 1 } else { 1 + rand(8) });
                    m.apply_write(&mut log, entry, pg, block, n, &mut freed);
                    r.refs.insert(entry, n as u32);
                    for j in 0..n {
                        let p = Mapping {
                            block: block + j * 4096,
                            entry,
                        };
                        if let Some(old) = r.pages.insert(pg + j, p) {
                            r.release(old, &mut want);
                        }
                    }
                }
            }
            assert_eq!(freed, want, "step {i}");
            shape(&m);
            was_large |= matches!(m.pages, Pages::Large { .. });
            let all: Vec<_> = r.pages.iter().map(|(&p, m)| (p, m.block, m.entry)).collect();
            let got: Vec<_> = m.pages.iter_from(0).map(|(p, m)| (p, m.block, m.entry)).collect();
            assert_eq!(got, all, "step {i}");
            assert_eq!(m.live_entries(), r.refs.len() as u64);
            assert_eq!(log.live_ratio().0, r.refs.len() as u64 + holes);
            let pg = rand(span + 10);
            assert_eq!(m.lookup(pg), r.pages.get(&pg).map(|p| p.block));
            assert_eq!(m.next_mapped(pg), r.pages.range(pg..).next().map(|(&p, _)| p));
            assert_eq!(m.end(), r.pages.keys().next_back().map_or(0, |p| p + 1));
        }
        assert!(was_large);
    }
}
