//! Model-based property test of the POSIX surface (DESIGN.md §4): random
//! operation sequences run on novafs and on an in-memory reference tree, and
//! every result is compared — values, attributes and exact errnos. Clean and
//! crash remounts are part of the sequence; after each one the whole tree is
//! compared, the free-space count is checked for leaks and fsck must be clean.
//!
//! The operations are novafs's own vocabulary ([`novafs_ops::Op`]), run on
//! novafs by its one interpreter ([`novafs_ops::Runner`]); the reference
//! model and its steps are the test's own (`reference/`). This file holds
//! the system under test: the checks after each step read the whole tree
//! through `Fs` by inode number.
//!
//! Where POSIX lets several errors apply to one call, the model accepts any
//! of them; otherwise it expects exactly one. Scale with `PROPTEST_CASES`.
#![allow(clippy::unwrap_used)]

mod common;
mod reference;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use common::assert_fsck_clean;
use novafs::{Attr, Consistency, DirEntry, Error, FormatOptions, Fs, Ino, MountReport, SetAttr, ROOT_INO, SEEK_DATA};
use novafs_ops::{At, Observed, Op, OpError, Runner, Whence};
use pm::MemRegion;
use proptest::test_runner::Config;
use proptest_state_machine::{prop_state_machine, StateMachineTest};

use reference::*;

// ---------------------------------------------------------------------------
// The system under test.

/// [`Step::DirChurn`] on novafs: tells `kept` the index and inode number
/// of each file it keeps.
fn churn(
    runner: &mut Runner,
    dir: &str,
    base: u64,
    count: usize,
    mut kept: impl FnMut(usize, Ino),
) -> Result<(), OpError> {
    for i in 0..count {
        let path = join(dir, &churn_name(base, i));
        let create = Op::Create {
            path: path.clone(),
            perm: 0o600,
            owner: ROOT_OWNER,
        };
        let Observed::Attr(a) = runner.apply(&create)? else {
            unreachable!("create observes attributes")
        };
        if i % 8 != 0 {
            runner.apply(&Op::Unlink(path))?;
        } else {
            kept(i, a.ino);
        }
    }
    Ok(())
}

/// A full readdir: `chunk(offset)` reads the entries after `offset`, each
/// chunk resuming from the last one's offset.
fn read_all(mut chunk: impl FnMut(u64) -> Vec<DirEntry>, ctx: &dyn fmt::Debug) -> Vec<DirEntry> {
    let mut all = Vec::new();
    let mut off = 0;
    loop {
        let got = chunk(off);
        let Some(last) = got.last() else { break };
        assert!(last.next_offset > off, "readdir offsets go forward ({ctx:?})");
        off = last.next_offset;
        all.extend(got);
    }
    all
}

struct Sut {
    runner: Runner,
    inos: HashMap<Id, Ino>,
    /// The model after the last transition, for the teardown's check.
    model: Option<Model>,
}

impl Sut {
    /// The mounted file system, for the checks that read everything by
    /// inode number.
    fn fs(&self) -> &Fs {
        self.runner.fs().unwrap()
    }

    /// Runs `step` through the interpreter; `first_id` is the model number
    /// its first new node gets.
    fn run(&mut self, step: &Step, first_id: Id) -> Result<Observed, OpError> {
        match step {
            Step::Op(op) => self.runner.apply(op),
            Step::WriteMany { at, seed, count } => {
                for (off, len, seed) in many_writes(*seed, *count) {
                    self.runner.apply(&Op::write(at.clone(), off, len, seed))?;
                }
                Ok(Observed::Done)
            }
            Step::DirChurn { dir, base, count } => {
                // The model numbers the files in creation order from
                // `first_id`; the kept ones need their inode numbers.
                let mut kept = Vec::new();
                let r = churn(&mut self.runner, dir, *base, *count, |i, ino| {
                    kept.push((first_id + i as u64, ino));
                });
                self.inos.extend(kept);
                r.map(|()| Observed::Done)
            }
            Step::Remount | Step::Crash | Step::ReadOnly { .. } => unreachable!("checked by the harness directly"),
        }
    }

