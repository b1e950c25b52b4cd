//! Damage that still reads as something: fsck must report it and
//! `--repair` restore it from what the image keeps, never take it as the
//! truth. A journal header whose head no run of transactions reaches or
//! whose reserved words are not zero; a replica's log pointer (an inode
//! record's head or tail word, a log page's link) damaged so that it
//! still leads somewhere. Each case damages exactly one word of one copy
//! of a cleanly unmounted image; fsck reports a problem, repair makes it
//! clean, and the tree reads exactly as before.

#![allow(clippy::unwrap_used)]

mod sweep_common;

use novafs::inject::{self, CopyKind, Located, Target};
use novafs::probe::layout::{JOURNAL_HEADERS_OFF, LOG_NEXT_OFF};
use novafs::{Fs, Ino, MountOptions, ROOT_INO};
use sweep_common::{copy_of, populated, repair_and_compare, tree, Tree};

/// A populated image with one more file whose log spans several pages
/// (150 write entries), cleanly unmounted; its tree; the big file's inode.
fn image() -> (Vec<u8>, Tree, Ino) {
    let (base, _) = populated(16, 2, 3);
    let (mem, region) = copy_of(&base);
    let fs = Fs::open(region.clone(), MountOptions::default()).unwrap();
    let big = fs.create(ROOT_INO, b"big", 0o644, 0, 0).unwrap().ino;
    // One write entry per file page, all live: no GC compacts them.
    for i in 0..150u64 {
        fs.write(big, i * 4096, &[i as u8 + 1; 100]).unwrap();
    }
    fs.unmount().unwrap();
    let before = tree(&region).unwrap();
    (mem.snapshot(), before, big)
}

fn primary(l: &Located) -> u64 {
    l.copy(CopyKind::Primary).unwrap()
}

/// Stores `val` at `off` of a copy of `base`, then checks, repairs and
/// compares with `before`.
fn store_and_repair(base: &[u8], before: &Tree, off: u64, val: u64, what: &str) -> Result<(), String> {
    let (_mem, region) = copy_of(base);
    region.store_u64(off, val).unwrap();
    repair_and_compare(&region, before, what)
}

#[test]
fn a_damaged_journal_head_or_header_word_is_reported_and_rewritten() {
    let (base, before, _) = image();
    let mut failures = Vec::new();
    for shard in 0..2u64 {
        let line = JOURNAL_HEADERS_OFF + 64 * shard;
        // A head far past any count, and one between two words.
        for head in [u64::MAX - 5, 1 << 62, 12_345] {
            let what = format!("shard {shard} head {head:#x}");
            failures.extend(store_and_repair(&base, &before, line, head, &what).err());
        }
        // Word 1 is the intent, 5–7 are reserved. Words 2–4 (the redo
        // words) are whole at any value: words left by an earlier write
        // are normal, and a wrong set fails its check (tests/relaxed.rs).
        for word in [1, 5, 6, 7] {
            let what = format!("shard {shard} header word {word}");
            failures.extend(store_and_repair(&base, &before, line + 8 * word, 0x5a5a, &what).err());
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    // The rewritten head is whole: a later mount commits from it.
    let (_mem, region) = copy_of(&base);
    region.store_u64(JOURNAL_HEADERS_OFF, u64::MAX).unwrap();
    novafs::fsck::repair(region.clone()).unwrap();
    let head = region.load_u64(JOURNAL_HEADERS_OFF).unwrap();
    assert!(head < 1 << 62 && head % 8 == 0, "{head:#x}");
    let fs = Fs::open(region.clone(), MountOptions::default()).unwrap();
    fs.mkdir(ROOT_INO, b"after", 0o755, 0, 0).unwrap();
    fs.unmount().unwrap();
    let rep = novafs::fsck::check(region, &|_, _| {}).unwrap();
    assert!(rep.is_clean(), "{:?}", rep.problems);
}

/// The replica's log words and links damaged so that they still lead
/// somewhere: the primary's are whole and keep every entry.
#[test]
fn a_replica_log_pointer_that_still_loads_is_repaired_from_the_primary() {
    let (base, before, big) = image();
    let (_mem, probe) = copy_of(&base);
    let rec = inject::locate(&*probe, Target::Inode, big).unwrap()[0]
        .copy(CopyKind::Replica)
        .unwrap();
    let entries = inject::locate(&*probe, Target::LogEntry, big).unwrap();
    let pages = inject::locate(&*probe, Target::LogPage, big).unwrap();
    let last = primary(entries.last().unwrap());
    let mut failures = Vec::new();
    failures.extend(store_and_repair(&base, &before, rec + 16, last, "replica tail").err());
    failures.extend(store_and_repair(&base, &before, rec + 8, primary(&pages[1]), "replica head").err());
    let link = pages[0].copy(CopyKind::Replica).unwrap() + LOG_NEXT_OFF;
    failures.extend(store_and_repair(&base, &before, link, primary(&pages[2]), "replica link").err());
    assert!(failures.is_empty(), "{failures:#?}");
}
