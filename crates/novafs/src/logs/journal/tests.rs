//! The journal's unit tests: the ring's encoding, damage, checks and
//! accounting, and the block-granular baseline's blocks.

use super::*;

const RING: u64 = 4096;

/// A ring held in memory, read with wrap-around like the real one.
fn reader(ring: &[u8]) -> impl Fn(u64, &mut [u8]) -> Result<()> + '_ {
    move |pos, buf| {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = ring[((pos + i as u64) % RING) as usize];
        }
        Ok(())
    }
}

fn ring_with(txns: &[(&[Update], &[Check])], start: u64) -> Vec<u8> {
    let mut ring = vec![0u8; RING as usize];
    let mut pos = start;
    for (updates, checks) in txns {
        let mut buf = Vec::new();
        encode_into(&mut buf, updates, checks, pos);
        for (i, b) in buf.iter().enumerate() {
            ring[((pos + i as u64) % RING) as usize] = *b;
        }
        pos += buf.len() as u64;
    }
    ring
}

#[test]
fn transactions_round_trip_across_the_ring_end() {
    let t1 = [
        Update::word(64, 7),
        Update {
            addr: 100,
            bytes: vec![1, 2, 3],
        },
    ];
    let c1 = [Check {
        addr: 512,
        len: 64,
        crc: 0xdead_beef,
    }];
    let t2 = [Update::word(8, 9)];
    let start = RING - 40; // The first transaction wraps.
    let ring = ring_with(&[(&t1, &c1), (&t2, &[])], start);
    let read = reader(&ring);
    let a = read_txn(&read, start, RING, 4096).unwrap().unwrap();
    assert_eq!(a.updates.len(), 2);
    assert_eq!(a.updates[1].bytes, vec![1, 2, 3]);
    assert_eq!(a.checks, c1);
    let b = read_txn(&read, a.end, RING, 4096).unwrap().unwrap();
    assert_eq!(
        (b.updates[0].addr, b.updates[0].bytes.clone()),
        (8, 9u64.to_le_bytes().to_vec())
    );
    assert!(b.checks.is_empty());
    assert!(
        read_txn(&read, b.end, RING, 4096).unwrap().is_none(),
        "zeroed ring after the last"
    );
}

#[test]
fn damaged_misplaced_or_out_of_bounds_transactions_are_not_committed() {
    let t = [Update::word(64, 7), Update::word(128, 8)];
    let ring = ring_with(&[(&t, &[])], 0);
    assert!(read_txn(&reader(&ring), 0, RING, 4096).unwrap().is_some());
    for flip in [0, 8, 20, 40] {
        let mut bad = ring.clone();
        bad[flip] ^= 1;
        assert!(
            read_txn(&reader(&bad), 0, RING, 4096).unwrap().is_none(),
            "bit flip at {flip}"
        );
    }
    // The same bytes found one lap later belong to an older transaction.
    assert!(read_txn(&reader(&ring), RING, RING, 4096).unwrap().is_none());
    assert!(
        read_txn(&reader(&ring), 0, RING, 100).unwrap().is_none(),
        "record beyond the region"
    );
}

#[test]
fn a_commit_counts_its_ring_bytes_in_place_bytes_lines_and_fences() {
    use zerocopy::FromZeros;
    let region = pm::MemRegion::new(4 * PAGE_SIZE);
    let mut sb = Superblock::new_zeroed();
    sb.shards = 1;
    sb.journal_headers_off = 0;
    sb.journal_rings_off = PAGE_SIZE;
    sb.journal_ring_size = RING;
    let journal = Journal::open(&region, &sb).unwrap();
    let home = 3 * PAGE_SIZE;
    let updates = [
        Update::word(home, 7),
        Update {
            addr: home + 100,
            bytes: vec![1; 20],
        },
    ];
    let mut txn = journal.begin();
    txn.depends_on(&[Check::of(home + 512, &[0; 64])]);
    let _ = txn.commit(&region, &updates).unwrap();
    // Records: 16 + 8, 16 + 20 padded to 40, a check 16 + 4 padded to
    // 24; TxnInfo 32: 120 bytes from ring offset 0, two lines. In
    // place: 8 + 20 bytes, one line each. Checkpoint: one line.
    let one = JournalStats {
        txns: 1,
        words: 0,
        journal_bytes: 120,
        applied_bytes: 28,
        checkpoint_bytes: 8,
        flushes: 2 + 2 + 1,
        fences: 3,
    };
    assert_eq!(journal.stats(), one);
    assert_eq!(region.load_u64(JOURNAL_HEAD_FIELD).unwrap(), 120, "checkpointed");
    // A single word: no ring, no checkpoint; a fence before and after.
    let _ = journal.commit(&region, &[Update::word(home + 8, 9)]).unwrap();
    let word = JournalStats {
        words: 1,
        applied_bytes: 8,
        flushes: 1,
        fences: 2,
        ..JournalStats::default()
    };
    assert_eq!(journal.stats().since(&one), word);
    assert_eq!(journal.stats().bytes(), 120 + 28 + 8 + 8);
}