    /// Compares a node's attributes with the model.
    fn check_attr(&self, m: &Model, id: Id, a: &Attr, ctx: &dyn fmt::Debug) {
        let n = m.node(id);
        if let Some(&ino) = self.inos.get(&id) {
            assert_eq!(a.ino, ino, "inode number of model node {id} after {ctx:?}");
        }
        let want_size = match &n.body {
            Body::File(b) => Some(b.size),
            Body::Symlink(t) => Some(t.len() as u64),
            Body::Special(..) => Some(0),
            Body::Dir(_) => None,
        };
        let rdev = match n.body {
            Body::Special(_, r) => r,
            _ => 0,
        };
        assert_eq!(
            (a.kind, a.perm, a.uid, a.gid, a.nlink, a.rdev),
            (n.kind(), n.perm, n.uid, n.gid, m.nlink(id), rdev),
            "attributes of model node {id} (ino {}) after {ctx:?}",
            a.ino
        );
        if let Some(size) = want_size {
            assert_eq!(a.size, size, "size of model node {id} after {ctx:?}");
        }
        if let Some(t) = n.mtime {
            assert_eq!(a.mtime, t, "mtime of model node {id} after {ctx:?}");
        }
    }

    /// Every live node's attributes and every directory's names.
    fn check_shape(&self, m: &Model, ctx: &dyn fmt::Debug) {
        let fs = self.fs();
        for (&id, n) in &m.nodes {
            let ino = self.inos[&id];
            let a = fs
                .getattr(ino)
                .unwrap_or_else(|e| panic!("getattr of model node {id} (ino {ino}) after {ctx:?}: {e}"));
            self.check_attr(m, id, &a, ctx);
            assert_eq!(
                fs.listxattr(ino).unwrap(),
                xattr_list(n),
                "xattr names of model node {id} after {ctx:?}"
            );
            for (name, v) in &n.xattrs {
                assert!(
                    fs.getxattr(ino, name).unwrap() == *v,
                    "xattr {} of model node {id} after {ctx:?}",
                    String::from_utf8_lossy(name)
                );
            }
            if let Some(children) = n.children() {
                let want: Vec<(Vec<u8>, Ino)> = children
                    .iter()
                    .map(|(name, c)| (name.clone().into_bytes(), self.inos[c]))
                    .collect();
                let all = read_all(
                    |off| {
                        let mut got = Vec::new();
                        fs.readdir(ino, off, |e| {
                            got.push(e);
                            false
                        })
                        .unwrap();
                        got
                    },
                    ctx,
                );
                let got = self.check_listing(ino, all, ctx);
                assert_eq!(got, want, "names in model directory {id} after {ctx:?}");
                assert_eq!(
                    fs.lookup(ino, b"..").unwrap().ino,
                    self.inos[&n.parent],
                    "'..' of model directory {id} after {ctx:?}"
                );
            }
        }
    }

    /// Checks the full listing `all` of directory `ino` ("." and "..",
    /// kinds, no name twice); returns its names sorted, without "." and "..".
    fn check_listing(&self, ino: Ino, all: Vec<DirEntry>, ctx: &dyn fmt::Debug) -> Vec<(Vec<u8>, Ino)> {
        let fs = self.fs();
        let parent = fs.lookup(ino, b"..").unwrap().ino;
        assert_eq!(
            all.iter()
                .filter(|e| e.name == b"." || e.name == b"..")
                .map(|e| (e.name.clone(), e.ino))
                .collect::<Vec<_>>(),
            vec![(b".".to_vec(), ino), (b"..".to_vec(), parent)],
            "'.' and '..' of ino {ino} ({ctx:?})"
        );
        let mut v: Vec<(Vec<u8>, Ino)> = all
            .into_iter()
            .filter(|e| e.name != b"." && e.name != b"..")
            .map(|e| {
                let a = fs.getattr(e.ino).unwrap();
                assert_eq!(a.kind, e.kind, "readdir kind of {:?} ({ctx:?})", e.name);
                (e.name, e.ino)
            })
            .collect();
        let n = v.len();
        v.sort();
        v.dedup_by(|a, b| a.0 == b.0);
        assert_eq!(v.len(), n, "readdir listed a name twice ({ctx:?})");
        v
    }

