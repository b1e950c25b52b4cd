//! The transitions of the model test: the steps a sequence is made of,
//! the strategies that generate them, and the reference state machine
//! that applies them to the model.

use std::fmt;

use novafs::MAX_FILE_SIZE;
use novafs::{SetAttr, RENAME_EXCHANGE, RENAME_NOREPLACE};
use novafs_ops::{self as op, At, Op, Owner, Whence};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::Union;
use proptest_state_machine::ReferenceStateMachine;

use super::*;

// ---------------------------------------------------------------------------
// Transitions.

/// One step of a sequence: an operation of novafs's vocabulary, a few
/// operations at once, or a remount.
#[derive(Clone, Debug)]
pub enum Step {
    Op(Op),
    /// Many small writes at scattered offsets, one [`Op::Write`] each:
    /// grows the file's log until garbage collection runs (NOVA §4.6).
    WriteMany {
        at: At,
        seed: u8,
        count: usize,
    },
    /// Creates `count` files named after `base`, unlinking seven of every
    /// eight at once: grows the directory's log with dead entries.
    DirChurn {
        dir: String,
        base: u64,
        count: usize,
    },
    Remount,
    Crash,
    /// Unmount (or crash), mount read-only and compare everything; every
    /// change must give EROFS; then mount read-write again.
    ReadOnly {
        crash: bool,
    },
}

impl Step {
    /// The open handle the step names, if any.
    pub fn handle(&self) -> Option<usize> {
        match self {
            Step::Op(op) => op.handle(),
            Step::WriteMany { at, .. } => at.handle(),
            Step::DirChurn { .. } | Step::Remount | Step::Crash | Step::ReadOnly { .. } => None,
        }
    }
}

/// File offsets: mostly small, some near page boundaries, a few far out
/// (sparse files), a few at the largest file size (EFBIG).
pub fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => 0..20_000u64,
        3 => (0..6u64, 0..7u64).prop_map(|(k, d)| (k * PAGE + d).saturating_sub(3)),
        1 => (0..20_000u64).prop_map(|x| (1 << 20) + x),
        1 => (0..8192u64).prop_map(|x| (1 << 30) - PAGE + x),
        1 => (0..8192u64).prop_map(|x| MAX_FILE_SIZE - PAGE + x),
    ]
}

pub fn length() -> impl Strategy<Value = u64> {
    prop_oneof![
        5 => 0..20_000u64,
        3 => (1..6u64, 0..7u64).prop_map(|(k, d)| (k * PAGE + d).saturating_sub(3)),
        2 => 1..64u64,
    ]
}

/// The writes of [`Step::WriteMany`] as (offset, length, data seed):
/// offsets within 64 KiB, 1 to 300 bytes.
pub fn many_writes(seed: u8, count: usize) -> Vec<(u64, u64, u64)> {
    let mut rng = novafs_rng::SplitMix::new(u64::from(seed));
    (0..count)
        .map(|i| {
            let off = rng.below(65_536);
            let len = 1 + rng.below(300);
            (off, len, u64::from(seed.wrapping_add(i as u8) | 1))
        })
        .collect()
}

pub fn churn_name(base: u64, i: usize) -> String {
    format!("t{base}_{i}")
}

pub fn long_name() -> String {
    "x".repeat(NAME_MAX + 1)
}

pub fn name() -> BoxedStrategy<String> {
    prop_oneof![
        30 => select(&POOL[..]).prop_map(str::to_string),
        1 => Just(long_name()),
        1 => Just(NAME_MAX).prop_map(|n| "y".repeat(n)),
        1 => select(&[".", ".."][..]).prop_map(str::to_string),
    ]
    .boxed()
}

/// Attribute names: a few of each namespace kept, now and then one that
/// is refused.
pub fn xattr_name() -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        20 => select(&["user.a", "user.b", "trusted.t", "security.s"][..]).prop_map(|n| n.as_bytes().to_vec()),
        1 => select(&["foo.x", "user.", ""][..]).prop_map(|n| n.as_bytes().to_vec()),
        1 => Just([b"user.".as_slice(), &[b'n'; 251]].concat()),
    ]
    .boxed()
}

pub fn weighted<T: fmt::Debug + 'static>(arms: Vec<(u32, BoxedStrategy<T>)>) -> BoxedStrategy<T> {
    Union::new_weighted(arms).boxed()
}

pub struct Reference;

impl ReferenceStateMachine for Reference {
    type State = Model;
    type Transition = Step;

    fn init_state() -> BoxedStrategy<Model> {
        Just(Model::new()).boxed()
    }

