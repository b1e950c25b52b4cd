//! A full file system under load, with snapshots taken and deleted on a
//! timer, and a soak that never fills: nothing hangs (every call is
//! timed by a watchdog), and a full image can always be emptied: every
//! snapshot deletes, every name removes, the space comes back to the
//! empty image's figure, and fsck finds nothing leaked; after a clean
//! unmount, after a crash on the full image, and on the image reopened.
//!
//! The short form runs in `cargo test`: a fixed seed and one drawn from
//! the clock (printed, so a failure can be rerun). The long form:
//! `NOVAFS_STRESS_SEEDS=5 NOVAFS_STRESS_SECS=120 cargo test --release
//! --test full_image -- --nocapture` (NOVAFS_STRESS_SEED=S reruns seed S).
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use novafs::{Error, Fs, Ino, ScrubOptions, ROOT_INO};
use novafs_rng::SplitMix;
use pm::Region;

/// A call that takes longer than this is a hang.
const CALL_LIMIT: Duration = Duration::from_secs(60);

/// One load's shape.
#[derive(Clone, Copy)]
struct Load {
    seed: u64,
    mib: u64,
    writers: usize,
    /// Largest file a writer writes, in KiB.
    max_kib: u64,
    /// Pause between snapshots.
    snapshot_every: Duration,
    /// Snapshots kept: the oldest beyond goes.
    keep: usize,
    /// A scrub and a tree-walking reader beside the writers.
    scrub_and_read: bool,
    run_for: Duration,
}

/// When each worker's call in flight began (ms since `epoch`, 0 when
/// idle): the watchdog fails the test on one older than [`CALL_LIMIT`].
struct Watch {
    epoch: Instant,
    started: Vec<AtomicU64>,
    what: Vec<std::sync::Mutex<&'static str>>,
}

impl Watch {
    fn new(workers: usize) -> Watch {
        Watch {
            epoch: Instant::now(),
            started: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            what: (0..workers).map(|_| std::sync::Mutex::new("")).collect(),
        }
    }

    /// Runs one call of worker `w`, timed by the watchdog.
    fn call<T>(&self, w: usize, what: &'static str, f: impl FnOnce() -> T) -> T {
        *self.what[w].lock().unwrap() = what;
        let now = self.epoch.elapsed().as_millis() as u64;
        self.started[w].store(now.max(1), Ordering::Release);
        let r = f();
        self.started[w].store(0, Ordering::Release);
        r
    }

    /// The first call in flight for longer than `CALL_LIMIT`.
    fn stuck(&self) -> Option<String> {
        let now = self.epoch.elapsed().as_millis() as u64;
        self.started.iter().enumerate().find_map(|(w, s)| {
            let t = s.load(Ordering::Acquire);
            (t != 0 && now.saturating_sub(t) > CALL_LIMIT.as_millis() as u64).then(|| {
                format!(
                    "worker {w} stuck in {} for {} ms",
                    self.what[w].lock().unwrap(),
                    now - t
                )
            })
        })
    }
}

/// Errors a call may meet in this load: a full device, and names another
/// writer moved or removed first.
fn expected(e: &Error) -> bool {
    matches!(
        e,
        Error::NoSpace | Error::NotFound | Error::Exists | Error::NotEmpty | Error::NotDir | Error::IsDir
    )
}

fn check<T>(what: &str, r: Result<T, Error>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) if expected(&e) => None,
        Err(e) => panic!("{what}: unexpected error {e:?}"),
    }
}

/// What the load saw.
#[derive(Default)]
struct Counts {
    ops: AtomicU64,
    full: AtomicU64,
    snapshots: AtomicU64,
}