#[test]
fn a_damaged_head_replays_nothing_and_counting_on_cannot_overflow() {
    let region = pm::MemRegion::new(8192);
    for damaged in [MAX_HEAD, u64::MAX - 3, u64::MAX, 12345] {
        region.store_u64(64 + JOURNAL_HEAD_FIELD, damaged).unwrap();
        let head = load_head(&region, 64, RING).unwrap();
        assert_eq!(head % RING, (damaged % RING) & !7, "the same ring position's word");
        assert!(
            head_is_whole(head) && head_is_whole(head + (1 << 60)),
            "room to count on"
        );
        assert!(head >= 1 << 61, "a count no transaction reached");
    }
    region.store_u64(64 + JOURNAL_HEAD_FIELD, 12344).unwrap();
    assert_eq!(load_head(&region, 64, RING).unwrap(), 12344);
}

#[test]
fn checks_compare_the_media_with_what_was_written() {
    let region = pm::MemRegion::new(8192);
    let bytes = [5u8; 64];
    region.write(4096, &bytes).unwrap();
    let good = Check {
        addr: 4096,
        len: 64,
        crc: crc32c::crc32c(&bytes),
    };
    let plain = Bounds {
        data_start: 4096,
        data_end: 8192,
        replicas: false,
        dead_zone_pages: 0,
        stale: false,
    };
    assert_eq!(checks_hold(&region, &region, plain, &[good]).unwrap(), Some(vec![]));
    region.write(4100, &[6]).unwrap();
    assert_eq!(checks_hold(&region, &region, plain, &[good]).unwrap(), None);
}

#[test]
fn a_check_that_fails_in_the_primary_holds_in_its_replica() {
    let mem = std::sync::Arc::new(pm::MemRegion::new(24 * PAGE_SIZE));
    let bounds = Bounds {
        data_start: 4 * PAGE_SIZE,
        data_end: 20 * PAGE_SIZE,
        replicas: true,
        dead_zone_pages: 2,
        stale: false,
    };
    let meta = Mirrored::view(mem.clone(), bounds);
    let addr = 5 * PAGE_SIZE + 200;
    let bytes = [7u8; 100];
    meta.write(addr, &bytes).unwrap();
    let c = Check::of(addr, &bytes);
    assert_eq!(checks_hold(&*meta, &*mem, bounds, &[c]).unwrap(), Some(vec![]));
    // A scribble reads back: only the checksum finds it.
    mem.write(addr + 70, &[0xee; 8]).unwrap();
    assert_eq!(
        checks_hold(&*meta, &*mem, bounds, &[c]).unwrap(),
        Some(vec![(addr, 100)])
    );
    copy_replica_over_primary(&*mem, bounds, addr, 100).unwrap();
    assert_eq!(checks_hold(&*meta, &*mem, bounds, &[c]).unwrap(), Some(vec![]));
    // Both copies wrong: not committed.
    let m = bounds.mirror(addr).unwrap();
    mem.write(addr, &[1]).unwrap();
    mem.write(m + 99, &[1]).unwrap();
    assert_eq!(checks_hold(&*meta, &*mem, bounds, &[c]).unwrap(), None);
}

/// A journal of one shard: header at 0, ring of `ring` bytes at page 1.
fn journal_on(region: &dyn Region, ring: u64) -> Journal {
    use zerocopy::FromZeros;
    let mut sb = Superblock::new_zeroed();
    sb.shards = 1;
    sb.journal_headers_off = 0;
    sb.journal_rings_off = PAGE_SIZE;
    sb.journal_ring_size = ring;
    Journal::open(region, &sb).unwrap()
}

