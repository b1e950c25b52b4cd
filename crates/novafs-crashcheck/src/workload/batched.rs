//! Batching scenarios (FGM §III-C1, README "Relaxed mode"): relaxed
//! images mounted with [`Batching`], whose in-place setattrs wait in a
//! running transaction that a crash loses whole ([`crate::batch`]).
//!
//! Their running transactions hold a few words (a chmod rewrites three of
//! its setattr entry: mode, ctime and checksum), so they fill and commit
//! inside the workloads. The timer is an hour: it never fires during a
//! run. A timer commit would land wherever the thread happens to run, in
//! the middle of any op's stores, so the recording and the legal states
//! would depend on scheduling; the other commits (full, fsync, snapshot,
//! a log page freed, unmount) happen at points the checker sees.
//!
//! The scenarios hold no overwrites inside a file: those batch their new
//! mtime today but are to be durable at once (journaled under the
//! intent), and in-place setattrs are what batches either way. The oracle
//! has no rule of its own for them: it follows how each op went in the
//! live run (batched or committed), so the random sequences hold a few,
//! checked either way.

use std::time::Duration;

use novafs::{Batching, Consistency, MountOptions};
use novafs_ops::Op;
use novafs_rng::SplitMix as Rng;

use super::relaxed::{look, target, way_of, Way};
use super::{apply, fresh_runner_as, tree_of, Expect, Workload, REGION_SIZE};

/// The commit timer of every batching workload: never fires (module docs).
pub const NEVER: Duration = Duration::from_secs(3600);

/// Batching of `words` words, its timer [`NEVER`].
pub fn batching(words: usize) -> Batching {
    Batching { words, interval: NEVER }
}

/// A batching workload whose ops go as each says (`None`: not checked).
fn batch_workload(name: &str, words: usize, setup: Vec<Op>, ops: Vec<(Op, Option<Way>)>) -> Workload {
    let mut w = Workload::new(name, setup, ops.iter().map(|(op, _)| op.clone()).collect());
    w.consistency = Consistency::Relaxed;
    w.batch = Some(batching(words));
    w.ways = ops
        .iter()
        .enumerate()
        .filter_map(|(i, (_, way))| way.map(|way| (i, way)))
        .collect();
    w
}

fn fsync(p: &str) -> Op {
    Op::Fsync(p.into())
}

