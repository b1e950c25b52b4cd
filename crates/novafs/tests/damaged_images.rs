//! Damaged images: no bad byte anywhere in the metadata may panic, hang,
//! loop, or make inspect, fsck or mount fail with anything but a clear
//! error (DESIGN.md §5: everything read from the media is untrusted).
//!
//! How it works:
//! - The two tests that run by default are supervisors. They build a small
//!   populated image in three states (cleanly unmounted, crashed, crashed
//!   with a committed journal transaction waiting), derive damaged cases
//!   from them, and hand the list to a worker: this test binary started
//!   again as a subprocess (`subprocess_worker`). An abort — an allocation
//!   the capping allocator refused, or the watchdog — kills only the worker;
//!   the supervisor blames the case it was on and starts a new worker after
//!   it, so one run lists every failing case.
//! - A capping global allocator refuses any single allocation above 1 GiB:
//!   a length read from damaged media then aborts at once ("memory
//!   allocation of N bytes failed") instead of eating the machine.
//! - A watchdog aborts a case that runs longer than 20 s (a hang or a loop).
//! - Failing cases are saved to tests/corpus/ as replayable text, one per
//!   distinct failure; `corpus_cases_are_handled` replays the whole corpus.
//!
//! Environment: `NOVAFS_FUZZ_SEED=N` (the seed that otherwise changes every
//! run), `NOVAFS_FUZZ_LONG=1` (many more cases), `NOVAFS_FUZZ_CASES=N`
//! (cases per seed), `NOVAFS_FUZZ_ONLY=SEED[:INDEX]` (only those cases, with
//! the worker's whole output), `NOVAFS_FUZZ_LIST=1` (print the cases, run
//! none), `NOVAFS_FUZZ_SAVE=0` (leave the corpus alone),
//! `NOVAFS_FUZZ_DEADLINE_SECS=N` (the watchdog), `NOVAFS_FUZZ_VERBOSE=1`
//! (the corpus workers' whole output), `RUST_BACKTRACE=1`.
#![allow(clippy::unwrap_used)]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::backtrace::Backtrace;
use std::cell::Cell;
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use novafs::layout::{
    entry_csum, JournalRecord, Superblock, TxnInfo, CHUNK_FOOTER_OFF, CHUNK_MAGIC, CHUNK_NEXT_OFF, CHUNK_SIZE,
    INODE_CSUM_END, INODE_CSUM_START, INODE_CSUM_WORD_OFF, INODE_HEADS_OFF, INODE_SIZE, JOURNAL_HEADERS_OFF,
    JOURNAL_RINGS_OFF, JOURNAL_RING_SIZE, LOG_NEXT_OFF, LOG_USABLE, PAGE_SIZE, RECORD_CHECK, RECORD_UPDATE,
    RECOVERY_INODE_OFF, SLOT, TXN_MAGIC, TXN_MARKER,
};
use novafs::{Attr, Error, FileType, FormatOptions, Fs, MountOptions, ROOT_INO, SEEK_DATA, SEEK_HOLE};
use novafs_rng::SplitMix;
use pm::{MemRegion, Region};
use zerocopy::{FromBytes, IntoBytes};

// ---------------------------------------------------------------------------
// The capping allocator.

/// No single allocation above this is granted: on a 32 MiB image only a
/// length taken from damaged media asks for that much.
const ALLOC_CAP: usize = 1 << 30;

static LARGEST: AtomicUsize = AtomicUsize::new(0);
/// Granted, but reported as a failure: while a case runs, no buffer the
/// library needs is bigger than the image it works on.
static CASE_ALLOC_LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);
static CASE_LARGEST: AtomicUsize = AtomicUsize::new(0);
/// Where the case's biggest suspicious allocation came from.
static CASE_BIG_SITE: Mutex<Option<String>> = Mutex::new(None);

thread_local! {
    /// Set while the allocator itself captures a backtrace (which allocates).
    static IN_ALLOC_REPORT: Cell<bool> = const { Cell::new(false) };
}

struct CappedAlloc;

#[global_allocator]
static GLOBAL: CappedAlloc = CappedAlloc;

impl CappedAlloc {
    fn admit(size: usize) -> bool {
        LARGEST.fetch_max(size, Ordering::Relaxed);
        CASE_LARGEST.fetch_max(size, Ordering::Relaxed);
        if size > ALLOC_CAP || size > CASE_ALLOC_LIMIT.load(Ordering::Relaxed) {
            report_big_allocation(size, size > ALLOC_CAP);
        }
        size <= ALLOC_CAP
    }
}

// SAFETY: every call is forwarded to `System` unchanged, or answered with
// null (allocation failure), which the GlobalAlloc contract allows. It
// never unwinds: `report_big_allocation` catches its own panics.
unsafe impl GlobalAlloc for CappedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !Self::admit(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !Self::admit(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !Self::admit(new_size) {
            return std::ptr::null_mut();
        }
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Says where a huge allocation came from. A refused one is followed by
/// the abort of std's allocation error handler, so this is the only chance
/// to name the case and the library frames. Reentrant allocations (the
/// backtrace's own) are small and go straight through.
fn report_big_allocation(size: usize, refused: bool) {
    if IN_ALLOC_REPORT.with(|f| f.replace(true)) {
        return;
    }
    let _ = catch_unwind(|| {
        let frames = library_frames(&Backtrace::force_capture().to_string());
        let site = frames.first().cloned().unwrap_or_else(|| "outside novafs".into());
        if refused {
            eprintln!(
                "damaged_images: refused an allocation of {size} bytes (cap {ALLOC_CAP}) in step {}; \
                 the process aborts unless the caller handles it. novafs frames:",
                current_step()
            );
            for f in frames.iter().take(12) {
                eprintln!("    {f}");
            }
            eprintln!("@@abort abort-alloc {site}");
        } else if let Ok(mut s) = CASE_BIG_SITE.try_lock() {
            s.get_or_insert(site);
        }
    });
    IN_ALLOC_REPORT.with(|f| f.set(false));
}

/// The frames of a rendered backtrace that are novafs or pm code, as
/// "function (crates/…/file.rs:line)", innermost first. Frames are told by
/// their function's crate: the paths in the debug info are relative to
/// each crate ("./src/inode.rs").
fn library_frames(bt: &str) -> Vec<String> {
    let lines: Vec<&str> = bt.lines().collect();
    let mut frames = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(at) = line.trim_start().strip_prefix("at ") else {
            continue;
        };
        let Some((_, func)) = i.checked_sub(1).and_then(|j| lines[j].split_once(": ")) else {
            continue;
        };
        let func = func.trim();
        let krate = func.trim_start_matches('<').split("::").next().unwrap_or("");
        if krate != "novafs" && krate != "pm" {
            continue;
        }
        let file = match (at.find("crates/"), at.find("src/")) {
            (Some(p), _) => at[p..].to_string(),
            (None, Some(p)) => format!("crates/{krate}/{}", &at[p..]),
            _ => at.to_string(),
        };
        frames.push(format!("{func} ({})", strip_column(&file)));
    }
    frames
}

/// "file.rs:12:5" → "file.rs:12".
fn strip_column(loc: &str) -> String {
    let parts: Vec<&str> = loc.rsplitn(3, ':').collect();
    match parts.as_slice() {
        [col, line, file] if col.parse::<u32>().is_ok() => format!("{file}:{line}"),
        _ => loc.to_string(),
    }
}

// ---------------------------------------------------------------------------
// Steps, panics and the watchdog (worker side).

static STEP: Mutex<&str> = Mutex::new("start");
/// (deadline, what to print when it passes) of the case running now.
static WATCH: Mutex<Option<(Instant, String)>> = Mutex::new(None);
/// Panics seen since the case started, in any thread: a panic the library
/// catches itself (a scan thread's, turned into an error) still counts.
static PANICS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn set_step(step: &'static str) {
    *lock(&STEP) = step;
}

fn current_step() -> &'static str {
    // try_lock: called from the allocator, which may run under this lock.
    STEP.try_lock().map_or("?", |s| *s)
}

fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(non-string panic)".into());
        let loc = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let frames = library_frames(&Backtrace::force_capture().to_string());
        // The frame of the panic's own location when it is library code
        // (an index out of bounds, an overflow); else the innermost one.
        let site = frames
            .iter()
            .find(|f| f.ends_with(&format!("({loc})")))
            .or(frames.first())
            .cloned()
            .unwrap_or_else(|| loc.clone());
        eprintln!(
            "damaged_images: panic in step {}: {msg} (at {loc}); novafs frames:",
            current_step()
        );
        for f in frames.iter().take(12) {
            eprintln!("    {f}");
        }
        lock(&PANICS).push((site, format!("{msg} (at {loc})")));
    }));
}

fn deadline() -> Duration {
    let secs = std::env::var("NOVAFS_FUZZ_DEADLINE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20.0);
    Duration::from_secs_f64(secs)
}

fn start_watchdog() {
    std::thread::spawn(|| loop {
        std::thread::sleep(Duration::from_millis(20));
        let w = lock(&WATCH);
        if let Some((deadline, what)) = &*w {
            if Instant::now() > *deadline {
                eprintln!(
                    "damaged_images: WATCHDOG: case still running after {:?} in step {}:\n{what}",
                    self::deadline(),
                    current_step()
                );
                eprintln!("@@abort hang step:{}", current_step());
                std::process::abort();
            }
        }
    });
}

// ---------------------------------------------------------------------------
// The generator of the cases.

/// `novafs_rng::SplitMix` seeded as the cases were first generated (the
/// seed mixed with a constant of its own, each case's stream derived from
/// its index), so a printed `NOVAFS_FUZZ_ONLY=SEED:INDEX` keeps naming the
/// same case; with the draws the case generator makes.
#[derive(Clone)]
struct Rng(SplitMix);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(SplitMix::from_state(seed ^ 0x6A09_E667_F3BC_C909))
    }

    fn for_case(seed: u64, index: u64) -> Rng {
        let mut r = Rng::new(seed);
        let a = r.next();
        Rng::new(a ^ index.wrapping_mul(0xD1B5_4A32_D192_ED03))
    }

    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0.below(n)
    }

    /// In `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.0.chance(percent, 100)
    }

    fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        *self.0.pick(v).unwrap()
    }
}

