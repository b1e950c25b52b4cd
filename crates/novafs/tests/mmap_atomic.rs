//! Atomic mmap (NOVA §4.5): stores through an atomic mapping reach the
//! file only at sync, all at once; a crash shows the previous sync or the
//! last one, never a mix; calls that change the file show in the mapping.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::{assert_fsck_clean, fresh, mount, read_all, same, store_from_threads};
use novafs::{Error, Fs, MapKind, MountOptions, SetAttr, ROOT_INO};
use pm::Region;

const PS: usize = 4096;

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add((i * 13 % 251) as u8)).collect()
}

fn file_with(fs: &Fs, name: &str, data: &[u8]) -> u64 {
    let ino = fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
    fs.write(ino, 0, data).unwrap();
    ino
}

fn load(m: &novafs::Mapping<'_>, len: usize) -> Vec<u8> {
    let mut got = vec![0u8; len];
    m.load(0, &mut got).unwrap();
    got
}

/// Drops `fs` without unmounting (its mappings forgotten by the caller,
/// never synced) and mounts the image again: the crash scan runs.
fn crash(region: &Arc<dyn Region>, fs: Fs) -> Fs {
    crash_as(region, fs, false)
}

/// [`crash`], mounting with `mmap_store_faults` as given.
fn crash_as(region: &Arc<dyn Region>, fs: Fs, store_faults: bool) -> Fs {
    drop(fs);
    let fs = mount_as(region, store_faults);
    assert!(!fs.mount_report().clean);
    fs
}

/// A mount whose atomic mappings find stores by faults (`store_faults`)
/// or by the kernel's write tracking.
fn mount_as(region: &Arc<dyn Region>, store_faults: bool) -> Fs {
    Fs::open(region.clone(), MountOptions::default().mmap_store_faults(store_faults)).unwrap()
}

/// Whether this kernel tracks writes for atomic mappings: where it does
/// not, the tests of tracking have nothing to test (and CI's kernel has
/// it, so there it is a failure).
fn kernel_tracks_writes(fs: &Fs, ino: u64) -> bool {
    let m = fs.mmap_atomic(ino, 0, 1, true).unwrap();
    let mut b = [0u8];
    m.load(0, &mut b).unwrap();
    let before = m.faults();
    m.store(0, &b).unwrap();
    let tracked = m.faults() == before;
    assert!(tracked || std::env::var_os("CI").is_none(), "CI's kernel tracks writes");
    if !tracked {
        eprintln!("this kernel does not track writes: nothing to test");
    }
    tracked
}

#[test]
fn stores_reach_the_file_only_at_sync() {
    let region = fresh(64, 2);
    let fs = mount(&region);
    let data = pattern(1, 3 * PS + 100);
    let ino = file_with(&fs, "f", &data);
    let m = fs.mmap_atomic(ino, 0, 4, true).unwrap();
    assert_eq!(m.kind(), MapKind::Atomic);
    assert_eq!(&load(&m, data.len())[..], &data[..], "loads see the file");
    assert!(
        load(&m, 4 * PS)[data.len()..].iter().all(|&b| b == 0),
        "zeros past the end"
    );

    m.store(10, b"first page").unwrap();
    m.store(2 * PS + 7, b"third page").unwrap();
    m.persist(0, 4 * PS).unwrap(); // no effect on an atomic mapping
    let mut want = data.clone();
    want[10..20].copy_from_slice(b"first page");
    want[2 * PS + 7..2 * PS + 17].copy_from_slice(b"third page");
    assert_eq!(read_all(&fs, ino), want, "reads see the stores, as a page cache's");
    fs.take_snapshot(b"before sync").unwrap();
    let before = fs.getattr(ino).unwrap();

    m.sync().unwrap();
    assert_eq!(read_all(&fs, ino), want, "sync commits every page stored to");
    fs.take_snapshot(b"after sync").unwrap();
    let snap = |name: &[u8]| read_all(&fs.open_snapshot(name).unwrap(), ino);
    assert_eq!(
        snap(b"before sync"),
        data,
        "the file had none of the stores before sync"
    );
    assert_eq!(snap(b"after sync"), want);
    let after = fs.getattr(ino).unwrap();
    assert_eq!(after.size, data.len() as u64, "sync never changes the size");
    assert!(after.mtime > before.mtime, "sync changes mtime");
    assert_eq!(&load(&m, want.len())[..], &want[..]);

    // Unmapping commits too.
    m.store(PS, b"at unmap").unwrap();
    drop(m);
    want[PS..PS + 8].copy_from_slice(b"at unmap");
    assert_eq!(read_all(&fs, ino), want);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
    let fs = mount(&region);
    assert_eq!(read_all(&fs, ino), want, "after a remount");
}

