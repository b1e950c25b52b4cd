//! Workloads: path-based operations, the runner that applies them to an
//! [`Fs`], and the catalog of scenarios the checker sweeps (one per
//! operation type, multi-operation sequences, log growth, fast and thorough
//! GC, journal wrap-around, orphans, remounts).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use novafs::{FormatOptions, Fs, Ino, MountOptions, SetAttr, RENAME_EXCHANGE, RENAME_NOREPLACE};
use novafs::{FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE};
use pm::{MemRegion, Region};

use crate::rng::{data, Rng};
use crate::tree::Tree;

/// Size of every crash-test region: small, so images are cheap to copy.
pub const REGION_SIZE: u64 = 6 << 20;

/// One operation, by path, so it means the same in every run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Create(String),
    Mkdir(String),
    /// Full mode (type bits included) and device number.
    Mknod(String, u32, u64),
    Symlink(String, String),
    /// Path, offset, length, data seed (see [`crate::rng::data`]).
    Write(String, u64, u64, u64),
    Truncate(String, u64),
    /// Path, mode, offset, length.
    Fallocate(String, u32, u64, u64),
    Unlink(String),
    Rmdir(String),
    /// From, to, flags.
    Rename(String, String, u32),
    /// Existing path, new name.
    Link(String, String),
    Chmod(String, u32),
    Chown(String, u32, u32),
    /// atime, mtime.
    Utimens(String, i64, i64),
    /// Opens a handle (kept until `Release`): an unlinked open file lives on.
    Open(String),
    Release(String),
    /// Mount the image (the first operation of every recorded run).
    Mount,
    /// Clean unmount.
    Unmount,
    /// Clean unmount, then mount again.
    Remount,
    /// mkfs over the (unmounted) image.
    Mkfs,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Create(p) => write!(f, "create {p}"),
            Op::Mkdir(p) => write!(f, "mkdir {p}"),
            Op::Mknod(p, m, r) => write!(f, "mknod {p} mode {m:o} rdev {r}"),
            Op::Symlink(p, t) if t.len() > 40 => write!(f, "symlink {p} -> ({} bytes)", t.len()),
            Op::Symlink(p, t) => write!(f, "symlink {p} -> {t}"),
            Op::Write(p, o, l, s) => write!(f, "write {p} off {o} len {l} seed {s}"),
            Op::Truncate(p, s) => write!(f, "truncate {p} to {s}"),
            Op::Fallocate(p, m, o, l) => write!(f, "fallocate {p} mode {m} off {o} len {l}"),
            Op::Unlink(p) => write!(f, "unlink {p}"),
            Op::Rmdir(p) => write!(f, "rmdir {p}"),
            Op::Rename(a, b, 0) => write!(f, "rename {a} -> {b}"),
            Op::Rename(a, b, fl) => write!(f, "rename {a} -> {b} flags {fl}"),
            Op::Link(a, b) => write!(f, "link {a} as {b}"),
            Op::Chmod(p, m) => write!(f, "chmod {p} {m:o}"),
            Op::Chown(p, u, g) => write!(f, "chown {p} {u}:{g}"),
            Op::Utimens(p, a, m) => write!(f, "utimens {p} atime {a} mtime {m}"),
            Op::Open(p) => write!(f, "open {p}"),
            Op::Release(p) => write!(f, "release {p}"),
            Op::Mount => write!(f, "mount"),
            Op::Unmount => write!(f, "unmount"),
            Op::Remount => write!(f, "remount"),
            Op::Mkfs => write!(f, "mkfs"),
        }
    }
}

fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(i) => (if i == 0 { "/" } else { &path[..i] }, &path[i + 1..]),
        None => ("/", path),
    }
}

/// Applies operations to a file system on one region.
pub struct Runner {
    pub region: Arc<dyn Region>,
    pub fs: Option<Fs>,
    handles: HashMap<String, Vec<Ino>>,
    /// Run each operation on a new thread: threads take shards in turn,
    /// so operations spread over every shard's journal and inode table.
    pub spread: bool,
    /// Shards for [`Op::Mkfs`].
    pub shards: u32,
}

