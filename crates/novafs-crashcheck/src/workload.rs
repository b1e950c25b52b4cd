//! Workloads: the catalog of scenarios the checker sweeps (one per
//! operation type, multi-operation sequences, log growth, fast and thorough
//! GC, journal wrap-around, orphans, remounts), written in novafs's
//! operation vocabulary ([`novafs_ops`]) and run by its [`Runner`].

use std::sync::Arc;

use novafs::{FormatOptions, RENAME_EXCHANGE, RENAME_NOREPLACE, RENAME_WHITEOUT};
use novafs::{FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE};
use novafs_ops::{Op, Runner};
use pm::{MemRegion, Region};

use crate::tree::Tree;
use novafs_rng::SplitMix as Rng;

/// Size of every crash-test region: small, so images are cheap to copy.
/// Metadata replicas are on, as mkfs does by default, with a dead zone of
/// 64 KiB instead of 1 MiB to keep the region small.
pub const REGION_SIZE: u64 = 8 << 20;

/// A runner on `region` whose mkfs lays out `shards` shards, not mounted.
pub fn runner(region: Arc<dyn Region>, shards: u32) -> Runner {
    let format = FormatOptions {
        shards: Some(shards),
        dead_zone: 64 << 10,
        ..Default::default()
    };
    Runner::new(region, format)
}

/// A runner on a freshly formatted heap region of `size` bytes with
/// `shards` shards, not mounted yet.
pub fn fresh_runner(size: u64, shards: u32) -> Result<Runner, String> {
    let mut r = runner(Arc::new(MemRegion::new(size)), shards);
    r.apply(&Op::Mkfs).map_err(|e| format!("format: {e}"))?;
    Ok(r)
}

/// Applies `op`; an error is the file system's answer, as text. With
/// `spread` the operation runs on a new thread: threads take shards in
/// turn, so operations spread over every shard's journal and inode table.
pub fn apply(r: &mut Runner, op: &Op, spread: bool) -> Result<(), String> {
    if spread {
        return std::thread::scope(|s| {
            s.spawn(|| apply(r, op, false))
                .join()
                .unwrap_or_else(|_| Err(format!("{op} panicked")))
        });
    }
    r.apply(op).map(drop).map_err(|e| e.to_string())
}

/// The visible tree of the mounted file system.
pub fn tree_of(r: &Runner) -> Result<Tree, String> {
    Tree::capture(r.fs().ok_or("not mounted")?)
}

/// What a recorded run must do besides its operations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Expect {
    /// Every operation must succeed.
    #[default]
    AllSucceed,
    /// Operations may fail (random sequences); a failure must change nothing.
    MaySucceed,
}

/// Which GC counter a workload must move during its recorded operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GcKind {
    Fast,
    Thorough,
}

/// A scenario: operations run before recording (not crash-tested, their
/// result cleanly unmounted is the starting image), then the recorded ones.
#[derive(Clone, Debug)]
pub struct Workload {
    pub name: String,
    pub setup: Vec<Op>,
    /// Recorded after an implicit [`Op::Mount`], which is operation 0.
    pub ops: Vec<Op>,
    pub expect: Expect,
    /// The recorded operations must run this kind of GC at least once.
    pub gc: Option<GcKind>,
    /// Region size (default [`REGION_SIZE`]).
    pub region_size: u64,
    /// Shards at mkfs (default 1), and whether operations rotate through
    /// them (see [`apply`]).
    pub shards: u32,
    pub spread: bool,
}

impl Workload {
    fn new(name: &str, setup: Vec<Op>, ops: Vec<Op>) -> Workload {
        Workload {
            name: name.into(),
            setup,
            ops,
            expect: Expect::AllSucceed,
            gc: None,
            region_size: REGION_SIZE,
            shards: 1,
            spread: false,
        }
    }

    /// The recorded operations: mount, then `ops`.
    pub fn recorded_ops(&self) -> Vec<Op> {
        let mut v = vec![Op::Mount];
        v.extend(self.ops.iter().cloned());
        v
    }
}

/// The GC counter for `kind` of the file system `r` has mounted (0 when
/// none is).
pub fn gc_count(r: &Runner, kind: GcKind) -> u64 {
    let s = r.fs().map(novafs::Fs::gc_stats).unwrap_or_default();
    match kind {
        GcKind::Fast => s.fast_pages,
        GcKind::Thorough => s.thorough_runs,
    }
}