// ---------------------------------------------------------------------------
// The base images and what they hold.

const IMAGE_SIZE: u64 = 32 << 20;
const SHARDS: u32 = 2;
/// The file the rw step creates after the walk.
const NEW_NAME: &[u8] = b"fuzz-new";

#[derive(Clone, Debug, PartialEq)]
enum Expect {
    Dir,
    File(Vec<u8>),
    Symlink(Vec<u8>),
    Special(FileType),
}

/// Path ("/a/f1") → what the base image holds there.
type Model = BTreeMap<String, Expect>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    /// Cleanly unmounted: the saved allocator state is used.
    Clean,
    /// Dropped while mounted, an unlinked file still open: the recovery scan
    /// runs and reclaims the orphan.
    Crashed,
    /// Crashed, plus a committed transaction at shard 0's journal head:
    /// replay runs.
    Journal,
}

const VARIANTS: [Variant; 3] = [Variant::Clean, Variant::Crashed, Variant::Journal];

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Clean => "clean",
            Variant::Crashed => "crashed",
            Variant::Journal => "journal",
        }
    }

    fn parse(s: &str) -> Option<Variant> {
        VARIANTS.into_iter().find(|v| v.name() == s)
    }
}

struct Base {
    bytes: Vec<u8>,
    map: MetaMap,
}

struct Bases {
    bases: Vec<(Variant, Base)>,
    model: Model,
}

impl Bases {
    fn get(&self, v: Variant) -> &Base {
        &self.bases.iter().find(|(w, _)| *w == v).unwrap().1
    }

    /// Built once per process.
    fn shared() -> &'static Bases {
        static BASES: OnceLock<Bases> = OnceLock::new();
        BASES.get_or_init(Bases::build)
    }

    fn build() -> Bases {
        let (clean, crashed, model) = build_on_shard_zero();
        let mut journal = crashed.clone();
        let txn_head = plant_transaction(&mut journal);
        let mut jmap = map_image(&journal);
        jmap.txn_head = Some(txn_head);
        let bases = vec![
            (
                Variant::Clean,
                Base {
                    map: map_image(&clean),
                    bytes: clean,
                },
            ),
            (
                Variant::Crashed,
                Base {
                    map: map_image(&crashed),
                    bytes: crashed,
                },
            ),
            (
                Variant::Journal,
                Base {
                    map: jmap,
                    bytes: journal,
                },
            ),
        ];
        Bases { bases, model }
    }
}

fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u8)
                .wrapping_mul(31)
                .wrapping_add(salt)
                .wrapping_add((i >> 12) as u8)
                | 1
        })
        .collect()
}

/// Builds the image on a thread that novafs maps to shard 0, so that the
/// layout (which pages, which slots) is the same in every process and a
/// case saved as (offset, bytes) writes replays on the same structures.
/// novafs gives each new thread the next shard (`alloc::current_shard`);
/// the first file's inode number says which one a thread got.
fn build_on_shard_zero() -> (Vec<u8>, Vec<u8>, Model) {
    for _ in 0..32 {
        if let Some(built) = std::thread::spawn(try_build).join().unwrap() {
            return built;
        }
    }
    panic!("no thread was mapped to shard 0");
}

fn try_build() -> Option<(Vec<u8>, Vec<u8>, Model)> {
    let mem = Arc::new(MemRegion::new(IMAGE_SIZE));
    let region: Arc<dyn Region> = mem.clone();
    Fs::format(
        region.clone(),
        &FormatOptions {
            shards: Some(SHARDS),
            ..Default::default()
        },
    )
    .unwrap();
    let fs = Fs::open(region, MountOptions::default()).unwrap();
    let mut m = Model::new();
    let small = fs.create(ROOT_INO, b"small", 0o644, 0, 0).unwrap();
    // Shard 0's first free slot is inode 3 (the root has 1); shard 1's is 2.
    if small.ino != 3 {
        return None;
    }
    fs.write(small.ino, 0, b"small file").unwrap();
    m.insert("/small".into(), Expect::File(b"small file".to_vec()));
    populate(&fs, &mut m);
    // An unlinked file still open: the crash leaves an orphan to reclaim.
    let orphan = fs.create_open(ROOT_INO, b"orphan", 0o644, 0, 0).unwrap();
    fs.write(orphan.ino, 0, &pattern(4096, 9)).unwrap();
    fs.unlink(ROOT_INO, b"orphan").unwrap();
    // Every operation is durable when it returns: a copy now is a crash.
    let crashed = mem.snapshot();
    fs.unmount().unwrap();
    Some((mem.snapshot(), crashed, m))
}

/// Directories, files of a few pages, a hard link, a symlink, a FIFO, and
/// enough creates, unlinks, renames and writes that logs span several pages
/// and hold invalidated dentries.
fn populate(fs: &Fs, m: &mut Model) {
    let file = |fs: &Fs, m: &mut Model, parent: u64, path: &str, data: &[u8]| -> Attr {
        let name = path.rsplit('/').next().unwrap();
        let a = fs.create(parent, name.as_bytes(), 0o644, 0, 0).unwrap();
        // Two writes, so the file has two write entries.
        let half = data.len() / 2;
        fs.write(a.ino, 0, &data[..half]).unwrap();
        fs.write(a.ino, half as u64, &data[half..]).unwrap();
        m.insert(path.into(), Expect::File(data.to_vec()));
        a
    };
    let a = fs.mkdir(ROOT_INO, b"a", 0o755, 0, 0).unwrap();
    m.insert("/a".into(), Expect::Dir);
    let f1_data = pattern(3 * 4096 + 100, 1);
    let f1 = file(fs, m, a.ino, "/a/f1", &f1_data);
    let b = fs.mkdir(a.ino, b"b", 0o755, 0, 0).unwrap();
    m.insert("/a/b".into(), Expect::Dir);
    let f2 = file(fs, m, b.ino, "/a/b/f2", &pattern(2 * 4096, 2));
    fs.setattr(
        f2.ino,
        &novafs::SetAttr {
            mode: Some(0o600),
            ..Default::default()
        },
    )
    .unwrap();
    fs.link(f1.ino, b.ino, b"hard").unwrap();
    m.insert("/a/b/hard".into(), Expect::File(f1_data));
    fs.symlink(ROOT_INO, b"link", b"a/f1", 0, 0).unwrap();
    m.insert("/link".into(), Expect::Symlink(b"a/f1".to_vec()));
    fs.mknod(ROOT_INO, b"fifo", libc::S_IFIFO | 0o644, 0, 0, 0).unwrap();
    m.insert("/fifo".into(), Expect::Special(FileType::NamedPipe));
    let c = fs.mkdir(ROOT_INO, b"c", 0o755, 0, 0).unwrap();
    m.insert("/c".into(), Expect::Dir);
    file(fs, m, c.ino, "/c/x", b"moved across directories");
    fs.rename(c.ino, b"x", a.ino, b"moved", 0).unwrap();
    let moved = m.remove("/c/x").unwrap();
    m.insert("/a/moved".into(), moved);
    // Truncated: a setattr entry shrinks what the write entries map.
    let t = file(fs, m, ROOT_INO, "/trunc", &pattern(3 * 4096, 3));
    fs.setattr(
        t.ino,
        &novafs::SetAttr {
            size: Some(5000),
            ..Default::default()
        },
    )
    .unwrap();
    m.insert("/trunc".into(), Expect::File(pattern(3 * 4096, 3)[..5000].to_vec()));
    // One page per write: a log of a few pages of live write entries.
    let big = fs.create(ROOT_INO, b"big", 0o644, 0, 0).unwrap();
    let mut big_data = Vec::new();
    for i in 0..130u64 {
        let page = pattern(4096, i as u8);
        fs.write(big.ino, i * 4096, &page).unwrap();
        big_data.extend_from_slice(&page);
    }
    m.insert("/big".into(), Expect::File(big_data));
    // Small appends to one page: superseded entries, GC.
    let app = fs.create(ROOT_INO, b"appendlog", 0o644, 0, 0).unwrap();
    let mut app_data = Vec::new();
    for i in 0..150u32 {
        let rec = format!("append {i:08}\n").into_bytes();
        fs.write(app.ino, app_data.len() as u64, &rec).unwrap();
        app_data.extend_from_slice(&rec);
    }
    m.insert("/appendlog".into(), Expect::File(app_data));
    // A directory of long names, most removed, some renamed: a log of
    // several pages with invalidated adds.
    let ch = fs.mkdir(ROOT_INO, b"churn", 0o755, 0, 0).unwrap();
    m.insert("/churn".into(), Expect::Dir);
    let long = "n".repeat(60);
    for i in 0..120 {
        file(
            fs,
            m,
            ch.ino,
            &format!("/churn/{i:03}-{long}"),
            format!("churn {i}").as_bytes(),
        );
    }
    for i in (0..120).filter(|i| i % 4 != 0) {
        let name = format!("{i:03}-{long}");
        fs.unlink(ch.ino, name.as_bytes()).unwrap();
        m.remove(&format!("/churn/{name}"));
    }
    for i in (0..120).step_by(8) {
        let (from, to) = (format!("{i:03}-{long}"), format!("r{i:03}"));
        fs.rename(ch.ino, from.as_bytes(), ch.ino, to.as_bytes(), 0).unwrap();
        let e = m.remove(&format!("/churn/{from}")).unwrap();
        m.insert(format!("/churn/{to}"), e);
    }
}

