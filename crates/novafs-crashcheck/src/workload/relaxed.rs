//! Relaxed-mode scenarios (NOVA-Fortis §4.6, README "Relaxed mode"): an
//! overwrite inside the file changes its data pages in place under a
//! journal intent, and a setattr or the overwrite's new mtime changes the
//! inode's newest log entry in place; everything else goes copy-on-write.
//! Each scenario names how each of its operations must go, and the live
//! run checks it ([`way_of`]), so a scenario that silently went
//! copy-on-write fails instead of passing with nothing torn to check.

use novafs::inject::{self, Target};
use novafs::{Consistency, PAGE_SIZE};
use novafs_ops::{At, Op, Runner};

use super::Workload;

const PS: u64 = PAGE_SIZE;

/// How an operation changed the node it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// No log entry appended, no data page moved, a journal transaction
    /// committed: the newest entry (and for a write the pages) changed in
    /// place.
    InPlace,
    /// A log entry appended or a data page replaced.
    CopyOnWrite,
    /// The node's attributes changed with no log entry appended, no data
    /// page moved and no journal transaction: the newest entry's words
    /// joined a batching mount's running transaction, in DRAM until it
    /// commits ([`crate::batch`]).
    Batched,
}

/// What the live run shows of one inode, to tell how an operation changed
/// it (read from the media: reads are not part of a recording).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Look {
    /// Where its committed log entries are.
    pub entries: Vec<u64>,
    /// The data pages it maps.
    pub pages: Vec<u64>,
    /// Journal commits the mount has made: transactions, and single words
    /// (an in-place overwrite ends as one: its intent).
    pub commits: u64,
    /// Where its committed setattr entries are (a new one carries every
    /// attribute the inode has in DRAM).
    pub setattrs: Vec<u64>,
    /// Its attributes as the mount shows them.
    pub attr: novafs::Attr,
}

/// The inode at `path` as the media and the mount show it now.
pub fn look(r: &Runner, path: &str) -> Result<Look, String> {
    let fs = r.fs().ok_or("not mounted")?;
    let ino = fs.resolve(path).map_err(|e| format!("{path}: {e}"))?.ino;
    look_ino(r, ino).map_err(|e| format!("{path}: {e}"))
}

/// [`look`] at inode `ino`.
pub fn look_ino(r: &Runner, ino: novafs::Ino) -> Result<Look, String> {
    let fs = r.fs().ok_or("not mounted")?;
    let attr = fs.getattr(ino).map_err(|e| e.to_string())?;
    let at = |t| -> Result<Vec<novafs::inject::Located>, String> {
        inject::locate(&**r.region(), t, ino).map_err(|e| format!("locate {t:?}: {e}"))
    };
    let first = |v: &[novafs::inject::Located], only: &dyn Fn(&str) -> bool| {
        v.iter()
            .filter(|l| only(&l.what))
            .filter_map(|l| l.copies.first().map(|c| c.1))
            .collect()
    };
    let entries = at(Target::LogEntry)?;
    Ok(Look {
        entries: first(&entries, &|_| true),
        pages: first(&at(Target::DataPage)?, &|_| true),
        commits: {
            let j = fs.journal_stats();
            j.txns + j.words
        },
        setattrs: first(&entries, &|w| w == "log entry (setattr)"),
        attr,
    })
}

/// How an operation went, from the looks before and after it; `None`
/// when it changed nothing of the node.
pub fn way_of(before: &Look, after: &Look) -> Option<Way> {
    if before.entries != after.entries || before.pages != after.pages {
        Some(Way::CopyOnWrite)
    } else if after.commits > before.commits {
        Some(Way::InPlace)
    } else if after.attr != before.attr {
        Some(Way::Batched)
    } else {
        None
    }
}

/// The path of the node `op` may change in place: a write's or a
/// setattr's, named by path.
pub(crate) fn target(op: &Op) -> Option<&str> {
    match op {
        Op::Write { at: At::Path(p), .. } | Op::Setattr { at: At::Path(p), .. } => Some(p),
        _ => None,
    }
}

