//! (c) filebench-style personalities, written against [`Backend`]: the
//! flowops of filebench's fileserver, varmail, webserver and webproxy
//! (workloads/*.f) with the file and I/O sizes of NOVA Table 2, on a file
//! set pre-created in the run's directory.
//!
//! As in filebench, a thread picks a file set entry at random and holds it
//! while a flowop works on it (so two threads never delete and read the same
//! file at once); creates pick an entry that does not exist, the other
//! flowops one that does. Every flowop counts as one operation, opens and
//! closes included, as filebench counts them. Differences from filebench:
//! every file starts at the mean size (filebench draws sizes from a gamma
//! distribution around it), appends have a fixed size (filebench's
//! appendfilerand draws one up to it), the file set is one flat directory,
//! and each thread appends to a log file of its own, rotated (deleted and
//! created again, not counted) at [`LOG_MAX`] so that a fast target does
//! not fill its file system with log.
//!
//! ENOSPC from a flowop is an operation that failed, counted apart, not an
//! error of the harness: the full-file-system run (f) depends on it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use novafs_rng::SplitMix;

use crate::backend::{parallel, read_whole, write_whole, Backend};
use crate::requests::Breakdown;

/// The four filebench personalities of NOVA §5.3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Personality {
    Fileserver,
    Varmail,
    Webserver,
    Webproxy,
}

/// File and I/O sizes of a personality (NOVA Table 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Mean file size, bytes.
    pub file_size: u64,
    /// Read size (whole files are read in reads of this size).
    pub read_io: usize,
    /// Write and append size.
    pub write_io: usize,
    /// Percentage of the file set that exists before the run (filebench's
    /// `prealloc`).
    pub prealloc_pct: u64,
    /// Whether the personality appends to a log file.
    pub log: bool,
}

const KIB: usize = 1024;

impl Personality {
    pub const ALL: [Personality; 4] = [
        Personality::Fileserver,
        Personality::Varmail,
        Personality::Webserver,
        Personality::Webproxy,
    ];

    pub fn name(&self) -> &'static str {
        match self {
            Personality::Fileserver => "fileserver",
            Personality::Varmail => "varmail",
            Personality::Webserver => "webserver",
            Personality::Webproxy => "webproxy",
        }
    }

    pub fn shape(&self) -> Shape {
        let (file_size, read_io, write_io, prealloc_pct, log) = match self {
            Personality::Fileserver => (128 * KIB, 16 * KIB, 16 * KIB, 80, false),
            Personality::Varmail => (32 * KIB, 1024 * KIB, 16 * KIB, 80, false),
            Personality::Webserver => (64 * KIB, 1024 * KIB, 8 * KIB, 100, true),
            Personality::Webproxy => (32 * KIB, 1024 * KIB, 16 * KIB, 80, true),
        };
        Shape {
            file_size: file_size as u64,
            read_io,
            write_io,
            prealloc_pct,
            log,
        }
    }

    /// One line on what a loop of this personality does, for the report.
    pub fn flowops(&self) -> &'static str {
        match self {
            Personality::Fileserver => {
                "create + write whole file + close, open + append + close, open + read whole file + close, delete, stat"
            }
            Personality::Varmail => {
                "delete, create + append + fsync + close, open + read whole + append + fsync + close, open + read whole + close"
            }
            Personality::Webserver => "10 × (open + read whole file + close), append to the log",
            Personality::Webproxy => "delete, create + append + close, 5 × (open + read whole file + close), append to the log",
        }
    }
}

/// Size, threads and duration of a personality run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PersonalityParams {
    /// Entries in the file set.
    pub files: u64,
    pub threads: usize,
    /// Duration of one run.
    pub secs: f64,
}

/// Operations done and failed with ENOSPC, shared with a sampler.
#[derive(Debug, Default)]
pub struct Counters {
    pub ops: AtomicU64,
    pub nospc: AtomicU64,
}