#[test]
fn a_crash_keeps_the_last_sync_and_drops_later_stores() {
    let region = fresh(64, 2);
    let fs = mount(&region);
    let data = pattern(2, 8 * PS);
    let ino = file_with(&fs, "f", &data);
    let m = fs.mmap_atomic(ino, 0, 8, true).unwrap();
    for p in 0..8 {
        m.store(p * PS + p, &[0xA0 + p as u8; 300]).unwrap();
    }
    m.sync().unwrap();
    let synced = load(&m, 8 * PS);
    for p in [1usize, 5, 6] {
        m.store(p * PS, &[0x11; 4000]).unwrap();
    }
    std::mem::forget(m);
    let fs = crash(&region, fs);
    assert_eq!(read_all(&fs, ino), synced, "the last sync, none of the later stores");
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

#[test]
fn mappings_of_one_file_share_their_stores() {
    let region = fresh(64, 2);
    let fs = mount(&region);
    let ino = file_with(&fs, "f", &pattern(3, 4 * PS));
    let a = fs.mmap_atomic(ino, 0, 4, true).unwrap();
    let b = fs.mmap_atomic(ino, 2 * PS as u64, 2, true).unwrap();
    a.store(2 * PS + 1, b"from a").unwrap();
    let mut got = [0u8; 6];
    b.load(1, &mut got).unwrap();
    assert_eq!(&got, b"from a", "b sees a's store before any sync");
    b.store(PS + 3, b"from b").unwrap();
    a.load(3 * PS + 3, &mut got).unwrap();
    assert_eq!(&got, b"from b");
    // b's sync commits the pages it covers, whoever stored to them.
    b.sync().unwrap();
    let file = read_all(&fs, ino);
    assert_eq!(&file[2 * PS + 1..2 * PS + 7], b"from a");
    assert_eq!(&file[3 * PS + 3..3 * PS + 9], b"from b");
    // A read-only mapping refuses stores: the access is fatal, as SIGBUS
    // would be, so only its refusal to be writable is checked here.
    let r = fs.mmap_atomic(ino, 0, 1, false).unwrap();
    assert_eq!(load(&r, 6), pattern(3, 6));
    drop((a, b, r));
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

#[test]
fn calls_that_change_the_file_show_in_the_mapping() {
    let region = fresh(64, 2);
    let fs = mount(&region);
    let ino = file_with(&fs, "f", &pattern(4, 4 * PS));
    let m = fs.mmap_atomic(ino, 0, 4, true).unwrap();
    let mut view = load(&m, 4 * PS); // every page loaded, all clean
    m.store(100, b"pending").unwrap();
    view[100..107].copy_from_slice(b"pending");
    // write(2) over a dirty page keeps its other pending bytes, and over a
    // clean one replaces the replica.
    fs.write(ino, 200, b"written").unwrap();
    fs.write(ino, 2 * PS as u64, b"clean page").unwrap();
    view[200..207].copy_from_slice(b"written");
    view[2 * PS..2 * PS + 10].copy_from_slice(b"clean page");
    assert_eq!(load(&m, 4 * PS), view);
    // A hole punched over a dirty page zeroes only the hole.
    fs.fallocate(ino, novafs::FALLOC_FL_PUNCH_HOLE | novafs::FALLOC_FL_KEEP_SIZE, 150, 40)
        .unwrap();
    view[150..190].fill(0);
    assert_eq!(load(&m, 4 * PS), view);
    // A truncation into the first page, and back: what lay past the new
    // end reads as zeros, pending stores there included.
    fs.setattr(ino, &SetAttr::default().size(104)).unwrap();
    fs.setattr(ino, &SetAttr::default().size(4 * PS as u64)).unwrap();
    view[104..].fill(0);
    assert_eq!(load(&m, 4 * PS), view);
    m.sync().unwrap();
    assert_eq!(read_all(&fs, ino), view);
    drop(m);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// Stores past the end of the file, in its last page, are dropped as a
/// kernel's are: a sync commits zeros there, and when a write extends the
/// file over them, the gap reads as zeros through the mapping and read(2)
/// alike, and stays zeros on the media after the next sync.
#[test]
fn stores_past_the_end_never_reach_the_file() {
    let region = fresh(64, 2);
    let fs = mount(&region);
    let ino = file_with(&fs, "f", &pattern(5, 100));
    let m = fs.mmap_atomic(ino, 0, 1, true).unwrap();
    m.store(500, b"past the end").unwrap();
    m.sync().unwrap();
    assert_eq!(
        read_all(&fs, ino),
        pattern(5, 100),
        "the sync kept the size and its bytes"
    );
    fs.write(ino, 1000, b"extended").unwrap();
    let mut want = pattern(5, 100);
    want.resize(1000, 0);
    want.extend_from_slice(b"extended");
    assert_eq!(read_all(&fs, ino), want, "read(2): the gap is zeros");
    assert_eq!(load(&m, want.len()), want, "the mapping: the gap is zeros");
    m.store(0, b"X").unwrap();
    want[0] = b'X';
    m.sync().unwrap();
    assert_eq!(read_all(&fs, ino), want, "the next sync commits no stale byte");
    drop(m);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
    let fs = mount(&region);
    assert_eq!(read_all(&fs, ino), want, "after a remount");
}

/// Where the kernel tracks writes, a store after a sync takes no fault of
/// ours, and the sync still commits exactly the pages stored to; with
/// `mmap_store_faults`, each such store faults once.
#[test]
fn stores_after_a_sync_fault_only_without_write_tracking() {
    for store_faults in [false, true] {
        let region = fresh(64, 2);
        let fs = mount_as(&region, store_faults);
        let data = pattern(7, 8 * PS);
        let ino = file_with(&fs, "f", &data);
        if !store_faults && !kernel_tracks_writes(&fs, ino) {
            continue;
        }
        let m = fs.mmap_atomic(ino, 0, 8, true).unwrap();
        assert_eq!(load(&m, 8 * PS), data);
        let before = m.faults();
        let mut want = data.clone();
        for p in [1, 3, 6] {
            m.store(p * PS + 5, b"stored").unwrap();
            want[p * PS + 5..p * PS + 11].copy_from_slice(b"stored");
        }
        let stores_faulted = m.faults() - before;
        assert_eq!(
            stores_faulted,
            if store_faults { 3 } else { 0 },
            "store faults {store_faults}"
        );
        assert_eq!(read_all(&fs, ino), want, "read(2) sees the stores at once");
        fs.take_snapshot(b"before").unwrap();
        m.sync().unwrap();
        fs.take_snapshot(b"after").unwrap();
        let snap = |name: &[u8]| read_all(&fs.open_snapshot(name).unwrap(), ino);
        assert_eq!(snap(b"before"), data);
        assert_eq!(snap(b"after"), want);
        // After the sync: a store to a synced page is found again, and a
        // sync with none commits nothing.
        m.store(3 * PS, b"again").unwrap();
        want[3 * PS..3 * PS + 5].copy_from_slice(b"again");
        m.sync().unwrap();
        let mtime = fs.getattr(ino).unwrap().mtime;
        m.sync().unwrap();
        assert_eq!(fs.getattr(ino).unwrap().mtime, mtime, "nothing to commit");
        drop(m);
        assert_eq!(read_all(&fs, ino), want);
        fs.unmount().unwrap();
        assert_fsck_clean(&region);
    }
}

/// Kernel mappings allowed a process (`vm.max_map_count`).
fn kernel_mapping_limit() -> usize {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Without write tracking a store fault makes its own page writable, so
/// stores to every other page of a large mapping alternate writable and
/// read-only pages, a kernel mapping each: more of them than the kernel
/// allows a process once killed the program. All of them reach the file
/// at sync.
#[test]
fn stores_to_every_other_page_of_a_mapping_past_the_kernels_limit_all_sync() {
    const PAGES: usize = 70_001;
    assert!(
        PAGES > kernel_mapping_limit(),
        "the test needs more pages than vm.max_map_count"
    );
    let region = fresh(1024, 2);
    let fs = mount_as(&region, true);
    let mut want = pattern(3, PAGES * PS);
    let ino = file_with(&fs, "f", &want);
    let m = fs.mmap_atomic(ino, 0, PAGES, true).unwrap();
    let mut b = [0u8];
    for p in 0..PAGES {
        m.load(p * PS, &mut b).unwrap();
    }
    for p in (0..PAGES).step_by(2) {
        m.store(p * PS + 9, &[0xee]).unwrap();
        want[p * PS + 9] = 0xee;
    }
    m.sync().unwrap();
    drop(m);
    assert!(read_all(&fs, ino) == want, "every store synced, nothing else changed");
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// Never faulted: a window that only holds kernel mappings.
struct Untouched;

impl pm::Fault for Untouched {
    fn fault(&self, _page: usize, _write: bool) -> bool {
        false
    }
}

/// Another part of the process holding `n` kernel mappings: every other
/// page of a window over a file in memory.
fn crowd(n: usize) -> (pm::Window, std::fs::File) {
    use std::os::fd::AsFd;
    let file = pm::anonymous_file(c"novafs-test-crowd").unwrap();
    file.set_len((n * PS) as u64).unwrap();
    let src = pm::MapSource {
        fd: file.as_fd(),
        sync: false,
    };
    let w = pm::Window::new(src, n, Arc::new(Untouched)).unwrap();
    for p in (1..n).step_by(2) {
        w.map(p, (p * PS) as u64, 1, false).unwrap();
    }
    (w, file)
}

/// While the process holds so many kernel mappings that a mapping must
/// unmap pages to map more, a tracked page stored to (no fault) and then
/// unmapped keeps its stores for the next sync: the page is held and
/// looked at before it goes.
#[test]
fn stores_to_pages_a_crowded_tracking_mapping_unmaps_all_sync() {
    const PAGES: usize = 8192;
    let region = fresh(128, 2);
    let fs = mount(&region);
    let mut want = pattern(5, PAGES * PS);
    let ino = file_with(&fs, "f", &want);
    if !kernel_tracks_writes(&fs, ino) {
        return;
    }
    let (held, _file) = crowd(kernel_mapping_limit() * 3 / 5);
    let m = fs.mmap_atomic(ino, 0, PAGES, true).unwrap();
    let mut b = [0u8];
    // Runs of 16 pages mapped (fault-around) with gaps of 16 between.
    for p in (0..PAGES).step_by(32) {
        m.load(p * PS, &mut b).unwrap();
        for q in p..p + 16 {
            m.store(q * PS + 1, &[0xab]).unwrap();
            want[q * PS + 1] = 0xab;
        }
    }
    let before = m.faults();
    for p in 0..PAGES {
        m.load(p * PS, &mut b).unwrap();
    }
    let refaults = m.faults() - before;
    assert!(
        refaults > (PAGES / 32) as u64,
        "{refaults} faults: pages were unmapped and faulted back"
    );
    m.sync().unwrap();
    drop(m);
    drop(held);
    assert!(read_all(&fs, ino) == want, "every store synced, nothing else changed");
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// A read looks for tracked stores only on pages not dirty yet: it must
/// still see every store, to a page that is dirty (read from its replica
/// without a look), to a clean page beside it, and to a page a sync made
/// clean again; and a sync still commits the stores no read looked for.
#[test]
fn reads_see_stores_to_dirty_clean_and_resynced_pages() {
    let region = fresh(64, 2);
    let fs = mount(&region);
    let data = pattern(3, 3 * PS);
    let ino = file_with(&fs, "f", &data);
    if !kernel_tracks_writes(&fs, ino) {
        return;
    }
    let m = fs.mmap_atomic(ino, 0, 3, true).unwrap();
    assert_eq!(load(&m, 3 * PS), data);
    let mut want = data.clone();
    // Stores through `m` and into `want`; what the file should read now.
    let mut store = |at: usize, bytes: &[u8]| {
        m.store(at, bytes).unwrap();
        want[at..at + bytes.len()].copy_from_slice(bytes);
        want.clone()
    };
    let w = store(PS + 1, b"one");
    assert_eq!(read_all(&fs, ino), w, "page 1 found dirty");
    let w = store(PS + 100, b"two");
    assert_eq!(read_all(&fs, ino), w, "dirty page 1 again");
    store(7, b"zero");
    let w = store(2 * PS + 9, b"two");
    assert_eq!(read_all(&fs, ino), w, "clean pages 0 and 2 beside it");
    let now = store(PS + 95, b"alone");
    let mut one = vec![0u8; 10];
    fs.read(ino, PS as u64 + 95, &mut one).unwrap();
    assert_eq!(one, now[PS + 95..PS + 105], "a read of the dirty page alone");
    let synced = store(PS + 200, b"unread");
    m.sync().unwrap();
    assert_eq!(read_all(&fs, ino), synced);
    let last = store(PS + 300, b"after");
    assert_eq!(
        read_all(&fs, ino),
        last,
        "page 1, clean again after the sync, is looked at"
    );
    m.close().unwrap();
    fs.unmount().unwrap();
    let fs = mount(&region);
    assert_eq!(read_all(&fs, ino), last, "the syncs committed every store");
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// A thread stores i to page 0 and then to page 5, again and again, while
/// another syncs and snapshots: every sync commits the replicas as of one
/// moment, so no snapshot holds page 5's i without page 0's.
#[test]
fn a_sync_commits_a_prefix_of_a_concurrent_threads_stores() {
    for store_faults in [false, true] {
        let region = fresh(64, 2);
        let fs = mount_as(&region, store_faults);
        let ino = file_with(&fs, "f", &vec![0u8; 8 * PS]);
        let m = fs.mmap_atomic(ino, 0, 8, true).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    i += 1;
                    m.store(0, &i.to_le_bytes()).unwrap();
                    m.store(5 * PS, &i.to_le_bytes()).unwrap();
                }
            });
            // Stops the writer however the rounds end, a failed assertion
            // included (the scope waits for it before the panic goes on).
            struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
            impl Drop for Stop<'_> {
                fn drop(&mut self) {
                    self.0.store(true, std::sync::atomic::Ordering::Relaxed);
                }
            }
            let _stop = Stop(&stop);
            for round in 0..200 {
                m.sync().unwrap();
                let name = format!("s{round}");
                fs.take_snapshot(name.as_bytes()).unwrap();
                let held = read_all(&fs.open_snapshot(name.as_bytes()).unwrap(), ino);
                let at = |off: usize| u64::from_le_bytes(held[off..off + 8].try_into().unwrap());
                assert!(
                    at(5 * PS) <= at(0),
                    "store faults {store_faults}, round {round}: page 5 has {} before page 0's {}",
                    at(5 * PS),
                    at(0)
                );
                fs.delete_snapshot(name.as_bytes()).unwrap();
            }
        });
        drop(m);
        fs.unmount().unwrap();
        assert_fsck_clean(&region);
    }
}

/// Twelve threads, more than the signal handler has stacks, store at once
/// through one atomic mapping, each to its own pages (loads faulting them
/// in, stores found by tracking or by faults); one sync commits them all.
#[test]
fn many_threads_store_at_once() {
    const THREADS: usize = 12;
    const EACH: usize = 8;
    for store_faults in [false, true] {
        let region = fresh(64, 2);
        let fs = mount_as(&region, store_faults);
        let data = pattern(9, THREADS * EACH * PS);
        let ino = file_with(&fs, "f", &data);
        let m = fs.mmap_atomic(ino, 0, THREADS * EACH, true).unwrap();
        let mut want = data.clone();
        for round in 1..=3u8 {
            store_from_threads(&m, (THREADS, EACH), (round, 32), &mut want);
            m.sync().unwrap();
            fs.take_snapshot(format!("r{round}").as_bytes()).unwrap();
            let held = read_all(&fs.open_snapshot(format!("r{round}").as_bytes()).unwrap(), ino);
            assert_eq!(
                held, want,
                "store faults {store_faults}, round {round}: the sync has every store"
            );
        }
        drop(m);
        fs.unmount().unwrap();
        assert_fsck_clean(&region);
    }
}

#[test]
fn atomic_mmap_needs_no_file_behind_the_region_and_refuses_append_only_files() {
    let region = fresh(16, 1); // a heap region: DAX mmap has nothing to map
    let fs = mount(&region);
    let ino = file_with(&fs, "f", b"x");
    assert!(matches!(fs.mmap(ino, 0, 1, false), Err(Error::NotSupported(_))));
    let held = fs.mmap_atomic(ino, 0, 1, false).unwrap();
    assert!(
        matches!(fs.mmap(ino, 0, 1, false), Err(Error::Busy(_))),
        "one kind of mapping a file at a time"
    );
    drop(held);
    drop(fs.mmap_atomic(ino, 0, 1, true).unwrap());
    fs.set_flags(ino, novafs::probe::layout::FLAG_APPEND).unwrap();
    assert!(matches!(fs.mmap_atomic(ino, 0, 1, true), Err(Error::NotPermitted)));
    assert!(fs.mmap_atomic(ino, 0, 1, false).is_ok(), "read-only is allowed");
}

/// Random stores through two atomic mappings of one file, writes,
/// truncations, hole punches, syncs, snapshots and crashes, against two
/// byte vectors: what the file holds (what snapshots and a crash find)
/// and what the mappings and reads show (the file plus the stores not yet
/// synced). Seeds vary with NOVAFS_MMAP_SEED.
#[test]
fn random_atomic_workloads_match_a_model() {
    for seed in common::mmap_seeds(20261127) {
        // Stores found by the kernel's write tracking, and by faults.
        model_run(seed, 300, false);
        model_run(seed, 300, true);
    }
}

/// The model again, and tracked stores checked, where every fault unmaps
/// the mapping's other pages (as past the kernel's mapping limit).
#[test]
fn the_model_holds_where_every_fault_unmaps_the_rest() {
    common::run_where_every_fault_unmaps_the_rest(&[
        "random_atomic_workloads_match_a_model",
        "faults_unmap_the_rest_where_windows_keep_no_mapping",
    ]);
}

#[test]
#[ignore = "run by the_model_holds_where_every_fault_unmaps_the_rest, with NOVAFS_WINDOW_VMAS=0"]
fn faults_unmap_the_rest_where_windows_keep_no_mapping() {
    const PAGES: usize = 64;
    for store_faults in [false, true] {
        let region = fresh(64, 2);
        let fs = mount_as(&region, store_faults);
        let mut want = pattern(2, PAGES * PS);
        let ino = file_with(&fs, "f", &want);
        let m = fs.mmap_atomic(ino, 0, PAGES, true).unwrap();
        let mut got = vec![0u8; PAGES * PS];
        m.load(0, &mut got).unwrap();
        // Stores with no fault where tracked; then every page faults
        // again, unmapping the stored ones.
        for p in 0..PAGES {
            m.store(p * PS + 7, &[0x5a]).unwrap();
            want[p * PS + 7] = 0x5a;
        }
        let first = m.faults();
        m.load(0, &mut got).unwrap();
        assert!(m.faults() > first, "the pages were unmapped, and faulted back in");
        assert!(got == want, "loads see the stores");
        m.sync().unwrap();
        drop(m);
        assert!(
            read_all(&fs, ino) == want,
            "every store synced (store faults {store_faults})"
        );
        fs.unmount().unwrap();
        assert_fsck_clean(&region);
    }
}

fn model_run(seed: u64, steps: usize, store_faults: bool) {
    const PAGES: usize = 16;
    const B_FROM: usize = 4; // b maps pages 4.. of the file
    let region = fresh(64, 2);
    let mut rng = novafs_rng::SplitMix::from_state(seed);
    let mut fs = mount_as(&region, store_faults);
    let ino = file_with(&fs, "f", &pattern(seed as u8, 5 * PS));
    let mut file = pattern(seed as u8, 5 * PS);
    let mut shown = file.clone();
    let mut snaps: Vec<(String, Vec<u8>)> = Vec::new();
    let mut crashes = 0;
    'outer: loop {
        let a = fs.mmap_atomic(ino, 0, PAGES, true).unwrap();
        let b = fs.mmap_atomic(ino, (B_FROM * PS) as u64, PAGES - B_FROM, true).unwrap();
        for step in 0..steps {
            let size = file.len();
            let ctx = format!("seed {seed} store faults {store_faults} step {step} crash {crashes}");
            match rng.below(12) {
                0..=3 if size > 0 => {
                    let off = rng.below(size as u64) as usize;
                    let len = (1 + rng.below(700) as usize).min(size - off);
                    let bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
                    if off >= B_FROM * PS && rng.below(2) == 0 {
                        b.store(off - B_FROM * PS, &bytes).unwrap();
                    } else {
                        a.store(off, &bytes).unwrap();
                    }
                    shown[off..off + len].copy_from_slice(&bytes);
                }
                k @ 4..=6 => match common::random_change(&fs, ino, &mut rng, k - 4, (size, PAGES * PS)) {
                    Some(change) => {
                        change.apply(&mut file);
                        change.apply(&mut shown);
                    }
                    None => continue,
                },
                7 => {
                    // A sync commits the pages its mapping covers.
                    let from = if rng.below(2) == 0 {
                        a.sync().unwrap();
                        0
                    } else {
                        b.sync().unwrap();
                        (B_FROM * PS).min(size)
                    };
                    file[from..].copy_from_slice(&shown[from..]);
                }
                8 => {
                    let name = format!("s{step}-{crashes}");
                    fs.take_snapshot(name.as_bytes()).unwrap();
                    snaps.push((name, file.clone()));
                }
                9 if !snaps.is_empty() => {
                    let (name, _) = snaps.remove(rng.below(snaps.len() as u64) as usize);
                    fs.delete_snapshot(name.as_bytes()).unwrap();
                }
                10 if crashes < 2 && step > steps / 2 => {
                    std::mem::forget((a, b));
                    fs = crash_as(&region, fs, store_faults);
                    crashes += 1;
                    shown = file.clone();
                    check(&fs, ino, &file, &snaps, &ctx);
                    continue 'outer;
                }
                _ => same(&load(&a, size), &shown, &format!("{ctx}: the mapping")),
            }
            // Reads see the stores not yet synced; snapshots and crashes
            // check what the file holds.
            same(&read_all(&fs, ino), &shown, &ctx);
        }
        drop((a, b));
        // Unmapping committed everything.
        check(
            &fs,
            ino,
            &shown,
            &snaps,
            &format!("seed {seed} store faults {store_faults} end"),
        );
        break;
    }
    for (name, _) in &snaps {
        fs.delete_snapshot(name.as_bytes()).unwrap();
    }
    fs.wait_reclaimed();
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

fn check(fs: &Fs, ino: u64, file: &[u8], snaps: &[(String, Vec<u8>)], ctx: &str) {
    same(&read_all(fs, ino), file, ctx);
    for (name, want) in snaps {
        let view = fs.open_snapshot(name.as_bytes()).unwrap();
        same(&read_all(&view, ino), want, &format!("{ctx}: snapshot {name}"));
    }
}
