//! DAX mmap in the library (NOVA-Fortis §3.3, §3.4): stores through a
//! mapping reach the file in place; checksums come back when pages are
//! sealed, and after a crash; snapshots copy on write and hold a prefix
//! of the program's stores (the paper's D-then-V example).
#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use common::{same, store_from_threads};
use novafs::{Error, FormatOptions, Fs, MountOptions, ScrubOptions, SetAttr, ROOT_INO};
use pm::{MapOptions, MmapRegion, Region};

const PS: usize = 4096;

/// An image file on /dev/shm (a region windows can map), removed on drop.
struct Image(PathBuf);

impl Image {
    fn new(name: &str) -> Image {
        Image::sized(name, 64 << 20)
    }

    fn sized(name: &str, bytes: u64) -> Image {
        let path = PathBuf::from(format!("/dev/shm/novafs-mmap-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let region: Arc<dyn Region> = Arc::new(MmapRegion::create(&path, bytes, &options()).unwrap());
        Fs::format(region, &FormatOptions::default()).unwrap();
        Image(path)
    }

    fn mount(&self) -> Fs {
        let region: Arc<dyn Region> = Arc::new(MmapRegion::open(&self.0, &options()).unwrap());
        Fs::open(region, MountOptions::default()).unwrap()
    }

    fn region(&self) -> Arc<dyn Region> {
        Arc::new(MmapRegion::open(&self.0, &options()).unwrap())
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// No lock: a test that "crashes" leaves its old mapping behind.
fn options() -> MapOptions {
    MapOptions {
        lock: false,
        ..MapOptions::default()
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add((i * 7 % 251) as u8)).collect()
}

fn file_with(fs: &Fs, name: &str, data: &[u8]) -> u64 {
    let ino = fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
    fs.write(ino, 0, data).unwrap();
    ino
}

fn read(fs: &Fs, ino: u64, off: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let n = fs.read(ino, off, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

fn scrub_clean(fs: &Fs) {
    let rep = fs.scrub(ScrubOptions::default(), &|_, _| true).unwrap();
    assert!(rep.damaged.is_empty(), "{:?}", rep.damaged);
    assert_eq!(
        rep.data_repaired, 0,
        "nothing to repair: every page's sums match its data"
    );
}

#[test]
fn stores_through_a_mapping_reach_the_file_and_are_sealed() {
    let img = Image::new("stores");
    let fs = img.mount();
    let data = pattern(1, 3 * PS);
    let ino = file_with(&fs, "f", &data);
    // A fourth page that is a hole.
    fs.setattr(ino, &SetAttr::default().size(4 * PS as u64)).unwrap();
    let before = fs.getattr(ino).unwrap();
    let m = fs.mmap(ino, 0, 4, true).unwrap();
    let mut got = vec![0u8; 4 * PS];
    m.load(0, &mut got).unwrap();
    assert_eq!(&got[..3 * PS], &data[..], "loads see the file");
    assert!(got[3 * PS..].iter().all(|&b| b == 0), "a hole reads as zeros");

    m.store(PS + 100, b"through the mapping").unwrap();
    m.store(3 * PS + 5, b"into the hole").unwrap();
    m.persist(0, 4 * PS).unwrap();
    // In place: the file system reads what the program stored, at once.
    assert_eq!(read(&fs, ino, PS as u64 + 100, 19), b"through the mapping");
    assert_eq!(read(&fs, ino, 3 * PS as u64 + 5, 13), b"into the hole");
    assert!(fs.getattr(ino).unwrap().mtime > before.mtime, "a store changes mtime");
    // Unprotected pages are left alone by scrub, and sealed by sync.
    scrub_clean(&fs);
    m.sync().unwrap();
    scrub_clean(&fs);
    m.store(PS + 100, b"THROUGH").unwrap();
    drop(m);
    scrub_clean(&fs);

    let mut want = data.clone();
    want.resize(4 * PS, 0);
    want[PS + 100..PS + 119].copy_from_slice(b"through the mapping");
    want[PS + 100..PS + 107].copy_from_slice(b"THROUGH");
    want[3 * PS + 5..3 * PS + 18].copy_from_slice(b"into the hole");
    assert_eq!(read(&fs, ino, 0, 4 * PS), want);
    fs.unmount().unwrap();
    common::assert_fsck_clean(&img.region());
    let fs = img.mount();
    assert_eq!(read(&fs, ino, 0, 4 * PS), want, "after a remount");
    scrub_clean(&fs);
}

#[test]
fn changes_through_the_file_system_show_in_the_mapping() {
    let img = Image::new("changes");
    let fs = img.mount();
    let ino = file_with(&fs, "f", &pattern(2, 2 * PS));
    let m = fs.mmap(ino, 0, 2, true).unwrap();
    m.store(10, b"mapped").unwrap();
    // write(2) over a page the mapping changed: sealed first, then the
    // mapping sees the new page.
    fs.write(ino, 8, b"written!").unwrap();
    let mut got = [0u8; 8];
    m.load(8, &mut got).unwrap();
    assert_eq!(&got, b"written!");
    assert_eq!(read(&fs, ino, 8, 8), b"written!");
    // Punching the page: the mapping reads zeros there after.
    fs.fallocate(
        ino,
        novafs::FALLOC_FL_PUNCH_HOLE | novafs::FALLOC_FL_KEEP_SIZE,
        PS as u64,
        PS as u64,
    )
    .unwrap();
    let mut page = vec![1u8; PS];
    m.load(PS, &mut page).unwrap();
    assert!(page.iter().all(|&b| b == 0));
    drop(m);
    scrub_clean(&fs);
    fs.unmount().unwrap();
    common::assert_fsck_clean(&img.region());
}

#[test]
fn a_crash_with_pages_mapped_writable_reseals_them_at_the_next_mount() {
    let img = Image::new("crash");
    let ino;
    let want;
    {
        let fs = img.mount();
        ino = file_with(&fs, "f", &pattern(3, 8 * PS));
        let m = fs.mmap(ino, 0, 8, true).unwrap();
        for p in [0usize, 3, 7] {
            m.store(p * PS + 1, &[0xEE; 600]).unwrap(); // two strips of each
        }
        m.persist(0, 8 * PS).unwrap();
        want = read(&fs, ino, 0, 8 * PS);
        // The crash: no munmap, no unmount.
        std::mem::forget(m);
        drop(fs);
    }
    let fs = img.mount();
    assert!(!fs.mount_report().clean);
    assert_eq!(read(&fs, ino, 0, 8 * PS), want, "the stores survive, checked");
    scrub_clean(&fs);
    fs.unmount().unwrap();
    common::assert_fsck_clean(&img.region());
    // A second mount finds them protected: nothing left to reseal.
    let fs = img.mount();
    assert!(fs.mount_report().clean);
    assert_eq!(read(&fs, ino, 0, 8 * PS), want);
    scrub_clean(&fs);
}

#[test]
fn a_snapshot_keeps_mapped_pages_as_they_were_when_taken() {
    let img = Image::new("snapshot");
    let fs = img.mount();
    let ino = file_with(&fs, "f", &pattern(4, 2 * PS));
    let m = fs.mmap(ino, 0, 2, true).unwrap();
    m.store(0, b"AAAA").unwrap();
    m.persist(0, 4).unwrap();
    fs.take_snapshot(b"s").unwrap();
    m.store(0, b"BBBB").unwrap(); // copy-on-write
    m.store(PS, b"CCCC").unwrap();
    assert_eq!(read(&fs, ino, 0, 4), b"BBBB");
    {
        let view = fs.open_snapshot(b"s").unwrap();
        let mut want = pattern(4, 2 * PS);
        want[..4].copy_from_slice(b"AAAA");
        assert_eq!(
            read(&view, ino, 0, 2 * PS),
            want,
            "the snapshot holds the stores before it"
        );
    }
    assert_eq!(fs.statfs().snapshot_blocks, 2, "both old pages are the snapshot's");
    // The kept pages' checksums are whole: scrub finds nothing to repair.
    drop(m);
    scrub_clean(&fs);
    let free_before = fs.statfs().blocks_free;
    fs.delete_snapshot(b"s").unwrap();
    fs.wait_reclaimed();
    assert_eq!(fs.statfs().blocks_free, free_before + 2, "the kept pages come back");
    assert_eq!(fs.statfs().snapshot_blocks, 0);
    fs.unmount().unwrap();
    common::assert_fsck_clean(&img.region());
}

/// §3.3, Figure 3: a thread stores D, persists, then stores V (a flag
/// saying D is valid), on another page; snapshots taken meanwhile must
/// never hold the new V without the D before it.
#[test]
fn snapshots_of_a_mapped_file_hold_a_prefix_of_the_stores() {
    let img = Image::new("d-then-v");
    let fs = img.mount();
    let ino = file_with(&fs, "f", &vec![0u8; 2 * PS]);
    let m = fs.mmap(ino, 0, 2, true).unwrap();
    let stop = AtomicBool::new(false);
    // The last i whose V the writer has stored.
    let done = AtomicU64::new(0);
    let seen = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                m.store(0, &i.to_le_bytes()).unwrap(); // D
                m.persist(0, 8).unwrap();
                m.store(PS, &i.to_le_bytes()).unwrap(); // V
                m.persist(PS, 8).unwrap();
                done.store(i, Ordering::Release);
            }
            i
        });
        let mut seen = Vec::new();
        for n in 0..40u32 {
            let name = format!("s{n}");
            let lo = done.load(Ordering::Acquire);
            fs.take_snapshot(name.as_bytes()).unwrap();
            let hi = done.load(Ordering::Acquire) + 1;
            // Let the writer run on: what it stores now is not the snapshot's.
            std::thread::sleep(std::time::Duration::from_millis(3));
            let view = fs.open_snapshot(name.as_bytes()).unwrap();
            let d = u64::from_le_bytes(read(&view, ino, 0, 8).try_into().unwrap());
            let v = u64::from_le_bytes(read(&view, ino, PS as u64, 8).try_into().unwrap());
            seen.push((lo, d, v, hi));
        }
        stop.store(true, Ordering::Relaxed);
        assert!(writer.join().unwrap() > 0);
        seen
    });
    for &(lo, d, v, hi) in &seen {
        assert!(d == v || d == v + 1, "snapshot holds V={v} with D={d}");
        assert!(
            lo <= v && d <= hi,
            "snapshot holds D={d} V={v}, taken between {lo} and {hi}"
        );
    }
    assert!(
        seen.iter().any(|&(_, d, _, _)| d > 0),
        "the writer ran during the snapshots"
    );
    drop(m);
    for n in 0..40u32 {
        fs.delete_snapshot(format!("s{n}").as_bytes()).unwrap();
    }
    fs.wait_reclaimed();
    scrub_clean(&fs);
    fs.unmount().unwrap();
    common::assert_fsck_clean(&img.region());
}

/// Random stores through two mappings of one file, writes, truncations,
/// hole punches, syncs, snapshots and crashes, against a byte vector: the
/// file (read through the file system and through a mapping) always equals
/// it, each snapshot equals the copy made when it was taken, and scrub
/// finds nothing to repair. Seeds vary with NOVAFS_MMAP_SEED.
#[test]
fn random_mapped_workloads_match_a_model() {
    for seed in common::mmap_seeds(20261126) {
        model_run(seed, 300);
    }
}

/// The model again, and loads and stores checked, where every fault
/// unmaps the mapping's other pages (as past the kernel's mapping limit).
#[test]
fn the_model_holds_where_every_fault_unmaps_the_rest() {
    common::run_where_every_fault_unmaps_the_rest(&[
        "random_mapped_workloads_match_a_model",
        "faults_unmap_the_rest_where_windows_keep_no_mapping",
    ]);
}

#[test]
#[ignore = "run by the_model_holds_where_every_fault_unmaps_the_rest, with NOVAFS_WINDOW_VMAS=0"]
fn faults_unmap_the_rest_where_windows_keep_no_mapping() {
    const PAGES: usize = 64;
    let img = Image::new("no-mapping-kept");
    let fs = img.mount();
    let mut want = pattern(1, PAGES * PS);
    let ino = file_with(&fs, "f", &want);
    let m = fs.mmap(ino, 0, PAGES, true).unwrap();
    let mut got = vec![0u8; PAGES * PS];
    m.load(0, &mut got).unwrap();
    let first = m.faults();
    m.load(0, &mut got).unwrap();
    assert!(m.faults() > first, "the pages were unmapped, and faulted back in");
    same(&got, &want, "loads");
    fs.take_snapshot(b"s").unwrap();
    for p in (0..PAGES).rev() {
        m.store(p * PS + 3, &[0xcd]).unwrap();
        want[p * PS + 3] = 0xcd;
    }
    m.sync().unwrap();
    drop(m);
    same(&read(&fs, ino, 0, PAGES * PS), &want, "the stores, copied on write");
    scrub_clean(&fs);
}

fn model_run(seed: u64, steps: usize) {
    const PAGES: usize = 16;
    let img = Image::new(&format!("model-{seed}"));
    let mut rng = novafs_rng::SplitMix::from_state(seed);
    let mut fs = img.mount();
    let ino = file_with(&fs, "f", &pattern(seed as u8, 5 * PS));
    let mut model = pattern(seed as u8, 5 * PS);
    let mut snaps: Vec<(String, Vec<u8>)> = Vec::new();
    let mut n_snap = 0;
    let mut crashes = 0;
    'outer: loop {
        let a = fs.mmap(ino, 0, PAGES, true).unwrap();
        let b = fs.mmap(ino, 4 * PS as u64, PAGES - 4, true).unwrap();
        for step in 0..steps {
            let size = model.len();
            let ctx = format!("seed {seed} step {step} crash {crashes}");
            match rng.below(12) {
                0..=3 if size > 0 => {
                    // A store within the file (past it would kill us).
                    let off = rng.below(size as u64) as usize;
                    // Now and then a long one: its pages fault in order
                    // (write-ahead runs, copy-on-write runs).
                    let most = if rng.below(4) == 0 { 3 * PS as u64 } else { 700 };
                    let len = (1 + rng.below(most) as usize).min(size - off);
                    let bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
                    if off >= 4 * PS && rng.below(2) == 0 {
                        b.store(off - 4 * PS, &bytes).unwrap();
                    } else {
                        a.store(off, &bytes).unwrap();
                    }
                    model[off..off + len].copy_from_slice(&bytes);
                }
                k @ 4..=6 => match common::random_change(&fs, ino, &mut rng, k - 4, (size, PAGES * PS)) {
                    Some(change) => change.apply(&mut model),
                    None => continue,
                },
                7 => {
                    if rng.below(2) == 0 { a.sync() } else { b.sync() }.unwrap();
                }
                8 => {
                    let name = format!("s{n_snap}");
                    n_snap += 1;
                    fs.take_snapshot(name.as_bytes()).unwrap();
                    snaps.push((name, model.clone()));
                }
                9 if !snaps.is_empty() => {
                    let (name, _) = snaps.remove(rng.below(snaps.len() as u64) as usize);
                    fs.delete_snapshot(name.as_bytes()).unwrap();
                }
                10 if crashes < 2 && step > steps / 2 => {
                    // A crash with both mappings live.
                    std::mem::forget(a);
                    std::mem::forget(b);
                    drop(fs);
                    fs = img.mount();
                    crashes += 1;
                    check(&fs, ino, &model, &snaps, &ctx);
                    continue 'outer;
                }
                _ => {
                    let mut via_map = vec![0u8; model.len()];
                    a.load(0, &mut via_map[..model.len().min(PAGES * PS)]).unwrap();
                    same(&via_map, &model, &format!("{ctx}: the mapping"));
                }
            }
            same(&read(&fs, ino, 0, PAGES * PS + 1), &model, &ctx);
        }
        drop(a);
        drop(b);
        check(&fs, ino, &model, &snaps, &format!("seed {seed} end"));
        break;
    }
    for (name, _) in &snaps {
        fs.delete_snapshot(name.as_bytes()).unwrap();
    }
    fs.wait_reclaimed();
    scrub_clean(&fs);
    fs.unmount().unwrap();
    common::assert_fsck_clean(&img.region());
}