/// Puts a committed transaction at shard 0's journal head, as
/// `corruption.rs` does: it stores a word in a free page and checks 64
/// zero bytes of another. Returns the head (its ring counter).
fn plant_transaction(img: &mut [u8]) -> u64 {
    let sb = Superblock::read_from_bytes(&img[..size_of::<Superblock>()]).unwrap();
    let head = u64_at(img, JOURNAL_HEADERS_OFF);
    // Two zero (free) pages whose mirrors are zero too: replay writes a
    // metadata update to both copies when the image keeps replicas.
    let pages = (sb.data_end - sb.data_start) / PAGE_SIZE;
    let mirror = |off: u64| sb.data_start + (pages - 1 - (off - sb.data_start) / PAGE_SIZE) * PAGE_SIZE;
    let zero = |off: u64| img[off as usize..(off + PAGE_SIZE) as usize].iter().all(|&b| b == 0);
    let target = (1..pages)
        .map(|i| sb.data_end - i * PAGE_SIZE)
        .find(|&t| [t, t - PAGE_SIZE].iter().all(|&p| zero(p) && zero(mirror(p))))
        .expect("two free pages with free mirrors");
    let checked = target - PAGE_SIZE;
    let mut txn = Vec::new();
    let update = JournalRecord {
        addr: target,
        len: 8,
        kind: RECORD_UPDATE,
    };
    txn.extend_from_slice(update.as_bytes());
    txn.extend_from_slice(&0x1234_5678_u64.to_le_bytes());
    let check = JournalRecord {
        addr: checked,
        len: 64,
        kind: RECORD_CHECK,
    };
    txn.extend_from_slice(check.as_bytes());
    txn.extend_from_slice(&u64::from(crc32c::crc32c(&[0u8; 64])).to_le_bytes());
    let info = TxnInfo {
        marker: TXN_MARKER,
        count: 2,
        magic: TXN_MAGIC,
        txn_id: head,
        csum: crc32c::crc32c(&txn),
        pad: 0,
    };
    txn.extend_from_slice(info.as_bytes());
    for (i, b) in txn.iter().enumerate() {
        img[ring_byte(head + i as u64) as usize] = *b;
    }
    head
}

/// Region offset of byte `counter` of shard 0's journal ring.
fn ring_byte(counter: u64) -> u64 {
    JOURNAL_RINGS_OFF + counter % JOURNAL_RING_SIZE
}

fn u64_at(img: &[u8], off: u64) -> u64 {
    u64::from_le_bytes(img[off as usize..off as usize + 8].try_into().unwrap())
}

// ---------------------------------------------------------------------------
// Where the metadata is, found by walking the image as FORMAT.md lays it out.

#[derive(Default)]
struct MetaMap {
    size: u64,
    data_start: u64,
    data_end: u64,
    replica: u64,
    shards: u64,
    chunks: Vec<u64>,
    /// Pages of the inode tables that hold something.
    chunk_pages: Vec<u64>,
    /// Live inode records.
    inodes: Vec<u64>,
    /// Free slots next to live ones (a forged record there comes to life).
    free_slots: Vec<u64>,
    log_pages: Vec<u64>,
    /// (offset, length) of every entry found in a log page.
    entries: Vec<(u64, u64)>,
    /// The recovery inode's chain: the saved allocator state.
    chain: Vec<u64>,
    chain_len: u64,
    ring_pages: Vec<u64>,
    /// Words that hold pointers, heads, tails or the valid bit, by kind:
    /// journal heads, inode-table heads and links, inode records' state,
    /// head and tail, log page links, the recovery inode and its chain.
    pointers: [Vec<u64>; 5],
    /// The planted transaction (journal variant).
    txn_head: Option<u64>,
}

impl MetaMap {
    fn fixed_pages(&self) -> Vec<u64> {
        vec![0, PAGE_SIZE, 2 * PAGE_SIZE, self.replica]
    }

    /// A fingerprint of the layout, to tell when the library now places
    /// things elsewhere and a saved case no longer hits what it did.
    fn layout(&self) -> u32 {
        let mut c = 0;
        for list in [&self.chunks, &self.inodes, &self.log_pages, &self.chain] {
            c = crc32c::crc32c_append(c, list.as_bytes());
        }
        c
    }

    fn in_data_area(&self, off: u64) -> bool {
        off >= self.data_start && off < self.data_end
    }
}

fn page_is_zero(img: &[u8], page: u64) -> bool {
    img[page as usize..(page + PAGE_SIZE) as usize].iter().all(|&b| b == 0)
}

/// Follows a page chain (next pointer at the end of each page), bounded.
fn chain_from(img: &[u8], map: &MetaMap, head: u64) -> Vec<u64> {
    let mut pages = Vec::new();
    let mut p = head;
    while p != 0 && p.is_multiple_of(PAGE_SIZE) && map.in_data_area(p) && pages.len() < 10_000 {
        pages.push(p);
        p = u64_at(img, p + LOG_NEXT_OFF);
    }
    pages
}

fn map_image(img: &[u8]) -> MetaMap {
    let sb = Superblock::read_from_bytes(&img[..size_of::<Superblock>()]).unwrap();
    let mut m = MetaMap {
        size: img.len() as u64,
        data_start: sb.data_start,
        data_end: sb.data_end,
        replica: sb.replica_off,
        shards: u64::from(sb.shards),
        ..MetaMap::default()
    };
    for s in 0..m.shards {
        m.pointers[0].push(JOURNAL_HEADERS_OFF + 64 * s);
        m.pointers[1].push(INODE_HEADS_OFF + 8 * s);
        let mut c = u64_at(img, INODE_HEADS_OFF + 8 * s);
        while c != 0 && m.in_data_area(c) && u64_at(img, c + CHUNK_FOOTER_OFF) == CHUNK_MAGIC {
            m.chunks.push(c);
            m.pointers[1].push(c + CHUNK_NEXT_OFF);
            c = u64_at(img, c + CHUNK_NEXT_OFF);
        }
    }
    for &c in &m.chunks.clone() {
        for p in (c..c + CHUNK_SIZE).step_by(PAGE_SIZE as usize) {
            if !page_is_zero(img, p) {
                m.chunk_pages.push(p);
            }
        }
        let mut free_near = 0;
        for rec in (c..c + CHUNK_FOOTER_OFF).step_by(INODE_SIZE as usize) {
            let bytes = &img[rec as usize..(rec + INODE_SIZE) as usize];
            if u64_at(img, rec) == 1 {
                m.inodes.push(rec);
                m.pointers[2].extend([rec, rec + 8, rec + 16]);
            } else if bytes.iter().all(|&b| b == 0) && free_near < 8 {
                m.free_slots.push(rec);
                free_near += 1;
            }
        }
    }
    for &rec in &m.inodes.clone() {
        for p in chain_from(img, &m, u64_at(img, rec + 8)) {
            m.log_pages.push(p);
            m.pointers[3].push(p + LOG_NEXT_OFF);
            let mut pos = 0;
            while pos < LOG_USABLE {
                let (etype, slots) = (img[(p + pos) as usize], img[(p + pos + 1) as usize]);
                let len = u64::from(slots) * SLOT;
                if etype == 0 || len == 0 || pos + len > LOG_USABLE {
                    break;
                }
                m.entries.push((p + pos, len));
                pos += len;
            }
        }
    }
    m.pointers[4].extend([RECOVERY_INODE_OFF, RECOVERY_INODE_OFF + 8, RECOVERY_INODE_OFF + 16]);
    if u64_at(img, RECOVERY_INODE_OFF) == 1 {
        m.chain = chain_from(img, &m, u64_at(img, RECOVERY_INODE_OFF + 8));
        m.chain_len = u64_at(img, RECOVERY_INODE_OFF + 16);
        m.pointers[4].extend(m.chain.iter().map(|p| p + LOG_NEXT_OFF));
    }
    let rings_end = JOURNAL_RINGS_OFF + m.shards * JOURNAL_RING_SIZE;
    m.ring_pages = (JOURNAL_RINGS_OFF..rings_end)
        .step_by(PAGE_SIZE as usize)
        .filter(|&p| !page_is_zero(img, p))
        .collect();
    m
}

// ---------------------------------------------------------------------------
// Cases: damage as (offset, bytes) writes and poisoned ranges on a base.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// Random bytes in pages 0–2 (superblock, journal headers, reserved
    /// inodes, inode-table heads), sometimes in both superblocks.
    Fixed,
    /// Random bytes in metadata pages: inode tables, logs, journal rings,
    /// the saved allocator state.
    Meta,
    /// Whole words set to extreme values: 0, all ones, the region size,
    /// pointers into the region, to the page itself (cycles).
    Scribble,
    /// Media errors in metadata.
    Poison,
    /// A structure changed and its checksum recomputed: damage no CRC
    /// catches (a bug that wrote nonsense, or a crafted image).
    Forged,
}

const CLASSES: [Class; 5] = [Class::Fixed, Class::Meta, Class::Scribble, Class::Poison, Class::Forged];

impl Class {
    fn name(self) -> &'static str {
        match self {
            Class::Fixed => "fixed",
            Class::Meta => "meta",
            Class::Scribble => "scribble",
            Class::Poison => "poison",
            Class::Forged => "forged",
        }
    }
}