impl Runner {
    /// A runner on `region`, not mounted yet.
    pub fn new(region: Arc<dyn Region>) -> Runner {
        Runner {
            region,
            fs: None,
            handles: HashMap::new(),
            spread: false,
            shards: 1,
        }
    }

    /// A runner on a freshly formatted heap region of [`REGION_SIZE`].
    pub fn fresh() -> Result<Runner, String> {
        Runner::fresh_sized(REGION_SIZE)
    }

    /// A runner on a freshly formatted heap region of `size` bytes.
    pub fn fresh_sized(size: u64) -> Result<Runner, String> {
        Runner::fresh_with(size, 1)
    }

    /// A runner on a freshly formatted heap region of `size` bytes with
    /// `shards` shards.
    pub fn fresh_with(size: u64, shards: u32) -> Result<Runner, String> {
        let region: Arc<dyn Region> = Arc::new(MemRegion::new(size));
        Fs::format(
            region.clone(),
            &FormatOptions {
                shards: Some(shards),
                ..Default::default()
            },
        )
        .map_err(|e| format!("format: {e}"))?;
        let mut r = Runner::new(region);
        r.shards = shards;
        Ok(r)
    }

    fn fs(&self) -> Result<&Fs, String> {
        self.fs.as_ref().ok_or_else(|| "not mounted".to_string())
    }

    fn parent(&self, path: &str) -> Result<(Ino, Vec<u8>), String> {
        let (dir, name) = split(path);
        let d = self.fs()?.resolve(dir).map_err(|e| format!("{dir}: {e}"))?;
        Ok((d.ino, name.as_bytes().to_vec()))
    }

    fn ino(&self, path: &str) -> Result<Ino, String> {
        Ok(self.fs()?.resolve(path).map_err(|e| format!("{path}: {e}"))?.ino)
    }

    /// The visible tree (the mounted one).
    pub fn tree(&self) -> Result<Tree, String> {
        Tree::capture(self.fs()?)
    }

    /// Applies `op`; an error is the file system's answer, as text.
    pub fn apply(&mut self, op: &Op) -> Result<(), String> {
        if self.spread {
            return std::thread::scope(|s| {
                s.spawn(|| self.apply_here(op))
                    .join()
                    .unwrap_or_else(|_| Err(format!("{op} panicked")))
            });
        }
        self.apply_here(op)
    }