/// The batching scenarios. Their setups leave `/a`, `/b` and `/c` with a
/// setattr as their newest log entry (`/a` 3000 bytes long), so that the
/// next setattr of each is rewritten in place.
pub fn batched() -> Vec<Workload> {
    use Way::{Batched as B, CopyOnWrite as Cow, InPlace};
    let setup = || {
        let mut v = vec![
            Op::create("/a"),
            Op::create("/b"),
            Op::create("/c"),
            Op::write("/a", 0, 3000, 1),
        ];
        v.extend(["/a", "/b", "/c"].map(|p| Op::chmod(p, 0o640)));
        v
    };
    let b = |op: Op| (op, Some(B));
    let inp = |op: Op| (op, Some(InPlace));
    let cow = |op: Op| (op, Some(Cow));
    let none = |op: Op| (op, None);
    let t = |s: i64| s * 1_000_000_000;
    vec![
        batch_workload(
            // Never full: only fsync commits (whichever file it names),
            // and the crash at the end loses what came after the last.
            "batch_setattrs_fsync",
            64,
            setup(),
            vec![
                b(Op::chmod("/a", 0o600)),
                b(Op::chown("/b", 1, 2)),
                b(Op::utimens("/c", t(1), t(2))),
                none(fsync("/a")),
                b(Op::chmod("/a", 0o604)),
                b(Op::chmod("/b", 0o600)),
                b(Op::chmod("/a", 0o606)),
                none(fsync("/c")),
                b(Op::utimens("/a", t(3), t(4))),
                b(Op::chown("/c", 5, 6)),
            ],
        ),
        batch_workload(
            // Four words: a chmod of one file (three words) waits; the
            // next file's would overfill the transaction, which commits
            // first, in that op, and so does the third file's; a chmod
            // of that file again adds no word and waits.
            "batch_full",
            4,
            setup(),
            vec![
                b(Op::chmod("/a", 0o600)),
                inp(Op::chmod("/b", 0o600)),
                inp(Op::chmod("/c", 0o604)),
                b(Op::chmod("/c", 0o606)),
                inp(Op::utimens("/a", t(1), t(2))),
                b(Op::chmod("/b", 0o640)),
                none(fsync("/a")),
                inp(Op::chown("/c", 3, 4)),
                b(Op::chmod("/b", 0o604)),
            ],
        ),
        batch_workload(
            // Copy-on-write after a batched setattr of the same file: an
            // append's write entry makes mtime/ctime durable, the mode
            // stays in the running transaction; the next setattr is
            // appended (it carries every attribute); a link's entry makes
            // the ctime durable; a setattr after it is appended, and the
            // next one batched; a truncate's setattr carries the batched
            // mode with it.
            "batch_then_copy_on_write",
            64,
            setup(),
            vec![
                b(Op::chmod("/a", 0o600)),
                cow(Op::write("/a", 3000, 2000, 2)),
                cow(Op::chmod("/a", 0o604)),
                b(Op::chmod("/a", 0o606)),
                b(Op::chown("/b", 3, 4)),
                none(Op::link("/b", "/d")),
                cow(Op::chmod("/b", 0o600)),
                b(Op::chmod("/b", 0o604)),
                b(Op::chmod("/a", 0o640)),
                cow(Op::truncate("/a", 4000)),
            ],
        ),
        batch_workload(
            // Names change around batched setattrs: a rename, a create in
            // a directory whose mode waits, and an unlink that frees an
            // inode's log, which commits the running transaction first.
            "batch_names",
            64,
            {
                let mut v = setup();
                v.extend([
                    Op::mkdir("/d"),
                    Op::chmod("/d", 0o750),
                    Op::create("/e"),
                    Op::chmod("/e", 0o600),
                ]);
                v
            },
            vec![
                b(Op::chmod("/d", 0o700)),
                b(Op::chown("/c", 7, 8)),
                none(Op::rename("/c", "/d/c", 0)),
                none(Op::create("/d/x")),
                b(Op::chmod("/e", 0o604)),
                b(Op::chmod("/a", 0o600)),
                none(Op::Unlink("/e".into())),
                b(Op::chmod("/b", 0o600)),
                none(Op::create("/f")),
            ],
        ),
        batch_workload(
            // A snapshot commits first; an entry it sees takes no change
            // in place, one appended after it does; once it is deleted,
            // so does the older one. A remount commits; a clean unmount
            // at the end too.
            "batch_snapshot_remount",
            64,
            setup(),
            vec![
                b(Op::chmod("/a", 0o600)),
                b(Op::chown("/b", 1, 1)),
                none(Op::Snapshot("s".into())),
                cow(Op::chmod("/a", 0o604)),
                b(Op::chmod("/a", 0o606)),
                cow(Op::chmod("/c", 0o600)),
                none(Op::DeleteSnapshot("s".into())),
                b(Op::chmod("/b", 0o600)),
                b(Op::chmod("/c", 0o604)),
                none(Op::Remount),
                b(Op::chmod("/a", 0o640)),
                none(Op::Unmount),
            ],
        ),
    ]
}

