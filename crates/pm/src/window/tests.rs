//! The window's faults, its pool of fault stacks and its write tracking.

use super::*;
use crate::{MapOptions, MmapRegion, Region};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Copies the faulting page to region page 2 + page and maps that
/// writable: copy-on-write, as a snapshot needs it.
struct CopyOnWrite {
    region: Arc<MmapRegion>,
    window: Mutex<Option<Arc<Window>>>,
    faults: AtomicUsize,
}

impl Fault for CopyOnWrite {
    fn fault(&self, page: usize, write: bool) -> bool {
        assert!(write, "every page of the test is mapped readable");
        self.faults.fetch_add(1, Ordering::SeqCst);
        let w = self.window.lock().unwrap().clone().unwrap();
        let mut buf = [0u8; WINDOW_PAGE];
        let from = (page * WINDOW_PAGE) as u64;
        let to = ((2 + page) * WINDOW_PAGE) as u64;
        self.region.read(from, &mut buf).unwrap();
        self.region.write(to, &buf).unwrap();
        w.map(page, to, 1, true).is_ok()
    }
}

#[test]
fn a_store_to_a_read_only_page_is_resolved_by_the_handler_then_retried() {
    let dir = std::env::temp_dir().join(format!("pm-window-{}", std::process::id()));
    let region = Arc::new(MmapRegion::create(&dir, 16 * WINDOW_PAGE as u64, &MapOptions::default()).unwrap());
    region.write(0, &[7u8; 2 * WINDOW_PAGE]).unwrap();
    let cow = Arc::new(CopyOnWrite {
        region: region.clone(),
        window: Mutex::new(None),
        faults: AtomicUsize::new(0),
    });
    let src = region.map_source().expect("a file region has windows");
    let w = Arc::new(Window::new(src, 2, cow.clone()).unwrap());
    *cow.window.lock().unwrap() = Some(w.clone());
    w.map(0, 0, 2, false).unwrap();
    let p = w.as_ptr();
    // SAFETY: both pages are mapped readable.
    assert_eq!(unsafe { p.add(WINDOW_PAGE + 5).read_volatile() }, 7);
    assert!(overlaps_window(p, 1) && !overlaps_window(std::ptr::null(), 1));
    // SAFETY: page 1 is mapped; the store faults and is retried.
    unsafe { p.add(WINDOW_PAGE + 5).write_volatile(9) };
    assert_eq!(cow.faults.load(Ordering::SeqCst), 1);
    assert_eq!(w.faults(), 1, "the window counts what its handler resolved");
    // SAFETY: as above; page 1 is now writable, no second fault.
    unsafe { p.add(WINDOW_PAGE + 6).write_volatile(10) };
    assert_eq!(cow.faults.load(Ordering::SeqCst), 1);
    let mut old = [0u8; 8];
    region.read(WINDOW_PAGE as u64, &mut old).unwrap();
    assert_eq!(old, [7u8; 8], "the original page is untouched");
    let mut new = [0u8; 8];
    region.read(3 * WINDOW_PAGE as u64 + 4, &mut new).unwrap();
    assert_eq!(new, [7, 9, 10, 7, 7, 7, 7, 7], "the store went to the copy");
    // Read-only again (as a snapshot makes it): the next store faults.
    w.protect(1, 1, false).unwrap();
    // SAFETY: page 1 is mapped read-only; the store faults and retries.
    unsafe { p.add(WINDOW_PAGE + 7).write_volatile(11) };
    assert_eq!(cow.faults.load(Ordering::SeqCst), 2);
    *cow.window.lock().unwrap() = None;
    drop(w);
    let _ = std::fs::remove_file(&dir);
}

/// Maps the faulting page writable; the faults resolved on their own
/// threads wait until `STACKS + 1` faults have arrived, so that every
/// pool stack is held and at least one fault must go to the service.
struct Crowd {
    window: Mutex<Option<Arc<Window>>>,
    arrived: AtomicUsize,
    /// (faulting page, the name of the thread that resolved it)
    resolved: Mutex<Vec<(usize, String)>>,
}

