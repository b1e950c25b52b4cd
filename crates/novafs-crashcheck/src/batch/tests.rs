#![allow(clippy::unwrap_used)]
use super::*;
use crate::tree::Content;
use pm::Trace;

fn file(perm: u32, ctime: i64) -> Node {
    Node {
        kind: "RegularFile".into(),
        perm,
        uid: 1,
        gid: 1,
        nlink: 1,
        size: 0,
        blocks: 0,
        rdev: 0,
        atime: 1,
        mtime: 1,
        ctime,
        first_name: "/a".into(),
        content: Content::Bytes(Vec::new()),
        target: None,
        xattrs: Vec::new(),
    }
}

/// States around ops 0 (mount), 1 (a batched chmod of `/a`, linked as
/// `/h` too) and 2 (an fsync), with `batch` as the tracker would leave it.
fn recorded(batch: Batched) -> Recorded {
    let tree = |perm, ctime| {
        let mut t = Tree::default();
        t.nodes.insert("/a".into(), file(perm, ctime));
        t.nodes.insert("/h".into(), file(perm, ctime));
        t
    };
    Recorded {
        ops: vec![Op::Mount, Op::chmod("/a", 0o600), Op::Fsync("/a".into())],
        trace: Trace {
            base: Vec::new(),
            events: Vec::new(),
        },
        states: vec![tree(0o644, 5), tree(0o644, 5), tree(0o600, 9), tree(0o600, 9)],
        errors: Vec::new(),
        in_place: 1,
        batch,
    }
}

fn lost_chmod() -> Lost {
    Lost(
        ["/a", "/h"]
            .iter()
            .flat_map(|p| [(p.to_string(), Field::Perm, 0o644), (p.to_string(), Field::Ctime, 5)])
            .collect(),
    )
}

fn batched() -> Batched {
    Batched {
        at: vec![Lost::default(), Lost::default(), lost_chmod(), Lost::default()],
        applied: vec![Lost::default(), lost_chmod(), lost_chmod()],
        commits: vec![false, false, true],
    }
}

const CMP: Compare = Compare { times: true };

#[test]
fn without_batching_the_legal_states_are_the_exact_ones() {
    let rec = recorded(Batched::default());
    let o = Oracle::new(&rec, CMP);
    assert_eq!(o.states(Some(1), Some(0)), vec![Legal::Exact(1), Legal::Exact(2)]);
    assert_eq!(o.states(None, Some(1)), vec![Legal::Exact(2)]);
    assert_eq!(o.states(None, None), vec![Legal::Exact(0)]);
    assert_eq!(o.torn_pairs(1), vec![(Legal::Exact(1), Legal::Exact(2))]);
}

#[test]
fn a_batched_change_is_lost_on_every_link_until_the_commit_and_never_kept_before() {
    let rec = recorded(batched());
    let o = Oracle::new(&rec, CMP);
    // After the chmod returned: lost, on both names; the chmod kept is
    // illegal (nothing of the running transaction reaches the media
    // before its commit).
    let after_chmod = o.states(None, Some(1));
    assert_eq!(after_chmod, vec![Legal::Lost(2)]);
    assert_eq!(o.tree(Legal::Lost(2)), &rec.states[1]);
    assert!(!o.accepts(&after_chmod, rec.states[2].digest(CMP)));
    assert!(o.lost_only(&after_chmod, rec.states[1].digest(CMP)));
    // One name lost, the other not: no state.
    let half = Lost(lost_chmod().0.into_iter().filter(|(p, _, _)| p == "/a").collect()).apply(&rec.states[2]);
    assert!(!o.accepts(&after_chmod, half.digest(CMP)));
    // The mode lost but not the ctime of the same transaction: no state.
    let mode_only = Lost(
        lost_chmod()
            .0
            .into_iter()
            .filter(|(_, f, _)| *f == Field::Perm)
            .collect(),
    );
    assert!(!o.accepts(&after_chmod, mode_only.apply(&rec.states[2]).digest(CMP)));
    // During the fsync: lost, or committed.
    let during = o.states(Some(2), None);
    assert_eq!(
        during,
        vec![Legal::Lost(2), Legal::Applied(2), Legal::Exact(2), Legal::Exact(3)]
    );
    assert!(o.accepts(&during, rec.states[3].digest(CMP)));
    assert!(o.accepts(&during, rec.states[1].digest(CMP)));
    // After it: committed, exactly.
    assert_eq!(o.states(None, Some(2)), vec![Legal::Exact(3)]);
    assert!(!o.accepts(&o.states(None, Some(2)), rec.states[1].digest(CMP)));
    assert_eq!(
        Oracle::describe(Legal::Lost(2), Some(2)),
        "the state before the op with the running transaction lost"
    );
}

#[test]
fn only_fsync_snapshot_unmount_and_remount_must_commit() {
    for op in [
        Op::Fsync("/a".into()),
        Op::Snapshot("s".into()),
        Op::Unmount,
        Op::Remount,
    ] {
        assert!(commits(&op), "{op}");
    }
    for op in [Op::create("/x"), Op::chmod("/a", 0o600), Op::Unlink("/a".into())] {
        assert!(!commits(&op), "{op}");
    }
}