/// Sets ACL `name` of `path` to `(tag, perm)` entries; named users'
/// entries (tag 2) are for uid 1001, the others take no id.
fn set_acl(path: &str, name: &str, entries: &[(u16, u16)]) -> Op {
    let mut value = 2u32.to_le_bytes().to_vec();
    for &(tag, perm) in entries {
        let id = if tag == 2 { 1001 } else { u32::MAX };
        value.extend_from_slice(&tag.to_le_bytes());
        value.extend_from_slice(&perm.to_le_bytes());
        value.extend_from_slice(&id.to_le_bytes());
    }
    Op::SetXattr {
        at: path.into(),
        name: name.into(),
        value,
        flags: 0,
    }
}

/// The hand-written scenarios: one per operation type and form, plus a few
/// multi-operation sequences. Log growth, GC and journal wrap-around
/// workloads are built by [`generated`] (they need a trial run).
pub fn catalog() -> Vec<Workload> {
    let w = Workload::new;
    let f = || vec![Op::create("/f")];
    let f_with = |len: u64| vec![Op::create("/f"), Op::write("/f", 0, len, 1)];
    vec![
        w(
            "create",
            vec![Op::mkdir("/d")],
            vec![Op::create("/a"), Op::create("/d/b")],
        ),
        w(
            "mkdir",
            vec![Op::mkdir("/d")],
            vec![Op::mkdir("/a"), Op::mkdir("/d/b"), Op::mkdir("/d/b/c")],
        ),
        w(
            "mknod",
            vec![],
            vec![
                Op::mknod("/fifo", libc::S_IFIFO | 0o600, 0),
                Op::mknod("/chr", libc::S_IFCHR | 0o640, 0x0501),
                Op::mknod("/blk", libc::S_IFBLK | 0o640, 0x0802),
                Op::mknod("/sock", libc::S_IFSOCK | 0o700, 0),
                Op::mknod("/reg", libc::S_IFREG | 0o600, 0),
            ],
        ),
        w(
            "symlink",
            vec![Op::mkdir("/d")],
            vec![
                Op::symlink("/l", "d/target"),
                Op::symlink("/d/long", "x/".repeat(1500)),
                Op::symlink("/max", "y".repeat(4095)),
            ],
        ),
        w(
            "write_small",
            f(),
            vec![Op::write("/f", 0, 100, 2), Op::write("/f", 200, 1, 3)],
        ),
        w("write_large", f(), vec![Op::write("/f", 0, 300 * 1024, 4)]),
        w(
            "write_unaligned",
            f_with(10_000),
            vec![
                Op::write("/f", 1000, 9000, 5),
                Op::write("/f", 4095, 2, 6),
                Op::write("/f", 12_000, 5000, 7),
            ],
        ),
        w(
            "overwrite",
            f_with(3 * 4096),
            vec![
                Op::write("/f", 4096, 4096, 8),
                Op::write("/f", 100, 50, 9),
                Op::write("/f", 0, 3 * 4096, 10),
            ],
        ),
        w(
            "append",
            f_with(5000),
            vec![
                Op::write("/f", 5000, 3000, 11),
                Op::write("/f", 8000, 10, 12),
                Op::write("/f", 8010, 8192, 13),
            ],
        ),
        w(
            "truncate_down",
            f_with(4 * 4096 + 300),
            vec![
                Op::truncate("/f", 3 * 4096 + 5),
                Op::truncate("/f", 2 * 4096),
                Op::truncate("/f", 100),
                Op::truncate("/f", 0),
            ],
        ),
        w(
            "truncate_up",
            f_with(100),
            vec![
                Op::truncate("/f", 10_000),
                Op::write("/f", 10_000, 10, 14),
                Op::truncate("/f", 50_000),
            ],
        ),
        w(
            "fallocate",
            f_with(1000),
            vec![
                Op::fallocate("/f", 0, 0, 16_384),
                Op::fallocate("/f", FALLOC_FL_KEEP_SIZE, 16_384, 8192),
                Op::fallocate("/f", 0, 30_000, 100),
            ],
        ),
        w(
            "punch_hole",
            f_with(4 * 4096),
            vec![
                Op::fallocate("/f", FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 4096, 4096),
                Op::fallocate("/f", FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 100, 5000),
                Op::fallocate("/f", FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 3 * 4096 + 10, 20),
            ],
        ),
        w(
            "zero_range",
            f_with(4 * 4096),
            vec![
                Op::fallocate("/f", FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 100, 9000),
                Op::fallocate("/f", FALLOC_FL_ZERO_RANGE, 3 * 4096 + 10, 20_000),
            ],
        ),
        w(
            "unlink",
            vec![
                Op::create("/f"),
                Op::write("/f", 0, 9000, 15),
                Op::link("/f", "/g"),
                Op::create("/e"),
            ],
            vec![
                Op::Unlink("/f".into()),
                Op::Unlink("/g".into()),
                Op::Unlink("/e".into()),
            ],
        ),
        w(
            "rmdir",
            vec![Op::mkdir("/d"), Op::mkdir("/d/e")],
            vec![Op::Rmdir("/d/e".into()), Op::Rmdir("/d".into())],
        ),
        w(
            "rename_in_dir",
            vec![Op::create("/a"), Op::write("/a", 0, 100, 16), Op::mkdir("/d")],
            vec![Op::rename("/a", "/b", 0), Op::rename("/d", "/e", 0)],
        ),
        w(
            "rename_across_dirs",
            vec![
                Op::mkdir("/d1"),
                Op::mkdir("/d2"),
                Op::create("/d1/f"),
                Op::write("/d1/f", 0, 100, 17),
            ],
            vec![Op::rename("/d1/f", "/d2/f", 0), Op::rename("/d2/f", "/g", 0)],
        ),
        w(
            "rename_over_file",
            vec![
                Op::create("/a"),
                Op::write("/a", 0, 100, 18),
                Op::create("/b"),
                Op::write("/b", 0, 5000, 19),
            ],
            vec![Op::rename("/a", "/b", 0)],
        ),
        w(
            "rename_over_linked_file",
            vec![
                Op::mkdir("/d"),
                Op::create("/a"),
                Op::create("/b"),
                Op::write("/b", 0, 70, 20),
                Op::link("/b", "/d/b2"),
            ],
            vec![Op::rename("/a", "/b", 0), Op::rename("/d/b2", "/a", 0)],
        ),
        w(
            "rename_dir_across_dirs",
            vec![
                Op::mkdir("/d1"),
                Op::mkdir("/d2"),
                Op::mkdir("/d1/sub"),
                Op::create("/d1/sub/f"),
                Op::mkdir("/d1/sub/x"),
            ],
            vec![Op::rename("/d1/sub", "/d2/sub", 0), Op::rename("/d2/sub/x", "/x", 0)],
        ),
        w(
            "rename_dir_over_empty_dir",
            vec![
                Op::mkdir("/d1"),
                Op::mkdir("/d2"),
                Op::mkdir("/d1/sub"),
                Op::create("/d1/sub/f"),
                Op::mkdir("/d2/empty"),
                Op::mkdir("/e"),
            ],
            vec![Op::rename("/d1/sub", "/d2/empty", 0), Op::rename("/d2", "/e", 0)],
        ),
        w(
            "rename_exchange",
            vec![
                Op::mkdir("/d"),
                Op::create("/a"),
                Op::write("/a", 0, 10, 21),
                Op::create("/b"),
                Op::mkdir("/d/sub"),
            ],
            vec![
                Op::rename("/a", "/b", RENAME_EXCHANGE),
                Op::rename("/a", "/d/sub", RENAME_EXCHANGE),
            ],
        ),
        w(
            "rename_exchange_dirs",
            vec![
                Op::mkdir("/e1"),
                Op::mkdir("/e2"),
                Op::mkdir("/e1/x"),
                Op::mkdir("/e2/y"),
                Op::create("/e1/x/f"),
                Op::mkdir("/e2/y/z"),
            ],
            vec![
                Op::rename("/e1/x", "/e2/y", RENAME_EXCHANGE),
                Op::rename("/e1/x/z", "/e2/y/f", RENAME_EXCHANGE),
            ],
        ),
        w(
            // The old name becomes a whiteout (a new inode) in the rename's
            // own transaction: across directories over a file, and in place.
            "rename_whiteout",
            vec![
                Op::mkdir("/d"),
                Op::create("/a"),
                Op::write("/a", 0, 100, 27),
                Op::create("/d/b"),
                Op::create("/c"),
            ],
            vec![
                Op::rename("/a", "/d/b", RENAME_WHITEOUT),
                Op::rename("/c", "/c2", RENAME_WHITEOUT),
            ],
        ),
        w(
            "rename_noreplace",
            vec![Op::mkdir("/d"), Op::create("/a")],
            vec![Op::rename("/a", "/d/a", RENAME_NOREPLACE)],
        ),
        w(
            "link",
            vec![Op::mkdir("/d"), Op::create("/f"), Op::write("/f", 0, 10, 22)],
            vec![Op::link("/f", "/g"), Op::link("/f", "/d/h")],
        ),
        w(
            "setattr",
            vec![Op::create("/f"), Op::mkdir("/d")],
            vec![
                Op::chmod("/f", 0o600),
                Op::chown("/f", 7, 8),
                Op::utimens("/f", 1_000_000_000, 2_000_000_000),
                Op::chmod("/d", 0o700),
            ],
        ),
        w(
            // Inline values, a value in data pages, replacing one by the
            // other (the old pages freed after the commit) and removals.
            "xattr",
            vec![Op::create("/f"), Op::mkdir("/d"), Op::symlink("/l", "f")],
            vec![
                Op::setxattr("/f", "user.a", 10, 40),
                Op::setxattr("/f", "user.a", 300, 41),
                Op::setxattr("/f", "user.big", 9000, 42),
                Op::setxattr("/d", "trusted.t", 0, 0),
                Op::setxattr("/l", "security.s", 20, 43),
                Op::removexattr("/f", "user.a"),
                Op::setxattr("/f", "user.big", 100, 44),
                Op::setxattr("/d", "user.big", 60_000, 45),
                Op::removexattr("/d", "user.big"),
            ],
        ),
        w(
            // Snapshots (Fortis §3.1): each record is one tail commit of
            // the list's log, whose first append also sets its head; a
            // long name takes several slots; a deletion is a record too.
            "snapshot",
            vec![Op::create("/f"), Op::write("/f", 0, 5000, 1)],
            vec![
                Op::Snapshot("a".into()),
                Op::write("/f", 100, 200, 2),
                Op::Snapshot("b".repeat(200)),
                Op::DeleteSnapshot("a".into()),
                Op::create("/g"),
                Op::Snapshot("c".into()),
                Op::DeleteSnapshot("b".repeat(200)),
            ],
        ),
        w(
            // What snapshots keep (Fortis §3.2): overwritten and truncated
            // data, an unlinked file and a removed directory, an xattr
            // value in pages; deleting the snapshots hands the pages on or
            // frees them.
            "snapshot_keep",
            vec![
                Op::create("/f"),
                Op::write("/f", 0, 3 * 4096, 1),
                Op::mkdir("/d"),
                Op::create("/d/g"),
                Op::write("/d/g", 0, 5000, 2),
                Op::setxattr("/f", "user.big", 5000, 3),
            ],
            vec![
                Op::Snapshot("a".into()),
                Op::write("/f", 0, 4096, 4),
                Op::Unlink("/d/g".into()),
                Op::Rmdir("/d".into()),
                Op::Snapshot("b".into()),
                Op::truncate("/f", 100),
                Op::setxattr("/f", "user.big", 10, 5),
                Op::DeleteSnapshot("a".into()),
                Op::DeleteSnapshot("b".into()),
            ],
        ),
        w(
            // POSIX ACLs: the access ACL and the mode change together, a
            // chmod rewrites the ACL, new nodes inherit a default ACL.
            "acl",
            vec![Op::create("/f"), Op::mkdir("/d")],
            vec![
                set_acl(
                    "/f",
                    "system.posix_acl_access",
                    &[(1, 6), (2, 4), (4, 4), (0x10, 6), (0x20, 0)],
                ),
                Op::chmod("/f", 0o640),
                set_acl(
                    "/d",
                    "system.posix_acl_default",
                    &[(1, 7), (2, 5), (4, 5), (0x10, 7), (0x20, 0)],
                ),
                Op::create("/d/g"),
                Op::mkdir("/d/e"),
                set_acl("/f", "system.posix_acl_access", &[(1, 6), (4, 4), (0x20, 4)]),
            ],
        ),
        w(
            "unlink_open_file",
            vec![Op::create("/f"), Op::write("/f", 0, 6000, 23)],
            vec![Op::Open("/f".into()), Op::Unlink("/f".into()), Op::Release("/f".into())],
        ),
        w(
            // A removed directory someone still holds stays, empty and
            // with no links, until released (or a crash reclaims it).
            "rmdir_open_dir",
            vec![Op::mkdir("/d"), Op::mkdir("/d/e")],
            vec![
                Op::Open("/d/e".into()),
                Op::Rmdir("/d/e".into()),
                Op::Open("/d".into()),
                Op::Rmdir("/d".into()),
                Op::Release("/d/e".into()),
                Op::Release("/d".into()),
            ],
        ),
        w(
            "remount",
            vec![Op::create("/f")],
            vec![Op::write("/f", 0, 100, 24), Op::Remount, Op::create("/g"), Op::Unmount],
        ),
        w(
            // The replicas go stale, then a protected mount rewrites them
            // (crash points in both mounts and inside the rewrite).
            "unprotected_mount",
            vec![Op::create("/f"), Op::write("/f", 0, 6000, 30), Op::mkdir("/d")],
            vec![
                Op::Unmount,
                Op::MountUnprotected,
                Op::write("/f", 4096, 3000, 31),
                Op::create("/d/g"),
                Op::rename("/f", "/d/f", 0),
                Op::Unmount,
                Op::Mount,
                Op::write("/d/g", 0, 100, 32),
                Op::Unlink("/d/f".into()),
            ],
        ),
        w(
            "mkfs_over_an_old_image",
            vec![
                Op::mkdir("/old"),
                Op::create("/old/f"),
                Op::write("/old/f", 0, 5000, 26),
            ],
            vec![Op::Unmount, Op::Mkfs, Op::Mount, Op::create("/new")],
        ),
        w(
            "sequence_mixed",
            vec![],
            vec![
                Op::mkdir("/d"),
                Op::create("/d/f"),
                Op::write("/d/f", 0, 5000, 25),
                Op::link("/d/f", "/l"),
                Op::rename("/d/f", "/g", 0),
                Op::symlink("/d/s", "../g"),
                Op::truncate("/g", 1234),
                Op::Unlink("/l".into()),
                Op::mkdir("/d/e"),
                Op::rename("/d/e", "/e", 0),
                Op::Rmdir("/e".into()),
                Op::chmod("/g", 0o400),
                Op::Unmount,
            ],
        ),
    ]
}

