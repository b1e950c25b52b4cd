//! Multi-operation sequences, remounts and the background work of logs and
//! journals (growth, fast and thorough GC, ring wrap-around) are atomic at
//! every crash point, including crashes inside recovery.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::{assert_atomic, assert_atomic_workload};
use novafs_crashcheck::{check_workload, record, workload, Stats};
use pm::{MemRegion, Region};

#[test]
fn mixed_sequence_with_clean_unmount_is_atomic_at_every_crash_point() {
    assert_atomic("sequence_mixed");
}

#[test]
fn remount_and_clean_unmount_are_atomic_at_every_crash_point() {
    assert_atomic("remount");
}

#[test]
fn random_sequences_are_atomic_at_every_crash_point() {
    for seed in 1..=3 {
        assert_atomic_workload(&workload::random(seed, 16));
    }
}

/// The same with a seed that differs from run to run (a sweep that
/// passed with one seed once missed a hole another seed found), on one
/// shard and on two. The seed is printed; a failure's reproducer names it.
#[test]
fn random_sequences_with_a_new_seed_each_run_are_atomic_at_every_crash_point() {
    let seed = common::run_seed();
    eprintln!("crash sweep seed {seed} (NOVAFS_CRASH_SEED={seed} reruns it)");
    let cfg = common::config_for(seed);
    common::assert_atomic_with(&workload::random(seed, 16), &cfg);
    common::assert_atomic_with(&workload::random_sharded(seed, 16), &cfg);
}

/// Operations alternating between two shards' journals: a transaction must
/// be checkpointed before the operation returns, or a crash can leave it
/// behind its head while a later one on the other shard is committed, and
/// recovery replays it last (seed 0 caught exactly that).
#[test]
fn sequences_across_two_journal_shards_are_atomic_at_every_crash_point() {
    assert_atomic_workload(&workload::random_sharded(0, 24));
}

#[test]
fn log_growth_of_a_file_is_atomic_at_every_crash_point() {
    assert_atomic("log_growth_file");
}

#[test]
fn log_growth_of_a_directory_is_atomic_at_every_crash_point() {
    assert_atomic("log_growth_dir");
}

#[test]
fn fast_gc_is_atomic_at_every_crash_point() {
    assert_atomic("fast_gc");
}

#[test]
fn fast_gc_under_a_snapshot_is_atomic_at_every_crash_point() {
    assert_atomic("fast_gc_under_snapshot");
}

#[test]
fn fast_gc_of_a_directory_under_a_snapshot_is_atomic_at_every_crash_point() {
    assert_atomic("fast_gc_dir_under_snapshot");
}

#[test]
fn thorough_gc_of_a_file_is_atomic_at_every_crash_point() {
    assert_atomic("thorough_gc_file");
}

#[test]
fn thorough_gc_of_a_directory_is_atomic_at_every_crash_point() {
    assert_atomic("thorough_gc_dir");
}

#[test]
fn thorough_gc_of_a_log_of_xattrs_is_atomic_at_every_crash_point() {
    assert_atomic("thorough_gc_xattr");
}

/// Regression: an unlink whose append compacted the directory invalidated
/// the cancelled add at its old, freed place.
#[test]
fn unlink_that_compacts_its_directory_is_atomic_at_every_crash_point() {
    assert_atomic("thorough_gc_dir_by_unlink");
}

/// The same for a rename over an existing name (two cancelled adds).
#[test]
fn rename_over_a_name_that_compacts_its_directory_is_atomic_at_every_crash_point() {
    assert_atomic("thorough_gc_dir_by_rename");
}

/// A write that found the file system full compacts other inodes' logs,
/// then writes (`Fs::writing`).
#[test]
fn compaction_for_space_is_atomic_at_every_crash_point() {
    assert_atomic("thorough_gc_for_space");
}

#[test]
fn journal_transaction_wrapping_the_ring_is_atomic_at_every_crash_point() {
    assert_atomic("journal_wraps");
}

#[test]
fn inode_table_growth_to_a_second_chunk_is_atomic_at_every_crash_point() {
    let w = workload::inode_table_growth();
    // The recorded creates do claim a second 2 MiB chunk.
    let rec = record(&w).unwrap();
    let region: Arc<dyn Region> = Arc::new(MemRegion::from_bytes(rec.trace.final_image()));
    assert_eq!(novafs::probe::inode_table_chunks(&*region).unwrap(), 2);
    // 16k files make each image slow to check: a smaller sample.
    let mut cfg = common::config();
    cfg.max_images = Some(40);
    cfg.recovery_every = 0;
    let mut st = Stats::default();
    check_workload(&w, &cfg, &mut st);
    eprintln!("{}: {st}", w.name);
    assert!(st.failures.is_empty(), "{}", st.failures[0]);
    assert!(st.images > 0);
}