/// One writer: files and directories in its own directory and across
/// the others' (renames), written, truncated, punched and removed.
fn writer(fs: &Fs, dirs: &[Ino], w: usize, load: &Load, watch: &Watch, stop: &AtomicBool, counts: &Counts) {
    let mut rng = SplitMix::from_state(load.seed ^ (w as u64 + 1).wrapping_mul(0x9E37_79B9));
    let buf: Vec<u8> = (0..load.max_kib * 1024).map(|i| (i as u8) ^ (w as u8)).collect();
    let name = |rng: &mut SplitMix| format!("f{}", rng.below(64)).into_bytes();
    while !stop.load(Ordering::Acquire) {
        let dir = dirs[if rng.below(4) == 0 {
            rng.below(dirs.len() as u64) as usize
        } else {
            w
        }];
        let n = name(&mut rng);
        let r: Result<(), Error> = match rng.below(10) {
            0..=2 => watch.call(w, "create+write", || {
                let a = match fs.create(dir, &n, 0o644, 0, 0) {
                    Err(Error::Exists) => fs.lookup(dir, &n)?,
                    r => r?,
                };
                let len = 1 + rng.below(buf.len() as u64) as usize;
                fs.write(a.ino, rng.below(64 * 1024), &buf[..len]).map(drop)
            }),
            3 => watch.call(w, "append", || {
                let a = fs.lookup(dir, &n)?;
                fs.write(a.ino, a.size, &buf[..4096]).map(drop)
            }),
            4 | 5 => watch.call(w, "unlink", || fs.unlink(dir, &n)),
            6 => watch.call(w, "rename", || {
                let to = dirs[rng.below(dirs.len() as u64) as usize];
                fs.rename(dir, &n, to, &name(&mut rng), 0)
            }),
            7 => watch.call(w, "truncate", || {
                let a = fs.lookup(dir, &n)?;
                let set = novafs::SetAttr::default().size(a.size / 2);
                fs.setattr(a.ino, &set).map(drop)
            }),
            8 => watch.call(w, "punch", || {
                let a = fs.lookup(dir, &n)?;
                let mode = novafs::FALLOC_FL_PUNCH_HOLE | novafs::FALLOC_FL_KEEP_SIZE;
                fs.fallocate(a.ino, mode, 0, a.size / 2 + 1)
            }),
            _ => watch.call(w, "mkdir/rmdir", || {
                let d = [b"sub".as_slice(), &n].concat();
                match fs.mkdir(dir, &d, 0o755, 0, 0) {
                    Err(Error::Exists) => fs.rmdir(dir, &d),
                    r => r.map(drop),
                }
            }),
        };
        if let Err(Error::NoSpace) = r {
            counts.full.fetch_add(1, Ordering::Relaxed);
        }
        check("writer", r);
        counts.ops.fetch_add(1, Ordering::Relaxed);
    }
}

/// Takes a snapshot every `snapshot_every` and deletes the oldest beyond
/// `keep`. Taking may meet a full device; deleting never fails.
fn snapshotter(fs: &Fs, w: usize, load: &Load, watch: &Watch, stop: &AtomicBool, counts: &Counts) {
    let mut taken = std::collections::VecDeque::new();
    let mut i = 0u64;
    while !stop.load(Ordering::Acquire) {
        i += 1;
        let name = format!("s{i}").into_bytes();
        match watch.call(w, "take_snapshot", || fs.take_snapshot(&name)) {
            Ok(_) => {
                taken.push_back(name);
                counts.snapshots.fetch_add(1, Ordering::Relaxed);
            }
            Err(Error::NoSpace) => {}
            Err(e) => panic!("take_snapshot: {e:?}"),
        }
        while taken.len() > load.keep {
            let old = taken.pop_front().unwrap();
            watch.call(w, "delete_snapshot", || fs.delete_snapshot(&old)).unwrap();
        }
        std::thread::sleep(load.snapshot_every);
    }
}

/// Scrubs in a loop (stopped at the end of the load) and walks the tree
/// reading every file, as a backup program would.
fn scrubber(fs: &Fs, w: usize, watch: &Watch, stop: &AtomicBool) {
    while !stop.load(Ordering::Acquire) {
        let rep = watch.call(w, "scrub", || {
            fs.scrub(ScrubOptions::default(), &|_, _| !stop.load(Ordering::Acquire))
        });
        let rep = rep.unwrap();
        assert!(rep.damaged.is_empty(), "scrub found damage: {:?}", rep.damaged);
    }
}

fn reader(fs: &Fs, w: usize, watch: &Watch, stop: &AtomicBool) {
    let mut buf = vec![0u8; 1 << 20];
    while !stop.load(Ordering::Acquire) {
        let mut stack = vec![ROOT_INO];
        while let Some(dir) = stack.pop() {
            let mut entries = Vec::new();
            let r = watch.call(w, "readdir", || {
                fs.readdir(dir, 0, |e| {
                    if e.name != b"." && e.name != b".." {
                        entries.push(e.name);
                    }
                    false
                })
            });
            check("readdir", r);
            for name in entries {
                let Some(a) = check("lookup", watch.call(w, "lookup", || fs.lookup(dir, &name))) else {
                    continue;
                };
                match a.kind {
                    novafs::FileType::Directory => stack.push(a.ino),
                    _ => {
                        check("read", watch.call(w, "read", || fs.read(a.ino, 0, &mut buf)));
                    }
                }
            }
        }
    }
}