/// Runs `ops` on a fresh file system; returns how many of them ran before
/// `stop` returned true after one (the index of that op), or None.
fn first_where(setup: &[Op], ops: impl Iterator<Item = Op>, mut stop: impl FnMut(&Runner) -> bool) -> Option<usize> {
    let mut r = fresh_runner(REGION_SIZE, 1).ok()?;
    r.apply(&Op::Mount).ok()?;
    for op in setup {
        r.apply(op).ok()?;
    }
    for (i, op) in ops.enumerate() {
        r.apply(&op).ok()?;
        if stop(&r) {
            return Some(i);
        }
    }
    None
}

/// A workload whose recorded ops are the `before` ops leading up to the
/// first op of `gen` after which `stop` holds, that op, and `after` more.
fn around(
    name: &str,
    setup: Vec<Op>,
    gen: impl Fn(usize) -> Op,
    limit: usize,
    stop: impl FnMut(&Runner) -> bool,
    before: usize,
    after: usize,
) -> Option<Workload> {
    let at = first_where(&setup, (0..limit).map(&gen), stop)?;
    let start = at.saturating_sub(before);
    let mut all = setup;
    all.extend((0..start).map(&gen));
    Some(Workload::new(name, all, (start..=at + after).map(&gen).collect()))
}

/// Journal head position (bytes since format) of shard 0, read from media.
fn journal_head(region: &dyn Region) -> u64 {
    region
        .load_u64(novafs::layout::JOURNAL_HEADERS_OFF + novafs::layout::JOURNAL_HEAD_FIELD)
        .unwrap_or(0)
}