#[derive(Clone, Debug)]
struct Case {
    base: Variant,
    layout: u32,
    class: Class,
    origin: String,
    writes: Vec<(u64, Vec<u8>)>,
    poisons: Vec<(u64, u64)>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

fn parse_num(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

impl Case {
    fn to_text(&self) -> String {
        let mut s = format!(
            "base {}\nlayout {:08x}\nclass {}\norigin {}\n",
            self.base.name(),
            self.layout,
            self.class.name(),
            self.origin
        );
        for (off, bytes) in &self.writes {
            let _ = writeln!(s, "write {off:#x} {}", hex(bytes));
        }
        for (off, len) in &self.poisons {
            let _ = writeln!(s, "poison {off:#x} {len}");
        }
        s
    }

    fn parse(text: &str) -> Result<Case, String> {
        let mut case = Case {
            base: Variant::Clean,
            layout: 0,
            class: Class::Meta,
            origin: String::new(),
            writes: Vec::new(),
            poisons: Vec::new(),
        };
        let mut have_base = false;
        for line in text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let (key, rest) = line.split_once(' ').unwrap_or((line, ""));
            let bad = || format!("bad line: {line}");
            match key {
                "base" => {
                    case.base = Variant::parse(rest).ok_or_else(bad)?;
                    have_base = true;
                }
                "layout" => case.layout = u32::from_str_radix(rest, 16).map_err(|_| bad())?,
                "class" => case.class = CLASSES.into_iter().find(|c| c.name() == rest).ok_or_else(bad)?,
                "origin" => case.origin = rest.to_string(),
                "write" => {
                    let (off, bytes) = rest.split_once(' ').ok_or_else(bad)?;
                    case.writes
                        .push((parse_num(off).ok_or_else(bad)?, unhex(bytes).ok_or_else(bad)?));
                }
                "poison" => {
                    let (off, len) = rest.split_once(' ').ok_or_else(bad)?;
                    case.poisons
                        .push((parse_num(off).ok_or_else(bad)?, parse_num(len).ok_or_else(bad)?));
                }
                _ => return Err(bad()),
            }
        }
        if !have_base {
            return Err("no base line".into());
        }
        Ok(case)
    }

    /// Whether what the walk reads must match what was written: only when
    /// nothing in the data area was touched and no checksum was forged.
    /// Damage there can legitimately change what a file holds without any
    /// error: data pages carry no checksum yet, and the words outside the
    /// checksums (an inode's log head and tail, a dentry's INVALID bit, a
    /// superblock with a recomputed CRC) may point at other valid entries.
    /// Outside it, every structure is checksummed, replicated or checked
    /// against its neighbours, so the files read back exactly or fail.
    fn strict(&self, map: &MetaMap) -> bool {
        self.class != Class::Forged
            && self
                .writes
                .iter()
                .map(|(off, b)| (*off, b.len() as u64))
                .chain(self.poisons.iter().copied())
                .all(|(off, len)| off + len <= map.data_start || off >= map.data_end)
    }
}

/// A case's damage, by `Rng::for_case(seed, index)`.
fn generate(bases: &Bases, seed: u64, index: u64) -> Case {
    let mut rng = Rng::for_case(seed, index);
    let variant = rng.pick(&VARIANTS);
    let base = bases.get(variant);
    let class = match rng.below(100) {
        0..25 => Class::Fixed,
        25..50 => Class::Meta,
        50..68 => Class::Scribble,
        68..83 => Class::Forged,
        _ => Class::Poison,
    };
    let mut case = Case {
        base: variant,
        layout: base.map.layout(),
        class,
        origin: format!("seed={seed} index={index}"),
        writes: Vec::new(),
        poisons: Vec::new(),
    };
    let g = Gen { rng, base };
    match class {
        Class::Fixed => g.fixed(&mut case),
        Class::Meta => g.meta(&mut case),
        Class::Scribble => g.scribble(&mut case),
        Class::Poison => g.poison(&mut case),
        Class::Forged => g.forged(&mut case),
    }
    case
}

struct Gen<'a> {
    rng: Rng,
    base: &'a Base,
}