/// A relaxed workload whose ops go as each says (`None`: not checked).
fn relaxed_workload(name: &str, setup: Vec<Op>, ops: Vec<(Op, Option<Way>)>) -> Workload {
    let mut w = Workload::new(name, setup, ops.iter().map(|(op, _)| op.clone()).collect());
    w.consistency = Consistency::Relaxed;
    w.ways = ops
        .iter()
        .enumerate()
        .filter_map(|(i, (_, way))| way.map(|way| (i, way)))
        .collect();
    w
}

/// The relaxed-mode scenarios. Strips are 512 bytes, pages 4 KiB; the
/// setups leave `/f` 4 pages long, its newest entry the write that filled
/// it.
pub fn relaxed() -> Vec<Workload> {
    use Way::{CopyOnWrite as Cow, InPlace};
    let r = relaxed_workload;
    let f = || vec![Op::create("/f"), Op::write("/f", 0, 4 * PS, 1)];
    let inp = |op: Op| (op, Some(InPlace));
    let cow = |op: Op| (op, Some(Cow));
    vec![
        r(
            "relaxed_overwrite_strip",
            f(),
            vec![inp(Op::write("/f", 100, 64, 2)), inp(Op::write("/f", PS + 600, 200, 3))],
        ),
        r(
            "relaxed_overwrite_strips",
            f(),
            vec![inp(Op::write("/f", 300, 1000, 4))],
        ),
        r(
            "relaxed_overwrite_page_boundary",
            f(),
            vec![inp(Op::write("/f", PS - 300, 700, 5))],
        ),
        r(
            "relaxed_overwrite_whole_page",
            f(),
            vec![inp(Op::write("/f", PS, PS, 6))],
        ),
        r(
            // Four pages: the intent moves page by page.
            "relaxed_overwrite_pages",
            f(),
            vec![inp(Op::write("/f", 1000, 3 * PS, 7))],
        ),
        r(
            // The append's write entry is the newest: it takes the mtime.
            "relaxed_overwrite_after_append",
            vec![Op::create("/f"), Op::write("/f", 0, 5000, 1)],
            vec![
                cow(Op::write("/f", 5000, 5000, 8)),
                inp(Op::write("/f", 5100, 3000, 9)),
                inp(Op::write("/f", 50, 10, 10)),
            ],
        ),
        r(
            // A link's entry is no place for a mode; the chmod's setattr
            // then takes the overwrite's mtime and ctime, and the next
            // chmod. Both names show the torn bytes.
            "relaxed_overwrite_after_chmod",
            vec![Op::create("/f"), Op::write("/f", 0, 4 * PS, 1), Op::link("/f", "/h")],
            vec![
                cow(Op::chmod("/f", 0o600)),
                inp(Op::write("/f", 200, 300, 11)),
                inp(Op::chmod("/f", 0o640)),
                inp(Op::write("/h", 2 * PS + 10, 100, 12)),
            ],
        ),
        r(
            // A chmod to the same mode in place between two overwrites in
            // place of one setattr: it changes only the ctime, so the
            // entry is the same but for its times, and the second write's
            // intent must never bring back the first one's time (its redo
            // words fail the check by their generation).
            "relaxed_overwrite_around_chmod",
            vec![Op::create("/f"), Op::write("/f", 0, 2 * PS, 1), Op::chmod("/f", 0o600)],
            vec![
                inp(Op::write("/f", 100, 200, 25)),
                inp(Op::chmod("/f", 0o600)),
                inp(Op::write("/f", PS + 100, 200, 26)),
            ],
        ),
        r(
            // An xattr entry cannot take an mtime: copy-on-write, whose
            // write entry then can.
            "relaxed_overwrite_after_setxattr",
            f(),
            vec![
                (Op::setxattr("/f", "user.a", 10, 13), None),
                cow(Op::write("/f", 100, 50, 14)),
                inp(Op::write("/f", 200, 50, 15)),
            ],
        ),
        r(
            // The snapshot keeps its pages: copied, the view unchanged;
            // a page written since is changed in place; once the snapshot
            // is gone, the old pages are too.
            "relaxed_overwrite_after_snapshot",
            f(),
            vec![
                (Op::Snapshot("s".into()), None),
                cow(Op::write("/f", 100, 300, 16)),
                cow(Op::write("/f", PS + 100, 100, 17)),
                inp(Op::write("/f", 150, 100, 18)),
                (Op::DeleteSnapshot("s".into()), None),
                inp(Op::write("/f", 2 * PS + 5, 100, 19)),
            ],
        ),
        r(
            // Each kind twice in a row, the newest setattr rewritten.
            "relaxed_setattr_in_place",
            vec![Op::create("/g")],
            vec![
                cow(Op::chmod("/g", 0o600)),
                inp(Op::chmod("/g", 0o640)),
                inp(Op::chmod("/g", 0o604)),
                inp(Op::chown("/g", 7, 8)),
                inp(Op::chown("/g", 9, 10)),
                inp(Op::utimens("/g", 1_000_000_000, 2_000_000_000)),
                inp(Op::utimens("/g", 3_000_000_000, 4_000_000_000)),
            ],
        ),
        r(
            // A size change goes copy-on-write; its setattr then takes an
            // overwrite's mtime; a write into the hole is copied.
            "relaxed_truncate",
            f(),
            vec![
                cow(Op::truncate("/f", 3 * PS + 100)),
                inp(Op::write("/f", 100, 200, 20)),
                cow(Op::truncate("/f", 5 * PS)),
                inp(Op::write("/f", 3 * PS + 50, 500, 21)),
                cow(Op::write("/f", 4 * PS + 10, 100, 22)),
            ],
        ),
        r(
            // A remount finds the newest entry again, and a clean unmount
            // after in-place changes leaves a clean image.
            "relaxed_remount",
            f(),
            vec![
                inp(Op::write("/f", 10, 100, 23)),
                (Op::Remount, None),
                inp(Op::write("/f", 2 * PS + 7, 50, 24)),
                (Op::Unmount, None),
            ],
        ),
    ]
}