    /// File contents and symlink targets of every node.
    fn check_contents(&self, m: &Model, ctx: &dyn fmt::Debug) {
        let fs = self.fs();
        for (&id, n) in &m.nodes {
            let ino = self.inos[&id];
            match &n.body {
                Body::Symlink(t) => assert_eq!(&fs.readlink(ino).unwrap(), t, "{ctx:?}"),
                Body::File(b) => {
                    // Read in 1 MiB chunks, skipping chunks that are holes
                    // in both the model and novafs.
                    const CHUNK: u64 = 1 << 20;
                    let mut pos = 0;
                    while pos < b.size {
                        let model_next = b
                            .pages
                            .range(pos / PAGE..)
                            .next()
                            .map_or(b.size, |(&p, _)| (p * PAGE).max(pos));
                        let fs_next = fs.lseek(ino, pos, SEEK_DATA).unwrap_or(b.size);
                        let start = model_next.min(fs_next) / PAGE * PAGE;
                        let start = start.max(pos);
                        if start >= b.size {
                            break;
                        }
                        let end = (start + CHUNK).min(b.size);
                        let mut buf = vec![0xEE; (end - start) as usize];
                        let got = fs.read(ino, start, &mut buf).unwrap();
                        assert_eq!(got, buf.len(), "short read of node {id} ({ctx:?})");
                        let want = b.read(start, buf.len());
                        if buf != want {
                            let i = buf.iter().zip(&want).position(|(x, y)| x != y).unwrap();
                            panic!(
                                "contents of model node {id} differ at byte {} \
                                 (novafs {:#x}, model {:#x}) after {ctx:?}",
                                start + i as u64,
                                buf[i],
                                want[i]
                            );
                        }
                        pos = end;
                    }
                }
                _ => {}
            }
        }
    }

    fn check_seek(&self, b: &Bytes, off: u64, whence: Whence, got: &Result<Observed, OpError>, step: &Step) {
        let data = whence == Whence::Data;
        let size = b.size;
        if off >= size {
            assert!(
                matches!(got, Err(OpError::Fs(Error::NoSuchOffset))),
                "lseek at/after EOF must be ENXIO: {step:?} gave {got:?}"
            );
            return;
        }
        let nz = b.next_nonzero(off);
        match got {
            Ok(Observed::Offset(r)) if data => {
                assert!(
                    (off..size).contains(r),
                    "SEEK_DATA result {r} outside [{off}, {size}): {step:?}"
                );
                if let Some(nz) = nz {
                    assert!(*r <= nz, "SEEK_DATA {r} skips data at {nz}: {step:?}");
                }
            }
            Ok(Observed::Offset(r)) => {
                assert!(
                    (off..=size).contains(r),
                    "SEEK_HOLE result {r} outside [{off}, {size}]: {step:?}"
                );
                let page_end = ((r / PAGE + 1) * PAGE).min(size);
                if *r < size {
                    assert!(
                        b.read(*r, (page_end - r) as usize).iter().all(|&x| x == 0),
                        "SEEK_HOLE {r} points at data: {step:?}"
                    );
                }
            }
            Err(OpError::Fs(Error::NoSuchOffset)) if data => {
                assert!(nz.is_none(), "SEEK_DATA ENXIO but data at {nz:?}: {step:?}");
            }
            other => panic!("{step:?} gave {other:?}"),
        }
    }

    fn remount(&mut self, m: &Model, r: &Remount, step: &dyn fmt::Debug) {
        let before = self.fs().statfs();
        self.runner
            .apply(if r.clean { &Op::Unmount } else { &Op::Crash })
            .unwrap();
        assert_fsck_clean(self.runner.region());
        if r.read_only {
            let rep = mount_report(self.runner.apply(&Op::MountReadOnly));
            assert_eq!(rep.clean, r.clean, "read-only mount after {step:?}");
            self.check_shape(m, step);
            self.check_contents(m, step);
            self.check_read_only(m, step);
            self.runner.apply(&Op::Unmount).unwrap();
            assert_fsck_clean(self.runner.region());
        }
        let rep = mount_report(self.runner.apply(&Op::Mount));
        // A clean unmount saved the allocators and the snapshots'
        // manifests, and ended the orphans (freed, or kept for a snapshot):
        // no scan.
        let (scanned, reclaimed) = if r.clean { (0, 0) } else { (r.live, r.orphans) };
        assert_eq!(
            (rep.clean, rep.scanned_inodes, rep.orphans_reclaimed),
            (r.clean, scanned, reclaimed),
            "mount report (clean, scanned, orphans) after {step:?}"
        );
        let by_shard: u64 = rep.shards.iter().map(|s| s.inodes).sum();
        assert_eq!(by_shard, rep.scanned_inodes, "the shards' scans add up after {step:?}");
        let after = self.fs().statfs();
        if r.orphans == 0 {
            assert_eq!(after, before, "statfs across {step:?}: space leaked or invented");
        } else if r.snapshots {
            // An orphan a snapshot may see is kept, pages and all.
            assert!(after.blocks_free >= before.blocks_free, "{step:?}");
        } else {
            assert!(after.blocks_free > before.blocks_free, "{step:?}");
        }
        self.check_shape(m, step);
        self.check_contents(m, step);
    }

