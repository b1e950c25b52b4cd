//! Batching (FGM §III-C1, README "Relaxed mode") at every crash point: a
//! crash loses the running transaction's in-place setattrs since its last
//! commit, all of them together, and nothing else (`novafs_crashcheck::batch`).
//! Each scenario checks in its live run that its setattrs batched,
//! committed a full transaction, or went copy-on-write, as it says.
#![allow(clippy::unwrap_used)]

mod common;

use common::{assert_atomic_with, relaxed_config, SEED};
use novafs_crashcheck::batch::{Field, Legal, Lost, Oracle};
use novafs_crashcheck::tree::Tree;
use novafs_crashcheck::{check_recorded, record, workload, Compare, Recorded, Stats};

/// Checks batching scenario `name`; panics listing each kind of failure.
fn check(name: &str) -> Stats {
    let w = workload::by_name(name).unwrap();
    assert!(w.relaxed() && w.batch.is_some(), "{name} is not a batching workload");
    let st = assert_atomic_with(&w, &relaxed_config(SEED));
    assert!(st.lost > 0, "no crash image lost a running transaction: {st}");
    st
}

#[test]
fn batched_setattrs_wait_for_an_fsync_of_any_file_and_a_crash_loses_them_all() {
    let st = check("batch_setattrs_fsync");
    assert_eq!(st.in_place_ops, 8, "{st}");
}

#[test]
fn a_full_running_transaction_commits_in_the_op_that_fills_it() {
    check("batch_full");
}

#[test]
fn copy_on_write_after_a_batched_setattr_is_durable_and_the_rest_may_be_lost() {
    check("batch_then_copy_on_write");
}

#[test]
fn renames_creates_and_an_unlink_around_batched_setattrs() {
    check("batch_names");
}

#[test]
fn a_snapshot_a_remount_and_an_unmount_commit_the_running_transaction() {
    check("batch_snapshot_remount");
}

/// A random batching sequence, with a seed that changes from run to run
/// (printed; `NOVAFS_CRASH_SEED` pins it).
#[test]
fn random_batching_sequences_lose_at_most_the_running_transaction() {
    let seed = common::run_seed();
    eprintln!("crash sweep seed {seed} (NOVAFS_CRASH_SEED={seed} reruns it)");
    let st = assert_atomic_with(&workload::random_batch(seed, 16), &relaxed_config(seed));
    assert!(st.in_place_ops > 0, "{st}");
}

/// The fields `l` lists for `path`.
fn fields(l: &Lost, path: &str) -> Vec<Field> {
    l.0.iter().filter(|(p, _, _)| p == path).map(|(_, f, _)| *f).collect()
}

fn value(l: &Lost, path: &str, field: Field) -> Option<i64> {
    l.0.iter()
        .find(|(p, f, _)| p == path && *f == field)
        .map(|(_, _, v)| *v)
}

fn copy_on_write() -> Recorded {
    record(&workload::by_name("batch_then_copy_on_write").unwrap()).unwrap()
}

/// `batch_then_copy_on_write`, op by op (op 0 mounts; `at[i + 1]` is what
/// a crash after op `i` loses).
#[test]
fn what_a_crash_may_lose_follows_the_live_run() {
    use Field::{Ctime, Gid, Perm, Uid};
    let rec = copy_on_write();
    let at = &rec.batch.at;
    assert_eq!(at.len(), rec.states.len());
    assert!(at[1].is_empty(), "the mount");
    // chmod /a, batched: its mode and ctime.
    assert_eq!(fields(&at[2], "/a"), [Perm, Ctime]);
    assert_eq!(value(&at[2], "/a", Perm), Some(0o640));
    // An append: its write entry carries mtime and ctime; the mode waits.
    assert_eq!(fields(&at[3], "/a"), [Perm]);
    // The next chmod is appended, with every attribute.
    assert!(at[4].is_empty(), "{:?}", at[4]);
    // chmod /a again (batched), chown /b (batched).
    assert_eq!(value(&at[5], "/a", Perm), Some(0o604));
    assert_eq!(fields(&at[6], "/b"), [Uid, Gid, Ctime]);
    // A link: its entry carries the ctime; both names may lose the owner.
    for p in ["/b", "/d"] {
        assert_eq!(fields(&at[7], p), [Uid, Gid], "{p}");
    }
    // chmod /b is appended after the link; the next batched.
    assert!(fields(&at[8], "/b").is_empty());
    assert_eq!(fields(&at[9], "/d"), [Perm, Ctime]);
    // chmod /a (batched): the mode on the media is still the one of op 3.
    assert_eq!(value(&at[10], "/a", Perm), Some(0o604));
    // A truncate's setattr carries the batched mode, though unchanged.
    assert!(fields(&at[11], "/a").is_empty(), "{:?}", at[11]);
    assert_eq!(fields(&at[11], "/b"), [Perm, Ctime]);
    assert!(!rec.batch.commits.iter().any(|&c| c), "nothing commits here");
}