impl<'a> Gen<'a> {
    // Borrowed from the base, not from `self`: the generator stays mutable.
    fn img(&self) -> &'a [u8] {
        &self.base.bytes
    }

    fn map(&self) -> &'a MetaMap {
        &self.base.map
    }

    /// A byte value different from the one at `off`.
    fn new_byte(&mut self, off: u64) -> u8 {
        self.img()[off as usize] ^ (self.rng.range(1, 255) as u8)
    }

    fn fixed(mut self, case: &mut Case) {
        let m = self.map();
        // The bytes that mean something, each structure as likely as the
        // superblock (which a checksum and a replica protect): the journal
        // heads and the rest of their lines, the recovery inode's state,
        // head and tail and the rest of it, the inode-table heads.
        let used: Vec<(u64, u64)> = vec![
            (0, size_of::<Superblock>() as u64),
            (JOURNAL_HEADERS_OFF, 8),
            (JOURNAL_HEADERS_OFF + 64, 8),
            (JOURNAL_HEADERS_OFF, 64 * m.shards),
            (RECOVERY_INODE_OFF, 24),
            (RECOVERY_INODE_OFF + 24, INODE_SIZE - 24),
            (INODE_HEADS_OFF, 8 * m.shards),
        ];
        let replica = m.replica;
        let n = self.rng.range(1, 16);
        let mode = self.rng.below(4);
        let mut offs = Vec::new();
        for _ in 0..n {
            let off = if self.rng.chance(50) {
                let (start, len) = self.rng.pick(&used);
                start + self.rng.below(len)
            } else {
                self.rng.below(3 * PAGE_SIZE)
            };
            offs.push(off);
        }
        if mode >= 2 {
            // The primary superblock and the rest at once.
            offs[0] = self.rng.below(size_of::<Superblock>() as u64);
            offs.push(PAGE_SIZE + self.rng.below(2 * PAGE_SIZE));
        }
        if mode == 3 {
            // Both superblocks: no good copy is left.
            for _ in 0..self.rng.range(1, 4) {
                offs.push(replica + self.rng.below(size_of::<Superblock>() as u64));
            }
        }
        for off in offs {
            let b = self.new_byte(off);
            case.writes.push((off, vec![b]));
        }
    }

    /// A metadata page, weighted by kind.
    fn meta_page(&mut self) -> u64 {
        let m = self.map();
        let fixed = m.fixed_pages();
        let kinds: Vec<&Vec<u64>> = [
            &m.log_pages,
            &m.log_pages,
            &m.chunk_pages,
            &m.ring_pages,
            &fixed,
            &m.chain,
        ]
        .into_iter()
        .filter(|v| !v.is_empty())
        .collect();
        let list = kinds[self.rng.below(kinds.len() as u64) as usize];
        list[self.rng.below(list.len() as u64) as usize]
    }

    /// An offset in `page`, near something non-zero more often than not.
    fn offset_in(&mut self, page: u64, align: u64) -> u64 {
        let bytes = &self.img()[page as usize..(page + PAGE_SIZE) as usize];
        if self.rng.chance(75) {
            let nonzero: Vec<u64> = (0..PAGE_SIZE)
                .step_by(align as usize)
                .filter(|&o| bytes[o as usize..(o + align) as usize].iter().any(|&b| b != 0))
                .collect();
            if !nonzero.is_empty() {
                return page + self.rng.pick(&nonzero);
            }
        }
        page + self.rng.below(PAGE_SIZE / align) * align
    }

    fn meta(mut self, case: &mut Case) {
        for _ in 0..self.rng.range(1, 3) {
            let page = self.meta_page();
            for _ in 0..self.rng.range(1, 16) {
                let off = self.offset_in(page, 1);
                let b = self.new_byte(off);
                case.writes.push((off, vec![b]));
            }
        }
    }

    /// An extreme or structural value for a word at `at` that holds `cur`.
    fn extreme(&mut self, at: u64, cur: u64) -> u64 {
        let m = self.map();
        let page = at & !(PAGE_SIZE - 1);
        let pages = m.size / PAGE_SIZE;
        let data_pages = (m.data_end - m.data_start) / PAGE_SIZE;
        let other = if m.log_pages.is_empty() {
            page
        } else {
            m.log_pages[self.rng.below(m.log_pages.len() as u64) as usize]
        };
        let (size, ds, de) = (m.size, m.data_start, m.data_end);
        let choices = [
            0,
            u64::MAX,
            1 << 63,
            size,
            size - 8,
            size - PAGE_SIZE,
            ds,
            de,
            de - PAGE_SIZE,
            self.rng.below(pages) * PAGE_SIZE,
            ds + self.rng.below(data_pages) * PAGE_SIZE,
            page,
            at,
            other,
            cur ^ (1 << self.rng.below(64)),
            cur.wrapping_add(1),
            cur.wrapping_sub(1),
            cur.wrapping_add(PAGE_SIZE),
            cur.wrapping_add(SLOT),
            u64::from(u32::MAX),
            u64::from(u32::MAX) << 32,
            self.rng.next(),
            1,
            self.rng.below(4096),
        ];
        self.rng.pick(&choices)
    }

    fn scribble(mut self, case: &mut Case) {
        for _ in 0..self.rng.range(1, 4) {
            let at = if self.rng.chance(50) {
                let kind = &self.map().pointers[self.rng.below(5) as usize];
                self.rng.pick(kind)
            } else {
                let page = self.meta_page();
                self.offset_in(page, 8)
            };
            let v = self.extreme(at, u64_at(self.img(), at));
            case.writes.push((at, v.to_le_bytes().to_vec()));
        }
    }

    fn poison(mut self, case: &mut Case) {
        for _ in 0..self.rng.range(1, 2) {
            let page = if self.rng.chance(10) { 0 } else { self.meta_page() };
            let (off, len) = match self.rng.below(4) {
                0 => (page, PAGE_SIZE),
                1 => (page + self.rng.below(PAGE_SIZE / 64) * 64, 64),
                2 => (self.offset_in(page, 8), 8),
                _ => {
                    let off = self.offset_in(page, 1);
                    (off, self.rng.range(1, 64).min(page + PAGE_SIZE - off))
                }
            };
            case.poisons.push((off, len));
        }
        if case.poisons[0].0 == 0 && self.rng.chance(50) {
            // Both superblocks unreadable.
            case.poisons.push((self.map().replica, 64));
        }
    }

    /// A value of `width` bytes for a field: extremes, small numbers, or a
    /// structural value for 8-byte fields.
    fn field_value(&mut self, at: u64, width: u64) -> Vec<u8> {
        let cur = {
            let mut b = [0u8; 8];
            b[..width as usize].copy_from_slice(&self.img()[at as usize..(at + width) as usize]);
            u64::from_le_bytes(b)
        };
        let v = if width == 8 {
            self.extreme(at, cur)
        } else {
            let max = if width == 8 { u64::MAX } else { (1 << (8 * width)) - 1 };
            let choices = [0, max, max >> 1, 1, 2, cur.wrapping_add(1) & max, self.rng.next() & max];
            self.rng.pick(&choices)
        };
        v.to_le_bytes()[..width as usize].to_vec()
    }

    fn forged(mut self, case: &mut Case) {
        let m = self.map();
        let mut kinds = vec![0, 1, 1, 2, 2, 2, 2];
        if !m.chain.is_empty() {
            kinds.extend([3, 3]);
        }
        if m.txn_head.is_some() {
            kinds.extend([4, 4, 4, 4]);
        }
        match self.rng.pick(&kinds) {
            0 => self.forge_superblock(case),
            1 => self.forge_inode(case),
            2 => self.forge_entry(case),
            3 => self.forge_alloc_state(case),
            _ => self.forge_txn(case),
        }
    }

    fn forge_superblock(&mut self, case: &mut Case) {
        let len = size_of::<Superblock>();
        let mut sb = self.img()[..len].to_vec();
        for _ in 0..self.rng.range(1, 3) {
            // Skip the magic word most of the time: a bad magic is dull.
            let at = self
                .rng
                .range(1, (std::mem::offset_of!(Superblock, csum) / 8 - 1) as u64)
                * 8;
            let v = self.field_value(at, 8);
            sb[at as usize..at as usize + 8].copy_from_slice(&v);
        }
        let mut s = Superblock::read_from_bytes(&sb).unwrap();
        s.csum = s.compute_csum();
        case.writes.push((0, s.as_bytes().to_vec()));
        case.writes.push((self.map().replica, s.as_bytes().to_vec()));
    }

    fn forge_inode(&mut self, case: &mut Case) {
        let m = self.map();
        let (rec, fresh) = if m.free_slots.is_empty() || self.rng.chance(80) {
            (self.rng.pick(&m.inodes), false)
        } else {
            (self.rng.pick(&m.free_slots), true)
        };
        let mut bytes = self.img()[rec as usize..(rec + INODE_SIZE) as usize].to_vec();
        if fresh {
            // A free slot comes to life with made-up fields.
            bytes[..8].copy_from_slice(&1u64.to_le_bytes());
            for at in [8u64, 16] {
                let v = self.field_value(rec + at, 8);
                bytes[at as usize..at as usize + 8].copy_from_slice(&v);
            }
            let mode = self
                .rng
                .pick(&[libc::S_IFREG, libc::S_IFDIR, libc::S_IFLNK, 0, u32::MAX])
                | 0o644;
            bytes[40..44].copy_from_slice(&mode.to_le_bytes());
        }
        // (offset, width): state, log head and tail, then the checksummed
        // fields ino … delete_epoch.
        let fields = [
            (0, 8),
            (8, 8),
            (16, 8),
            (24, 8),
            (32, 8),
            (40, 4),
            (44, 4),
            (48, 4),
            (52, 4),
            (56, 4),
            (64, 8),
            (72, 8),
            (96, 8),
            (104, 8),
            (112, 8),
        ];
        for _ in 0..self.rng.range(1, 3) {
            let (at, w) = self.rng.pick(&fields);
            let v = self.field_value(rec + at, w);
            bytes[at as usize..(at + w) as usize].copy_from_slice(&v);
        }
        let csum = crc32c::crc32c(&bytes[INODE_CSUM_START..INODE_CSUM_END]);
        let w = INODE_CSUM_WORD_OFF as usize;
        bytes[w..w + 4].copy_from_slice(&csum.to_le_bytes());
        case.writes.push((rec, bytes));
    }

    fn forge_entry(&mut self, case: &mut Case) {
        let (off, len) = self.rng.pick(&self.map().entries);
        let page_pos = off % PAGE_SIZE;
        // The entry and what follows it up to the page's footer: a forged
        // length may take in the bytes after it.
        let room = LOG_USABLE - page_pos;
        let mut bytes = self.img()[off as usize..(off + room) as usize].to_vec();
        let etype = bytes[0];
        // (offset, width) of each field, by entry type (layout.rs).
        let mut fields: Vec<(u64, u64)> = vec![(0, 1), (1, 1), (2, 2), (8, 8)];
        fields.extend_from_slice(match etype {
            1 => &[(16, 8), (24, 8), (32, 4), (40, 8), (48, 8)][..],
            2 | 3 => &[(16, 8), (24, 8), (32, 8), (40, 4), (44, 1), (45, 1), (48, 1), (49, 1)][..],
            4 => &[(16, 4), (20, 4), (24, 4), (32, 8), (40, 8), (48, 8), (56, 8)][..],
            5 => &[(16, 4), (24, 8)][..],
            _ => &[(16, 8), (24, 8), (32, 8)][..],
        });
        // Mostly the type-specific fields: the header ones are dull.
        for _ in 0..self.rng.range(1, 3) {
            let (at, w) = if self.rng.chance(80) {
                self.rng.pick(&fields[4..])
            } else {
                self.rng.pick(&fields[..4])
            };
            let v = self.field_value(off + at, w);
            bytes[at as usize..(at + w) as usize].copy_from_slice(&v);
        }
        let new_len = u64::from(bytes[1]) * SLOT;
        let csum_len = if new_len > 0 && new_len <= room { new_len } else { len };
        let csum = entry_csum(&bytes[..csum_len as usize]);
        bytes[4..8].copy_from_slice(&csum.to_le_bytes());
        bytes.truncate(csum_len.max(len) as usize);
        case.writes.push((off, bytes));
    }

    fn forge_alloc_state(&mut self, case: &mut Case) {
        let m = self.map();
        let payload = LOG_NEXT_OFF;
        let mut blob = Vec::new();
        for &p in &m.chain {
            blob.extend_from_slice(&self.img()[p as usize..(p + payload) as usize]);
        }
        let len = (m.chain_len as usize).min(blob.len());
        let words = len / 8;
        for _ in 0..self.rng.range(1, 3) {
            // Header counts (words 1, 2) or a (start, len) pair.
            let w = if self.rng.chance(25) {
                self.rng.range(1, 2)
            } else {
                self.rng.range(5, (words as u64).max(6) - 1)
            } as usize;
            let cur = u64::from_le_bytes(blob[w * 8..w * 8 + 8].try_into().unwrap());
            let choices = [
                0,
                1,
                u64::MAX,
                1 << 47,
                (1 << 48) - 1,
                cur.wrapping_add(1),
                cur.wrapping_sub(1),
                cur << 1,
                m.size / PAGE_SIZE,
                self.rng.next(),
            ];
            let v = self.rng.pick(&choices);
            blob[w * 8..w * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        let csum = crc32c::crc32c(&blob[40..len]);
        blob[32..36].copy_from_slice(&csum.to_le_bytes());
        // Only the words that changed: the saved state holds no times, so
        // its checksum is the same in every build of the base.
        for w in 0..words {
            let at = w * 8;
            let page = m.chain[at / payload as usize];
            let off = page + (at % payload as usize) as u64;
            if blob[at..at + 8] != self.img()[off as usize..off as usize + 8] {
                case.writes.push((off, blob[at..at + 8].to_vec()));
            }
        }
    }

    /// The planted transaction with forged records and a checksum that
    /// matches them.
    fn forge_txn(&mut self, case: &mut Case) {
        let head = self.map().txn_head.unwrap();
        let mut txn: Vec<u8> = (0..80).map(|i| self.img()[ring_byte(head + i) as usize]).collect();
        // (offset, width): update addr, len, kind, payload; check addr,
        // len, kind; TxnInfo count.
        let fields = [(0, 8), (8, 4), (12, 4), (16, 8), (24, 8), (32, 4), (36, 4), (56, 4)];
        for _ in 0..self.rng.range(1, 2) {
            let (at, w) = self.rng.pick(&fields);
            let v = self.field_value(ring_byte(head + at), w);
            txn[at as usize..(at + w) as usize].copy_from_slice(&v);
        }
        // Make the forged check hold when its range is readable, so the
        // transaction commits and its updates are applied.
        let (addr, len) = (
            u64_at(&txn, 24),
            u64::from(u32::from_le_bytes(txn[32..36].try_into().unwrap())),
        );
        if len <= PAGE_SIZE && addr.checked_add(len).is_some_and(|e| e <= self.map().size) {
            let crc = crc32c::crc32c(&self.img()[addr as usize..(addr + len) as usize]);
            txn[40..48].copy_from_slice(&u64::from(crc).to_le_bytes());
        }
        let csum = crc32c::crc32c(&txn[..48]);
        txn[72..76].copy_from_slice(&csum.to_le_bytes());
        for (i, b) in txn.into_iter().enumerate() {
            case.writes.push((ring_byte(head + i as u64), vec![b]));
        }
    }
}

// ---------------------------------------------------------------------------
// Running one case (worker side).

#[derive(Clone, Debug)]
struct Finding {
    kind: String,
    site: String,
    message: String,
}

impl Finding {
    fn signature(&self) -> String {
        // The function, not the line: lines move as the code changes.
        let site = self.site.split(" (crates/").next().unwrap_or(&self.site);
        format!("{} @ {site}", self.kind)
    }
}

/// What the steps check besides "no panic, no hang".
struct Expectations<'a> {
    /// The base image's files, when the case is built on one.
    model: Option<&'a Model>,
    /// Files must read back exactly as written, or fail (`Case::strict`).
    strict: bool,
}

struct Probe<'a> {
    expect: Expectations<'a>,
    findings: Vec<Finding>,
    notes: Vec<String>,
}

/// An error from inspect, fsck or a mount must say what is wrong with the
/// image: not a stray errno like ENOENT or EINVAL.
fn is_clear_image_error(e: &Error) -> bool {
    matches!(
        e,
        Error::Corrupt(_)
            | Error::NotNovafs(_)
            | Error::TooNew { .. }
            | Error::TooSmall { .. }
            | Error::NotSupported(_)
            | Error::Pm(_)
    )
}

fn variant_name(e: &Error) -> String {
    let d = format!("{e:?}");
    d.split(['(', ' ', '{']).next().unwrap_or(&d).to_string()
}