    fn apply_here(&mut self, op: &Op) -> Result<(), String> {
        let e = |e: novafs::Error| e.to_string();
        match op {
            Op::Mount => {
                self.fs = Some(Fs::open(self.region.clone(), MountOptions::default()).map_err(e)?);
                return Ok(());
            }
            Op::Unmount => {
                self.handles.clear();
                return self.fs.take().ok_or("not mounted")?.unmount().map_err(e);
            }
            Op::Remount => {
                self.apply_here(&Op::Unmount)?;
                return self.apply_here(&Op::Mount);
            }
            Op::Mkfs => {
                if self.fs.is_some() {
                    return Err("mkfs of a mounted image".into());
                }
                let opts = FormatOptions {
                    shards: Some(self.shards),
                    ..Default::default()
                };
                return Fs::format(self.region.clone(), &opts).map_err(e);
            }
            _ => {}
        }
        let fs = self.fs()?;
        match op {
            Op::Create(p) => {
                let (d, n) = self.parent(p)?;
                fs.create(d, &n, 0o644, 1000, 1000).map_err(e)?;
            }
            Op::Mkdir(p) => {
                let (d, n) = self.parent(p)?;
                fs.mkdir(d, &n, 0o755, 1000, 1000).map_err(e)?;
            }
            Op::Mknod(p, mode, rdev) => {
                let (d, n) = self.parent(p)?;
                fs.mknod(d, &n, *mode, *rdev, 1000, 1000).map_err(e)?;
            }
            Op::Symlink(p, t) => {
                let (d, n) = self.parent(p)?;
                fs.symlink(d, &n, t.as_bytes(), 1000, 1000).map_err(e)?;
            }
            Op::Write(p, off, len, seed) => {
                let ino = self.ino(p)?;
                fs.write(ino, *off, &data(*seed, *len)).map_err(e)?;
            }
            Op::Truncate(p, size) => {
                let ino = self.ino(p)?;
                let set = SetAttr {
                    size: Some(*size),
                    ..SetAttr::default()
                };
                fs.setattr(ino, &set).map_err(e)?;
            }
            Op::Fallocate(p, mode, off, len) => {
                let ino = self.ino(p)?;
                fs.fallocate(ino, *mode, *off, *len).map_err(e)?;
            }
            Op::Unlink(p) => {
                let (d, n) = self.parent(p)?;
                fs.unlink(d, &n).map_err(e)?;
            }
            Op::Rmdir(p) => {
                let (d, n) = self.parent(p)?;
                fs.rmdir(d, &n).map_err(e)?;
            }
            Op::Rename(a, b, flags) => {
                let (d1, n1) = self.parent(a)?;
                let (d2, n2) = self.parent(b)?;
                fs.rename(d1, &n1, d2, &n2, *flags).map_err(e)?;
            }
            Op::Link(a, b) => {
                let ino = self.ino(a)?;
                let (d, n) = self.parent(b)?;
                fs.link(ino, d, &n).map_err(e)?;
            }
            Op::Chmod(p, m) => {
                let ino = self.ino(p)?;
                let set = SetAttr {
                    mode: Some(*m),
                    ..SetAttr::default()
                };
                fs.setattr(ino, &set).map_err(e)?;
            }
            Op::Chown(p, u, g) => {
                let ino = self.ino(p)?;
                let set = SetAttr {
                    uid: Some(*u),
                    gid: Some(*g),
                    ..SetAttr::default()
                };
                fs.setattr(ino, &set).map_err(e)?;
            }
            Op::Utimens(p, a, m) => {
                let ino = self.ino(p)?;
                let set = SetAttr {
                    atime: Some(*a),
                    mtime: Some(*m),
                    ..SetAttr::default()
                };
                fs.setattr(ino, &set).map_err(e)?;
            }
            Op::Open(p) => {
                let ino = self.ino(p)?;
                fs.open_handle(ino).map_err(e)?;
                self.handles.entry(p.clone()).or_default().push(ino);
            }
            Op::Release(p) => {
                let ino = self
                    .handles
                    .get_mut(p)
                    .and_then(Vec::pop)
                    .ok_or_else(|| format!("{p} is not open"))?;
                self.fs()?.release_handle(ino).map_err(e)?;
            }
            Op::Mount | Op::Unmount | Op::Remount | Op::Mkfs => unreachable!("handled above"),
        }
        Ok(())
    }
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
    /// them (see [`Runner::spread`]).
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
    let s = r.fs.as_ref().map(Fs::gc_stats).unwrap_or_default();
    match kind {
        GcKind::Fast => s.fast_pages,
        GcKind::Thorough => s.thorough_runs,
    }
}

fn s(p: &str) -> String {
    p.to_string()
}
fn create(p: &str) -> Op {
    Op::Create(s(p))
}
fn mkdir(p: &str) -> Op {
    Op::Mkdir(s(p))
}
fn write(p: &str, off: u64, len: u64, seed: u64) -> Op {
    Op::Write(s(p), off, len, seed)
}
fn rename(a: &str, b: &str) -> Op {
    Op::Rename(s(a), s(b), 0)
}

