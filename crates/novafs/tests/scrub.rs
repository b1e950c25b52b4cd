//! Scrubbing (Fortis §4.2, §4.3): everything injected into a file system's
//! protected structures, even what no read needs (a second checksum copy,
//! parity), is found and repaired by one scrub, what
//! redundancy cannot repair is reported for that file only, and a scrub
//! runs beside writers without disturbing them.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;
use novafs::inject::{corrupt, Spec, Target, Which};
use novafs::{Fs, ScrubOptions, ROOT_INO};
use novafs_rng::SplitMix;
use pm::Region;

/// Inodes of a few files and a directory, their contents written.
struct Files {
    a: u64,
    b: u64,
    d: u64,
}

fn contents(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

fn populated() -> (Arc<dyn Region>, Files) {
    let region = fresh(32, 2);
    let fs = mount(&region);
    let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    fs.write(a, 0, &contents(1, 5 * 4096)).unwrap();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    let b = fs.create(d, b"b", 0o644, 0, 0).unwrap().ino;
    fs.write(b, 0, &contents(2, 3 * 4096 + 100)).unwrap();
    fs.unmount().unwrap();
    (region, Files { a, b, d })
}

fn damage(region: &Arc<dyn Region>, target: Target, which: Which, ino: u64, seed: u64, bytes: u64) {
    let spec = Spec::new(target).which(which).ino(ino).seed(seed).bytes(bytes);
    corrupt(&**region, &spec).unwrap();
}

fn scrub(fs: &Fs) -> novafs::ScrubReport {
    fs.scrub(ScrubOptions::default(), &|_, _| true).unwrap()
}

#[test]
fn one_scrub_repairs_everything_injected_and_a_second_finds_nothing() {
    let (region, f) = populated();
    // One bad strip in a data page, one bad checksum copy, a damaged
    // primary log page, a damaged replica of a record.
    damage(&region, Target::DataPage, Which::Primary, f.a, 3, 40);
    damage(&region, Target::DataChecksums, Which::Primary, f.b, 4, 8);
    damage(&region, Target::LogPage, Which::Primary, f.d, 5, 4096);
    damage(&region, Target::Inode, Which::Replica, f.b, 6, 16);
    // Redundancy no read needs: the second checksum copy, parity.
    damage(&region, Target::DataChecksums, Which::Replica, f.a, 8, 8);
    damage(&region, Target::Parity, Which::Primary, f.b, 9, 16);
    let fs = mount(&region);
    let rep = scrub(&fs);
    assert!(rep.damaged.is_empty(), "{rep:?}");
    assert!(rep.data_repaired >= 4, "{rep:?}");
    assert!(rep.metadata_repaired >= 1, "{rep:?}");
    assert!(rep.replicas_rewritten >= 1, "{rep:?}");
    assert!(rep.inodes >= 4 && rep.pages == 5 + 4, "{rep:?}");
    let again = scrub(&fs);
    assert_eq!(
        (again.data_repaired, again.metadata_repaired, again.replicas_rewritten),
        (0, 0, 0),
        "{again:?}"
    );
    assert_eq!(read_all(&fs, f.a), contents(1, 5 * 4096));
    assert_eq!(read_all(&fs, f.b), contents(2, 3 * 4096 + 100));
    assert_eq!(names(&fs, f.d), ["b"]);
    fs.unmount().unwrap();
    // The replicas agree with their primaries again: fsck finds nothing.
    assert_fsck_clean(&region);
}

#[test]
fn what_redundancy_cannot_repair_is_reported_for_that_file_only() {
    let (region, f) = populated();
    // A whole data page: more than parity rebuilds.
    damage(&region, Target::DataPage, Which::Primary, f.b, 7, 4096);
    let fs = mount(&region);
    let rep = scrub(&fs);
    assert_eq!(rep.damaged.len(), 1, "{rep:?}");
    assert_eq!(rep.damaged[0].ino, f.b);
    assert!(rep.damaged[0].why.contains("data page"), "{rep:?}");
    assert_eq!(read_all(&fs, f.a), contents(1, 5 * 4096));
    assert_eq!((fs.health().losses, fs.health().last_loss_ino), (1, f.b));
    fs.unmount().unwrap();
}

/// Writers keep overwriting and appending, and files come and go, while
/// a slow scrub goes over everything: nothing is reported, nothing
/// repaired or rewritten, every file reads back as last written.
#[test]
fn a_scrub_beside_writers_disturbs_nothing() {
    let region = fresh(64, 2);
    let fs = Arc::new(mount(&region));
    let files: Vec<u64> = (0..8)
        .map(|i| {
            let ino = fs
                .create(ROOT_INO, format!("f{i}").as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino;
            fs.write(ino, 0, &contents(i as u8, 16 * 4096)).unwrap();
            ino
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = files
        .iter()
        .enumerate()
        .map(|(w, &ino)| {
            let (fs, stop) = (fs.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = SplitMix::from_state(w as u64 + 1);
                let mut shadow = contents(w as u8, 16 * 4096);
                let mut rounds = 0;
                while !stop.load(Ordering::Relaxed) || rounds < 20 {
                    let off = rng.below(20 * 4096) as usize;
                    let data = contents(rng.below(250) as u8, 1 + rng.below(9000) as usize);
                    fs.write(ino, off as u64, &data).unwrap();
                    if shadow.len() < off + data.len() {
                        shadow.resize(off + data.len(), 0);
                    }
                    shadow[off..off + data.len()].copy_from_slice(&data);
                    rounds += 1;
                }
                (ino, shadow)
            })
        })
        .collect();
    // Files created and unlinked meanwhile: inode slots claimed and
    // released while the scrub checks the tables' free slots.
    let churn = {
        let (fs, stop) = (fs.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) || n < 50 {
                let name = format!("churn{}", n % 7);
                let _ = fs.unlink(ROOT_INO, name.as_bytes());
                let ino = fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
                fs.write(ino, 0, &contents(n as u8, 100)).unwrap();
                n += 1;
            }
        })
    };
    let rep = fs.scrub(ScrubOptions::default().rate(64 << 20), &|_, _| true).unwrap();
    stop.store(true, Ordering::Relaxed);
    churn.join().unwrap();
    for w in writers {
        let (ino, shadow) = w.join().unwrap();
        assert_eq!(read_all(&fs, ino), shadow);
    }
    assert!(rep.damaged.is_empty(), "{rep:?}");
    assert_eq!(
        (rep.data_repaired, rep.metadata_repaired, rep.replicas_rewritten),
        (0, 0, 0),
        "{rep:?}"
    );
    assert!(rep.pages > 0);
    assert_eq!(fs.health(), novafs::HealthCounts::default());
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    assert_fsck_clean(&region);
}

/// What no live inode covers: the superblock copies, an inode-table head
/// and chunk footer, a free slot's record (made to look live), page 2's
/// reserved records. One scrub makes every copy whole again.
#[test]
fn a_scrub_also_repairs_the_tables_free_slots_and_superblock() {
    use novafs::probe::layout::{decode, Bounds, Superblock, CHUNK_FOOTER_OFF, INODE_HEADS_OFF, INODE_SIZE};

    let (region, _) = populated();
    let mut buf = vec![0u8; std::mem::size_of::<Superblock>()];
    region.read(0, &mut buf).unwrap();
    let sb: Superblock = decode(&buf).unwrap();
    let bounds = Bounds {
        data_start: sb.data_start,
        data_end: sb.data_end,
        replicas: true,
        dead_zone_pages: sb.dead_zone_pages,
        stale: false,
    };
    let mirror = |off| bounds.mirror(off).unwrap();
    let chunk = region.load_u64(INODE_HEADS_OFF).unwrap();
    let free_slot = chunk + 200 * INODE_SIZE;
    let scribble = [0x01, 0, 0, 0, 0, 0, 0, 0, 0xEE, 0xEE, 0xEE];
    // Replicas: the shard 1 head, a chunk footer, page 2's recovery record.
    region.write(mirror(INODE_HEADS_OFF + 8), &[0x42; 8]).unwrap();
    region.write(mirror(chunk + CHUNK_FOOTER_OFF + 20), &[7; 4]).unwrap();
    region.write(mirror(sb.recovery_inode_off + 40), &[9; 8]).unwrap();
    // A primary: a free slot that now reads as live, which the mount's
    // saved state does not notice (only a scrub or the next scan would).
    region.write(free_slot, &scribble).unwrap();
    region.fence();
    let fs = mount(&region);
    // The superblock replica, damaged while mounted (a mount rewrites it).
    region.write(sb.replica_off + 64, &[3; 8]).unwrap();
    let rep = scrub(&fs);
    assert!(rep.damaged.is_empty(), "{rep:?}");
    assert_eq!(rep.metadata_repaired, 1, "the free slot: {rep:?}");
    // Head, footer, page 2, superblock replica.
    assert_eq!(rep.replicas_rewritten, 4, "{rep:?}");
    let again = scrub(&fs);
    assert_eq!((again.metadata_repaired, again.replicas_rewritten), (0, 0), "{again:?}");
    let read = |off, len| bytes_at(&region, off, len);
    assert_eq!(read(free_slot, 128), read(mirror(free_slot), 128));
    assert_eq!(
        read(free_slot, 128)[..8],
        [0; 8],
        "kept from the replica, which reads as free"
    );
    assert_eq!(
        region.load_u64(mirror(INODE_HEADS_OFF + 8)).unwrap(),
        region.load_u64(INODE_HEADS_OFF + 8).unwrap()
    );
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// The `len` bytes at `off` of the image.
fn bytes_at(region: &Arc<dyn Region>, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    region.read(off, &mut b).unwrap();
    b
}

/// Changes `len` bytes at `off` of an unmounted image (each XORed).
fn flip(region: &Arc<dyn Region>, off: u64, len: usize) {
    let mut buf = bytes_at(region, off, len);
    buf.iter_mut().for_each(|b| *b ^= 0x5A);
    region.write(off, &buf).unwrap();
    region.fence();
}

/// Region offsets of the primary, then the replica, of the first
/// instance of `target` of inode `ino` (the image unmounted).
fn copies_of(region: &Arc<dyn Region>, target: Target, ino: u64) -> (u64, u64) {
    use novafs::inject::{locate, CopyKind};
    let found = locate(&**region, target, ino).unwrap();
    let copy = |kind| found[0].copy(kind).unwrap();
    (copy(CopyKind::Primary), copy(CopyKind::Replica))
}

/// File `f` (4 pages) and `g` (3 pages) written, snapshot `s` taken and
/// `f` overwritten whole: its old pages only `s` keeps, in its manifest.
/// Returns the unmounted image, `f`, `g` and the kept pages in file order.
fn kept_pages() -> (Arc<dyn Region>, u64, u64, Vec<u64>) {
    let region = fresh(32, 2);
    let fs = mount(&region);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    fs.write(f, 0, &contents(1, 4 * 4096)).unwrap();
    let g = fs.create(ROOT_INO, b"g", 0o644, 0, 0).unwrap().ino;
    fs.write(g, 0, &contents(2, 2 * 4096 + 10)).unwrap();
    fs.unmount().unwrap();
    let old: Vec<u64> = novafs::inject::locate(&*region, Target::DataPage, f)
        .unwrap()
        .iter()
        .map(|page| page.copies[0].1)
        .collect();
    assert_eq!(old.len(), 4);
    let fs = mount(&region);
    fs.take_snapshot(b"s").unwrap();
    fs.write(f, 0, &contents(9, 4 * 4096)).unwrap();
    assert_eq!(fs.snapshots()[0].held_pages, 4);
    fs.unmount().unwrap();
    (region, f, g, old)
}

/// f's 4 live pages, g's 3 and the 4 the snapshot keeps.
const KEPT_IMAGE_PAGES: u64 = 4 + 3 + 4;

/// A strip of a page that only a snapshot's manifest holds is rebuilt
/// by the scrub itself, not left for the first read of the snapshot.
/// A second scrub finds nothing to report or repair.
fn assert_nothing_left(fs: &Fs) {
    let again = scrub(fs);
    assert!(again.damaged.is_empty(), "{again:?}");
    assert_eq!(
        (again.data_repaired, again.metadata_repaired, again.replicas_rewritten),
        (0, 0, 0),
        "{again:?}"
    );
}

#[test]
fn a_scrub_repairs_a_page_only_a_snapshot_keeps() {
    let (region, f, g, old) = kept_pages();
    flip(&region, old[1] + 512 + 100, 40); // strip 1
    let fs = mount(&region);
    let rep = scrub(&fs);
    assert!(rep.damaged.is_empty(), "{rep:?}");
    assert_eq!(rep.data_repaired, 1, "{rep:?}");
    assert_eq!(rep.pages, KEPT_IMAGE_PAGES, "{rep:?}");
    assert_nothing_left(&fs);
    let view = fs.open_snapshot(b"s").unwrap();
    assert_eq!(view.lookup(ROOT_INO, b"f").unwrap().ino, f);
    assert_eq!(read_all(&view, f), contents(1, 4 * 4096));
    drop(view);
    assert_eq!(fs.health().data_repairs, 1, "the view found nothing left to repair");
    assert_eq!(read_all(&fs, f), contents(9, 4 * 4096));
    assert_eq!(read_all(&fs, g), contents(2, 2 * 4096 + 10));
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// Two bad strips in a page only a snapshot keeps: parity cannot rebuild
/// it. The scrub reports that page (no inode maps it) and its snapshot;
/// reading it in the snapshot is EIO, and nothing else is touched.
#[test]
fn a_kept_page_past_repair_is_reported_and_fails_only_its_reads() {
    let (region, f, g, old) = kept_pages();
    flip(&region, old[2] + 100, 40); // strip 0
    flip(&region, old[2] + 3 * 512 + 7, 40); // strip 3
    let fs = mount(&region);
    let rep = scrub(&fs);
    assert_eq!(rep.damaged.len(), 1, "{rep:?}");
    let novafs::Damaged { ino, why, path, .. } = &rep.damaged[0];
    assert_eq!((*ino, path), (0, &None), "{rep:?}");
    assert!(why.contains(&format!("data page {:#x}", old[2])), "{why}");
    assert!(why.contains("snapshot"), "{why}");
    assert_eq!((rep.data_repaired, rep.metadata_repaired), (0, 0), "{rep:?}");
    assert_eq!(rep.pages, KEPT_IMAGE_PAGES, "{rep:?}");
    assert_eq!(fs.health().losses, 1);
    let view = fs.open_snapshot(b"s").unwrap();
    let mut buf = vec![0u8; 4 * 4096];
    let err = view.read(f, 0, &mut buf).unwrap_err();
    assert_eq!(err.errno(), libc::EIO, "{err}");
    // The file's other pages, the rest of the snapshot, the live files.
    let want = contents(1, 4 * 4096);
    for pg in [0, 1, 3] {
        let mut page = vec![0u8; 4096];
        assert_eq!(view.read(f, pg * 4096, &mut page).unwrap(), 4096);
        assert_eq!(page, want[pg as usize * 4096..][..4096], "page {pg}");
    }
    assert_eq!(read_all(&view, g), contents(2, 2 * 4096 + 10));
    drop(view);
    assert_eq!(read_all(&fs, f), contents(9, 4 * 4096));
    assert_eq!(read_all(&fs, g), contents(2, 2 * 4096 + 10));
    fs.unmount().unwrap();
}

/// An unmounted image whose root holds file "k" (three pages' worth).
fn image_with_k() -> (std::sync::Arc<dyn Region>, u64) {
    let region = fresh(32, 2);
    let fs = mount(&region);
    let k = fs.create(ROOT_INO, b"k", 0o644, 0, 0).unwrap().ino;
    fs.write(k, 0, &contents(3, 2 * 4096 + 5)).unwrap();
    fs.unmount().unwrap();
    (region, k)
}

/// An inode unlinked after a snapshot is kept (record, log, pages) for
/// it alone. Its damaged primary record and log page are repaired from
/// their replicas by the scrub, and the snapshot reads the file back.
#[test]
fn a_scrub_repairs_the_record_and_log_of_an_inode_only_a_snapshot_keeps() {
    let (region, k) = image_with_k();
    // Found while the inode is live (the log gains no page by the unlink).
    let record = copies_of(&region, Target::Inode, k);
    let log = copies_of(&region, Target::LogPage, k);
    let fs = mount(&region);
    fs.take_snapshot(b"s").unwrap();
    fs.unlink(ROOT_INO, b"k").unwrap();
    assert!(matches!(fs.getattr(k), Err(novafs::Error::NotFound)));
    assert!(fs.snapshots()[0].held_pages >= 4, "3 data pages and a log page");
    fs.unmount().unwrap();
    // The record's state word (kept no more, to the tables' scan) and
    // mtime (inside its checksum), the whole first log page.
    flip(&region, record.0, 1);
    flip(&region, record.0 + 80, 8);
    flip(&region, log.0, 4096);
    let fs = mount(&region);
    let rep = scrub(&fs);
    assert!(rep.damaged.is_empty(), "{rep:?}");
    assert!(rep.metadata_repaired >= 2, "the record and the log: {rep:?}");
    assert_eq!((rep.inodes, rep.pages), (2, 3), "the root, and k kept: {rep:?}");
    let read = |off, len| bytes_at(&region, off, len);
    assert_eq!(read(record.0, 128), read(record.1, 128));
    assert_eq!(read(log.0, 4096), read(log.1, 4096));
    assert_nothing_left(&fs);
    let view = fs.open_snapshot(b"s").unwrap();
    assert_eq!(view.lookup(ROOT_INO, b"k").unwrap().ino, k);
    assert_eq!(read_all(&view, k), contents(3, 2 * 4096 + 5));
    drop(view);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// The crash scan reads a kept inode whose primary record is damaged (in
/// its checksum) through the replica, as it does a live one's: the
/// snapshot still shows the file.
#[test]
fn the_crash_scan_reads_a_damaged_kept_record_from_its_replica() {
    let (region, k) = image_with_k();
    let record = copies_of(&region, Target::Inode, k);
    let fs = mount(&region);
    fs.take_snapshot(b"s").unwrap();
    fs.unlink(ROOT_INO, b"k").unwrap();
    drop(fs); // crash: the next mount scans
    flip(&region, record.0 + 80, 8); // mtime, inside the record's checksum
    let fs = mount(&region);
    assert!(!fs.mount_report().clean);
    let view = fs.open_snapshot(b"s").unwrap();
    assert_eq!(read_all(&view, k), contents(3, 2 * 4096 + 5));
    drop(view);
    assert_eq!(
        fs.snapshots()[0].held_pages,
        5,
        "3 data pages, the log page and its replica"
    );
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// Snapshots deleted in the middle of a scrub's pass over what they
/// keep: the reclaimer frees their pages and slots, a writer reuses
/// them, and the scrub checks only what is still kept. Nothing is
/// reported or "repaired", and everything reads back as last written.
#[test]
fn a_scrub_passes_over_what_deleted_snapshots_kept() {
    let region = fresh(64, 2);
    let fs = Arc::new(mount(&region));
    let files: Vec<u64> = (0..8u8)
        .map(|i| {
            let ino = fs.create(ROOT_INO, &[b'f', b'0' + i], 0o644, 0, 0).unwrap().ino;
            fs.write(ino, 0, &contents(i, 16 * 4096)).unwrap();
            ino
        })
        .collect();
    for i in 0..4u8 {
        let ino = fs.create(ROOT_INO, &[b'k', b'0' + i], 0o644, 0, 0).unwrap().ino;
        fs.write(ino, 0, &contents(i, 4 * 4096)).unwrap();
    }
    fs.take_snapshot(b"old").unwrap();
    for (i, &ino) in files.iter().enumerate() {
        fs.write(ino, 0, &contents(i as u8 + 50, 16 * 4096)).unwrap();
    }
    for i in 0..4u8 {
        fs.unlink(ROOT_INO, &[b'k', b'0' + i]).unwrap();
    }
    fs.take_snapshot(b"new").unwrap();
    for (i, &ino) in files.iter().enumerate() {
        fs.write(ino, 0, &contents(i as u8 + 100, 16 * 4096)).unwrap();
    }
    let kept: u64 = fs.snapshots().iter().map(|s| s.held_pages).sum();
    assert!(kept >= 2 * 8 * 16 + 4 * 4, "{kept}");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (fs, stop, files) = (fs.clone(), stop.clone(), files.clone());
        std::thread::spawn(move || {
            let mut last = vec![0u8; files.len()];
            let mut round = 0u8;
            while !stop.load(Ordering::Relaxed) || round < 8 {
                let i = usize::from(round) % files.len();
                last[i] = round.wrapping_add(150);
                fs.write(files[i], 0, &contents(last[i], 16 * 4096)).unwrap();
                round = round.wrapping_add(1);
            }
            last
        })
    };
    // The root and the 8 files, then the first kept item: both snapshots
    // go, with all they keep, before the second is checked.
    let calls = std::cell::Cell::new(0);
    let progress = |_, _| {
        calls.set(calls.get() + 1);
        if calls.get() == 1 + 8 + 1 {
            fs.delete_snapshot(b"new").unwrap();
            fs.delete_snapshot(b"old").unwrap();
            fs.wait_reclaimed();
        }
        true
    };
    let rep = fs.scrub(ScrubOptions::default().rate(32 << 20), &progress).unwrap();
    stop.store(true, Ordering::Relaxed);
    let last = writer.join().unwrap();
    assert!(calls.get() > 1 + 8 + 1, "the scrub went on after the deletions");
    assert!(rep.damaged.is_empty(), "{rep:?}");
    assert_eq!(
        (rep.data_repaired, rep.metadata_repaired, rep.replicas_rewritten),
        (0, 0, 0),
        "{rep:?}"
    );
    // Live pages, and at most the first kept item (a 16-page run).
    assert!(rep.pages >= 8 * 16 && rep.pages <= 8 * 16 + 16, "{rep:?}");
    assert!(fs.snapshots().is_empty());
    for (i, &ino) in files.iter().enumerate() {
        assert_eq!(read_all(&fs, ino), contents(last[i], 16 * 4096));
    }
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    assert_fsck_clean(&region);
}

/// `zpool status -v` for novafs: what parity cannot rebuild is named by
/// path (one of its names, and how many others) and byte range, the
/// whole file checked past its first bad page; the rest of the file
/// reads, the ranges read EIO until rewritten, and then all is well. An
/// inode lost whole is reported by its path too.
#[test]
fn damage_past_repair_is_named_by_path_and_byte_range() {
    let region = fresh(32, 2);
    let fs = mount(&region);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    let f = fs.create(d, b"f", 0o644, 0, 0).unwrap().ino;
    let size = 5 * 4096 + 100;
    fs.write(f, 0, &contents(4, size)).unwrap();
    fs.link(f, ROOT_INO, b"g").unwrap();
    let e = fs.create(d, b"e", 0o644, 0, 0).unwrap().ino;
    fs.write(e, 0, &contents(5, 100)).unwrap();
    fs.unmount().unwrap();
    let pages: Vec<u64> = novafs::inject::locate(&*region, Target::DataPage, f)
        .unwrap()
        .iter()
        .map(|page| page.copies[0].1)
        .collect();
    assert_eq!(pages.len(), 6);
    // Two strips of pages 1, 2 and 5 (the last, 100 bytes long).
    for pg in [1, 2, 5] {
        flip(&region, pages[pg] + 100, 40); // strip 0
        flip(&region, pages[pg] + 3 * 512 + 7, 40); // strip 3
    }
    // Both copies of e's record: e is lost whole.
    let spec = Spec::new(Target::Inode).which(Which::Both).ino(e).bytes(128);
    corrupt(&*region, &spec).unwrap();
    let state = state_word(&region, e);
    let fs = mount(&region);
    let rep = scrub(&fs);
    let mut shown: Vec<String> = rep.damaged.iter().map(|d| d.to_string()).collect();
    shown.sort();
    let strip0 = |pg: usize| {
        format!(
            "damaged on the media: data page {:#x}: strips [0, 3] are damaged and parity rebuilds only one",
            pages[pg]
        )
    };
    assert_eq!(
        shown,
        [
            format!(
                "/d/e (inode {e}): lost, every access answers EIO (damaged on the media: inode {e}'s record has a \
                 damaged state word {state:#x})"
            ),
            format!(
                "/g (inode {f}, and 1 other name): bytes 4096..12288, 20480..20580 read EIO until rewritten ({})",
                strip0(1)
            ),
        ],
        "{rep:?}"
    );
    let damaged = rep.damaged.iter().find(|x| x.ino == f).unwrap();
    assert_eq!(damaged.path, Some((b"/g".to_vec(), 1)));
    assert_eq!(damaged.ranges, [4096..12288, 20480..20580]);
    assert!(!damaged.lost);
    // The rest of the file reads; each damaged page is EIO.
    let want = contents(4, size);
    let mut buf = vec![0u8; 4096];
    for (pg, bad) in [(0, false), (1, true), (2, true), (3, false), (4, false), (5, true)] {
        let got = fs.read(f, pg as u64 * 4096, &mut buf);
        match bad {
            true => assert_eq!(got.unwrap_err().errno(), libc::EIO, "page {pg}"),
            false => assert_eq!(
                buf[..got.unwrap()],
                want[pg * 4096..(pg * 4096 + 4096).min(size)],
                "page {pg}"
            ),
        }
    }
    // Rewritten, the ranges read again; a second scrub finds only e.
    fs.write(f, 4096, &want[4096..12288]).unwrap();
    fs.write(f, 20480, &want[20480..]).unwrap();
    assert!(read_all(&fs, f) == want);
    let again = scrub(&fs);
    assert_eq!(
        again.damaged.iter().map(|d| d.ino).collect::<Vec<_>>(),
        [e],
        "{again:?}"
    );
    fs.unmount().unwrap();
}

/// The primary state word of inode `ino`'s record (damaged).
fn state_word(region: &Arc<dyn Region>, ino: u64) -> u64 {
    let (primary, _) = copies_of(region, Target::Inode, ino);
    u64::from_le_bytes(bytes_at(region, primary, 8).try_into().unwrap())
}
