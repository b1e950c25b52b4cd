//! Crashes with media errors (NOVA-Fortis §4.2, `novafs crashcheck
//! --media-errors`, `--scribbles`): every crash image of a few workloads,
//! each also with one copy of a metadata line the interrupted operation
//! wrote unreadable, or overwritten with garbage that reads back (never
//! the only whole copy), recovers to a legal state with nothing lost, fsck
//! runs on it before and after, and a remount shows the same tree.
//! Several seeds: each picks other stores, lines, copies.
#![allow(clippy::unwrap_used)]

mod common;

use novafs_crashcheck::damage::Kind;
use novafs_crashcheck::{check_workload, group, workload, Stats};

/// Checks `names` with damage of `kind` for each of `seeds`; panics
/// listing each kind of failure.
fn sweep(names: &[&str], seeds: &[u64], kind: Kind) -> Stats {
    let mut total = Stats::default();
    for &seed in seeds {
        let mut cfg = common::config_for(seed);
        cfg.damage = vec![kind];
        for name in names {
            let w = workload::by_name(name).unwrap();
            let mut st = Stats::default();
            check_workload(&w, &cfg, &mut st);
            eprintln!("{name} seed {seed}: {st}");
            total.merge(st);
        }
    }
    if !total.failures.is_empty() {
        let mut msg = format!("{} failure(s)\n", total.failures.len());
        for (sig, n, first) in group(&total.failures) {
            msg += &format!("{n} x {sig}\n{first}\n");
        }
        panic!("{msg}");
    }
    total
}

/// One image of one crash point of `name` (a reproducer's `--point` and
/// `--image`), thoroughly, with a media error in one copy.
fn one_image(name: &str, seed: u64, point: usize, image: usize) -> Stats {
    let mut cfg = novafs_crashcheck::Config::thorough(seed);
    cfg.damage = vec![Kind::MediaError];
    cfg.only_point = Some(point);
    cfg.only_image = Some(image);
    let mut st = Stats::default();
    check_workload(&workload::by_name(name).unwrap(), &cfg, &mut st);
    st
}

#[test]
fn namespace_operations_survive_a_crash_and_an_unreadable_copy() {
    let seed = common::run_seed();
    let st = sweep(
        &["create", "rename_across_dirs", "unlink"],
        &[seed, seed + 1, seed + 2],
        Kind::MediaError,
    );
    // Every crash image of these operations was also checked damaged: each
    // crash point follows a store to metadata with two copies (the mount's
    // first is the superblock's).
    assert_eq!(st.damaged * 2, st.images - st.recovery_images, "{st}");
}

#[test]
fn writes_log_growth_and_the_superblock_survive_a_crash_and_an_unreadable_copy() {
    let seed = common::run_seed() + 100;
    let st = sweep(
        &["write_small", "log_growth_file", "remount"],
        &[seed, seed + 1],
        Kind::MediaError,
    );
    assert!(st.damaged > 0, "{st}");
}

/// Found by `novafs crashcheck --all --media-errors --seed 2124848441`: a
/// rename's journal commits a new log tail whose entry is whole in the
/// primary log page but torn in the replica (both written before one
/// fence); a media error elsewhere in that page sent the whole page read
/// to the replica, so recovery, having accepted the transaction on the
/// primary's entry, then read the replica's torn one ("log tail ... is not
/// in the chain"). Reads now go around a media error line by line.
#[test]
fn a_media_error_beside_a_committed_entry_reads_only_its_own_line_from_the_replica() {
    let st = one_image("rename_exchange", 2124848441, 4, 167);
    assert_eq!(st.damaged, 1, "{st}");
    assert!(st.failures.is_empty(), "{}", st.failures[0]);
}

/// Found by `novafs crashcheck --all --media-errors --seed 3541715167`: an
/// mkfs over an old image crashes after clearing the replica's magic word
/// but before the primary's reached the media, and then the primary's first
/// line becomes unreadable. No copy of any superblock is left: the image is
/// plainly not novafs (mkfs's interrupted state), which fsck and the mount
/// must say, instead of failing on the media error.
#[test]
fn an_unreadable_primary_superblock_beside_a_cleared_replica_is_not_novafs() {
    let st = one_image("mkfs_over_an_old_image", 3541715167, 7, 2);
    assert_eq!((st.damaged, st.damaged_other_state), (1, 1), "{st}");
    assert!(st.failures.is_empty(), "{}", st.failures[0]);
}

#[test]
fn namespace_operations_survive_a_crash_and_a_scribbled_copy() {
    let seed = common::run_seed() + 200;
    let st = sweep(&["create", "rename_across_dirs", "unlink"], &[seed], Kind::Scribble);
    assert_eq!(st.damaged * 2, st.images - st.recovery_images, "{st}");
}

/// Found by `novafs crashcheck --scribbles --workload create --seed
/// 737749`: a crash after a create's journal commit, its in-place updates
/// partly on media (the parent's new log tail, the new inode's state
/// word), with garbage in the primary of a range the transaction checks
/// (the new inode's record, or the dentry appended to the parent's log).
/// Replay judged the check by the primary alone, called the transaction
/// uncommitted and dropped it: the parent's log named an inode whose slot
/// was free ("lookup /a: no such file or directory"), or a live inode
/// lost its only name ("inode 3 is not reachable from the root"), or the
/// new record was lost. The replica holds the check, and the replay now
/// accepts it and rewrites the primary from it.
#[test]
fn a_scribbled_primary_of_a_checked_range_does_not_undo_a_committed_create() {
    let st = sweep(&["create"], &[737749], Kind::Scribble);
    assert!(st.damaged > 90, "{st}");
}

/// The mirror case, found by `novafs crashcheck --all --media-errors --seed
/// 840881383`: the primary's magic word cleared, the replica (the old
/// superblock's last copy) unreadable.
#[test]
fn an_unreadable_superblock_replica_beside_a_cleared_primary_is_not_novafs() {
    let st = one_image("mkfs_over_an_old_image", 840881383, 7, 1);
    assert_eq!((st.damaged, st.damaged_other_state), (1, 1), "{st}");
    assert!(st.failures.is_empty(), "{}", st.failures[0]);
}

/// Relaxed mode (Fortis §4.6): an overwrite and a setattr change the
/// newest log entry in place, primary and replica, under a journal
/// transaction; with one copy of what they wrote unreadable, every crash
/// image still recovers to a legal state (the overwrite in flight may be
/// torn) with nothing lost.
#[test]
fn in_place_overwrites_survive_a_crash_and_an_unreadable_copy() {
    let seed = common::run_seed() + 300;
    let mut total = Stats::default();
    for name in ["relaxed_overwrite_page_boundary", "relaxed_remount"] {
        let mut cfg = common::relaxed_config(seed);
        cfg.damage = vec![Kind::MediaError];
        let mut st = Stats::default();
        check_workload(&workload::by_name(name).unwrap(), &cfg, &mut st);
        eprintln!("{name} seed {seed}: {st}");
        total.merge(st);
    }
    assert!(total.failures.is_empty(), "{}", total.failures[0]);
    assert!(total.damaged > 0 && total.in_place_ops > 0, "{total}");
}