/// Workloads that need a trial run to place their recorded window: log
/// growth of a file and of a directory, fast GC, thorough GC of a file and
/// of a directory, and a journal transaction that wraps around the ring.
pub fn generated() -> Vec<Workload> {
    let mut out = Vec::new();
    // Log growth: distinct pages stay live, so the log must grow.
    let grow = |i: usize| Op::write("/f", i as u64 * 4096, 8, 100 + i as u64);
    {
        let r = fresh_runner(REGION_SIZE, 1);
        if let Ok(mut r) = r {
            // Find the op after which the file's log occupies a new page:
            // blocks in use jump by more than the one data page.
            let _ = r.apply(&Op::Mount);
            let _ = r.apply(&Op::create("/f"));
            let mut at = None;
            if let Some(fs) = r.fs() {
                let mut free = fs.statfs().blocks_free;
                for i in 0..400 {
                    let _ = r.apply(&grow(i));
                    let fs = r.fs().expect("mounted");
                    let now = fs.statfs().blocks_free;
                    if free - now > 1 && i > 0 {
                        at = Some(i);
                        break;
                    }
                    free = now;
                }
            }
            if let Some(at) = at {
                let mut setup = vec![Op::create("/f")];
                setup.extend((0..at - 1).map(grow));
                out.push(Workload::new(
                    "log_growth_file",
                    setup,
                    (at - 1..at + 2).map(grow).collect(),
                ));
            }
        }
    }
    {
        let name = |i: usize| format!("/d/entry-{i:04}");
        let gen = |i: usize| Op::create(name(i));
        if let Ok(mut r) = fresh_runner(REGION_SIZE, 1) {
            let _ = r.apply(&Op::Mount);
            let _ = r.apply(&Op::mkdir("/d"));
            let mut at = None;
            if r.fs().is_some() {
                let mut free = r.fs().map_or(0, |f| f.statfs().blocks_free);
                for i in 0..400 {
                    let _ = r.apply(&gen(i));
                    let now = r.fs().map_or(0, |f| f.statfs().blocks_free);
                    if free > now && i > 0 {
                        at = Some(i);
                        break;
                    }
                    free = now;
                }
            }
            if let Some(at) = at {
                let mut setup = vec![Op::mkdir("/d")];
                setup.extend((0..at - 1).map(gen));
                out.push(Workload::new(
                    "log_growth_dir",
                    setup,
                    (at - 1..at + 2).map(gen).collect(),
                ));
            }
        }
    }
    // Fast GC: overwrites of one page leave only dead entries behind.
    let over = |i: usize| Op::write("/f", (i % 3) as u64 * 8, 8, 1000 + i as u64);
    if let Some(mut w) = around(
        "fast_gc",
        vec![Op::create("/f"), Op::write("/f", 0, 4096, 9)],
        over,
        2000,
        |r| gc_count(r, GcKind::Fast) > 0,
        2,
        1,
    ) {
        w.gc = Some(GcKind::Fast);
        out.push(w);
    }
    // Fast GC under a snapshot (Fortis §3.2): the log is covered, so only
    // its dead pages the snapshot cannot replay go; the first page, with
    // the entry the snapshot sees, stays.
    if let Some(mut w) = around(
        "fast_gc_under_snapshot",
        vec![Op::create("/f"), Op::write("/f", 0, 4096, 9), Op::Snapshot("s".into())],
        over,
        2000,
        |r| gc_count(r, GcKind::Fast) > 0,
        2,
        1,
    ) {
        w.gc = Some(GcKind::Fast);
        out.push(w);
    }
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
    if let Some(mut w) = around(
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
        2,
        1,
    ) {
        w.gc = Some(GcKind::Fast);
        out.push(w);
    }
    // Thorough GC of a file (NOVA §4.6): one live page per log page.
    let sparse = |i: usize| {
        let k = i / 71;
        if i.is_multiple_of(71) {
            Op::write("/f", 4096 + k as u64 * 4096, 4096, 2000 + k as u64)
        } else {
            Op::write("/f", 0, 16, 3000 + i as u64)
        }
    };
    if let Some(mut w) = around(
        "thorough_gc_file",
        vec![Op::create("/f")],
        sparse,
        30_000,
        |r| gc_count(r, GcKind::Thorough) > 0,
        2,
        1,
    ) {
        w.gc = Some(GcKind::Thorough);
        out.push(w);
    }
    // Thorough GC of a directory: create/unlink cycles leave remove entries.
    let cycle = |i: usize| {
        let n = format!("/d/tmp-{}", (i / 2) % 7);
        if i.is_multiple_of(2) {
            Op::create(n)
        } else {
            Op::Unlink(n)
        }
    };
    if let Some(mut w) = around(
        "thorough_gc_dir",
        vec![Op::mkdir("/d"), Op::create("/d/keep")],
        cycle,
        40_000,
        |r| gc_count(r, GcKind::Thorough) > 0,
        2,
        1,
    ) {
        w.gc = Some(GcKind::Thorough);
        out.push(w);
    }
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
        if let Some(mut w) = around(
            name,
            vec![Op::mkdir("/d"), Op::create("/d/b")],
            step,
            40_000,
            cancelling_op_compacted,
            2,
            1,
        ) {
            w.gc = Some(GcKind::Thorough);
            out.push(w);
        }
    }
    // Thorough GC of a log of xattr entries: three names set over and
    // over, one value in data pages that the compacted log must keep.
    let churn = |i: usize| match i {
        0 => Op::setxattr("/f", "user.pages", 6000, 50),
        _ => Op::setxattr("/f", ["user.a", "user.b", "user.c"][i % 3], 40, 60 + i as u64),
    };
    if let Some(mut w) = around(
        "thorough_gc_xattr",
        vec![Op::create("/f"), Op::write("/f", 0, 100, 49)],
        churn,
        5000,
        |r| gc_count(r, GcKind::Thorough) > 0,
        2,
        1,
    ) {
        w.gc = Some(GcKind::Thorough);
        out.push(w);
    }
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
    if let Ok(mut r) = fresh_runner(REGION_SIZE, 1) {
        let _ = r.apply(&Op::Mount);
        let ring = novafs::layout::JOURNAL_RING_SIZE;
        let mut at = None;
        let mut last = journal_head(&**r.region());
        for i in 0..100_000 {
            if r.apply(&pair(i)).is_err() {
                break;
            }
            let t = journal_head(&**r.region());
            if t / ring != last / ring && !t.is_multiple_of(ring) {
                at = Some(i);
                break;
            }
            last = t;
        }
        if let Some(at) = at {
            let start = at.saturating_sub(2);
            out.push(Workload::new(
                "journal_wraps",
                (0..start).map(pair).collect(),
                (start..=at + 1).map(pair).collect(),
            ));
        }
    }
    out
}