/// Whether `e` is ENOSPC, from novafs or from the kernel.
pub fn is_nospc(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<novafs::Error>()
            .is_some_and(|n| matches!(n, novafs::Error::NoSpace))
            || c.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::StorageFull || io.raw_os_error() == Some(28))
    })
}

/// The file set: one slot per entry; `true` where the file exists. A
/// thread holds the slot's lock while it works on the file.
pub struct FileSet {
    names: Vec<String>,
    slots: Vec<Mutex<bool>>,
}

/// Size at which a thread's log file is rotated.
pub const LOG_MAX: u64 = 4 << 20;

impl FileSet {
    /// Entries `f0`, `f1`, … of which those with `exists[i]` are on the
    /// target already.
    pub fn with_existing(exists: Vec<bool>) -> FileSet {
        FileSet {
            names: (0..exists.len()).map(|i| format!("f{i}")).collect(),
            slots: exists.into_iter().map(Mutex::new).collect(),
        }
    }

    /// Entries, existing or not.
    pub fn entries(&self) -> usize {
        self.slots.len()
    }

    /// How many entries exist now.
    pub fn existing(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| *s.lock().unwrap_or_else(|p| p.into_inner()))
            .count()
    }

    pub fn name(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// An entry that exists (or not), not held by another thread, searched
    /// from a random start.
    fn pick(&self, rng: &mut SplitMix, exists: bool) -> Option<(usize, MutexGuard<'_, bool>)> {
        let n = self.slots.len();
        let start = rng.below(n as u64) as usize;
        (0..n).find_map(|k| {
            let i = (start + k) % n;
            let g = self.slots[i].try_lock().ok()?;
            (*g == exists).then_some((i, g))
        })
    }
}

/// Create the file set of `k` with `files` entries in `dir`: the
/// personality's prealloc share of them written at the mean size.
pub fn prepare<B: Backend>(b: &B, dir: &B::Dir, k: Personality, files: u64) -> Result<FileSet> {
    let shape = k.shape();
    let files = files.max(2) as usize;
    let existing = (files as u64 * shape.prealloc_pct / 100) as usize;
    let set = FileSet::with_existing((0..files).map(|i| i < existing).collect());
    let buf = vec![0x46u8; shape.write_io.max(shape.file_size as usize)];
    for i in 0..existing {
        let f = b.create(dir, set.name(i))?;
        write_whole(b, &f, shape.file_size, &buf)?;
    }
    Ok(set)
}

/// Remove what is left of the file set.
pub fn cleanup<B: Backend>(b: &B, dir: &B::Dir, set: &FileSet) -> Result<()> {
    for (i, s) in set.slots.iter().enumerate() {
        let mut g = s.lock().unwrap_or_else(|p| p.into_inner());
        if *g {
            b.unlink(dir, set.name(i))?;
            *g = false;
        }
    }
    Ok(())
}

/// When the threads stop.
#[derive(Debug, Clone, Copy)]
pub enum Until {
    /// At this instant (checked between loops).
    Deadline(Instant),
    /// After this many loops per thread (the tests count flowops so;
    /// ageing runs a fixed amount of work).
    Loops(u64),
}

/// Run `k` on `threads` threads over `set` until `until` or `halt`;
/// operations are added to `counters` as they happen. Returns the wall
/// time, seconds.
#[allow(clippy::too_many_arguments)]
pub fn run<B: Backend>(
    b: &B,
    dir: &B::Dir,
    k: Personality,
    set: &FileSet,
    threads: usize,
    until: Until,
    halt: &AtomicBool,
    counters: &Counters,
) -> Result<f64> {
    parallel(threads.max(1), |t| {
        let mut w = Worker::new(b, dir, set, k, t)?;
        let mut loops = 0u64;
        loop {
            let go = match until {
                Until::Deadline(d) => Instant::now() < d,
                Until::Loops(n) => loops < n,
            };
            if !go || halt.load(Ordering::Relaxed) {
                break;
            }
            w.one_loop()?;
            loops += 1;
            counters.ops.fetch_add(std::mem::take(&mut w.ops), Ordering::Relaxed);
            counters
                .nospc
                .fetch_add(std::mem::take(&mut w.nospc), Ordering::Relaxed);
        }
        w.finish()
    })
}