impl Probe<'_> {
    fn find(&mut self, kind: &str, site: String, message: String) {
        self.findings.push(Finding {
            kind: kind.into(),
            site,
            message,
        });
    }

    /// Any error of any call must say something.
    fn error(&mut self, step: &'static str, e: &Error) {
        if e.to_string().trim().is_empty() {
            self.find("empty-error", step.into(), format!("{e:?} displays as nothing"));
        }
    }

    fn image_error(&mut self, step: &'static str, e: &Error) {
        self.error(step, e);
        self.notes.push(format!("{step}=err:{}", variant_name(e)));
        if !is_clear_image_error(e) {
            self.find(
                "unclear-error",
                format!("{step}: {}", variant_name(e)),
                format!("{step} failed with \"{e}\" ({e:?}), which does not say the image is damaged"),
            );
        }
    }

    fn steps(&mut self, mem: &Arc<MemRegion>) {
        let region: Arc<dyn Region> = mem.clone();
        set_step("inspect");
        match novafs::inspect(region.clone()) {
            Ok(_) => self.notes.push("inspect=ok".into()),
            Err(e) => self.image_error("inspect", &e),
        }
        self.fsck(&region, "fsck");
        set_step("open-ro");
        match Fs::open(
            region.clone(),
            MountOptions {
                read_only: true,
                ..MountOptions::default()
            },
        ) {
            Ok(fs) => {
                self.notes.push("ro=ok".into());
                self.walk(&fs, self.expect.strict);
                set_step("unmount-ro");
                if let Err(e) = fs.unmount() {
                    self.error("unmount-ro", &e);
                }
            }
            Err(e) => self.image_error("open-ro", &e),
        }
        set_step("open-rw");
        match Fs::open(region.clone(), MountOptions::default()) {
            Ok(fs) => {
                self.notes.push("rw=ok".into());
                self.walk(&fs, self.expect.strict);
                let wrote = self.mutate(&fs);
                set_step("unmount");
                let unmounted = match fs.unmount() {
                    Ok(()) => true,
                    Err(e) => {
                        self.error("unmount", &e);
                        false
                    }
                };
                set_step("reopen");
                match Fs::open(region.clone(), MountOptions::default()) {
                    Ok(fs) => {
                        self.notes.push("reopen=ok".into());
                        if wrote && unmounted {
                            self.check_new_file(&fs);
                        }
                        self.walk(&fs, false);
                        set_step("unmount-reopened");
                        if let Err(e) = fs.unmount() {
                            self.error("unmount-reopened", &e);
                        }
                    }
                    Err(e) => self.image_error("reopen", &e),
                }
            }
            Err(e) => self.image_error("open-rw", &e),
        }
        self.fsck(&region, "fsck-after");
    }

    fn fsck(&mut self, region: &Arc<dyn Region>, step: &'static str) {
        set_step(step);
        match novafs::fsck::check(region.clone(), &|_, _| {}) {
            Ok(rep) => {
                let outcome = if rep.is_clean() { "clean" } else { "problems" };
                self.notes.push(format!("{step}={outcome}"));
                if rep.problems.iter().any(|p| p.trim().is_empty()) {
                    self.find("empty-error", step.into(), "fsck reported an empty problem".into());
                }
            }
            Err(e) => self.image_error(step, &e),
        }
    }

    /// Every name, attribute, file byte and link target reachable from the
    /// root, with bounds of its own so a damaged tree cannot make the walk
    /// itself endless.
    fn walk(&mut self, fs: &Fs, strict: bool) {
        set_step("walk");
        let _ = fs.statfs();
        if let Err(e) = fs.getattr(ROOT_INO) {
            self.error("walk", &e);
        }
        let model = self.expect.model.filter(|_| strict);
        if let Some(model) = self.expect.model {
            for path in model.keys() {
                if let Err(e) = fs.resolve(path) {
                    self.error("walk", &e);
                }
            }
        }
        let mut queue = VecDeque::from([(ROOT_INO, String::new())]);
        let mut dirs = HashSet::new();
        let mut names = 0usize;
        while let Some((dir, path)) = queue.pop_front() {
            if !dirs.insert(dir) || dirs.len() > 1000 || names > 20_000 {
                continue;
            }
            let mut list = Vec::new();
            if let Err(e) = fs.readdir(dir, 0, |e| {
                list.push(e);
                list.len() >= 10_000
            }) {
                self.error("walk", &e);
                continue;
            }
            let mut n = 0;
            if let Err(e) = fs.readdir_plus(dir, 0, u64::MAX, |_, _| {
                n += 1;
                n >= 10_000
            }) {
                self.error("walk", &e);
            }
            if let Some(mid) = list.get(list.len() / 2) {
                if let Err(e) = fs.readdir(dir, mid.next_offset, |_| false) {
                    self.error("walk", &e);
                }
            }
            for e in list {
                names += 1;
                let attr = match fs.lookup(dir, &e.name) {
                    Ok(a) => a,
                    Err(err) => {
                        self.error("walk", &err);
                        continue;
                    }
                };
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                if let Err(err) = fs.getattr(e.ino) {
                    self.error("walk", &err);
                }
                let child = format!("{path}/{}", String::from_utf8_lossy(&e.name));
                let got = match attr.kind {
                    FileType::Directory => {
                        queue.push_back((attr.ino, child.clone()));
                        Some(Expect::Dir)
                    }
                    FileType::RegularFile => self.read_file(fs, &attr).map(Expect::File),
                    FileType::Symlink => match fs.readlink(attr.ino) {
                        Ok(t) => Some(Expect::Symlink(t)),
                        Err(err) => {
                            self.error("walk", &err);
                            None
                        }
                    },
                    k => Some(Expect::Special(k)),
                };
                if let (Some(model), Some(got)) = (model, got) {
                    self.compare(model, &child, got);
                }
            }
        }
    }

    fn compare(&mut self, model: &Model, path: &str, got: Expect) {
        let describe = |e: &Expect| match e {
            Expect::Dir => "a directory".to_string(),
            Expect::File(d) => format!("a file of {} bytes (crc {:08x})", d.len(), crc32c::crc32c(d)),
            Expect::Symlink(t) => format!("a symlink to {:?}", String::from_utf8_lossy(t)),
            Expect::Special(k) => format!("a {k:?}"),
        };
        match model.get(path) {
            Some(want) if *want == got => {}
            Some(want) => self.find(
                "silent-change",
                path.into(),
                format!(
                    "{path} reads as {} without an error; it was written as {}",
                    describe(&got),
                    describe(want)
                ),
            ),
            None => self.find(
                "silent-change",
                "unexpected name".into(),
                format!("{path} ({}) appeared; it was never created", describe(&got)),
            ),
        }
    }

    /// The whole file (up to 4 MiB), or None if a read failed or the file
    /// claims more. Also reads at the edges and seeks.
    fn read_file(&mut self, fs: &Fs, attr: &Attr) -> Option<Vec<u8>> {
        const LIMIT: u64 = 4 << 20;
        let mut buf = vec![0u8; 64 << 10];
        for off in [attr.size, attr.size.saturating_sub(1), novafs::MAX_FILE_SIZE] {
            if let Err(e) = fs.read(attr.ino, off, &mut buf[..16]) {
                self.error("walk", &e);
            }
        }
        for whence in [SEEK_DATA, SEEK_HOLE] {
            if let Err(e) = fs.lseek(attr.ino, 0, whence) {
                self.error("walk", &e);
            }
        }
        let mut out = Vec::new();
        while (out.len() as u64) < attr.size.min(LIMIT) {
            let want = (attr.size.min(LIMIT) - out.len() as u64).min(buf.len() as u64) as usize;
            match fs.read(attr.ino, out.len() as u64, &mut buf[..want]) {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) => {
                    self.error("walk", &e);
                    return None;
                }
            }
        }
        (attr.size <= LIMIT).then_some(out)
    }

    /// Changes on the damaged image: a new file of 8 KiB (which must read
    /// back), and changes to damaged objects, which must fail cleanly if
    /// they fail. Returns whether the new file was written.
    fn mutate(&mut self, fs: &Fs) -> bool {
        set_step("mutate");
        let data = pattern(8192, 77);
        let wrote = match fs.create(ROOT_INO, NEW_NAME, 0o644, 0, 0) {
            Ok(a) => match fs.write(a.ino, 0, &data) {
                Ok(8192) => {
                    self.check_file(fs, a.ino, &data, "mutate");
                    true
                }
                Ok(n) => {
                    self.find("short-write", "mutate".into(), format!("write of 8192 bytes wrote {n}"));
                    false
                }
                Err(e) => {
                    self.error("mutate", &e);
                    false
                }
            },
            Err(e) => {
                self.error("mutate", &e);
                false
            }
        };
        let mut results = Vec::new();
        results.push(fs.mkdir(ROOT_INO, b"fuzz-dir", 0o755, 0, 0).map(|_| ()));
        if let Ok(d) = fs.lookup(ROOT_INO, b"fuzz-dir") {
            results.push(fs.rename(ROOT_INO, b"small", d.ino, b"small", 0));
        }
        if let Ok(b) = fs.resolve("/a/b") {
            results.push(fs.unlink(b.ino, b"f2"));
        }
        if let Ok(f) = fs.resolve("/appendlog") {
            results.push(fs.write(f.ino, f.size, b"one more line\n").map(|_| ()));
        }
        if let Ok(f) = fs.resolve("/a/f1") {
            let set = novafs::SetAttr {
                size: Some(100),
                ..Default::default()
            };
            results.push(fs.setattr(f.ino, &set).map(|_| ()));
        }
        if let Ok(ch) = fs.resolve("/churn") {
            results.push(fs.create(ch.ino, b"late", 0o644, 0, 0).map(|_| ()));
        }
        for r in results {
            if let Err(e) = r {
                self.error("mutate", &e);
            }
        }
        wrote
    }

    fn check_file(&mut self, fs: &Fs, ino: u64, want: &[u8], step: &'static str) {
        let mut buf = vec![0u8; want.len() + 16];
        match fs.read(ino, 0, &mut buf) {
            Ok(n) if buf[..n] == *want => {}
            Ok(n) => self.find(
                "lost-write",
                step.into(),
                format!("a file just written with 8192 bytes reads back {n} bytes that differ"),
            ),
            Err(e) => self.error(step, &e),
        }
    }

    /// After unmount and remount, the file written on the damaged image
    /// reads back exactly, or fails.
    fn check_new_file(&mut self, fs: &Fs) {
        set_step("reopen-check");
        match fs.lookup(ROOT_INO, NEW_NAME) {
            Ok(a) => self.check_file(fs, a.ino, &pattern(8192, 77), "reopen-check"),
            Err(Error::NotFound) if self.expect.strict => self.find(
                "lost-write",
                "reopen-check".into(),
                "a file created and written before a clean unmount is gone after the remount".into(),
            ),
            Err(e) => self.error("reopen-check", &e),
        }
    }
}