/// Creates that fill the first inode-table chunk and claim a second one
/// (a 2 MiB chunk linked by one 8-byte pointer).
pub fn inode_table_growth() -> Workload {
    let per_chunk = novafs::layout::INODES_PER_CHUNK as usize;
    let name = |i: usize| Op::create(format!("/t{}/{i}", i % 8));
    let mut setup: Vec<Op> = (0..8).map(|d| Op::mkdir(format!("/t{d}"))).collect();
    // The root and the 8 directories hold slots too; leave one free.
    let before = per_chunk - 1 - 8 - 1;
    setup.extend((0..before).map(name));
    let mut w = Workload::new("inode_table_growth", setup, (before..before + 3).map(name).collect());
    w.region_size = 16 << 20; // Room for a second 2 MiB chunk, its mirror and the logs.
    w
}

/// Every named workload: the catalog and the generated ones.
pub fn all() -> Vec<Workload> {
    let mut v = catalog();
    v.extend(generated());
    v.push(inode_table_growth());
    v
}

/// Finds a workload by name (including `random-SEED-LEN`).
pub fn by_name(name: &str) -> Option<Workload> {
    if let Some(rest) = name.strip_prefix("random2-") {
        let (seed, len) = rest.split_once('-')?;
        return Some(random_sharded(seed.parse().ok()?, len.parse().ok()?));
    }
    if let Some(rest) = name.strip_prefix("random-") {
        let (seed, len) = rest.split_once('-')?;
        return Some(random(seed.parse().ok()?, len.parse().ok()?));
    }
    catalog()
        .into_iter()
        .find(|w| w.name == name)
        .or_else(|| generated().into_iter().find(|w| w.name == name))
        .or_else(|| (name == "inode_table_growth").then(inode_table_growth))
}