/// The hand-written scenarios: one per operation type and form, plus a few
/// multi-operation sequences. Log growth, GC and journal wrap-around
/// workloads are built by [`generated`] (they need a trial run).
pub fn catalog() -> Vec<Workload> {
    let w = Workload::new;
    let f = || vec![create("/f")];
    let f_with = |len: u64| vec![create("/f"), write("/f", 0, len, 1)];
    vec![
        w("create", vec![mkdir("/d")], vec![create("/a"), create("/d/b")]),
        w(
            "mkdir",
            vec![mkdir("/d")],
            vec![mkdir("/a"), mkdir("/d/b"), mkdir("/d/b/c")],
        ),
        w(
            "mknod",
            vec![],
            vec![
                Op::Mknod(s("/fifo"), libc::S_IFIFO | 0o600, 0),
                Op::Mknod(s("/chr"), libc::S_IFCHR | 0o640, 0x0501),
                Op::Mknod(s("/blk"), libc::S_IFBLK | 0o640, 0x0802),
                Op::Mknod(s("/sock"), libc::S_IFSOCK | 0o700, 0),
                Op::Mknod(s("/reg"), libc::S_IFREG | 0o600, 0),
            ],
        ),
        w(
            "symlink",
            vec![mkdir("/d")],
            vec![
                Op::Symlink(s("/l"), s("d/target")),
                Op::Symlink(s("/d/long"), "x/".repeat(1500)),
                Op::Symlink(s("/max"), "y".repeat(4095)),
            ],
        ),
        w("write_small", f(), vec![write("/f", 0, 100, 2), write("/f", 200, 1, 3)]),
        w("write_large", f(), vec![write("/f", 0, 300 * 1024, 4)]),
        w(
            "write_unaligned",
            f_with(10_000),
            vec![
                write("/f", 1000, 9000, 5),
                write("/f", 4095, 2, 6),
                write("/f", 12_000, 5000, 7),
            ],
        ),
        w(
            "overwrite",
            f_with(3 * 4096),
            vec![
                write("/f", 4096, 4096, 8),
                write("/f", 100, 50, 9),
                write("/f", 0, 3 * 4096, 10),
            ],
        ),
        w(
            "append",
            f_with(5000),
            vec![
                write("/f", 5000, 3000, 11),
                write("/f", 8000, 10, 12),
                write("/f", 8010, 8192, 13),
            ],
        ),
        w(
            "truncate_down",
            f_with(4 * 4096 + 300),
            vec![
                Op::Truncate(s("/f"), 3 * 4096 + 5),
                Op::Truncate(s("/f"), 2 * 4096),
                Op::Truncate(s("/f"), 100),
                Op::Truncate(s("/f"), 0),
            ],
        ),
        w(
            "truncate_up",
            f_with(100),
            vec![
                Op::Truncate(s("/f"), 10_000),
                write("/f", 10_000, 10, 14),
                Op::Truncate(s("/f"), 50_000),
            ],
        ),
        w(
            "fallocate",
            f_with(1000),
            vec![
                Op::Fallocate(s("/f"), 0, 0, 16_384),
                Op::Fallocate(s("/f"), FALLOC_FL_KEEP_SIZE, 16_384, 8192),
                Op::Fallocate(s("/f"), 0, 30_000, 100),
            ],
        ),
        w(
            "punch_hole",
            f_with(4 * 4096),
            vec![
                Op::Fallocate(s("/f"), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 4096, 4096),
                Op::Fallocate(s("/f"), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 100, 5000),
                Op::Fallocate(s("/f"), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 3 * 4096 + 10, 20),
            ],
        ),
        w(
            "unlink",
            vec![
                create("/f"),
                write("/f", 0, 9000, 15),
                Op::Link(s("/f"), s("/g")),
                create("/e"),
            ],
            vec![Op::Unlink(s("/f")), Op::Unlink(s("/g")), Op::Unlink(s("/e"))],
        ),
        w(
            "rmdir",
            vec![mkdir("/d"), mkdir("/d/e")],
            vec![Op::Rmdir(s("/d/e")), Op::Rmdir(s("/d"))],
        ),
        w(
            "rename_in_dir",
            vec![create("/a"), write("/a", 0, 100, 16), mkdir("/d")],
            vec![rename("/a", "/b"), rename("/d", "/e")],
        ),
        w(
            "rename_across_dirs",
            vec![mkdir("/d1"), mkdir("/d2"), create("/d1/f"), write("/d1/f", 0, 100, 17)],
            vec![rename("/d1/f", "/d2/f"), rename("/d2/f", "/g")],
        ),
        w(
            "rename_over_file",
            vec![
                create("/a"),
                write("/a", 0, 100, 18),
                create("/b"),
                write("/b", 0, 5000, 19),
            ],
            vec![rename("/a", "/b")],
        ),
        w(
            "rename_over_linked_file",
            vec![
                mkdir("/d"),
                create("/a"),
                create("/b"),
                write("/b", 0, 70, 20),
                Op::Link(s("/b"), s("/d/b2")),
            ],
            vec![rename("/a", "/b"), rename("/d/b2", "/a")],
        ),
        w(
            "rename_dir_across_dirs",
            vec![
                mkdir("/d1"),
                mkdir("/d2"),
                mkdir("/d1/sub"),
                create("/d1/sub/f"),
                mkdir("/d1/sub/x"),
            ],
            vec![rename("/d1/sub", "/d2/sub"), rename("/d2/sub/x", "/x")],
        ),
        w(
            "rename_dir_over_empty_dir",
            vec![
                mkdir("/d1"),
                mkdir("/d2"),
                mkdir("/d1/sub"),
                create("/d1/sub/f"),
                mkdir("/d2/empty"),
                mkdir("/e"),
            ],
            vec![rename("/d1/sub", "/d2/empty"), rename("/d2", "/e")],
        ),
        w(
            "rename_exchange",
            vec![
                mkdir("/d"),
                create("/a"),
                write("/a", 0, 10, 21),
                create("/b"),
                mkdir("/d/sub"),
            ],
            vec![
                Op::Rename(s("/a"), s("/b"), RENAME_EXCHANGE),
                Op::Rename(s("/a"), s("/d/sub"), RENAME_EXCHANGE),
            ],
        ),
        w(
            "rename_exchange_dirs",
            vec![
                mkdir("/e1"),
                mkdir("/e2"),
                mkdir("/e1/x"),
                mkdir("/e2/y"),
                create("/e1/x/f"),
                mkdir("/e2/y/z"),
            ],
            vec![
                Op::Rename(s("/e1/x"), s("/e2/y"), RENAME_EXCHANGE),
                Op::Rename(s("/e1/x/z"), s("/e2/y/f"), RENAME_EXCHANGE),
            ],
        ),
        w(
            "rename_noreplace",
            vec![mkdir("/d"), create("/a")],
            vec![Op::Rename(s("/a"), s("/d/a"), RENAME_NOREPLACE)],
        ),
        w(
            "link",
            vec![mkdir("/d"), create("/f"), write("/f", 0, 10, 22)],
            vec![Op::Link(s("/f"), s("/g")), Op::Link(s("/f"), s("/d/h"))],
        ),
        w(
            "setattr",
            vec![create("/f"), mkdir("/d")],
            vec![
                Op::Chmod(s("/f"), 0o600),
                Op::Chown(s("/f"), 7, 8),
                Op::Utimens(s("/f"), 1_000_000_000, 2_000_000_000),
                Op::Chmod(s("/d"), 0o700),
            ],
        ),
        w(
            "unlink_open_file",
            vec![create("/f"), write("/f", 0, 6000, 23)],
            vec![Op::Open(s("/f")), Op::Unlink(s("/f")), Op::Release(s("/f"))],
        ),
        w(
            "remount",
            vec![create("/f")],
            vec![write("/f", 0, 100, 24), Op::Remount, create("/g"), Op::Unmount],
        ),
        w(
            "mkfs_over_an_old_image",
            vec![mkdir("/old"), create("/old/f"), write("/old/f", 0, 5000, 26)],
            vec![Op::Unmount, Op::Mkfs, Op::Mount, create("/new")],
        ),
        w(
            "sequence_mixed",
            vec![],
            vec![
                mkdir("/d"),
                create("/d/f"),
                write("/d/f", 0, 5000, 25),
                Op::Link(s("/d/f"), s("/l")),
                rename("/d/f", "/g"),
                Op::Symlink(s("/d/s"), s("../g")),
                Op::Truncate(s("/g"), 1234),
                Op::Unlink(s("/l")),
                mkdir("/d/e"),
                rename("/d/e", "/e"),
                Op::Rmdir(s("/e")),
                Op::Chmod(s("/g"), 0o400),
                Op::Unmount,
            ],
        ),
    ]
}