struct Outcome {
    findings: Vec<Finding>,
    notes: String,
}

/// Damages a copy of `image` and runs every step on it under the watchdog,
/// catching panics.
fn run_case(
    label: &str,
    image: Vec<u8>,
    writes: &[(u64, Vec<u8>)],
    poisons: &[(u64, u64)],
    expect: Expectations<'_>,
) -> Outcome {
    let mem = Arc::new(MemRegion::from_bytes(image));
    let mut probe = Probe {
        notes: vec![format!("strict={}", expect.strict)],
        expect,
        findings: Vec::new(),
    };
    for (off, bytes) in writes {
        if let Err(e) = mem.write(*off, bytes) {
            probe.find("bad-case", "harness".into(), format!("write at {off:#x}: {e}"));
        }
    }
    for &(off, len) in poisons {
        if let Err(e) = mem.poison(off, len) {
            probe.find("bad-case", "harness".into(), format!("poison at {off:#x}: {e}"));
        }
    }
    CASE_LARGEST.store(0, Ordering::Relaxed);
    *lock(&CASE_BIG_SITE) = None;
    let limit = mem.len() as usize;
    CASE_ALLOC_LIMIT.store(limit, Ordering::Relaxed);
    lock(&PANICS).clear();
    *lock(&WATCH) = Some((Instant::now() + deadline(), label.to_string()));
    let result = catch_unwind(AssertUnwindSafe(|| probe.steps(&mem)));
    *lock(&WATCH) = None;
    CASE_ALLOC_LIMIT.store(usize::MAX, Ordering::Relaxed);
    let step = current_step();
    let panics = std::mem::take(&mut *lock(&PANICS));
    if let Some((site, msg)) = panics.first() {
        let how = if result.is_err() {
            "panicked"
        } else {
            "panicked in a library thread (the library turned it into an error)"
        };
        probe.find("panic", site.clone(), format!("{how} in step {step}: {msg}"));
    } else if result.is_err() {
        probe.find("panic", "unknown".into(), format!("panicked in step {step}"));
    }
    let big = CASE_LARGEST.load(Ordering::Relaxed);
    if big > limit {
        let site = lock(&CASE_BIG_SITE).take().unwrap_or_else(|| "unknown".into());
        probe.find(
            "huge-allocation",
            site,
            format!("an allocation of {big} bytes on a {IMAGE_SIZE}-byte image"),
        );
    }
    Outcome {
        findings: probe.findings,
        notes: probe.notes.join(" "),
    }
}

// ---------------------------------------------------------------------------
// Jobs: what a supervisor hands its worker.

#[derive(Clone, Debug)]
enum Entry {
    Case(Case),
    /// A whole damaged image (gzipped), from the corpus.
    Image(PathBuf),
}

const JOB_SEPARATOR: &str = "%%";

fn job_text(entries: &[Entry]) -> String {
    let mut s = String::new();
    for e in entries {
        match e {
            Entry::Case(c) => s.push_str(&c.to_text()),
            Entry::Image(p) => {
                let _ = writeln!(s, "image {}", p.display());
            }
        }
        let _ = writeln!(s, "{JOB_SEPARATOR}");
    }
    s
}

fn parse_job(text: &str) -> Vec<Entry> {
    text.split(&format!("{JOB_SEPARATOR}\n"))
        .filter(|t| !t.trim().is_empty())
        .map(|t| match t.trim().strip_prefix("image ") {
            Some(p) => Entry::Image(PathBuf::from(p)),
            None => Entry::Case(Case::parse(t).unwrap()),
        })
        .collect()
}

fn gunzip(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path)?).read_to_end(&mut out)?;
    Ok(out)
}

/// Escapes a message onto one line of the results file.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n").replace('\t', "\\t")
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(o) => out.push(o),
                None => {}
            }
        } else {
            out.push(c);
        }
    }
    out
}

const ENV_JOB: &str = "NOVAFS_DAMAGED_WORKER_JOB";
const ENV_FROM: &str = "NOVAFS_DAMAGED_WORKER_FROM";
const ENV_RESULTS: &str = "NOVAFS_DAMAGED_WORKER_RESULTS";
const ENV_PROGRESS: &str = "NOVAFS_DAMAGED_WORKER_PROGRESS";

/// The worker: runs the job's cases from index `from` on, writing each
/// case's findings as it goes, so an abort loses nothing but itself.
#[test]
#[ignore = "the worker process of the other tests of this file; they start it"]
fn subprocess_worker() {
    let Ok(job) = std::env::var(ENV_JOB) else {
        return;
    };
    let from: usize = std::env::var(ENV_FROM).unwrap().parse().unwrap();
    let results = std::env::var(ENV_RESULTS).unwrap();
    let progress = std::env::var(ENV_PROGRESS).unwrap();
    install_panic_hook();
    start_watchdog();
    let entries = parse_job(&std::fs::read_to_string(job).unwrap());
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(results)
        .unwrap();
    for (i, entry) in entries.iter().enumerate().skip(from) {
        std::fs::write(&progress, i.to_string()).unwrap();
        eprintln!("@@case {i}");
        let outcome = match entry {
            Entry::Case(case) => {
                let bases = Bases::shared();
                let base = bases.get(case.base);
                if case.layout != base.map.layout() {
                    eprintln!(
                        "damaged_images: case {i} was made on another layout ({:08x}, now {:08x}): \
                         it may not hit what it once did",
                        case.layout,
                        base.map.layout()
                    );
                }
                let expect = Expectations {
                    model: Some(&bases.model),
                    strict: case.strict(&base.map),
                };
                run_case(&case.to_text(), base.bytes.clone(), &case.writes, &case.poisons, expect)
            }
            Entry::Image(path) => {
                let expect = Expectations {
                    model: None,
                    strict: false,
                };
                match gunzip(path) {
                    Ok(img) => run_case(&format!("image {}", path.display()), img, &[], &[], expect),
                    Err(e) => Outcome {
                        findings: vec![Finding {
                            kind: "bad-case".into(),
                            site: "harness".into(),
                            message: format!("{}: {e}", path.display()),
                        }],
                        notes: String::new(),
                    },
                }
            }
        };
        for f in &outcome.findings {
            writeln!(
                out,
                "FIND\t{i}\t{}\t{}\t{}",
                f.kind,
                escape(&f.site),
                escape(&f.message)
            )
            .unwrap();
        }
        writeln!(out, "CASE\t{i}\t{}", outcome.notes).unwrap();
    }
    writeln!(out, "MAXALLOC\t{}", LARGEST.load(Ordering::Relaxed)).unwrap();
    writeln!(out, "DONE").unwrap();
}

// ---------------------------------------------------------------------------
// The supervisor.

#[derive(Default)]
struct Supervised {
    findings: BTreeMap<usize, Vec<Finding>>,
    /// "step=outcome" → cases.
    notes: BTreeMap<String, usize>,
    cases: usize,
    workers: usize,
    largest_alloc: usize,
}

/// Runs `entries` in worker processes, a new one after each abort.
/// `echo` prints the workers' whole output.
fn supervise(tag: &str, entries: &[Entry], echo: bool) -> Supervised {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("damaged-images-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let job = dir.join("job");
    std::fs::write(&job, job_text(entries)).unwrap();
    let progress = dir.join("progress");
    let mut sup = Supervised::default();
    let mut from = 0;
    while from < entries.len() {
        let results = dir.join(format!("results-{}", sup.workers));
        let _ = std::fs::remove_file(&progress);
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "subprocess_worker",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ENV_JOB, &job)
            .env(ENV_FROM, from.to_string())
            .env(ENV_RESULTS, &results)
            .env(ENV_PROGRESS, &progress)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        sup.workers += 1;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if echo {
            eprint!("{stderr}");
        }
        let mut done = false;
        for line in std::fs::read_to_string(&results).unwrap_or_default().lines() {
            let f: Vec<&str> = line.split('\t').collect();
            match f.as_slice() {
                ["FIND", i, kind, site, msg] => sup.findings.entry(i.parse().unwrap()).or_default().push(Finding {
                    kind: kind.to_string(),
                    site: unescape(site),
                    message: unescape(msg),
                }),
                ["CASE", _, notes] => {
                    sup.cases += 1;
                    for n in notes.split(' ').filter(|n| !n.is_empty()) {
                        *sup.notes.entry(n.to_string()).or_default() += 1;
                    }
                }
                ["MAXALLOC", n] => sup.largest_alloc = sup.largest_alloc.max(n.parse().unwrap()),
                ["DONE"] => done = true,
                _ => {}
            }
        }
        if done && out.status.success() {
            break;
        }
        // The worker died: blame the case it was running.
        let Some(k) = std::fs::read_to_string(&progress)
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
        else {
            panic!("the worker died before its first case ({}):\n{stderr}", out.status);
        };
        let tail = stderr.rsplit(&format!("@@case {k}\n")).next().unwrap_or(&stderr);
        let (kind, site) = tail
            .lines()
            .filter_map(|l| l.strip_prefix("@@abort "))
            .next_back()
            .and_then(|l| l.split_once(' '))
            .map_or(("crash", "unknown".to_string()), |(k, s)| (k, s.to_string()));
        // What the worker said, without std's backtrace after it.
        let message: Vec<&str> = tail
            .lines()
            .take_while(|l| !l.starts_with("stack backtrace:"))
            .filter(|l| !l.starts_with("@@"))
            .collect();
        let message = message[message.len().saturating_sub(40)..].join("\n");
        let message = message.strip_prefix("damaged_images: ").unwrap_or(&message);
        sup.findings.entry(k).or_default().push(Finding {
            kind: kind.to_string(),
            site,
            message: format!("{message}\n(the worker died: {})", out.status),
        });
        sup.cases += 1;
        from = k + 1;
    }
    let _ = std::fs::remove_dir_all(&dir);
    sup
}

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