impl Fault for Crowd {
    fn fault(&self, page: usize, _write: bool) -> bool {
        let me = std::thread::current().name().unwrap_or("").to_string();
        self.arrived.fetch_add(1, Ordering::SeqCst);
        if me != "novafs-pm-faults" {
            let start = Instant::now();
            while self.arrived.load(Ordering::SeqCst) <= imp::STACKS && start.elapsed() < Duration::from_secs(20) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let w = self.window.lock().unwrap().clone().unwrap();
        self.resolved.lock().unwrap().push((page, me));
        w.map(page, (page * WINDOW_PAGE) as u64, 1, true).is_ok()
    }
}

#[test]
fn faults_resolve_on_the_faulting_thread_and_beyond_the_pool_on_the_service() {
    let n = imp::STACKS + 1;
    let dir = std::env::temp_dir().join(format!("pm-window-pool-{}", std::process::id()));
    let region = Arc::new(MmapRegion::create(&dir, (n * WINDOW_PAGE) as u64, &MapOptions::default()).unwrap());
    let crowd = Arc::new(Crowd {
        window: Mutex::new(None),
        arrived: AtomicUsize::new(0),
        resolved: Mutex::new(Vec::new()),
    });
    let w = Arc::new(Window::new(region.map_source().unwrap(), n, crowd.clone()).unwrap());
    *crowd.window.lock().unwrap() = Some(w.clone());
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let w = w.clone();
            std::thread::Builder::new()
                .name(format!("faulter-{i}"))
                .spawn(move || w.store(i * WINDOW_PAGE + 1, &[i as u8 + 1]).unwrap())
                .unwrap()
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut resolved = crowd.resolved.lock().unwrap().clone();
    resolved.sort();
    assert_eq!(resolved.len(), n, "one fault a page: {resolved:?}");
    for (page, by) in &resolved {
        assert!(
            by == &format!("faulter-{page}") || by == "novafs-pm-faults",
            "page {page} resolved by {by}, neither its own thread nor the service"
        );
    }
    assert!(
        resolved.iter().any(|(_, by)| by == "novafs-pm-faults"),
        "with every pool stack held, a fault goes to the service: {resolved:?}"
    );
    assert!(
        resolved.iter().filter(|(_, by)| by.starts_with("faulter-")).count() >= imp::STACKS - 2,
        "faults resolve on their own threads while stacks are free: {resolved:?}"
    );
    for i in 0..n {
        let mut b = [0u8; 2];
        region.read((i * WINDOW_PAGE) as u64, &mut b).unwrap();
        assert_eq!(b, [0, i as u8 + 1], "page {i}'s store landed");
    }
    *crowd.window.lock().unwrap() = None;
    drop(w);
    let _ = std::fs::remove_file(&dir);
}

/// Maps each faulting page writable, counting the faults.
struct MapWritable {
    window: Mutex<Option<Arc<Window>>>,
}

impl Fault for MapWritable {
    fn fault(&self, page: usize, _write: bool) -> bool {
        let w = self.window.lock().unwrap().clone().unwrap();
        w.map(page, (page * WINDOW_PAGE) as u64, 1, true).is_ok()
    }
}

#[test]
fn a_tracking_window_lists_the_pages_stored_to_without_a_fault() {
    let file = anonymous_file(c"pm-track-test").unwrap();
    file.set_len(8 * WINDOW_PAGE as u64).unwrap();
    let src = MapSource {
        fd: std::os::fd::AsFd::as_fd(&file),
        sync: false,
    };
    let handler = Arc::new(MapWritable {
        window: Mutex::new(None),
    });
    let w = match Window::tracking(src, 8, handler.clone()) {
        Ok(w) => Arc::new(w),
        // Before Linux 6.7 there is nothing to test; CI's kernel has it.
        Err(e) if std::env::var_os("CI").is_none() => return eprintln!("no write tracking here: {e}"),
        Err(e) => panic!("CI's kernel tracks writes: {e}"),
    };
    *handler.window.lock().unwrap() = Some(w.clone());
    assert!(w.tracks());
    w.map(0, 0, 8, true).unwrap();
    assert_eq!(w.written(0, 8).unwrap(), Vec::<usize>::new(), "nothing stored yet");
    w.store(WINDOW_PAGE + 3, b"one").unwrap();
    w.store(5 * WINDOW_PAGE, b"five").unwrap();
    w.store(6 * WINDOW_PAGE - 1, b"56").unwrap();
    assert_eq!(w.faults(), 0, "the kernel recorded the stores itself");
    assert_eq!(w.written(0, 8).unwrap(), vec![1, 5, 6], "\"56\" spans pages 5 and 6");
    assert_eq!(
        w.written(0, 8).unwrap(),
        Vec::<usize>::new(),
        "listing marks them again"
    );
    w.store(4 * WINDOW_PAGE, b"again").unwrap();
    assert_eq!(w.written(0, 8).unwrap(), vec![4]);
    // A page mapped anew over an old one is tracked from scratch.
    w.map(2, 2 * WINDOW_PAGE as u64, 1, true).unwrap();
    w.store(2 * WINDOW_PAGE, b"two").unwrap();
    assert_eq!(w.written(0, 8).unwrap(), vec![2]);
    let mut b = [0u8; 4];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut b, 5 * WINDOW_PAGE as u64).unwrap();
    assert_eq!(&b, b"five", "the stores reached the file");
    *handler.window.lock().unwrap() = None;
}