fn check(fs: &Fs, ino: u64, model: &[u8], snaps: &[(String, Vec<u8>)], ctx: &str) {
    same(&read(fs, ino, 0, model.len() + 1), model, ctx);
    for (name, want) in snaps {
        let view = fs.open_snapshot(name.as_bytes()).unwrap();
        same(
            &read(&view, ino, 0, want.len() + 1),
            want,
            &format!("{ctx}: snapshot {name}"),
        );
    }
    scrub_clean(fs);
}

#[test]
fn mmap_refuses_what_linux_refuses() {
    let img = Image::new("refuse");
    let fs = img.mount();
    let ino = file_with(&fs, "f", b"x");
    assert!(matches!(fs.mmap(ino, 100, 1, false), Err(Error::Invalid(_))));
    assert!(matches!(fs.mmap(ino, 0, 0, false), Err(Error::Invalid(_))));
    assert!(matches!(fs.mmap(ROOT_INO, 0, 1, false), Err(Error::Invalid(_))));
    fs.set_flags(ino, novafs::probe::layout::FLAG_APPEND).unwrap();
    assert!(matches!(fs.mmap(ino, 0, 1, true), Err(Error::NotPermitted)));
    let held = fs.mmap(ino, 0, 1, false).expect("read-only is allowed");
    assert!(
        matches!(fs.mmap_atomic(ino, 0, 1, false), Err(Error::Busy(_))),
        "one kind of mapping a file at a time"
    );
    drop(held);
    // A heap region has no file to map from.
    let heap = common::fresh(16, 1);
    let hfs = common::mount(&heap);
    let h = file_with(&hfs, "f", b"x");
    assert!(matches!(hfs.mmap(h, 0, 1, false), Err(Error::NotSupported(_))));
}

