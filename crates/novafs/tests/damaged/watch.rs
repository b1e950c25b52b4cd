//! The worker's guards: a global allocator that refuses any single
//! allocation above 1 GiB and reports big ones, the step each case is on,
//! the panics it met, and a watchdog that aborts a case that hangs.

use std::alloc::{GlobalAlloc, Layout, System};
use std::backtrace::Backtrace;
use std::cell::Cell;
use std::panic::catch_unwind;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// The capping allocator.

/// No single allocation above this is granted: on a 32 MiB image only a
/// length taken from damaged media asks for that much.
pub const ALLOC_CAP: usize = 1 << 30;

pub static LARGEST: AtomicUsize = AtomicUsize::new(0);
/// Granted, but reported as a failure: while a case runs, no buffer the
/// library needs is bigger than the image it works on.
pub static CASE_ALLOC_LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);
pub static CASE_LARGEST: AtomicUsize = AtomicUsize::new(0);
/// Where the case's biggest suspicious allocation came from.
pub static CASE_BIG_SITE: Mutex<Option<String>> = Mutex::new(None);

thread_local! {
    /// Set while the allocator itself captures a backtrace (which allocates).
    static IN_ALLOC_REPORT: Cell<bool> = const { Cell::new(false) };
}

pub struct CappedAlloc;

#[global_allocator]
pub static GLOBAL: CappedAlloc = CappedAlloc;

impl CappedAlloc {
    pub fn admit(size: usize) -> bool {
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
pub fn report_big_allocation(size: usize, refused: bool) {
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
pub fn library_frames(bt: &str) -> Vec<String> {
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
pub fn strip_column(loc: &str) -> String {
    let parts: Vec<&str> = loc.rsplitn(3, ':').collect();
    match parts.as_slice() {
        [col, line, file] if col.parse::<u32>().is_ok() => format!("{file}:{line}"),
        _ => loc.to_string(),
    }
}

// ---------------------------------------------------------------------------
// Steps, panics and the watchdog (worker side).

pub static STEP: Mutex<&str> = Mutex::new("start");
/// (deadline, what to print when it passes) of the case running now.
pub static WATCH: Mutex<Option<(Instant, String)>> = Mutex::new(None);
/// Panics seen since the case started, in any thread: a panic the library
/// catches itself (a scan thread's, turned into an error) still counts.
pub static PANICS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub fn set_step(step: &'static str) {
    *lock(&STEP) = step;
}

pub fn current_step() -> &'static str {
    // try_lock: called from the allocator, which may run under this lock.
    STEP.try_lock().map_or("?", |s| *s)
}

pub fn install_panic_hook() {
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

pub fn deadline() -> Duration {
    let secs = std::env::var("NOVAFS_FUZZ_DEADLINE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20.0);
    Duration::from_secs_f64(secs)
}

pub fn start_watchdog() {
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
