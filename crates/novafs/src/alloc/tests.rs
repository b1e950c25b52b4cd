use novafs_rng::SplitMix;

use super::mirror::Mirror;
use super::pool::extent;
use super::ranges::Overlap;
use super::*;
use crate::error::Error;
use crate::layout::PAGE_SHIFT;

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

#[test]
fn a_reservation_gives_back_what_no_commit_kept() {
    let a = mirrored(1000, 4000, 2, 256);
    let all = a.free_pages();
    {
        let mut r = a.reserve(5, Budget::Normal).unwrap();
        r.merge(a.reserve_meta(3, Budget::Normal).unwrap());
        r.merge(a.reserve_contiguous_meta(8, Budget::Normal).unwrap());
        assert_eq!(a.free_pages(), all - 5 - 2 * 3 - 2 * 8);
    }
    assert_eq!(a.free_pages(), all, "dropped: every page and mirror back");
    let kept = a.reserve_meta(2, Budget::Normal).unwrap();
    let primaries = pages_of(kept.meta_extents());
    kept.keep(&crate::log::Committed::for_test(Vec::new(), 0));
    assert_eq!(a.free_pages(), all - 4, "kept: the pages and their mirrors stay in use");
    assert!(primaries.iter().all(|&p| !a.is_free(p << PAGE_SHIFT)));
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
impl super::sealed::Commit for Proof {}
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
    let mut rng = SplitMix::new(7);
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
        let mut rng = SplitMix::new(seed);
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
        let paired = |p: u64, used: &std::collections::BTreeSet<u64>| m.key(p) < m.lo_end && !used.contains(&m.of(p));
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
                let mut rng = SplitMix::new(0x1234_5678 + t * 77);
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