/// Kernel mappings in the whole process (lines of /proc/self/maps).
fn process_vmas() -> usize {
    std::fs::read_to_string("/proc/self/maps").unwrap().lines().count()
}

/// A file written back to front has no two neighbouring pages next to each
/// other on the media: mapped, each page is a kernel mapping of its own,
/// and more of them than the kernel allows a process (65,530 by default)
/// once killed the program near page 65,000. Loads, stores and copies on
/// write over all of it now work, and the process stays well under the
/// limit.
#[test]
fn a_scattered_file_larger_than_the_kernels_mapping_limit_maps_whole() {
    const PAGES: usize = 70_001; // no multiple of 7 (the stride below)
    let limit: usize = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        PAGES > limit,
        "the test needs more scattered pages ({PAGES}) than vm.max_map_count ({limit})"
    );
    let img = Image::sized("scattered", 1 << 30);
    let fs = img.mount();
    let ino = fs.create(ROOT_INO, b"scattered", 0o644, 0, 0).unwrap().ino;
    let page_of = |i: usize| [(i % 251) as u8; PS];
    for i in (0..PAGES).rev() {
        fs.write(ino, (i * PS) as u64, &page_of(i)).unwrap();
    }
    let m = fs.mmap(ino, 0, PAGES, true).unwrap();
    let mut b = [0u8; 2];
    for i in 0..PAGES {
        m.load(i * PS, &mut b).unwrap();
        assert_eq!(b, [(i % 251) as u8; 2], "page {i}");
    }
    let most = process_vmas();
    for i in (0..PAGES).rev() {
        m.store(i * PS, &[1]).unwrap();
    }
    fs.take_snapshot(b"before").unwrap();
    for i in 0..PAGES {
        m.store((i * 7 % PAGES) * PS + 1, &[2]).unwrap();
    }
    let most = most.max(process_vmas());
    assert!(most < limit * 3 / 4, "{most} mappings of {limit} allowed");
    m.sync().unwrap();
    drop(m);
    for i in 0..PAGES {
        assert_eq!(read(&fs, ino, (i * PS) as u64, 3), [1, 2, (i % 251) as u8], "page {i}");
    }
    scrub_clean(&fs);
}