/// Checks how the live run went against what `w` says: `seen[i]` is how
/// op `i` of `w.ops` changed its node, if it named one and succeeded.
/// Returns how many ops went in place (batched or not).
pub(crate) fn check_ways(w: &Workload, seen: &[Option<Way>]) -> Result<usize, String> {
    for &(i, want) in &w.ways {
        let got = seen.get(i).copied().flatten();
        if got != Some(want) {
            let how = got.map_or("changed its node neither way".into(), |g| format!("went {g:?}"));
            return Err(format!(
                "op {} ({}) {how} in the live run; the workload needs {want:?}",
                i + 1,
                w.ops[i]
            ));
        }
    }
    let in_place = seen
        .iter()
        .filter(|s| matches!(s, Some(Way::InPlace | Way::Batched)))
        .count();
    if in_place < w.min_in_place {
        return Err(format!(
            "{in_place} op(s) went in place in the live run; the workload needs {}",
            w.min_in_place
        ));
    }
    Ok(in_place)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::engine::record;

    #[test]
    fn a_relaxed_workload_whose_overwrites_go_copy_on_write_fails_its_live_run() {
        let mut w = relaxed()
            .into_iter()
            .find(|w| w.name == "relaxed_overwrite_strip")
            .unwrap();
        assert_eq!(record(&w).unwrap().in_place, 2);
        // The same ops on a strict image copy every page.
        w.consistency = Consistency::Strict;
        let e = record(&w).err().unwrap();
        assert!(
            e.contains("op 1 (write /f off 100 len 64 seed 2) went CopyOnWrite"),
            "{e}"
        );
    }

    #[test]
    fn every_relaxed_workload_names_how_its_writes_and_setattrs_go() {
        for w in relaxed() {
            assert!(w.relaxed(), "{}", w.name);
            assert!(w.ways.iter().any(|&(_, way)| way == Way::InPlace), "{}", w.name);
            for (i, op) in w.ops.iter().enumerate() {
                let named = w.ways.iter().any(|&(j, _)| j == i);
                assert_eq!(named, target(op).is_some(), "{}: op {i} ({op})", w.name);
            }
        }
    }
}