/// `t` with `path`'s `fields` as in `from`.
fn with(t: &Tree, from: &Tree, path: &str, fields: &[Field]) -> Tree {
    let mut lost = Vec::new();
    for &f in fields {
        lost.push((path.to_string(), f, f.of(&from.nodes[path])));
    }
    Lost(lost).apply(t)
}

/// The oracle can fail: a crash image keeping a batched change, losing
/// part of a running transaction or losing a copy-on-write change is no
/// legal state.
#[test]
fn the_oracle_rejects_a_kept_batched_change_a_partial_loss_and_a_lost_durable_change() {
    use Field::{Ctime, Mtime, Perm, Uid};
    let cmp = Compare::default();
    let rec = copy_on_write();
    let o = Oracle::new(&rec, cmp);
    let s = &rec.states;
    let legal = |after: u64| o.states(None, Some(after));
    let accepts = |after: u64, t: &Tree| o.accepts(&legal(after), t.digest(cmp));
    // After the batched chmod (op 1): lost, never kept.
    assert!(accepts(1, &s[1]) && !accepts(1, &s[2]));
    // After the append (op 2): the mode may be lost, not the append's
    // mtime and ctime.
    let lost = o.tree(Legal::Lost(3)).clone();
    assert!(accepts(2, &lost));
    assert!(!accepts(2, &with(&lost, &s[2], "/a", &[Mtime, Ctime])));
    assert!(!accepts(2, &s[3]));
    // After the chown (op 5): /a's and /b's changes are lost together.
    let lost = o.tree(Legal::Lost(6)).clone();
    assert!(accepts(5, &lost));
    assert!(!accepts(5, &with(&lost, &s[6], "/b", &[Uid, Ctime])));
    assert!(!accepts(5, &with(&lost, &s[6], "/a", &[Perm, Ctime])));
    // After the truncate (op 10): /a's mode is durable, whatever came
    // before it.
    let lost = o.tree(Legal::Lost(11)).clone();
    assert!(accepts(10, &lost));
    assert!(!accepts(10, &with(&lost, &s[4], "/a", &[Perm])));
}

/// A checker told that nothing batches sees the setattrs a crash lost
/// and reports them.
#[test]
fn a_checker_that_expects_no_loss_reports_the_lost_setattrs() {
    let w = workload::by_name("batch_setattrs_fsync").unwrap();
    let mut rec = record(&w).unwrap();
    rec.batch = Default::default();
    let mut cfg = relaxed_config(SEED);
    cfg.max_images = Some(300);
    cfg.recovery_every = 0;
    cfg.recovery_busy_every = 0;
    let mut st = Stats::default();
    check_recorded(&w, &rec, &cfg, &mut st);
    assert!(!st.failures.is_empty(), "{st}");
    let f = &st.failures[0];
    assert!(f.message.contains("not a legal state"), "{f}");
    assert!(f.message.contains("perm 416 (expected 384)"), "{f}");
}

/// Where the running transaction commits: when full (`batch_full` ops 2,
/// 5 and 8), at fsync (op 7), before an unlink frees a log (`batch_names`
/// op 7), at a snapshot, a remount and an unmount.
#[test]
fn the_running_transaction_commits_where_it_fills_and_where_it_must() {
    for (name, want) in [
        ("batch_full", vec![2, 3, 5, 7, 8]),
        ("batch_names", vec![7]),
        ("batch_snapshot_remount", vec![3, 10, 12]),
        ("batch_setattrs_fsync", vec![4, 8]),
    ] {
        let rec = record(&workload::by_name(name).unwrap()).unwrap();
        let got: Vec<usize> = (0..rec.ops.len()).filter(|&i| rec.batch.commits[i]).collect();
        assert_eq!(got, want, "{name}");
        assert!(rec.batch.at[rec.states.len() - 1].is_empty() == (name == "batch_snapshot_remount"));
    }
}