/// What one [`measure`] run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    pub ops_per_s: f64,
    /// The requests the target's daemon served during the timed loops,
    /// where a daemon serves the target.
    pub requests: Option<Breakdown>,
}

/// One run of `k` in `dir` as the rounds do it: prepare the file set, run
/// for `p.secs`, clean up. ENOSPC here is an error (the target is too
/// small for the file set).
pub fn measure<B: Backend>(b: &B, dir: &B::Dir, k: Personality, p: &PersonalityParams) -> Result<Measured> {
    let set = prepare(b, dir, k, p.files)?;
    let counters = Counters::default();
    let halt = AtomicBool::new(false);
    // Taken outside the timed loops; what `novafs stats` itself sends
    // through the mount (a getattr of it) is one request in thousands.
    let before = b.requests()?;
    let deadline = Instant::now() + Duration::from_secs_f64(p.secs);
    let secs = run(b, dir, k, &set, p.threads, Until::Deadline(deadline), &halt, &counters)?;
    let after = b.requests()?;
    cleanup(b, dir, &set)?;
    let nospc = counters.nospc.load(Ordering::Relaxed);
    if nospc > 0 {
        bail!(
            "{}: {nospc} operations failed with ENOSPC; the file system is too small for the file set",
            k.name()
        );
    }
    let flowops = counters.ops.load(Ordering::Relaxed);
    let requests = match (before, after) {
        (Some(before), Some(after)) => Some(Breakdown {
            flowops,
            requests: after.since(&before)?,
        }),
        _ => None,
    };
    Ok(Measured {
        ops_per_s: flowops as f64 / secs.max(1e-9),
        requests,
    })
}

/// One thread of a personality run.
struct Worker<'a, B: Backend> {
    b: &'a B,
    dir: &'a B::Dir,
    set: &'a FileSet,
    k: Personality,
    shape: Shape,
    rng: SplitMix,
    wbuf: Vec<u8>,
    rbuf: Vec<u8>,
    /// This thread's log file, if the personality has one.
    log: Option<(String, B::File)>,
    ops: u64,
    nospc: u64,
}

impl<'a, B: Backend> Worker<'a, B> {
    fn new(b: &'a B, dir: &'a B::Dir, set: &'a FileSet, k: Personality, t: usize) -> Result<Self> {
        let shape = k.shape();
        let log = if shape.log {
            let name = format!("log{t}");
            let f = b.create(dir, &name)?;
            Some((name, f))
        } else {
            None
        };
        Ok(Worker {
            b,
            dir,
            set,
            k,
            shape,
            rng: SplitMix::derive(3, t as u64),
            wbuf: vec![0xB7u8; shape.write_io.max(1)],
            rbuf: vec![0u8; shape.read_io.max(1)],
            log,
            ops: 0,
            nospc: 0,
        })
    }