/// Write-ahead: stores in page order fault once a run of pages, whose
/// runs double up to 16, both in place and copying on write after a
/// snapshot; stores out of order fault once a page, and a hole is filled
/// only where a store lands.
#[test]
fn stores_in_page_order_fault_once_a_run() {
    const N: usize = 64;
    let img = Image::new("ahead");
    let fs = img.mount();
    let data = pattern(6, N * PS);
    let ino = file_with(&fs, "f", &data);
    let m = fs.mmap(ino, 0, N, true).unwrap();
    let mut want = data.clone();
    let mut got = vec![0u8; N * PS];
    m.load(0, &mut got).unwrap();
    let store_each = |order: &[usize], byte: u8, want: &mut Vec<u8>| -> u64 {
        let before = m.faults();
        for &p in order {
            m.store(p * PS + 9, &[byte]).unwrap();
            want[p * PS + 9] = byte;
        }
        m.faults() - before
    };
    let in_order: Vec<usize> = (0..N).collect();
    // Runs of 1, 2, 4, 8, 16, 16, 16, then the one page left.
    assert_eq!(store_each(&in_order, 1, &mut want), 8, "in place, in order");
    m.sync().unwrap();
    assert_eq!(read(&fs, ino, 0, N * PS), want);
    let scattered: Vec<usize> = (0..N).map(|i| i * 7 % N).collect();
    assert_eq!(
        store_each(&scattered, 2, &mut want),
        N as u64,
        "out of order: a page a fault"
    );
    m.sync().unwrap();
    scrub_clean(&fs);

    fs.take_snapshot(b"s").unwrap();
    assert_eq!(store_each(&in_order, 3, &mut want), 8, "copy-on-write, in order");
    assert_eq!(
        fs.statfs().snapshot_blocks,
        N as u64,
        "every old page is the snapshot's"
    );
    m.sync().unwrap();
    assert_eq!(read(&fs, ino, 0, N * PS), want);
    {
        let view = fs.open_snapshot(b"s").unwrap();
        let mut old = data.clone();
        for p in 0..N {
            old[p * PS + 9] = 2;
        }
        assert_eq!(
            read(&view, ino, 0, N * PS),
            old,
            "the snapshot keeps the pages as they were"
        );
    }
    drop(m);
    scrub_clean(&fs);

    // A sparse file: each store fills its own hole, none ahead.
    let sparse = file_with(&fs, "sparse", &[]);
    fs.setattr(sparse, &SetAttr::default().size((N * PS) as u64)).unwrap();
    let m = fs.mmap(sparse, 0, N, true).unwrap();
    for p in 0..4 {
        m.store(p * PS, b"x").unwrap();
    }
    let sectors = (4 * PS / 512) as u64;
    assert_eq!(fs.getattr(sparse).unwrap().blocks, sectors, "four stores, four pages");
    drop(m);
    fs.unmount().unwrap();
    common::assert_fsck_clean(&img.region());
    let fs = img.mount();
    assert_eq!(read(&fs, ino, 0, N * PS), want, "after a remount");
    scrub_clean(&fs);
}