    /// On a read-only mount every change gives EROFS and changes nothing.
    fn check_read_only(&mut self, m: &Model, step: &dyn fmt::Debug) {
        let file = m
            .entries()
            .into_iter()
            .find(|(_, _, id)| matches!(m.node(*id).body, Body::File(_)))
            .map_or_else(|| "/".to_string(), |(dir, name, _)| join(&dir, &name));
        let set = SetAttr::default().mode(0o600).size(1);
        let changes = [
            Op::create("/ro"),
            Op::mkdir("/ro"),
            Op::mknod("/ro", libc::S_IFIFO | 0o644, 0),
            Op::symlink("/ro", "t"),
            Op::link(file.as_str(), "/ro"),
            Op::Unlink("/a".into()),
            Op::Rmdir("/d1".into()),
            Op::rename("/a", "/b", 0),
            Op::Setattr {
                at: file.as_str().into(),
                set,
            },
            Op::write(file.as_str(), 0, 2, 1),
            Op::fallocate(file.as_str(), 0, 0, 4096),
            Op::setxattr("/", "user.ro", 3, 1),
            Op::removexattr("/", "user.ro"),
        ];
        for op in &changes {
            match self.runner.apply(op) {
                Err(e) => assert_eq!(
                    e.fs_error().map(Error::errno),
                    Some(libc::EROFS),
                    "{op} on a read-only mount: {e:?}"
                ),
                Ok(o) => panic!("{op} succeeded ({o:?}) on a read-only mount after {step:?}"),
            }
        }
        self.check_shape(m, step);
    }
}

/// The report of a mount that must have succeeded.
fn mount_report(r: Result<Observed, OpError>) -> MountReport {
    match r {
        Ok(Observed::Mounted(rep)) => rep,
        other => panic!("mount: {other:?}"),
    }
}

struct NovaTest;

impl StateMachineTest for NovaTest {
    type SystemUnderTest = Sut;
    type Reference = Reference;

    fn init_test(_: &Model) -> Sut {
        // Every other case on an image without metadata replicas (an image
        // made before they existed, or with `mkfs --no-meta-replicas`), and
        // every other pair in relaxed mode (Fortis §4.6: overwrites and
        // setattrs in place), which the model must not tell apart.
        static CASES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let case = CASES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mode = if (case / 2).is_multiple_of(2) {
            Consistency::Strict
        } else {
            Consistency::Relaxed
        };
        let format = FormatOptions::default()
            .shards(2)
            .meta_replicas(case.is_multiple_of(2))
            .consistency(mode);
        let mut runner = Runner::new(Arc::new(MemRegion::new(64 << 20)), format);
        runner.apply(&Op::Mkfs).unwrap();
        runner.apply(&Op::Mount).unwrap();
        Sut {
            runner,
            inos: HashMap::from([(ROOT, ROOT_INO)]),
            model: None,
        }
    }

    fn apply(sut: Sut, m: &Model, step: Step) -> Sut {
        let mut sut = run_step(sut, m, step);
        sut.model = Some(m.clone());
        sut
    }

    fn check_invariants(sut: &Sut, m: &Model) {
        let fs = sut.fs();
        // Files a churn created and removed were never given numbers: their
        // slots may be reused within the churn.
        for id in m.freed.iter().filter(|id| sut.inos.contains_key(id)) {
            let ino = sut.inos[id];
            assert!(
                matches!(fs.getattr(ino), Err(Error::NotFound)),
                "model node {id} (ino {ino}) was freed but novafs still has it"
            );
        }
        sut.check_shape(m, &"the last transition");
        sut.check_contents(m, &"the last transition");
        let names: Vec<String> = fs
            .snapshots()
            .into_iter()
            .map(|s| String::from_utf8(s.name).unwrap())
            .collect();
        assert_eq!(names, m.snapshots, "the snapshot list after the last transition");
    }