/// [`random`] on two shards, each operation on a new thread so they use
/// both shards' journals and inode tables.
pub fn random_sharded(seed: u64, len: usize) -> Workload {
    let mut w = random_with(seed, len, 2);
    w.name = format!("random2-{seed}-{len}");
    w
}

/// A random multi-operation sequence of `len` operations (seeded). Each op
/// is chosen from the tree as it stands in a trial run, so most are valid;
/// those that fail must change nothing.
pub fn random(seed: u64, len: usize) -> Workload {
    random_with(seed, len, 1)
}

fn random_with(seed: u64, len: usize, shards: u32) -> Workload {
    let mut rng = Rng::derive(seed, 0x5e0);
    let mut ops = Vec::new();
    let size = if shards > 1 { 13 << 20 } else { REGION_SIZE };
    let spread = shards > 1;
    let mut r = fresh_runner(size, shards).ok();
    if let Some(r) = r.as_mut() {
        let _ = apply(r, &Op::Mount, spread);
    }
    let names = ["a", "b", "c", "d"];
    for i in 0..len {
        let tree = r.as_ref().and_then(|r| tree_of(r).ok()).unwrap_or_default();
        let dirs: Vec<String> = tree
            .nodes
            .iter()
            .filter(|(_, n)| n.kind == "Directory")
            .map(|(p, _)| p.clone())
            .collect();
        let files: Vec<String> = tree
            .nodes
            .iter()
            .filter(|(_, n)| n.kind == "RegularFile")
            .map(|(p, _)| p.clone())
            .collect();
        let any: Vec<String> = tree.nodes.keys().filter(|p| *p != "/").cloned().collect();
        let dir = rng.pick(&dirs).cloned().unwrap_or_else(|| "/".into());
        let join = |d: &str, n: &str| if d == "/" { format!("/{n}") } else { format!("{d}/{n}") };
        let fresh = join(&dir, names[rng.below(names.len() as u64) as usize]);
        let seed_i = seed.wrapping_mul(1000) + i as u64;
        let op = match rng.below(24) {
            0..=2 => Op::create(fresh),
            3 => Op::mkdir(fresh),
            4 => Op::symlink(fresh, format!("t{}", rng.below(100))),
            5 => Op::mknod(fresh, libc::S_IFIFO | 0o644, 0),
            6..=9 => match rng.pick(&files) {
                Some(f) => {
                    let off = [0, 100, 4096, 5000, 8191][rng.below(5) as usize];
                    let len = [1, 64, 700, 4096, 9000][rng.below(5) as usize];
                    Op::write(f.clone(), off, len, seed_i)
                }
                None => Op::create(fresh),
            },
            10 => match rng.pick(&files) {
                Some(f) => Op::truncate(f.clone(), [0, 10, 4096, 6000, 20_000][rng.below(5) as usize]),
                None => Op::mkdir(fresh),
            },
            11 => match rng.pick(&files) {
                Some(f) => Op::fallocate(
                    f.clone(),
                    [0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE][rng.below(3) as usize],
                    rng.below(3) * 3000,
                    1 + rng.below(9000),
                ),
                None => Op::create(fresh),
            },
            12 | 13 => match rng.pick(&any) {
                Some(p) => {
                    let flags = [0, 0, 0, RENAME_NOREPLACE, RENAME_EXCHANGE][rng.below(5) as usize];
                    let to = if rng.chance(1, 2) {
                        fresh
                    } else {
                        rng.pick(&any).cloned().unwrap_or(fresh)
                    };
                    Op::rename(p.clone(), to, flags)
                }
                None => Op::create(fresh),
            },
            14 => match rng.pick(&files) {
                Some(f) => Op::link(f.clone(), fresh),
                None => Op::create(fresh),
            },
            15 | 16 => match rng.pick(&any) {
                Some(p) if tree.nodes[p].kind == "Directory" => Op::Rmdir(p.clone()),
                Some(p) => Op::Unlink(p.clone()),
                None => Op::create(fresh),
            },
            17 => match rng.pick(&any) {
                Some(p) => Op::chmod(p.clone(), 0o600 + rng.below(0o177) as u32),
                None => Op::mkdir(fresh),
            },
            18 => match rng.pick(&any) {
                Some(p) => Op::chown(p.clone(), rng.below(5) as u32, rng.below(5) as u32),
                None => Op::mkdir(fresh),
            },
            20 | 21 => match rng.pick(&any) {
                // Values inline, and large enough for data pages.
                Some(p) => {
                    let name = ["user.a", "user.b", "trusted.c"][rng.below(3) as usize];
                    if rng.chance(1, 3) {
                        Op::removexattr(p.clone(), name)
                    } else {
                        Op::setxattr(p.clone(), name, [0, 10, 900, 5000][rng.below(4) as usize], seed_i)
                    }
                }
                None => Op::create(fresh),
            },
            // Snapshots (Fortis §3): what they keep and their list.
            22 => Op::Snapshot(format!("s{}", rng.below(3))),
            23 => Op::DeleteSnapshot(format!("s{}", rng.below(3))),
            _ => {
                if rng.chance(1, 4) {
                    Op::Remount
                } else {
                    match rng.pick(&files) {
                        Some(f) => Op::write(f.clone(), tree.nodes[f].size, 1 + rng.below(5000), seed_i),
                        None => Op::create(fresh),
                    }
                }
            }
        };
        if let Some(r) = r.as_mut() {
            let _ = apply(r, &op, spread);
        }
        ops.push(op);
    }
    Workload {
        name: format!("random-{seed}-{len}"),
        setup: Vec::new(),
        ops,
        expect: Expect::MaySucceed,
        gc: None,
        region_size: size,
        shards,
        spread,
    }
}