/// Runs `ops` on a fresh file system; returns how many of them ran before
/// `stop` returned true after one (the index of that op), or None.
fn first_where(setup: &[Op], ops: impl Iterator<Item = Op>, mut stop: impl FnMut(&Runner) -> bool) -> Option<usize> {
    let mut r = Runner::fresh().ok()?;
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
    let grow = |i: usize| write("/f", i as u64 * 4096, 8, 100 + i as u64);
    {
        let r = Runner::fresh();
        if let Ok(mut r) = r {
            // Find the op after which the file's log occupies a new page:
            // blocks in use jump by more than the one data page.
            let _ = r.apply(&Op::Mount);
            let _ = r.apply(&create("/f"));
            let mut at = None;
            if let Some(fs) = r.fs.as_ref() {
                let mut free = fs.statfs().blocks_free;
                for i in 0..400 {
                    let _ = r.apply(&grow(i));
                    let fs = r.fs.as_ref().expect("mounted");
                    let now = fs.statfs().blocks_free;
                    if free - now > 1 && i > 0 {
                        at = Some(i);
                        break;
                    }
                    free = now;
                }
            }
            if let Some(at) = at {
                let mut setup = vec![create("/f")];
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
        let gen = |i: usize| Op::Create(name(i));
        if let Ok(mut r) = Runner::fresh() {
            let _ = r.apply(&Op::Mount);
            let _ = r.apply(&mkdir("/d"));
            let mut at = None;
            if r.fs.is_some() {
                let mut free = r.fs.as_ref().map_or(0, |f| f.statfs().blocks_free);
                for i in 0..400 {
                    let _ = r.apply(&gen(i));
                    let now = r.fs.as_ref().map_or(0, |f| f.statfs().blocks_free);
                    if free > now && i > 0 {
                        at = Some(i);
                        break;
                    }
                    free = now;
                }
            }
            if let Some(at) = at {
                let mut setup = vec![mkdir("/d")];
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
    let over = |i: usize| write("/f", (i % 3) as u64 * 8, 8, 1000 + i as u64);
    if let Some(mut w) = around(
        "fast_gc",
        vec![create("/f"), write("/f", 0, 4096, 9)],
        over,
        2000,
        |r| gc_count(r, GcKind::Fast) > 0,
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
            write("/f", 4096 + k as u64 * 4096, 4096, 2000 + k as u64)
        } else {
            write("/f", 0, 16, 3000 + i as u64)
        }
    };
    if let Some(mut w) = around(
        "thorough_gc_file",
        vec![create("/f")],
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
            Op::Create(n)
        } else {
            Op::Unlink(n)
        }
    };
    if let Some(mut w) = around(
        "thorough_gc_dir",
        vec![mkdir("/d"), create("/d/keep")],
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
                Op::Create(format!("/d/stay-{i}"))
            } else if i % 2 == 1 {
                Op::Create(tmp(i))
            } else if by_rename {
                Op::Rename(tmp(i - 1), "/d/b".into(), 0)
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
            vec![mkdir("/d"), create("/d/b")],
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
    // A journal transaction that wraps around the end of the ring.
    let pair = |i: usize| {
        let a = format!("/x{}", (i / 3) % 5);
        let b = format!("/y{}", (i / 3) % 5);
        if i.is_multiple_of(3) {
            Op::Create(a)
        } else if i % 3 == 1 {
            Op::Rename(a, b, 0)
        } else {
            Op::Unlink(b)
        }
    };
    if let Ok(mut r) = Runner::fresh() {
        let _ = r.apply(&Op::Mount);
        let ring = novafs::layout::JOURNAL_RING_SIZE;
        let mut at = None;
        let mut last = journal_head(&*r.region);
        for i in 0..100_000 {
            if r.apply(&pair(i)).is_err() {
                break;
            }
            let t = journal_head(&*r.region);
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
    let name = |i: usize| Op::Create(format!("/t{}/{i}", i % 8));
    let mut setup: Vec<Op> = (0..8).map(|d| Op::Mkdir(format!("/t{d}"))).collect();
    // The root and the 8 directories hold slots too; leave one free.
    let before = per_chunk - 1 - 8 - 1;
    setup.extend((0..before).map(name));
    let mut w = Workload::new("inode_table_growth", setup, (before..before + 3).map(name).collect());
    w.region_size = 10 << 20; // Room for a second 2 MiB chunk.
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
    let size = if shards > 1 { 8 << 20 } else { REGION_SIZE };
    let mut r = Runner::fresh_with(size, shards).ok();
    if let Some(r) = r.as_mut() {
        r.spread = shards > 1;
        let _ = r.apply(&Op::Mount);
    }
    let names = ["a", "b", "c", "d"];
    for i in 0..len {
        let tree = r.as_ref().and_then(|r| r.tree().ok()).unwrap_or_default();
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
        let op = match rng.below(20) {
            0..=2 => Op::Create(fresh),
            3 => Op::Mkdir(fresh),
            4 => Op::Symlink(fresh, format!("t{}", rng.below(100))),
            5 => Op::Mknod(fresh, libc::S_IFIFO | 0o644, 0),
            6..=9 => match rng.pick(&files) {
                Some(f) => {
                    let off = [0, 100, 4096, 5000, 8191][rng.below(5) as usize];
                    let len = [1, 64, 700, 4096, 9000][rng.below(5) as usize];
                    Op::Write(f.clone(), off, len, seed_i)
                }
                None => Op::Create(fresh),
            },
            10 => match rng.pick(&files) {
                Some(f) => Op::Truncate(f.clone(), [0, 10, 4096, 6000, 20_000][rng.below(5) as usize]),
                None => Op::Mkdir(fresh),
            },
            11 => match rng.pick(&files) {
                Some(f) => Op::Fallocate(
                    f.clone(),
                    [0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE][rng.below(3) as usize],
                    rng.below(3) * 3000,
                    1 + rng.below(9000),
                ),
                None => Op::Create(fresh),
            },
            12 | 13 => match rng.pick(&any) {
                Some(p) => {
                    let flags = [0, 0, 0, RENAME_NOREPLACE, RENAME_EXCHANGE][rng.below(5) as usize];
                    let to = if rng.chance(1, 2) {
                        fresh
                    } else {
                        rng.pick(&any).cloned().unwrap_or(fresh)
                    };
                    Op::Rename(p.clone(), to, flags)
                }
                None => Op::Create(fresh),
            },
            14 => match rng.pick(&files) {
                Some(f) => Op::Link(f.clone(), fresh),
                None => Op::Create(fresh),
            },
            15 | 16 => match rng.pick(&any) {
                Some(p) if tree.nodes[p].kind == "Directory" => Op::Rmdir(p.clone()),
                Some(p) => Op::Unlink(p.clone()),
                None => Op::Create(fresh),
            },
            17 => match rng.pick(&any) {
                Some(p) => Op::Chmod(p.clone(), 0o600 + rng.below(0o177) as u32),
                None => Op::Mkdir(fresh),
            },
            18 => match rng.pick(&any) {
                Some(p) => Op::Chown(p.clone(), rng.below(5) as u32, rng.below(5) as u32),
                None => Op::Mkdir(fresh),
            },
            _ => {
                if rng.chance(1, 4) {
                    Op::Remount
                } else {
                    match rng.pick(&files) {
                        Some(f) => Op::Write(f.clone(), tree.nodes[f].size, 1 + rng.below(5000), seed_i),
                        None => Op::Create(fresh),
                    }
                }
            }
        };
        if let Some(r) = r.as_mut() {
            let _ = r.apply(&op);
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
        spread: shards > 1,
    }
}
