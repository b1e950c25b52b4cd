//! The page index against a page-per-entry model.
use std::collections::HashMap;

use super::*;
use crate::alloc::Extent;
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
    let mut freed = Freed::default();
    m.apply_write(&mut log, 64, 0, 40960, 2, &mut freed);
    m.apply_write(&mut log, 128, 2, 40960 + 2 * 4096, 1, &mut freed);
    m.apply_write(&mut log, 192, 5, 8192, 1, &mut freed);
    assert_eq!(m.runs(), vec![(0, 40960, 3), (5, 8192, 1)]);
    assert!(freed.runs().is_empty());
    m.apply_write(&mut log, 256, 1, 0, 1, &mut freed);
    assert_eq!(
        freed.extents(),
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
    let mut freed = Freed::default();
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
        freed.extents(),
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
        freed.extents(),
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
        freed.extents(),
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
    let mut freed = Freed::default();
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
    let mut freed = Freed::default();
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
    // One run per single-page entry, contiguous with the next.
    let mut merged: Vec<Extent> = Vec::new();
    for e in freed.extents() {
        match merged.last_mut() {
            Some(l) if l.off + l.npages * 4096 == e.off => l.npages += e.npages,
            _ => merged.push(e),
        }
    }
    assert_eq!(merged, vec![extent(cut, n), extent(10, 30), extent(half, cut)]);
}

/// The previous index, one B-tree entry per page: the reference.
#[derive(Default)]
struct Reference {
    pages: BTreeMap<u64, Mapping>,
    refs: HashMap<u64, u32>,
}

impl Reference {
    fn release(&mut self, m: Mapping, freed: &mut Freed) {
        freed.push_page(m.block, m.entry);
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
    let mut rng = novafs_rng::SplitMix::new(1);
    let mut rand = |n: u64| rng.below(n);
    let mut was_large = false;
    for i in 1..50_000u64 {
        let (entry, block) = (64 * i, 4096 * 8 * i);
        let (mut freed, mut want) = (Freed::default(), Freed::default());
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