    /// Count a flowop: done, failed with ENOSPC (`None`), or a real error.
    fn op<T>(&mut self, r: Result<T>) -> Result<Option<T>> {
        match r {
            Ok(v) => {
                self.ops += 1;
                Ok(Some(v))
            }
            Err(e) if is_nospc(&e) => {
                self.nospc += 1;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// openfile on an existing file of the set, held (its guard) while the
    /// caller works on it; `None` when there is none or the open failed
    /// with ENOSPC.
    fn open_picked(&mut self) -> Result<Option<(B::File, MutexGuard<'a, bool>)>> {
        let (b, dir, set) = (self.b, self.dir, self.set);
        let Some((i, g)) = set.pick(&mut self.rng, true) else {
            return Ok(None);
        };
        Ok(self.op(b.open(dir, set.name(i)))?.map(|f| (f, g)))
    }

    fn one_loop(&mut self) -> Result<()> {
        match self.k {
            Personality::Fileserver => {
                self.create_file(true)?;
                self.open_append(false)?;
                self.open_read_close()?;
                self.delete()?;
                self.stat()
            }
            Personality::Varmail => {
                self.delete()?;
                self.create_file(false)?;
                self.open_append(true)?;
                self.open_read_close()
            }
            Personality::Webserver => {
                for _ in 0..10 {
                    self.open_read_close()?;
                }
                self.append_log()
            }
            Personality::Webproxy => {
                self.delete()?;
                self.create_file(false)?;
                for _ in 0..5 {
                    self.open_read_close()?;
                }
                self.append_log()
            }
        }
    }

    /// createfile, then writewholefile (fileserver) or appendfilerand, a
    /// varmail fsync, closefile.
    fn create_file(&mut self, whole: bool) -> Result<()> {
        let (b, dir, set) = (self.b, self.dir, self.set);
        let Some((i, mut g)) = set.pick(&mut self.rng, false) else {
            return Ok(());
        };
        let Some(f) = self.op(b.create(dir, set.name(i)))? else {
            return Ok(());
        };
        *g = true;
        let wrote = if whole {
            let r = write_whole(b, &f, self.shape.file_size, &self.wbuf);
            self.op(r)?
        } else {
            let r = b.write_at(&f, 0, &self.wbuf);
            self.op(r)?
        };
        if wrote.is_some() && self.k == Personality::Varmail {
            let r = b.fsync(&f);
            self.op(r)?;
        }
        drop(f);
        self.ops += 1; // closefile
        Ok(())
    }

    /// openfile; for varmail readwholefile first; appendfilerand; for
    /// varmail fsync; closefile.
    fn open_append(&mut self, varmail: bool) -> Result<()> {
        let b = self.b;
        let Some((f, _g)) = self.open_picked()? else {
            return Ok(());
        };
        if varmail {
            let r = read_whole(b, &f, &mut self.rbuf);
            self.op(r)?;
        }
        let end = b.len(&f)?;
        let r = b.write_at(&f, end, &self.wbuf);
        if self.op(r)?.is_some() && varmail {
            let r = b.fsync(&f);
            self.op(r)?;
        }
        drop(f);
        self.ops += 1;
        Ok(())
    }

    /// openfile, readwholefile, closefile.
    fn open_read_close(&mut self) -> Result<()> {
        let b = self.b;
        let Some((f, _g)) = self.open_picked()? else {
            return Ok(());
        };
        let r = read_whole(b, &f, &mut self.rbuf);
        self.op(r)?;
        drop(f);
        self.ops += 1;
        Ok(())
    }

    /// deletefile.
    fn delete(&mut self) -> Result<()> {
        let (b, dir, set) = (self.b, self.dir, self.set);
        let Some((i, mut g)) = set.pick(&mut self.rng, true) else {
            return Ok(());
        };
        if self.op(b.unlink(dir, set.name(i)))?.is_some() {
            *g = false;
        }
        Ok(())
    }

    /// statfile.
    fn stat(&mut self) -> Result<()> {
        let (b, dir, set) = (self.b, self.dir, self.set);
        let Some((i, _g)) = set.pick(&mut self.rng, true) else {
            return Ok(());
        };
        self.op(b.stat(dir, set.name(i)))?;
        Ok(())
    }

    /// appendfilerand on this thread's log file, rotated at [`LOG_MAX`].
    fn append_log(&mut self) -> Result<()> {
        let (b, dir) = (self.b, self.dir);
        let Some((name, log)) = self.log.as_mut() else {
            return Ok(());
        };
        let mut end = b.len(log)?;
        if end >= LOG_MAX {
            b.unlink(dir, name)?;
            *log = b.create(dir, name)?;
            end = 0;
        }
        let r = b.write_at(log, end, &self.wbuf);
        self.op(r)?;
        Ok(())
    }

    /// Remove this thread's log file.
    fn finish(self) -> Result<()> {
        if let Some((name, f)) = self.log {
            drop(f);
            self.b.unlink(self.dir, &name)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::target::LibraryTarget;

    fn lib(mib: u64) -> LibraryTarget {
        LibraryTarget::on_region(Arc::new(pm::MemRegion::new(mib << 20))).expect("format a heap region")
    }

    /// Flowops per loop, opens and closes included, as in filebench's .f files.
    fn flowops(k: Personality) -> u64 {
        match k {
            Personality::Fileserver => 11,
            Personality::Varmail => 13,
            Personality::Webserver => 31,
            Personality::Webproxy => 20,
        }
    }

    #[test]
    fn one_loop_does_the_flowops_of_filebench() {
        let t = lib(64);
        for k in Personality::ALL {
            let dir = t.mkdir(k.name()).expect("mkdir");
            let set = prepare(&t, &dir, k, 20).expect("prepare");
            let before = set.existing();
            assert_eq!(before as u64, 20 * k.shape().prealloc_pct / 100);
            let c = Counters::default();
            let loops = 3;
            run(&t, &dir, k, &set, 1, Until::Loops(loops), &AtomicBool::new(false), &c).expect("run");
            assert_eq!(c.ops.load(Ordering::Relaxed), loops * flowops(k), "{}", k.name());
            assert_eq!(c.nospc.load(Ordering::Relaxed), 0);
            // Creates and deletes balance: the set keeps its size.
            assert_eq!(set.existing(), before, "{}", k.name());
            cleanup(&t, &dir, &set).expect("cleanup");
            t.rmdir(k.name()).expect("the directory is empty after cleanup");
        }
    }

    #[test]
    fn fileserver_files_grow_by_appends_and_new_files_are_whole() {
        let t = lib(64);
        let k = Personality::Fileserver;
        let dir = t.mkdir("fs").expect("mkdir");
        let set = prepare(&t, &dir, k, 10).expect("prepare");
        run(
            &t,
            &dir,
            k,
            &set,
            1,
            Until::Loops(5),
            &AtomicBool::new(false),
            &Counters::default(),
        )
        .expect("run");
        let sh = k.shape();
        let mut total = 0;
        for i in 0..set.entries() {
            if let Ok(size) = t.stat(&dir, set.name(i)) {
                assert!(size >= sh.file_size && (size - sh.file_size).is_multiple_of(sh.write_io as u64));
                total += size;
            }
        }
        // Five creates and five deletes of whole files, five appends that
        // may have gone to files deleted since.
        assert!(total >= 8 * sh.file_size && total <= 8 * sh.file_size + 5 * sh.write_io as u64);
        cleanup(&t, &dir, &set).expect("cleanup");
    }

    #[test]
    fn threads_run_until_the_deadline_and_count_their_ops() {
        let t = lib(128);
        for k in Personality::ALL {
            let dir = t.mkdir(k.name()).expect("mkdir");
            let p = PersonalityParams {
                files: 50,
                threads: 3,
                secs: 0.2,
            };
            let m = measure(&t, &dir, k, &p).expect("measure");
            assert!(m.ops_per_s > 0.0, "{}", k.name());
            assert_eq!(m.requests, None, "no daemon serves the library");
            t.rmdir(k.name()).expect("cleaned up");
        }
    }

    /// The library, with a stand-in daemon that counts every call as a
    /// request of its name and reports them as `novafs stats` would.
    struct Counting {
        lib: LibraryTarget,
        calls: Mutex<std::collections::BTreeMap<&'static str, u64>>,
    }

    impl Counting {
        fn count<T>(&self, op: &'static str, r: T) -> T {
            *self.calls.lock().expect("calls").entry(op).or_default() += 1;
            r
        }
    }

    impl Backend for Counting {
        type Dir = novafs::Ino;
        type File = novafs::Ino;
        fn mkdir(&self, name: &str) -> Result<Self::Dir> {
            self.count("MKDIR", self.lib.mkdir(name))
        }
        fn rmdir(&self, name: &str) -> Result<()> {
            self.count("RMDIR", self.lib.rmdir(name))
        }
        fn create(&self, dir: &Self::Dir, name: &str) -> Result<Self::File> {
            self.count("CREATE", self.lib.create(dir, name))
        }
        fn open(&self, dir: &Self::Dir, name: &str) -> Result<Self::File> {
            self.count("OPEN", self.lib.open(dir, name))
        }
        fn write_at(&self, file: &Self::File, off: u64, buf: &[u8]) -> Result<()> {
            self.count("WRITE", self.lib.write_at(file, off, buf))
        }
        fn read_at(&self, file: &Self::File, off: u64, buf: &mut [u8]) -> Result<()> {
            self.count("READ", self.lib.read_at(file, off, buf))
        }
        fn fsync(&self, file: &Self::File) -> Result<()> {
            self.count("FSYNC", self.lib.fsync(file))
        }
        fn unlink(&self, dir: &Self::Dir, name: &str) -> Result<()> {
            self.count("UNLINK", self.lib.unlink(dir, name))
        }
        fn len(&self, file: &Self::File) -> Result<u64> {
            self.count("GETATTR", self.lib.len(file))
        }
        fn stat(&self, dir: &Self::Dir, name: &str) -> Result<u64> {
            self.count("LOOKUP", self.lib.stat(dir, name))
        }
        fn requests(&self) -> Result<Option<crate::requests::Requests>> {
            let mut table = "/dev/fuse\nopcode count wait_us handle_us reply_us\n".to_string();
            for (op, n) in self.calls.lock().expect("calls").iter() {
                table.push_str(&format!("{op} {n} 1.00 2.00 3.00\n"));
            }
            crate::requests::Requests::parse(&table).map(Some)
        }
    }

    #[test]
    fn the_breakdown_counts_the_timed_loops_and_not_the_file_set() {
        let t = Counting {
            lib: lib(64),
            calls: Mutex::default(),
        };
        let k = Personality::Webserver;
        let dir = t.mkdir("web").expect("mkdir");
        let p = PersonalityParams {
            files: 200,
            threads: 2,
            secs: 0.05,
        };
        let m = measure(&t, &dir, k, &p).expect("measure");
        let b = m.requests.expect("the stand-in daemon reports requests");
        let count = |op: &str| {
            let rows = b.requests.rows("/dev/fuse");
            rows.iter().find(|r| r.0 == op).map_or(0, |r| r.1.count)
        };
        // A loop: 10 × (open, fstat + one read of the 64 KiB file, close),
        // then an fstat and an append to the log: 31 flowops.
        let loops = b.flowops / 31;
        assert!(loops > 0 && b.flowops.is_multiple_of(31), "{b:?}");
        assert_eq!(count("OPEN"), 10 * loops);
        assert_eq!(count("READ"), 10 * loops);
        assert_eq!(count("GETATTR"), 11 * loops);
        // The file set's 200 creates and writes (prepare) and unlinks
        // (cleanup) are outside: what is left is the appends and the log
        // files, created and removed by each thread, and rotated.
        assert_eq!(count("WRITE"), loops);
        assert_eq!(count("CREATE"), count("UNLINK"));
        assert!(count("CREATE") >= 2 && count("CREATE") < 200, "{b:?}");
        assert_eq!(count("MKDIR"), 0);
        let total = b.requests.total("/dev/fuse");
        assert_eq!(total.count, 32 * loops + 2 * count("CREATE"));
        assert_eq!(total.mean().map(|s| s.handle_us), Some(2.0));
    }

    #[test]
    fn enospc_is_recognised_through_context() {
        let e = anyhow::Error::new(novafs::Error::NoSpace).context("write f1");
        assert!(is_nospc(&e));
        let io = anyhow::Error::new(std::io::Error::from_raw_os_error(28)).context("create");
        assert!(is_nospc(&io));
        assert!(!is_nospc(&anyhow::Error::new(novafs::Error::NotFound)));
    }
}