#[test]
fn home_blocks_are_distinct_and_an_update_across_a_boundary_touches_both() {
    let updates = [
        Update::word(2 * PAGE_SIZE + 8, 1),
        Update::word(2 * PAGE_SIZE + 64, 2),
        Update {
            addr: 5 * PAGE_SIZE - 4,
            bytes: vec![9; 8],
        },
    ];
    assert_eq!(
        blocks::home_blocks(&updates),
        [2 * PAGE_SIZE, 4 * PAGE_SIZE, 5 * PAGE_SIZE]
    );
    let mut block = vec![0u8; PAGE_SIZE as usize];
    blocks::overlay(5 * PAGE_SIZE, &mut block, &updates);
    assert_eq!(&block[..4], &[9; 4]);
    assert!(block[4..].iter().all(|&b| b == 0));
}

#[test]
fn the_block_baseline_journals_whole_blocks_between_a_descriptor_and_a_commit_block() {
    let ring = 8 * PAGE_SIZE;
    let region = pm::MemRegion::new(PAGE_SIZE + ring + 4 * PAGE_SIZE);
    let homes = PAGE_SIZE + ring;
    region.write(homes, &[0xab; 2 * PAGE_SIZE as usize]).unwrap();
    let mut journal = journal_on(&region, ring);
    journal.use_blocks();
    let updates = [Update::word(homes + 8, 7), Update::word(homes + PAGE_SIZE + 16, 9)];
    let _ = journal.begin().commit(&region, &updates).unwrap();
    // Descriptor, two copies, commit block: four pages, written without
    // flushes (non-temporal); the words and the checkpoint one line each.
    assert_eq!(
        journal.stats(),
        JournalStats {
            txns: 1,
            words: 0,
            journal_bytes: 4 * PAGE_SIZE,
            applied_bytes: 16,
            checkpoint_bytes: 8,
            flushes: 2 + 1,
            fences: 4,
        }
    );
    let page = |off: u64| {
        let mut b = vec![0u8; PAGE_SIZE as usize];
        region.read(off, &mut b).unwrap();
        b
    };
    let word = |b: &[u8], i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
    let descriptor = page(PAGE_SIZE);
    assert_eq!(
        (0..5).map(|i| word(&descriptor, i)).collect::<Vec<_>>(),
        [u64::from_le_bytes(*b"JBDDESC1"), 0, 2, homes, homes + PAGE_SIZE]
    );
    // Each copy is its home block as the updates left it.
    assert_eq!(page(2 * PAGE_SIZE), page(homes));
    assert_eq!(page(3 * PAGE_SIZE), page(homes + PAGE_SIZE));
    assert_eq!(word(&page(homes), 1), 7);
    assert_eq!(word(&page(homes + PAGE_SIZE), 2), 9);
    assert_eq!(word(&page(4 * PAGE_SIZE), 0), u64::from_le_bytes(*b"JBDCOMT1"));
    assert_eq!(
        region.load_u64(JOURNAL_HEAD_FIELD).unwrap(),
        4 * PAGE_SIZE,
        "checkpointed"
    );
    // The next one starts at a page, after the checkpoint, and wraps.
    let _ = journal.begin().commit(&region, &updates).unwrap();
    let _ = journal.begin().commit(&region, &updates).unwrap();
    assert_eq!(
        word(&page(PAGE_SIZE), 1),
        8 * PAGE_SIZE,
        "the third wrapped to the ring's start"
    );
    // A transaction needs its blocks to fit in the ring.
    let many: Vec<Update> = (0..7).map(|i| Update::word(homes + (i % 4) * PAGE_SIZE, i)).collect();
    let small = pm::MemRegion::new(PAGE_SIZE + 4 * PAGE_SIZE + 8 * PAGE_SIZE);
    let mut cramped = journal_on(&small, 4 * PAGE_SIZE);
    cramped.use_blocks();
    let fits = &many[..2];
    assert!(cramped.begin().commit(&small, fits).is_ok());
    assert!(
        cramped.begin().commit(&small, &many).is_err(),
        "four blocks and two more pages"
    );
}