/// With the region under protection keys, the fault handler loads from
/// and stores to it as the file system's does. A signal handler starts
/// with a PKRU that denies every key, so the handler must let its thread
/// in again, on a thread that had set its PKRU for the key before the
/// fault and on one that had not.
#[test]
#[cfg_attr(
    not(pm_pkeys),
    ignore = "needs memory protection keys (pku and ospke in /proc/cpuinfo)"
)]
fn a_handler_reads_and_writes_a_region_under_protection_keys() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let opts = MapOptions {
        protect: crate::WriteProtect::Pkey,
        ..MapOptions::default()
    };
    let region = Arc::new(MmapRegion::create(&dir.path().join("img"), 16 * WINDOW_PAGE as u64, &opts).unwrap());
    assert_eq!(region.protection(), crate::Protection::Pkey);
    region.write(0, &[7u8; 2 * WINDOW_PAGE]).unwrap();
    let cow = Arc::new(CopyOnWrite {
        region: region.clone(),
        window: Mutex::new(None),
        faults: AtomicUsize::new(0),
    });
    let w = Arc::new(Window::new(region.map_source().unwrap(), 2, cow.clone()).unwrap());
    *cow.window.lock().unwrap() = Some(w.clone());
    w.map(0, 0, 2, false).unwrap();
    let p = w.as_ptr() as usize;
    // SAFETY: page 0 is mapped read-only; the store faults and retries.
    unsafe { (p as *mut u8).add(5).write_volatile(9) };
    std::thread::spawn(move || {
        // SAFETY: as above, page 1, from a thread new to the key.
        unsafe { (p as *mut u8).add(WINDOW_PAGE + 5).write_volatile(10) };
    })
    .join()
    .unwrap();
    assert_eq!(cow.faults.load(Ordering::SeqCst), 2);
    let mut copies = [0u8; 2 * WINDOW_PAGE];
    region.read(2 * WINDOW_PAGE as u64, &mut copies).unwrap();
    assert_eq!((copies[5], copies[WINDOW_PAGE + 5]), (9, 10));
    assert_eq!(copies.iter().filter(|&&b| b == 7).count(), 2 * WINDOW_PAGE - 2);
    *cow.window.lock().unwrap() = None;
}