/// Prints every failure, grouped by signature, and returns the report.
fn report(labels: &[String], entries: &[Entry], sup: &Supervised) -> (String, BTreeMap<String, Vec<usize>>) {
    let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (&i, fs) in &sup.findings {
        let mut sigs: Vec<String> = fs.iter().map(Finding::signature).collect();
        sigs.dedup();
        for s in sigs {
            groups.entry(s).or_default().push(i);
        }
    }
    let mut s = String::new();
    for (sig, cases) in &groups {
        let first = cases[0];
        let f = sup.findings[&first].iter().find(|f| f.signature() == *sig).unwrap();
        let _ = writeln!(s, "\n=== {sig}: {} case(s), first: {}", cases.len(), labels[first]);
        let _ = writeln!(s, "site: {}", f.site);
        let _ = writeln!(s, "{}", f.message.trim_end());
        if let Entry::Case(c) = &entries[first] {
            let _ = writeln!(s, "case:\n{}", c.to_text().trim_end());
        }
        let more: Vec<&str> = cases[1..].iter().take(8).map(|&i| labels[i].as_str()).collect();
        if !more.is_empty() {
            let _ = writeln!(s, "also: {}", more.join("; "));
        }
    }
    (s, groups)
}

fn summary(sup: &Supervised, elapsed: Duration) -> String {
    let notes: Vec<String> = sup.notes.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    format!(
        "{} cases in {:.1} s, {} worker process(es); largest allocation {} bytes\noutcomes: {}",
        sup.cases,
        elapsed.as_secs_f64(),
        sup.workers,
        sup.largest_alloc,
        notes.join(" ")
    )
}

/// Saves the first case of each failure not already in the corpus.
fn save_to_corpus(entries: &[Entry], sup: &Supervised, groups: &BTreeMap<String, Vec<usize>>) -> Vec<PathBuf> {
    let dir = corpus_dir();
    let known: HashSet<String> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .flat_map(|t| {
            t.lines()
                .filter_map(|l| l.strip_prefix("# signature: ").map(str::to_string))
                .collect::<Vec<_>>()
        })
        .collect();
    let mut saved = Vec::new();
    for (sig, cases) in groups {
        let Entry::Case(case) = &entries[cases[0]] else {
            continue;
        };
        if known.contains(sig) {
            continue;
        }
        let f = sup.findings[&cases[0]].iter().find(|f| f.signature() == *sig).unwrap();
        // "panic @ novafs::inode::Meta::apply" → "panic-inode-Meta-apply".
        let stem: String = sig
            .replace("closure", "")
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect::<String>()
            .split('-')
            .filter(|p| !p.is_empty() && *p != "novafs")
            .collect::<Vec<_>>()
            .join("-");
        let origin = case.origin.replace("seed=", "s").replace(" index=", "-i");
        let path = dir.join(format!("{}-{origin}.txt", &stem[..stem.len().min(60)]));
        let first_line = f.message.lines().next().unwrap_or("");
        let text = format!(
            "# Found by tests/damaged_images.rs; replayed by its corpus test.\n\
             # signature: {sig}\n# site: {}\n# message: {first_line}\n{}",
            f.site,
            case.to_text()
        );
        if std::fs::write(&path, text).is_ok() {
            saved.push(path);
        }
    }
    saved
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Seeds that every run tries, besides the one that changes.
const FIXED_SEEDS: [u64; 4] = [1, 2, 3, 0xDA7A];

/// Damaged copies of the base images: every step may fail, none may panic,
/// hang, abort, or fail without saying the image is damaged.
#[test]
fn damaged_images_fail_cleanly() {
    let t0 = Instant::now();
    let run_seed = std::env::var("NOVAFS_FUZZ_SEED")
        .ok()
        .map(|s| parse_num(s.trim()).expect("NOVAFS_FUZZ_SEED is a number"))
        .unwrap_or_else(|| {
            let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
            (t.as_nanos() as u64 ^ u64::from(std::process::id()).rotate_left(32)) % 1_000_000_007
        });
    let long = env_flag("NOVAFS_FUZZ_LONG");
    let per_seed: u64 = std::env::var("NOVAFS_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if long { 2500 } else { 50 });
    let only = std::env::var("NOVAFS_FUZZ_ONLY").ok();
    let mut plan: Vec<(u64, u64)> = Vec::new();
    match &only {
        Some(spec) => {
            let (seed, index) = match spec.split_once(':') {
                Some((s, i)) => (s, Some(i)),
                None => (spec.as_str(), None),
            };
            let seed = parse_num(seed).expect("NOVAFS_FUZZ_ONLY=SEED[:INDEX]");
            match index.map(|i| parse_num(i).expect("NOVAFS_FUZZ_ONLY=SEED[:INDEX]")) {
                Some(i) => plan.push((seed, i)),
                None => plan.extend((0..per_seed).map(|i| (seed, i))),
            }
        }
        None => {
            for seed in FIXED_SEEDS {
                plan.extend((0..per_seed).map(|i| (seed, i)));
            }
            // The changing seed gets as many cases as two fixed ones.
            plan.extend((0..2 * per_seed).map(|i| (run_seed, i)));
        }
    }
    eprintln!(
        "damaged_images: run seed {run_seed} (NOVAFS_FUZZ_SEED={run_seed} repeats this run); fixed seeds \
         {FIXED_SEEDS:?}; {} cases",
        plan.len()
    );
    let bases = Bases::shared();
    for (v, b) in &bases.bases {
        let m = &b.map;
        eprintln!(
            "damaged_images: base {}: layout {:08x}, {} inodes, {} log pages, {} entries, {} chunk pages, \
             {} ring pages, {} saved-state pages",
            v.name(),
            m.layout(),
            m.inodes.len(),
            m.log_pages.len(),
            m.entries.len(),
            m.chunk_pages.len(),
            m.ring_pages.len(),
            m.chain.len()
        );
    }
    let entries: Vec<Entry> = plan
        .iter()
        .map(|&(seed, index)| Entry::Case(generate(bases, seed, index)))
        .collect();
    let labels: Vec<String> = plan
        .iter()
        .zip(&entries)
        .map(|(&(seed, index), e)| match e {
            Entry::Case(c) => format!("NOVAFS_FUZZ_ONLY={seed}:{index} ({} {})", c.base.name(), c.class.name()),
            Entry::Image(_) => unreachable!(),
        })
        .collect();
    if env_flag("NOVAFS_FUZZ_LIST") {
        for (label, e) in labels.iter().zip(&entries) {
            if let Entry::Case(c) = e {
                println!("# {label}\n{}", c.to_text());
            }
        }
        return;
    }
    let sup = supervise("fuzz", &entries, only.is_some());
    let (text, groups) = report(&labels, &entries, &sup);
    eprintln!("damaged_images: {}", summary(&sup, t0.elapsed()));
    if groups.is_empty() {
        return;
    }
    let saved = if std::env::var("NOVAFS_FUZZ_SAVE").as_deref() != Ok("0") {
        save_to_corpus(&entries, &sup, &groups)
    } else {
        Vec::new()
    };
    let saved: Vec<String> = saved.iter().map(|p| p.display().to_string()).collect();
    panic!(
        "{} of {} damaged images were not handled cleanly (run seed {run_seed}); {} distinct failure(s):\n{text}\n\
         new corpus files: {saved:?}\nreproduce one with NOVAFS_FUZZ_ONLY=SEED:INDEX (and RUST_BACKTRACE=1)",
        sup.findings.len(),
        sup.cases,
        groups.len()
    );
}

/// Every image in tests/corpus/ — cases saved as text, whole images
/// gzipped — is handled cleanly.
#[test]
fn corpus_cases_are_handled() {
    let t0 = Instant::now();
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .unwrap()
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| {
            let n = p.to_string_lossy();
            n.ends_with(".txt") || n.ends_with(".img.gz")
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "the corpus is empty");
    let entries: Vec<Entry> = files
        .iter()
        .map(|p| {
            if p.to_string_lossy().ends_with(".img.gz") {
                Entry::Image(p.clone())
            } else {
                let text = std::fs::read_to_string(p).unwrap();
                Entry::Case(Case::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
            }
        })
        .collect();
    let labels: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let sup = supervise("corpus", &entries, env_flag("NOVAFS_FUZZ_VERBOSE"));
    let (text, groups) = report(&labels, &entries, &sup);
    eprintln!("damaged_images corpus: {}", summary(&sup, t0.elapsed()));
    assert!(
        groups.is_empty(),
        "{} of {} corpus images were not handled cleanly:\n{text}",
        sup.findings.len(),
        entries.len()
    );
}

/// The harness itself: a case survives its text form, and a damaged
/// image the library handles yields no finding.
#[test]
fn harness_round_trips_cases() {
    let bases = Bases::shared();
    for index in 0..20 {
        let c = generate(bases, 99, index);
        let back = Case::parse(&c.to_text()).unwrap();
        assert_eq!(back.to_text(), c.to_text());
    }
    // Both superblocks unreadable: a clear error everywhere, nothing else.
    let base = bases.get(Variant::Clean);
    let out = run_case(
        "both superblocks poisoned",
        base.bytes.clone(),
        &[],
        &[(0, 64), (base.map.replica, 64)],
        Expectations {
            model: Some(&bases.model),
            strict: true,
        },
    );
    assert!(out.findings.is_empty(), "{:?}", out.findings);
    assert!(
        out.notes.contains("strict=true") && out.notes.contains("open-rw=err:Pm"),
        "{}",
        out.notes
    );
}