    fn transitions(s: &Model) -> BoxedStrategy<Step> {
        let dirs = s.dir_paths();
        let entries = s.entries();
        let files: Vec<_> = entries
            .iter()
            .filter(|e| matches!(s.node(e.2).body, Body::File(_)))
            .cloned()
            .collect();
        let subdirs: Vec<_> = entries.iter().filter(|e| s.node(e.2).is_dir()).cloned().collect();
        let nhandles = s.handles.len();
        let path_of = |(dir, name, _): (String, String, Id)| join(&dir, &name);

        // Parents: mostly real directories, sometimes any name (ENOTDIR).
        let mut dir_arms = vec![(9, select(dirs.clone()).boxed())];
        if !entries.is_empty() {
            dir_arms.push((1, select(entries.clone()).prop_map(path_of).boxed()));
        }
        let dir = weighted(dir_arms);
        // A path in a parent: mostly a fresh name.
        let fresh = (dir.clone(), name()).prop_map(|(d, n)| join(&d, &n)).boxed();
        let mut target_arms = vec![(1, fresh.clone().prop_map(At::Path).boxed())];
        if !entries.is_empty() {
            target_arms.push((3, select(entries.clone()).prop_map(path_of).prop_map(At::Path).boxed()));
        }
        if !files.is_empty() {
            target_arms.push((8, select(files.clone()).prop_map(path_of).prop_map(At::Path).boxed()));
        }
        if nhandles > 0 {
            target_arms.push((3, (0..nhandles).prop_map(At::Handle).boxed()));
        }
        let target = weighted(target_arms);
        // An existing name (for unlink, rename sources), or a fresh one.
        let mut existing_arms = vec![(1, fresh.clone().boxed())];
        if !entries.is_empty() {
            existing_arms.push((4, select(entries.clone()).prop_map(path_of).boxed()));
        }
        let existing = weighted(existing_arms);

        let op = |s: BoxedStrategy<Op>| s.prop_map(Step::Op).boxed();
        let perm = select(&[0o644u32, 0o600, 0o755, 0o4755][..]);
        let owner = select(&[0u32, 1000][..]);
        let mut arms: Vec<(u32, BoxedStrategy<Step>)> = vec![
            (
                10,
                op((fresh.clone(), perm.clone(), owner.clone(), owner.clone())
                    .prop_map(|(path, perm, uid, gid)| Op::Create {
                        path,
                        perm,
                        owner: Owner { uid, gid },
                    })
                    .boxed()),
            ),
            (
                5,
                op((fresh.clone(), perm)
                    .prop_map(|(path, perm)| Op::Mkdir {
                        path,
                        perm,
                        owner: ROOT_OWNER,
                    })
                    .boxed()),
            ),
            (
                2,
                op((fresh.clone(), any::<bool>(), 0..0x1_0000u64)
                    .prop_map(|(path, fifo, rdev)| {
                        let (mode, rdev) = if fifo {
                            (libc::S_IFIFO, 0)
                        } else {
                            (libc::S_IFCHR, rdev)
                        };
                        Op::Mknod {
                            path,
                            mode: mode | 0o640,
                            rdev,
                            owner: ROOT_OWNER,
                        }
                    })
                    .boxed()),
            ),
            (
                2,
                op((
                    fresh.clone(),
                    prop_oneof![
                        8 => "[a-z/.]{1,40}".prop_map(String::into_bytes),
                        1 => Just(Vec::new()),
                        1 => Just(vec![b'L'; 4095]),
                        1 => Just(vec![b'L'; 4096]),
                    ],
                )
                    .prop_map(|(path, target)| Op::Symlink {
                        path,
                        target,
                        owner: ROOT_OWNER,
                    })
                    .boxed()),
            ),
            (2, op(target.clone().prop_map(Op::Readlink).boxed())),
            (2, op(target.clone().prop_map(Op::Stat).boxed())),
            (
                4,
                op((target.clone(), fresh.clone())
                    .prop_map(|(from, to)| Op::Link { from, to })
                    .boxed()),
            ),
            (6, op(existing.clone().prop_map(Op::Unlink).boxed())),
            (3, op(existing.clone().prop_map(Op::Rmdir).boxed())),
            (
                10,
                op((
                    existing.clone(),
                    prop_oneof![2 => fresh.clone(), 1 => existing.clone()],
                    select(&[0, 0, RENAME_NOREPLACE, RENAME_EXCHANGE][..]),
                )
                    .prop_map(|(from, to, flags)| Op::Rename { from, to, flags })
                    .boxed()),
            ),
            (
                12,
                op((target.clone(), offset(), length(), any::<u8>())
                    .prop_map(|(at, off, len, seed)| Op::Write {
                        at,
                        off,
                        len,
                        seed: seed.into(),
                    })
                    .boxed()),
            ),
            (
                6,
                op((target.clone(), offset(), length())
                    .prop_map(|(at, off, len)| Op::Read { at, off, len })
                    .boxed()),
            ),
            (
                4,
                op((target.clone(), offset())
                    .prop_map(|(at, size)| Op::truncate(at, size))
                    .boxed()),
            ),
            (
                3,
                op((
                    target.clone(),
                    proptest::option::of(select(&[0o600u32, 0o777, 0o1777, 0o4711, 0o100644][..])),
                    proptest::option::of(0..3u32),
                    proptest::option::of(0..3u32),
                    proptest::option::of(0..1_000_000_000_000i64),
                )
                    .prop_map(|(at, mode, uid, gid, mtime)| Op::Setattr {
                        at,
                        set: SetAttr::default().mode(mode).uid(uid).gid(gid).mtime(mtime),
                    })
                    .boxed()),
            ),
            (
                4,
                op((target.clone(), select(&[0u32, 1, 3][..]), offset(), length())
                    .prop_map(|(at, mode, off, len)| Op::Fallocate { at, mode, off, len })
                    .boxed()),
            ),
            (
                4,
                op((target.clone(), offset(), select(&[Whence::Data, Whence::Hole][..]))
                    .prop_map(|(at, off, whence)| Op::Lseek { at, off, whence })
                    .boxed()),
            ),
            (1, op(target.clone().prop_map(Op::Fsync).boxed())),
            (
                4,
                op((
                    target.clone(),
                    xattr_name(),
                    select(&[0usize, 10, 900, 5000, 65_536, 65_537][..]),
                    any::<u8>(),
                    select(&[0u32, 0, novafs::XATTR_CREATE, novafs::XATTR_REPLACE][..]),
                )
                    .prop_map(|(at, name, len, seed, flags)| Op::SetXattr {
                        at,
                        name,
                        value: op::data(u64::from(seed) + 1, len as u64),
                        flags,
                    })
                    .boxed()),
            ),
            (
                2,
                op((target.clone(), xattr_name())
                    .prop_map(|(at, name)| Op::RemoveXattr { at, name })
                    .boxed()),
            ),
            (
                2,
                op((target.clone(), xattr_name())
                    .prop_map(|(at, name)| Op::GetXattr { at, name })
                    .boxed()),
            ),
            (1, op(target.clone().prop_map(Op::ListXattr).boxed())),
            (
                2,
                (target.clone(), 1..=255u8, 50..300usize)
                    .prop_map(|(at, seed, count)| Step::WriteMany { at, seed, count })
                    .boxed(),
            ),
            (
                1,
                (dir.clone(), Just(s.next_id), 20..200usize)
                    .prop_map(|(dir, base, count)| Step::DirChurn { dir, base, count })
                    .boxed(),
            ),
            (3, op(target.prop_map(Op::Open).boxed())),
            (
                3,
                op((dir, 1..5usize)
                    .prop_map(|(path, limit)| Op::Readdir { path, offset: 0, limit })
                    .boxed()),
            ),
            (1, Just(Step::Op(Op::Statfs)).boxed()),
            (
                1,
                op(select(&POOL[..]).prop_map(|n| Op::Snapshot(format!("s-{n}"))).boxed()),
            ),
            (
                1,
                op(select(&POOL[..])
                    .prop_map(|n| Op::DeleteSnapshot(format!("s-{n}")))
                    .boxed()),
            ),
            (2, Just(Step::Remount).boxed()),
            (2, Just(Step::Crash).boxed()),
            (1, any::<bool>().prop_map(|crash| Step::ReadOnly { crash }).boxed()),
        ];
        if nhandles > 0 {
            arms.push((6, op((0..nhandles).prop_map(|i| Op::Release(At::Handle(i))).boxed())));
        }
        if !subdirs.is_empty() {
            arms.push((
                3,
                op(select(subdirs.clone()).prop_map(path_of).prop_map(Op::Rmdir).boxed()),
            ));
            // A directory into itself or below itself.
            arms.push((
                2,
                op((select(subdirs), select(&POOL[..]), any::<bool>())
                    .prop_map(move |(e, newname, deeper)| {
                        let from = path_of(e);
                        let mut to = join(&from, newname);
                        if deeper {
                            to = join(&to, newname);
                        }
                        Op::rename(from, to, 0)
                    })
                    .boxed()),
            ));
        }
        weighted(arms)
    }

    fn preconditions(s: &Model, step: &Step) -> bool {
        step.handle().is_none_or(|i| i < s.handles.len())
    }

    fn apply(mut s: Model, step: &Step) -> Model {
        s.expect = s.step(step);
        s
    }
}