/// Twelve threads, more than the signal handler has stacks, store at once
/// through one mapping, each to its own pages in page order, first in
/// place and then after a snapshot (copy-on-write): faults are resolved
/// on many threads at once (and on the service thread beyond the stacks),
/// write-ahead runs cross each other's pages, and every store lands, the
/// snapshot keeping the pages as they were.
#[test]
fn many_threads_fault_at_once() {
    const THREADS: usize = 12;
    const EACH: usize = 24;
    let img = Image::new("threads");
    let fs = img.mount();
    let data = pattern(8, THREADS * EACH * PS);
    let ino = file_with(&fs, "f", &data);
    let m = fs.mmap(ino, 0, THREADS * EACH, true).unwrap();
    let mut want = data.clone();
    store_from_threads(&m, (THREADS, EACH), (1, 64), &mut want);
    let first = want.clone();
    m.sync().unwrap();
    assert_eq!(read(&fs, ino, 0, first.len()), first, "in place");
    fs.take_snapshot(b"s").unwrap();
    store_from_threads(&m, (THREADS, EACH), (2, 64), &mut want);
    let second = want;
    m.sync().unwrap();
    assert_eq!(read(&fs, ino, 0, second.len()), second, "copied on write");
    {
        let view = fs.open_snapshot(b"s").unwrap();
        assert_eq!(
            read(&view, ino, 0, first.len()),
            first,
            "the snapshot keeps the first stores"
        );
    }
    drop(m);
    scrub_clean(&fs);
    fs.unmount().unwrap();
    common::assert_fsck_clean(&img.region());
    let fs = img.mount();
    assert_eq!(read(&fs, ino, 0, second.len()), second, "after a remount");
}