/// Runs `load` on `fs` with the watchdog; returns what it saw.
fn run(fs: &Arc<Fs>, load: &Load) -> Counts {
    let dirs: Vec<Ino> = (0..load.writers)
        .map(|w| fs.mkdir(ROOT_INO, format!("d{w}").as_bytes(), 0o755, 0, 0).unwrap().ino)
        .collect();
    let workers = load.writers + 1 + if load.scrub_and_read { 2 } else { 0 };
    let watch = Watch::new(workers);
    let stop = AtomicBool::new(false);
    let counts = Counts::default();
    std::thread::scope(|s| {
        let mut workers = Vec::new();
        for w in 0..load.writers {
            let (fs, dirs, watch, stop, counts) = (&**fs, &dirs, &watch, &stop, &counts);
            workers.push(s.spawn(move || writer(fs, dirs, w, load, watch, stop, counts)));
        }
        let (f, wa, st, c) = (&**fs, &watch, &stop, &counts);
        workers.push(s.spawn(move || snapshotter(f, load.writers, load, wa, st, c)));
        if load.scrub_and_read {
            workers.push(s.spawn(move || scrubber(f, load.writers + 1, wa, st)));
            workers.push(s.spawn(move || reader(f, load.writers + 2, wa, st)));
        }
        let end = Instant::now() + load.run_for;
        // A worker that ended early panicked: the scope re-raises it.
        while Instant::now() < end && !workers.iter().any(|w| w.is_finished()) {
            std::thread::sleep(Duration::from_millis(100));
            if let Some(stuck) = watch.stuck() {
                // The scope would wait for the stuck thread forever.
                eprintln!("seed {}: {stuck}: hang", load.seed);
                std::process::abort();
            }
        }
        stop.store(true, Ordering::Release);
        if workers.iter().any(|w| w.is_finished()) {
            return; // the scope joins the rest, then re-raises the panic
        }
        // Every worker finishes its call in flight within the limit.
        let deadline = Instant::now() + CALL_LIMIT;
        while Instant::now() < deadline && watch.started.iter().any(|s| s.load(Ordering::Acquire) != 0) {
            std::thread::sleep(Duration::from_millis(10));
        }
        if let Some(stuck) = watch.stuck() {
            eprintln!("seed {}: {stuck}: hang at the end of the load", load.seed);
            std::process::abort();
        }
    });
    counts
}

/// Removes every snapshot and every name below the root: none may fail.
fn empty(fs: &Fs) {
    for s in fs.snapshots() {
        fs.delete_snapshot(&s.name)
            .unwrap_or_else(|e| panic!("deleting snapshot {:?} of a full image: {e:?}", s.name));
    }
    fs.wait_reclaimed();
    remove_tree(fs, ROOT_INO);
}

fn remove_tree(fs: &Fs, dir: Ino) {
    let mut entries = Vec::new();
    fs.readdir(dir, 0, |e| {
        if e.name != b"." && e.name != b".." {
            entries.push(e.name);
        }
        false
    })
    .unwrap();
    for name in entries {
        let a = fs.lookup(dir, &name).unwrap();
        if a.kind == novafs::FileType::Directory {
            remove_tree(fs, a.ino);
            fs.rmdir(dir, &name)
        } else {
            fs.unlink(dir, &name)
        }
        .unwrap_or_else(|e| panic!("removing {:?} from a full image: {e:?}", String::from_utf8_lossy(&name)));
    }
}

/// Free pages of an empty file system whose root's log has grown to
/// `root_size` bytes: the figure at `start` less the root's new log pages
/// and their mirrors.
fn empty_figure(start: (u64, u64), root_size: u64) -> u64 {
    let (free, root) = start;
    free - 2 * (root_size - root) / 4096
}

fn free_and_root(fs: &Fs) -> (u64, u64) {
    (fs.statfs().blocks_free, fs.getattr(ROOT_INO).unwrap().size)
}

fn assert_empty(fs: &Fs, start: (u64, u64), when: &str) {
    let (free, root) = free_and_root(fs);
    assert_eq!(names(fs, ROOT_INO), Vec::<String>::new(), "{when}");
    assert_eq!(
        free,
        empty_figure(start, root),
        "{when}: the space did not all come back"
    );
}

