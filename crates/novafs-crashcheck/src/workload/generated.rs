//! Workloads that need a trial run to place their recorded window: log
//! growth of a file and of a directory, fast and thorough GC, and a
//! journal transaction that wraps around the ring. A trial that fails (an
//! operation errs, or what it waits for never happens) is an error naming
//! the workload, never a workload quietly left out.

use novafs_ops::{Op, Runner};
use pm::Region;

use super::{fresh_runner, gc_count, GcKind, Workload, REGION_SIZE};

/// A generated workload's name and the workload, or why the trial run
/// could not place it.
pub type Generated = (&'static str, Result<Workload, String>);

/// Runs `setup` then `ops` on a fresh file system; returns the index of
/// the first op after which `stop` holds. An op that fails, or `stop`
/// never holding, is an error.
fn first_where(
    setup: &[Op],
    ops: impl Iterator<Item = Op>,
    mut stop: impl FnMut(&Runner) -> bool,
) -> Result<usize, String> {
    let mut r = fresh_runner(REGION_SIZE, 1)?;
    r.apply(&Op::Mount).map_err(|e| format!("mount: {e}"))?;
    for (i, op) in setup.iter().enumerate() {
        r.apply(op).map_err(|e| format!("setup op {i} ({op}) failed: {e}"))?;
    }
    let mut n = 0;
    for (i, op) in ops.enumerate() {
        r.apply(&op).map_err(|e| format!("trial op {i} ({op}) failed: {e}"))?;
        if stop(&r) {
            return Ok(i);
        }
        n = i + 1;
    }
    Err(format!("what the trial waits for never happened in {n} operations"))
}

/// A workload whose recorded ops are the `before` ops of `gen` leading up
/// to the first one after which `stop` holds (within `limit`), that op,
/// and `after` more.
fn window(
    name: &'static str,
    setup: Vec<Op>,
    gen: impl Fn(usize) -> Op,
    limit: usize,
    stop: impl FnMut(&Runner) -> bool,
    before: usize,
    after: usize,
) -> Generated {
    let w = first_where(&setup, (0..limit).map(&gen), stop).map(|at| {
        let start = at.saturating_sub(before);
        let mut all = setup;
        all.extend((0..start).map(&gen));
        Workload::new(name, all, (start..=at + after).map(&gen).collect())
    });
    (name, w.map_err(|e| format!("workload {name}: {e}")))
}

/// [`window`] around the first op that runs `gc` GC (`stop`), which the
/// recorded ops must then run too.
fn around(
    name: &'static str,
    setup: Vec<Op>,
    gen: impl Fn(usize) -> Op,
    limit: usize,
    stop: impl FnMut(&Runner) -> bool,
    gc: GcKind,
) -> Generated {
    let (name, w) = window(name, setup, gen, limit, stop, 2, 1);
    (
        name,
        w.map(|mut w| {
            w.gc = Some(gc);
            w
        }),
    )
}

/// A stop condition that holds after an op that took more than `pages`
/// pages (the first op only sets the baseline).
fn took_more_than(pages: u64) -> impl FnMut(&Runner) -> bool {
    let mut last: Option<u64> = None;
    move |r| {
        let now = r.fs().map_or(0, |f| f.statfs().blocks_free);
        let grew = last.is_some_and(|l| l.saturating_sub(now) > pages);
        last = Some(now);
        grew
    }
}

/// Journal head position (bytes since format) of shard 0, read from media.
fn journal_head(region: &dyn Region) -> u64 {
    region
        .load_u64(novafs::probe::layout::JOURNAL_HEADERS_OFF + novafs::probe::layout::JOURNAL_HEAD_FIELD)
        .unwrap_or(0)
}

/// Every generated workload, by name.
pub fn generated() -> Vec<Generated> {
    let mut out = Vec::new();
    // Log growth: distinct pages stay live, so the log must grow; the op
    // after which the file's log occupies a new page takes more than its
    // one data page.
    let grow = |i: usize| Op::write("/f", i as u64 * 4096, 8, 100 + i as u64);
    out.push(window(
        "log_growth_file",
        vec![Op::create("/f")],
        grow,
        400,
        took_more_than(1),
        1,
        1,
    ));
    let entry = |i: usize| Op::create(format!("/d/entry-{i:04}"));
    out.push(window(
        "log_growth_dir",
        vec![Op::mkdir("/d")],
        entry,
        400,
        took_more_than(0),
        1,
        1,
    ));
    // Fast GC: overwrites of one page leave only dead entries behind.
    let over = |i: usize| Op::write("/f", (i % 3) as u64 * 8, 8, 1000 + i as u64);
    out.push(around(
        "fast_gc",
        vec![Op::create("/f"), Op::write("/f", 0, 4096, 9)],
        over,
        2000,
        |r| gc_count(r, GcKind::Fast) > 0,
        GcKind::Fast,
    ));
    // Fast GC under a snapshot (Fortis §3.2): the log is covered, so only
    // its dead pages the snapshot cannot replay go; the first page, with
    // the entry the snapshot sees, stays.
    out.push(around(
        "fast_gc_under_snapshot",
        vec![Op::create("/f"), Op::write("/f", 0, 4096, 9), Op::Snapshot("s".into())],
        over,
        2000,
        |r| gc_count(r, GcKind::Fast) > 0,
        GcKind::Fast,
    ));
    // Fast GC of a directory a snapshot covers: a cancelled add that
    // snapshot "t" saw, whose remove is on a later log page, is
    // invalidated in place once "t" is gone, before the pages go (its
    // remove's among them); "long" keeps the add's page.
    const BEHIND: usize = 100;
    let churn = |i: usize| match i {
        BEHIND => Op::Unlink("/d/a".into()),
        x if x == BEHIND + 1 => Op::DeleteSnapshot("t".into()),
        _ if i.is_multiple_of(2) => Op::create(format!("/d/f{i}")),
        _ => Op::Unlink(format!("/d/f{}", i - 1)),
    };
    let mut seen = 0;
    let mut base = None;
    out.push(around(
        "fast_gc_dir_under_snapshot",
        [Op::mkdir("/d"), Op::create("/d/old"), Op::Snapshot("s".into())]
            .into_iter()
            // "a" on a page younger than "s".
            .chain((0..200).map(|i| {
                if i % 2 == 0 {
                    Op::create(format!("/d/e{i}"))
                } else {
                    Op::Unlink(format!("/d/e{}", i - 1))
                }
            }))
            .chain([
                Op::create("/d/long"),
                Op::create("/d/a"),
                Op::create("/d/long2"),
                Op::Snapshot("t".into()),
            ])
            .collect(),
        churn,
        4000,
        // The first fast GC after "t" is gone.
        |r| {
            seen += 1;
            let n = gc_count(r, GcKind::Fast);
            if seen == BEHIND + 2 {
                base = Some(n);
            }
            base.is_some_and(|b| n > b)
        },
        GcKind::Fast,
    ));
    // Thorough GC of a file (NOVA §4.6): one live page per log page.
    let sparse = |i: usize| {
        let k = i / 71;
        if i.is_multiple_of(71) {
            Op::write("/f", 4096 + k as u64 * 4096, 4096, 2000 + k as u64)
        } else {
            Op::write("/f", 0, 16, 3000 + i as u64)
        }
    };
    out.push(around(
        "thorough_gc_file",
        vec![Op::create("/f")],
        sparse,
        30_000,
        |r| gc_count(r, GcKind::Thorough) > 0,
        GcKind::Thorough,
    ));
    // Thorough GC of a directory: create/unlink cycles, 32 pairs then a
    // name that stays, so most log pages keep a live entry and fast GC
    // cannot free them.
    let cycle = |i: usize| {
        let p = i % 65;
        let n = format!("/d/tmp-{}", (p / 2) % 7);
        if p == 64 {
            Op::create(format!("/d/stay-{i}"))
        } else if p.is_multiple_of(2) {
            Op::create(n)
        } else {
            Op::Unlink(n)
        }
    };
    out.push(around(
        "thorough_gc_dir",
        vec![Op::mkdir("/d"), Op::create("/d/keep")],
        cycle,
        40_000,
        |r| gc_count(r, GcKind::Thorough) > 0,
        GcKind::Thorough,
    ));
    // Thorough GC started by the unlink, or the rename over an existing
    // name, that cancels an add: the add moves to the compacted log before
    // it is invalidated (the regression fixed in namespace.rs `commit_parts`). A
    // name that stays every 64 steps keeps fast GC from freeing the pages.
    for (name, by_rename) in [
        ("thorough_gc_dir_by_unlink", false),
        ("thorough_gc_dir_by_rename", true),
    ] {
        let step = move |i: usize| {
            let tmp = |k: usize| format!("/d/tmp-{k}");
            if i.is_multiple_of(64) {
                Op::create(format!("/d/stay-{i}"))
            } else if i % 2 == 1 {
                Op::create(tmp(i))
            } else if by_rename {
                Op::rename(tmp(i - 1), "/d/b", 0)
            } else {
                Op::Unlink(tmp(i - 1))
            }
        };
        let mut last = 0;
        let mut i = 0usize;
        let cancelling_op_compacted = |r: &Runner| {
            let now = gc_count(r, GcKind::Thorough);
            let cancels = i.is_multiple_of(2) && !i.is_multiple_of(64);
            let hit = now > last && cancels;
            (last, i) = (now, i + 1);
            hit
        };
        out.push(around(
            name,
            vec![Op::mkdir("/d"), Op::create("/d/b")],
            step,
            40_000,
            cancelling_op_compacted,
            GcKind::Thorough,
        ));
    }
    // Thorough GC of a log of xattr entries: three names set over and
    // over, one value in data pages that the compacted log must keep, and
    // a name that stays every 32 steps, so fast GC cannot free the pages.
    let churn = |i: usize| match i {
        0 => Op::setxattr("/f", "user.pages", 6000, 50),
        _ if i.is_multiple_of(32) => Op::setxattr("/f", &format!("user.stay{i}"), 40, 60 + i as u64),
        _ => Op::setxattr("/f", ["user.a", "user.b", "user.c"][i % 3], 40, 60 + i as u64),
    };
    out.push(around(
        "thorough_gc_xattr",
        vec![Op::create("/f"), Op::write("/f", 0, 100, 49)],
        churn,
        5000,
        |r| gc_count(r, GcKind::Thorough) > 0,
        GcKind::Thorough,
    ));
    out.push(thorough_gc_for_space());
    // A journal transaction that wraps around the end of the ring.
    let pair = |i: usize| {
        let a = format!("/x{}", (i / 3) % 5);
        let b = format!("/y{}", (i / 3) % 5);
        if i.is_multiple_of(3) {
            Op::create(a)
        } else if i % 3 == 1 {
            Op::rename(a, b, 0)
        } else {
            Op::Unlink(b)
        }
    };
    let ring = novafs::probe::layout::JOURNAL_RING_SIZE;
    let mut last: Option<u64> = None;
    let wrapped = move |r: &Runner| {
        let t = journal_head(&**r.region());
        let hit = last.is_some_and(|l| t / ring != l / ring && !t.is_multiple_of(ring));
        last = Some(t);
        hit
    };
    out.push(window("journal_wraps", Vec::new(), pair, 100_000, wrapped, 2, 1));
    out
}

/// Thorough GC for space (`Fs::writing`): directories churned at
/// random (about 20 live names of 40) hold logs that the third keeps
/// waiting for fast GC; then one file grows a page at a time, its log all
/// live, until the write that found no space compacted those logs and
/// went on. No write may fail before that (the trial would say so).
fn thorough_gc_for_space() -> Generated {
    let mut rng = novafs_rng::SplitMix::new(28);
    let mut setup = vec![Op::create("/fill")];
    for d in 0..8 {
        setup.push(Op::mkdir(format!("/d{d}")));
        let mut live = [false; 40];
        for _ in 0..600 + 100 * d {
            let i = rng.below(live.len() as u64) as usize;
            let name = format!("/d{d}/f{i}");
            setup.push(if live[i] { Op::Unlink(name) } else { Op::create(name) });
            live[i] = !live[i];
        }
    }
    let fill = |i: usize| Op::write("/fill", i as u64 * 4096, 4096, 7000 + i as u64);
    let mut base = None;
    let compacted = move |r: &Runner| {
        let now = gc_count(r, GcKind::Thorough);
        *base.get_or_insert(now) < now
    };
    let (name, w) = window("thorough_gc_for_space", setup, fill, 4000, compacted, 2, 0);
    (
        name,
        w.map(|mut w| {
            w.gc = Some(GcKind::Thorough);
            w
        }),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_trial_that_never_gets_there_is_an_error_naming_the_workload() {
        let (name, w) = window(
            "never",
            vec![Op::create("/f")],
            |i| Op::write("/f", 0, 8, i as u64),
            5,
            |_| false,
            1,
            1,
        );
        assert_eq!(name, "never");
        assert_eq!(
            w.unwrap_err(),
            "workload never: what the trial waits for never happened in 5 operations"
        );
    }

    #[test]
    fn a_trial_op_that_fails_is_an_error_naming_the_workload_and_the_op() {
        let (_, w) = around(
            "broken",
            Vec::new(),
            |_| Op::Unlink("/missing".into()),
            5,
            |_| true,
            GcKind::Fast,
        );
        let e = w.unwrap_err();
        assert!(
            e.starts_with("workload broken: trial op 0 (unlink /missing) failed: "),
            "{e}"
        );
    }

    #[test]
    fn a_trial_that_gets_there_places_the_window_around_the_op() {
        let mut n = 0;
        let stop = |_: &Runner| {
            n += 1;
            n == 4
        };
        let (_, w) = window("w", Vec::new(), |i| Op::create(format!("/f{i}")), 10, stop, 1, 1);
        let w = w.unwrap();
        let names = |ops: &[Op]| ops.iter().map(|o| o.to_string()).collect::<Vec<_>>().join(", ");
        assert_eq!(names(&w.setup), "create /f0, create /f1");
        assert_eq!(names(&w.ops), "create /f2, create /f3, create /f4");
    }
}