    fn teardown(mut sut: Sut) {
        // A last clean remount, compared in full.
        let Some(mut m) = sut.model.take() else {
            return;
        };
        let Expect::Remounted(r) = m.step(&Step::Remount) else {
            unreachable!()
        };
        sut.remount(&m, &r, &"teardown");
        sut.runner.apply(&Op::Unmount).unwrap();
        assert_fsck_clean(sut.runner.region());
    }
}

/// Runs `step` on novafs and compares its result with the model's.
fn run_step(mut sut: Sut, m: &Model, step: Step) -> Sut {
    {
        match (&m.expect, &step) {
            (Expect::Skip, _) => return sut,
            (Expect::Remounted(r), _) => {
                sut.remount(m, r, &step);
                return sut;
            }
            (Expect::Listing(id), Step::Op(Op::Readdir { path, limit, .. })) => {
                // The whole directory, chunk by chunk, from this first one.
                let all = read_all(
                    |offset| {
                        let page = Op::Readdir {
                            path: path.clone(),
                            offset,
                            limit: *limit,
                        };
                        match sut.runner.apply(&page) {
                            Ok(Observed::Entries(es)) => es,
                            other => panic!("{page}: {other:?}"),
                        }
                    },
                    &step,
                );
                let want: Vec<(Vec<u8>, Ino)> = m
                    .node(*id)
                    .children()
                    .unwrap()
                    .iter()
                    .map(|(name, c)| (name.clone().into_bytes(), sut.inos[c]))
                    .collect();
                assert_eq!(sut.check_listing(sut.inos[id], all, &step), want, "{step:?}");
                return sut;
            }
            _ => {}
        }
        let first_id = sut.model.as_ref().map_or(ROOT + 1, |p| p.next_id);
        let got = sut.run(&step, first_id);
        match (&m.expect, &got) {
            (Expect::Err(want), Err(e)) => {
                let errno = e.fs_error().map(Error::errno);
                assert!(
                    errno.is_some_and(|n| want.contains(&n)),
                    "{step:?}: got {e:?} (errno {errno:?}), want one of {want:?}"
                );
            }
            (Expect::Ok, Ok(Observed::Done)) => {}
            (Expect::Statfs, Ok(Observed::Statfs(s))) => {
                assert_eq!((s.block_size, s.name_max), (4096, 255));
                assert!(s.blocks_free <= s.blocks && s.files_free <= s.files, "{s:?}");
                assert!(s.blocks > 14_000, "64 MiB region: {s:?}");
            }
            (Expect::Written(n), Ok(Observed::Written(k))) => assert_eq!(n, k, "{step:?}"),
            (Expect::Data(d), Ok(Observed::Data(g))) => {
                assert_eq!(g.len(), d.len(), "length of {step:?}");
                assert!(g == d, "bytes of {step:?} differ from the model");
            }
            (Expect::Seek(id), _) => {
                let Body::File(b) = &m.node(*id).body else {
                    unreachable!()
                };
                let Step::Op(Op::Lseek { off, whence, .. }) = step else {
                    unreachable!()
                };
                sut.check_seek(b, off, whence, &got, &step);
            }
            (Expect::Opened(id, keep), Ok(Observed::Attr(a))) => {
                sut.check_attr(m, *id, a, &step);
                if !keep {
                    // Kept by the model for files only: the new handle is
                    // the one after those the model holds.
                    let last = At::Handle(m.handles.len());
                    sut.runner.apply(&Op::Release(last)).unwrap();
                }
            }
            (Expect::Node(id), Ok(Observed::Attr(a))) => {
                if let Some(&ino) = sut.inos.get(id) {
                    assert_eq!(ino, a.ino, "{step:?} acted on the wrong inode");
                } else {
                    assert!(
                        !sut.inos.iter().any(|(k, &i)| i == a.ino && m.nodes.contains_key(k)),
                        "{step:?} reused live inode {}",
                        a.ino
                    );
                    sut.inos.insert(*id, a.ino);
                }
                sut.check_attr(m, *id, a, &step);
            }
            (want, got) => panic!("{step:?}: got {got:?}, want {want:?}"),
        }
    }
    sut
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512)
}

prop_state_machine! {
    #![proptest_config(Config {
        cases: cases(),
        failure_persistence: None,
        max_shrink_iters: 4096,
        ..Config::default()
    })]

    /// Random operation sequences with remounts and crashes agree with the
    /// reference model at every step.
    #[test]
    fn random_operations_match_the_reference_model(sequential 1..80 => NovaTest);
}