/// Fills an image under `load`, then empties it: online, after a crash on
/// the full image, and after a clean unmount.
fn full_image_empties(load: Load) {
    eprintln!(
        "full image: seed {} ({} MiB, {} writers)",
        load.seed, load.mib, load.writers
    );
    let region = fresh(load.mib, 2);
    let fs = Arc::new(mount(&region));
    // The snapshot list's log takes a page (and its mirror) from the first
    // snapshot on, and keeps it: compaction holds it to one page.
    fs.take_snapshot(b"first").unwrap();
    fs.delete_snapshot(b"first").unwrap();
    let start = free_and_root(&fs);
    let counts = run(&fs, &load);
    assert!(
        counts.full.load(Ordering::Relaxed) > 0,
        "seed {}: the load never filled the image ({} ops): the test would prove nothing",
        load.seed,
        counts.ops.load(Ordering::Relaxed)
    );
    assert!(counts.snapshots.load(Ordering::Relaxed) > load.keep as u64);
    let fs = Arc::into_inner(fs).unwrap();

    // A crash on the full image: the next mount recovers, and it empties.
    let image = snapshot_region(&region);
    drop(fs);
    let fs = mount(&image);
    empty(&fs);
    assert_empty(&fs, start, "after a crash on the full image");
    fs.unmount().unwrap();
    assert_fsck_clean(&image);

    // The same full image, unmounted cleanly first, then reopened.
    let fs = mount(&region);
    fs.unmount().expect("a clean unmount of a full image");
    assert_fsck_clean(&region);
    let fs = mount(&region);
    empty(&fs);
    assert_empty(&fs, start, "after a clean unmount of the full image");
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
    let fs = mount(&region);
    assert_empty(&fs, start, "after the remount");
    fs.unmount().unwrap();
}

/// A copy of a region as it is now (a crash image: nothing more reaches it).
fn snapshot_region(region: &Arc<dyn Region>) -> Arc<dyn Region> {
    let len = region.len();
    let copy: Arc<dyn Region> = Arc::new(pm::MemRegion::new(len));
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0;
    while off < len {
        let n = buf.len().min((len - off) as usize);
        region.read(off, &mut buf[..n]).unwrap();
        copy.write(off, &buf[..n]).unwrap();
        off += n as u64;
    }
    copy
}

/// Seeds: a fixed one and one from the clock, or NOVAFS_STRESS_SEED, or
/// NOVAFS_STRESS_SEEDS of them from the clock.
fn seeds() -> Vec<u64> {
    let var = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    if let Some(s) = var("NOVAFS_STRESS_SEED") {
        return vec![s];
    }
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        % 1_000_000;
    match var("NOVAFS_STRESS_SEEDS") {
        Some(n) => (0..n).map(|i| clock + i).collect(),
        None => vec![22, clock],
    }
}

fn run_for(default_secs: u64) -> Duration {
    let secs = std::env::var("NOVAFS_STRESS_SECS").ok().and_then(|v| v.parse().ok());
    Duration::from_secs(secs.unwrap_or(default_secs))
}

#[test]
fn a_full_image_under_snapshots_never_hangs_and_always_empties() {
    for seed in seeds() {
        full_image_empties(Load {
            seed,
            mib: 24,
            writers: 4,
            max_kib: 256,
            snapshot_every: Duration::from_millis(5),
            keep: 4,
            scrub_and_read: false,
            run_for: run_for(4),
        });
    }
}

#[test]
fn a_full_image_without_snapshots_empties() {
    for seed in seeds() {
        full_image_empties(Load {
            seed,
            mib: 16,
            writers: 4,
            max_kib: 128,
            snapshot_every: Duration::from_millis(1),
            keep: 0,
            scrub_and_read: false,
            run_for: run_for(3),
        });
    }
}

/// The soak: an image that never fills, many writers, snapshots on a
/// short timer, a scrub and a reader at once; nothing hangs, scrub finds
/// nothing damaged, and the image checks clean after.
#[test]
fn a_busy_image_with_snapshots_scrub_and_a_reader_never_hangs() {
    for seed in seeds() {
        let region = fresh(256, 2);
        let fs = Arc::new(mount(&region));
        let counts = run(
            &fs,
            &Load {
                seed,
                mib: 256,
                writers: 16,
                max_kib: 16,
                snapshot_every: Duration::from_millis(20),
                keep: 4,
                scrub_and_read: true,
                run_for: run_for(4),
            },
        );
        assert_eq!(
            counts.full.load(Ordering::Relaxed),
            0,
            "seed {seed}: the soak filled the image"
        );
        Arc::into_inner(fs).unwrap().unmount().unwrap();
        assert_fsck_clean(&region);
    }
}
