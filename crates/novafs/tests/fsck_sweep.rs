//! fsck decides what exists the way a mount does: from checked copies.
//! For every inode of a populated, cleanly unmounted image, damage the
//! primary copy of its inode record (at the state word, the log
//! pointers and the checksummed part, each in turn) and of one of its
//! log entries: fsck must report the damage, `fsck --repair` must then
//! leave an image fsck calls clean, and the tree (names, contents,
//! attributes, extended attributes) must be exactly what it was — the
//! replica holds everything needed.
//!
//! `NOVAFS_SWEEP_LONG=1`: the image of 4,000 files in 20 directories and
//! more seeds per inode.

#![allow(clippy::unwrap_used)]

mod sweep_common;

use std::ops::Range;

use novafs::inject::{self, Spec, Target, Which};
use novafs::Ino;
use sweep_common::{copy_of, damage_and_repair, long, populated, tree};

/// The parts of an inode record a damage can hit first: the state word,
/// the log head and tail (both outside the record's checksum), and the
/// checksummed rest.
const RECORD_PARTS: [Range<u64>; 3] = [0..8, 8..24, 24..128];

/// The first seeds (up to `want`) whose damage to the primary record of
/// `ino` starts in `part`.
fn seeds_hitting(base: &[u8], ino: Ino, part: &Range<u64>, want: usize) -> Vec<u64> {
    let (_mem, region) = copy_of(base);
    (1..2_000)
        .filter(|&seed| {
            let spec = Spec::new(Target::Inode).ino(ino).seed(seed);
            let d = inject::plan(&*region, &spec).unwrap();
            part.contains(&(d[0].off - d[0].base))
        })
        .take(want)
        .collect()
}

/// Runs the sweep over `inos` and asserts it found nothing wrong.
fn sweep(base: &[u8], inos: &[Ino], seeds: usize) {
    let before = tree(&copy_of(base).1).unwrap();
    let mut failures = Vec::new();
    let mut cases = 0;
    for &ino in inos {
        for part in &RECORD_PARTS {
            for seed in seeds_hitting(base, ino, part, seeds) {
                let spec = Spec::new(Target::Inode).ino(ino).seed(seed).which(Which::Primary);
                cases += 1;
                failures.extend(damage_and_repair(base, &before, &spec).err());
            }
        }
        for seed in 1..=seeds as u64 * 2 {
            let spec = Spec::new(Target::LogEntry).ino(ino).seed(seed).which(Which::Primary);
            cases += 1;
            failures.extend(damage_and_repair(base, &before, &spec).err());
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {cases} cases failed; the first few:\n{}",
        failures.len(),
        failures.iter().take(5).cloned().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn a_damaged_primary_record_or_entry_loses_and_changes_nothing() {
    let (base, inos, seeds) = if long() {
        let (base, inos) = populated(256, 20, 200);
        (base, inos, 3)
    } else {
        let (base, inos) = populated(16, 3, 10);
        (base, inos, 1)
    };
    sweep(&base, &inos, seeds);
}