/// A random sequence of `len` operations on a batching relaxed image:
/// setattrs of a few files and directories (one in two naming the node
/// the last one named, so that many go in place and batch), with fsyncs,
/// creates, appends, truncates, renames, links, unlinks, extended
/// attributes, snapshots and remounts between them, chosen from the tree
/// in a trial run as [`super::random`] does. Writes append
/// (copy-on-write) or, two in three, overwrite inside the file; the
/// running transaction holds 3 to 8 words (seeded). At least one op must
/// batch: a sequence whose trial run had none ends with a file made and
/// changed three times, which does.
pub fn random_batch(seed: u64, len: usize) -> Workload {
    let mut rng = Rng::derive(seed, 0xba7c);
    let words = 3 + rng.below(6) as usize;
    let opts = MountOptions::default().batch(Some(batching(words)));
    let mut r = fresh_runner_as(REGION_SIZE, 1, Consistency::Relaxed)
        .ok()
        .map(|r| r.mount_with(opts));
    if let Some(r) = r.as_mut() {
        let _ = apply(r, &Op::Mount, false);
    }
    let names = ["a", "b", "c", "d"];
    let mut ops = Vec::new();
    let mut batched = 0;
    // The node the last setattr named: the next one names it again one
    // time in two, so that most go in place.
    let mut last: Option<String> = None;
    for i in 0..len {
        let tree = r.as_ref().and_then(|r| tree_of(r).ok()).unwrap_or_default();
        let of_kind = |k: Option<&str>| -> Vec<String> {
            let keep =
                |(p, n): (&String, &crate::tree::Node)| (k.is_none_or(|k| n.kind == k) && p != "/").then(|| p.clone());
            tree.nodes.iter().filter_map(keep).collect()
        };
        let (files, any) = (of_kind(Some("RegularFile")), of_kind(None));
        let mut dirs = of_kind(Some("Directory"));
        dirs.push("/".into());
        let dir = rng.pick(&dirs).cloned().unwrap_or_else(|| "/".into());
        let join = |d: &str, n: &str| if d == "/" { format!("/{n}") } else { format!("{d}/{n}") };
        let fresh = join(&dir, names[rng.below(names.len() as u64) as usize]);
        let some = |v: &[String], rng: &mut Rng| rng.pick(v).cloned();
        let again = last.clone().filter(|p| tree.nodes.contains_key(p) && rng.chance(1, 2));
        let node = |rng: &mut Rng| again.clone().or_else(|| some(&any, rng));
        let seed_i = seed.wrapping_mul(1000) + i as u64;
        let op = match rng.below(22) {
            0..=3 => node(&mut rng).map(|p| Op::chmod(p, 0o600 + rng.below(0o100) as u32)),
            4 | 5 => node(&mut rng).map(|p| Op::chown(p, rng.below(5) as u32, rng.below(5) as u32)),
            6 | 7 => node(&mut rng).map(|p| {
                let s = 1_000_000_000 * (1 + rng.below(1000) as i64);
                Op::utimens(p, s, s + 7)
            }),
            8 | 9 => some(&any, &mut rng).map(|p| Op::Fsync(p.into())),
            10 | 11 => Some(Op::create(fresh.clone())),
            12 => Some(Op::mkdir(fresh.clone())),
            13 | 14 => some(&files, &mut rng).map(|f| {
                let size = tree.nodes[&f].size;
                if size > 0 && rng.chance(2, 3) {
                    let off = rng.below(size);
                    return Op::write(f, off, 1 + rng.below((size - off).min(3000)), seed_i);
                }
                Op::write(f, size, 1 + rng.below(5000), seed_i)
            }),
            15 => some(&files, &mut rng).map(|f| Op::truncate(f, [0, 10, 4096, 6000][rng.below(4) as usize])),
            16 => some(&any, &mut rng).map(|p| Op::rename(p, fresh.clone(), 0)),
            17 => some(&files, &mut rng).map(|f| Op::link(f, fresh.clone())),
            18 => some(&any, &mut rng).map(|p| match tree.nodes[&p].kind.as_str() {
                "Directory" => Op::Rmdir(p),
                _ => Op::Unlink(p),
            }),
            19 => some(&any, &mut rng).map(|p| Op::setxattr(p, "user.a", 10, seed_i)),
            20 => Some(if rng.chance(2, 3) {
                Op::Snapshot(format!("s{}", rng.below(2)))
            } else {
                Op::DeleteSnapshot(format!("s{}", rng.below(2)))
            }),
            _ => Some(Op::Remount),
        };
        let op = op.unwrap_or_else(|| Op::create(fresh));
        if let Op::Setattr {
            at: novafs_ops::At::Path(p),
            ..
        } = &op
        {
            last = Some(p.clone());
        }
        if let Some(r) = r.as_mut() {
            let target = target(&op).map(str::to_owned);
            let before = target.as_deref().and_then(|p| look(r, p).ok());
            let ok = apply(r, &op, false).is_ok();
            let after = target.as_deref().filter(|_| ok).and_then(|p| look(r, p).ok());
            if let (Some(b), Some(a)) = (before, after) {
                batched += usize::from(way_of(&b, &a) == Some(Way::Batched));
            }
        }
        ops.push(op);
    }
    if batched == 0 {
        ops.extend([
            Op::create("/batched"),
            Op::chmod("/batched", 0o600),
            Op::chmod("/batched", 0o604),
            Op::chown("/batched", 1, 2),
        ]);
    }
    let mut w = Workload::new(&format!("random-batch-{seed}-{len}"), Vec::new(), ops);
    w.expect = Expect::MaySucceed;
    w.consistency = Consistency::Relaxed;
    w.batch = Some(batching(words));
    w.min_in_place = 1;
    w
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_batching_workload_names_how_its_setattrs_go_and_overwrites_nothing() {
        for w in batched().into_iter().chain([random_batch(1, 8)]) {
            assert!(w.relaxed(), "{}", w.name);
            assert_eq!(w.batch.map(|b| b.interval), Some(NEVER), "{}", w.name);
            if w.name.starts_with("random") {
                continue;
            }
            assert!(w.ways.iter().any(|&(_, way)| way == Way::Batched), "{}", w.name);
            for (i, op) in w.ops.iter().enumerate() {
                let named = w.ways.iter().find(|&&(j, _)| j == i).map(|&(_, way)| way);
                assert_eq!(named.is_some(), target(op).is_some(), "{}: op {i} ({op})", w.name);
                if matches!(op, Op::Write { .. }) {
                    assert_eq!(named, Some(Way::CopyOnWrite), "{}: op {i} ({op})", w.name);
                }
            }
        }
    }
}
