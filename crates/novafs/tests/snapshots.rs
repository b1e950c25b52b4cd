//! Snapshots through the library (NOVA-Fortis §3): the persistent list,
//! its epochs, its errors, and the list after a remount and a crash.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use novafs::{Error, Fs, MountOptions, ROOT_INO};

fn names_of(fs: &Fs) -> Vec<String> {
    fs.snapshots()
        .iter()
        .map(|s| String::from_utf8(s.name.clone()).unwrap())
        .collect()
}

#[test]
fn the_list_survives_remounts_and_crashes_and_epochs_only_grow() {
    let region = fresh(32, 2);
    let fs = mount(&region);
    assert!(fs.snapshots().is_empty());
    let a = fs.take_snapshot(b"a").unwrap();
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    fs.write(f, 0, b"x").unwrap();
    let b = fs.take_snapshot(b"b").unwrap();
    let c = fs.take_snapshot(b"c").unwrap();
    // One epoch per snapshot, whatever ran between them.
    assert_eq!((b.epoch, c.epoch), (a.epoch + 1, a.epoch + 2));
    assert!(a.created_ns <= b.created_ns && b.created_ns <= c.created_ns);
    assert_eq!(names_of(&fs), ["a", "b", "c"]);
    fs.delete_snapshot(b"b").unwrap();
    fs.unmount().unwrap();

    let fs = mount(&region);
    assert_eq!(names_of(&fs), ["a", "c"]);
    assert_eq!(fs.snapshots()[1], c);
    let d = fs.take_snapshot(b"d").unwrap();
    assert_eq!(d.epoch, c.epoch + 1, "a remount goes on past the newest epoch");
    drop(fs); // crash

    let fs = mount(&region);
    assert_eq!(names_of(&fs), ["a", "c", "d"]);
    fs.delete_snapshot(b"d").unwrap();
    drop(fs); // crash after a deletion
    let fs = mount(&region);
    assert_eq!(names_of(&fs), ["a", "c"]);
    let e = fs.take_snapshot(b"d").unwrap();
    assert!(e.epoch > d.epoch, "a deleted snapshot's epoch is never reused");
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

#[test]
fn names_and_states_are_checked() {
    let region = fresh(32, 2);
    let fs = mount(&region);
    fs.take_snapshot(b"x").unwrap();
    assert!(matches!(fs.take_snapshot(b"x"), Err(Error::Exists)));
    assert!(matches!(fs.take_snapshot(&[b'n'; 256]), Err(Error::NameTooLong)));
    for bad in [&b""[..], b".", b"..", b"a/b"] {
        assert!(matches!(fs.take_snapshot(bad), Err(Error::Invalid(_))), "{bad:?}");
    }
    assert!(matches!(fs.delete_snapshot(b"nothing"), Err(Error::NotFound)));
    fs.take_snapshot(&[b'n'; 255]).unwrap();
    assert_eq!(fs.snapshots().len(), 2);
    assert_ne!(
        fs.superblock().features_incompat & novafs::probe::layout::FEATURE_INCOMPAT_SNAPSHOTS,
        0,
        "the first snapshot marks the image"
    );
    fs.unmount().unwrap();
    let ro = Fs::open(region.clone(), MountOptions::default().read_only(true)).unwrap();
    assert_eq!(ro.snapshots().len(), 2);
    assert!(matches!(ro.take_snapshot(b"y"), Err(Error::ReadOnly)));
    assert!(matches!(ro.delete_snapshot(b"x"), Err(Error::ReadOnly)));
}

/// Many snapshots grow the list's log over several pages; all come back,
/// and the pages are the list's (fsck counts them, nothing else gets them).
#[test]
fn a_long_list_spans_log_pages() {
    let region = fresh(32, 2);
    let fs = mount(&region);
    for i in 0..300 {
        fs.take_snapshot(format!("snapshot-{i:03}-{}", "x".repeat(i % 100)).as_bytes())
            .unwrap();
        if i % 3 == 0 {
            fs.delete_snapshot(format!("snapshot-{i:03}-{}", "x".repeat(i % 100)).as_bytes())
                .unwrap();
        }
    }
    let want = names_of(&fs);
    assert_eq!(want.len(), 200);
    drop(fs); // crash: the scan rebuilds the allocator around the list
    let fs = mount(&region);
    assert_eq!(names_of(&fs), want);
    let g = fs.create(ROOT_INO, b"g", 0o644, 0, 0).unwrap().ino;
    fs.write(g, 0, &vec![7u8; 1 << 20]).unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
    let fs = mount(&region);
    assert_eq!(names_of(&fs), want);
    assert_eq!(read_all(&fs, g), vec![7u8; 1 << 20]);
}

/// Snapshots taken and deleted without end (a rotation keeping the newest
/// three) leave a bounded list: it is compacted as it would grow, into one
/// record per live snapshot and the newest one ever taken, so epochs still
/// only grow after a crash or a remount.
#[test]
fn a_rotating_list_is_compacted_and_epochs_still_only_grow() {
    let region = fresh(32, 2);
    let fs = mount(&region);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    fs.write(f, 0, &1999u32.to_le_bytes()).unwrap();
    let free_after_first_page = {
        fs.take_snapshot(b"r0").unwrap();
        fs.statfs().blocks_free
    };
    let mut newest = 0;
    for i in 1..2000u32 {
        newest = fs.take_snapshot(format!("r{i}").as_bytes()).unwrap().epoch;
        if i >= 3 {
            fs.delete_snapshot(format!("r{}", i - 3).as_bytes()).unwrap();
        }
    }
    fs.wait_reclaimed();
    // 4,000 records unbounded would take 64 log pages (each with its
    // replica); compacted, the list stays within a few.
    let used = free_after_first_page - fs.statfs().blocks_free;
    assert!(used <= 4, "the list takes {used} more pages");
    assert_eq!(names_of(&fs), ["r1997", "r1998", "r1999"]);
    fs.delete_snapshot(b"r1999").unwrap();
    fs.delete_snapshot(b"r1998").unwrap();
    drop(fs); // crash
    let fs = mount(&region);
    assert_eq!(names_of(&fs), ["r1997"]);
    let next = fs.take_snapshot(b"after-crash").unwrap();
    assert!(next.epoch > newest, "epoch {} after a newest of {newest}", next.epoch);
    for i in 0..200u32 {
        fs.take_snapshot(format!("s{i}").as_bytes()).unwrap();
        fs.delete_snapshot(format!("s{i}").as_bytes()).unwrap();
    }
    fs.delete_snapshot(b"after-crash").unwrap();
    fs.delete_snapshot(b"r1997").unwrap();
    let last = fs.take_snapshot(b"last").unwrap().epoch;
    fs.delete_snapshot(b"last").unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
    let fs = mount(&region);
    assert!(fs.snapshots().is_empty());
    assert!(
        fs.take_snapshot(b"again").unwrap().epoch > last,
        "a remount goes on past the newest epoch"
    );
    drop(fs);
    let fs = mount(&region);
    assert_eq!(names_of(&fs), ["again"]);
    assert_eq!(read_all(&fs, f), 1999u32.to_le_bytes());
}

/// Once deleted snapshots are reclaimed, at most `max` pages more are in
/// use than when `free_at_start` was taken, and fast GC ran.
fn assert_gc_bounded(fs: &Fs, free_at_start: u64, max: u64, what: &str) {
    fs.wait_reclaimed();
    let used = free_at_start - fs.statfs().blocks_free;
    assert!(used <= max, "{what} and what the snapshots keep take {used} pages");
    assert!(fs.gc_stats().fast_pages > 0);
}

/// A file rewritten under a rotation of snapshots (the newest three kept,
/// and the first one for good) does not grow its log without end: GC drops the dead log pages no live
/// snapshot may replay, and keeps those one may, so every snapshot still
/// reads what the file held when it was taken, also after a crash.
#[test]
fn a_file_rewritten_under_rotating_snapshots_keeps_a_bounded_log() {
    let region = fresh(32, 2);
    let fs = mount(&region);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    fs.write(f, 0, &0u32.to_le_bytes()).unwrap();
    fs.take_snapshot(b"r0").unwrap();
    let free_at_start = fs.statfs().blocks_free;
    for i in 1..3000u32 {
        fs.write(f, 0, &i.to_le_bytes()).unwrap();
        if i % 10 == 0 {
            let n = i / 10;
            fs.take_snapshot(format!("r{n}").as_bytes()).unwrap();
            if n >= 4 {
                fs.delete_snapshot(format!("r{}", n - 3).as_bytes()).unwrap();
            }
        }
    }
    // Unbounded, 3,000 write entries take 48 log pages (with replicas 96).
    assert_gc_bounded(&fs, free_at_start, 24, "the file's log");
    let check = |fs: &Fs| {
        assert_eq!(names_of(fs), ["r0", "r297", "r298", "r299"]);
        for n in [0, 297, 298, 299u32] {
            let view = fs.open_snapshot(format!("r{n}").as_bytes()).unwrap();
            assert_eq!(read_all(&view, f), (n * 10).to_le_bytes(), "snapshot r{n}");
        }
        assert_eq!(read_all(fs, f), 2999u32.to_le_bytes());
    };
    check(&fs);
    drop(fs); // crash
    let fs = mount(&region);
    check(&fs);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
    check(&mount(&region));
}

/// A directory whose names come and go under a rotation of snapshots (and
/// one kept for good) keeps a bounded log too: GC drops the dead pages no
/// snapshot may replay, once the cancelled adds there are invalidated in
/// place, and every snapshot still lists exactly the names it saw, also
/// after a crash and a remount.
#[test]
fn a_directory_churned_under_rotating_snapshots_keeps_a_bounded_log() {
    let region = fresh(32, 2);
    let fs = mount(&region);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    for k in 0..5 {
        fs.create(d, format!("keep-{k}").as_bytes(), 0o644, 0, 0).unwrap();
    }
    fs.take_snapshot(b"r0").unwrap();
    let mut want: Vec<(String, Vec<String>)> = vec![("r0".into(), names(&fs, d))];
    let free_at_start = fs.statfs().blocks_free;
    for i in 1..1500u32 {
        // Each name once: a wrongly revived one would show.
        fs.create(d, format!("t{i}").as_bytes(), 0o644, 0, 0).unwrap();
        if i > 3 {
            fs.unlink(d, format!("t{}", i - 3).as_bytes()).unwrap();
        }
        if i % 200 == 0 {
            // Long-lived names keep pages whose other adds are cancelled.
            fs.create(d, format!("long-{i}").as_bytes(), 0o644, 0, 0).unwrap();
        }
        if i % 25 == 0 {
            let snap = format!("r{}", i / 25);
            fs.take_snapshot(snap.as_bytes()).unwrap();
            want.push((snap, names(&fs, d)));
            if want.len() > 4 {
                let (gone, _) = want.remove(1);
                fs.delete_snapshot(gone.as_bytes()).unwrap();
            }
        }
    }
    // Unbounded, 1,500 dentries (64 or 128 B each) take 30-odd log pages,
    // each with its replica.
    assert_gc_bounded(&fs, free_at_start, 40, "the directory's log");
    let check = |fs: &Fs| {
        for (snap, names_then) in &want {
            let view = fs.open_snapshot(snap.as_bytes()).unwrap();
            let vd = view.lookup(ROOT_INO, b"d").unwrap().ino;
            assert_eq!(&names(&view, vd), names_then, "snapshot {snap}");
        }
    };
    check(&fs);
    let live = names(&fs, d);
    drop(fs); // crash
    let fs = mount(&region);
    check(&fs);
    assert_eq!(names(&fs, d), live);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
    let fs = mount(&region);
    check(&fs);
    assert_eq!(names(&fs, d), live);
}

/// The case GC of a covered directory must get right: an add a snapshot
/// saw, cancelled by a remove on a later log page, on a page that stays
/// (a long-lived name shares it). Its remove's page stays while the
/// snapshot lives, and once it is gone the add is invalidated in place
/// before the remove's page may go: the name never comes back, neither
/// while the snapshot lives nor after, across crashes.
#[test]
fn a_cancelled_add_a_snapshot_saw_never_comes_back() {
    let region = fresh(32, 2);
    let fs = mount(&region);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    fs.create(d, b"old", 0o644, 0, 0).unwrap();
    fs.take_snapshot(b"forever").unwrap(); // the log stays covered
    let mut n = 0u32;
    let mut churn = |fs: &Fs, ops: u32| {
        for _ in 0..ops {
            fs.create(d, format!("f{n}").as_bytes(), 0o644, 0, 0).unwrap();
            fs.unlink(d, format!("f{n}").as_bytes()).unwrap();
            n += 1;
        }
    };
    // "a" between two long-lived names (one of them shares its page), on
    // a page younger than "forever".
    churn(&fs, 100);
    fs.create(d, b"long", 0o644, 0, 0).unwrap();
    fs.create(d, b"a", 0o644, 0, 0).unwrap();
    fs.create(d, b"long2", 0o644, 0, 0).unwrap();
    fs.take_snapshot(b"saw-a").unwrap();
    churn(&fs, 100); // "a"'s page is behind now
    fs.unlink(d, b"a").unwrap();
    let region_crash = |fs: Fs| -> Fs {
        drop(fs);
        let fs = mount(&region);
        let d2 = fs.lookup(ROOT_INO, b"d").unwrap().ino;
        assert_eq!(names(&fs, d2), ["long", "long2", "old"], "after a crash");
        fs
    };
    let mut fs = fs;
    for round in 0..3 {
        churn(&fs, 300); // the remove's page falls behind, GC runs
        assert_eq!(names(&fs, d), ["long", "long2", "old"], "round {round}");
        if round == 0 {
            let view = fs.open_snapshot(b"saw-a").unwrap();
            let vd = view.lookup(ROOT_INO, b"d").unwrap().ino;
            assert_eq!(names(&view, vd), ["a", "long", "long2", "old"]);
            drop(view);
            fs = region_crash(fs);
            fs.delete_snapshot(b"saw-a").unwrap();
        } else {
            fs = region_crash(fs);
        }
    }
    churn(&fs, 300);
    assert!(fs.gc_stats().fast_pages > 0, "GC ran under the snapshot");
    assert_eq!(names(&fs, d), ["long", "long2", "old"]);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// Log GC under a snapshot: the log is never compacted while the snapshot
/// covers it, but its dead pages that the snapshot cannot replay (born and
/// dead after it) go; the page with the entry the snapshot sees stays. Once
/// the snapshot is deleted, thorough GC compacts again.
#[test]
fn gc_spares_what_snapshots_may_replay() {
    let region = fresh(64, 2);
    let fs = mount(&region);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    let overwrite = |from: u64, rounds: u64| {
        for i in from..from + rounds {
            fs.write(f, 0, &i.to_le_bytes()).unwrap();
        }
    };
    overwrite(0, 2000);
    let collected = fs.gc_stats();
    assert!(collected.fast_pages + collected.thorough_pages > 0, "{collected:?}");
    fs.take_snapshot(b"s").unwrap();
    overwrite(2000, 2000);
    let during = fs.gc_stats();
    assert!(during.fast_pages > collected.fast_pages, "{during:?}");
    assert_eq!(
        during.thorough_runs, collected.thorough_runs,
        "a covered log is not compacted"
    );
    let view = fs.open_snapshot(b"s").unwrap();
    assert_eq!(read_all(&view, f), 1999u64.to_le_bytes());
    drop(view);
    fs.delete_snapshot(b"s").unwrap();
    overwrite(4000, 2000);
    let after = fs.gc_stats();
    assert!(after.thorough_runs + after.fast_pages > during.thorough_runs + during.fast_pages);
    assert_eq!(read_all(&fs, f), 5999u64.to_le_bytes());
}

fn held(fs: &Fs) -> Vec<(String, u64)> {
    fs.snapshots()
        .into_iter()
        .map(|s| (String::from_utf8(s.name).unwrap(), s.held_pages))
        .collect()
}

/// Drops `fs` without unmounting and mounts again: the crash scan must
/// rebuild exactly the space in use, snapshots' pages included.
fn crash_keeps_the_space(region: &std::sync::Arc<dyn pm::Region>, fs: Fs) -> Fs {
    fs.wait_reclaimed();
    let before = fs.statfs();
    let snaps = held(&fs);
    drop(fs);
    let fs = mount(region);
    assert!(!fs.mount_report().clean);
    assert_eq!(fs.statfs(), before, "the scan rebuilt other free space");
    assert_eq!(held(&fs), snaps, "the scan rebuilt other manifests");
    fs
}

/// Unmounts `fs` and mounts again: the manifests come back with the
/// saved state (Fortis §3.2), without a scan, exactly.
fn unmount_keeps_the_space(region: &std::sync::Arc<dyn pm::Region>, fs: Fs) -> Fs {
    fs.wait_reclaimed();
    let before = fs.statfs();
    let snaps = held(&fs);
    let (items, _) = fs.manifest_memory();
    fs.unmount().unwrap();
    // fsck's own scan finds exactly what the saved manifests list.
    assert_fsck_clean(region);
    let fs = mount(region);
    assert!(fs.mount_report().clean, "a clean unmount with snapshots needs no scan");
    assert_eq!(fs.mount_report().scanned_inodes, 0);
    assert_eq!(fs.statfs(), before, "the saved state gave other free space");
    assert_eq!(held(&fs), snaps, "the saved manifests differ");
    assert_eq!(fs.manifest_memory().0, items);
    fs
}

/// Data a snapshot sees stays when it is overwritten, in the manifest of
/// the newest snapshot that needs it; deleting a snapshot hands its
/// pages to an older one that needs them or frees them; the crash scan
/// rebuilds all of it exactly.
#[test]
fn overwritten_data_is_kept_for_the_snapshots_that_see_it() {
    let region = fresh(64, 2);
    let fs = mount(&region);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    fs.write(f, 0, &[1u8; 64 * 4096]).unwrap();
    let free0 = fs.statfs().blocks_free;
    fs.take_snapshot(b"s1").unwrap();
    fs.write(f, 0, &[2u8; 32 * 4096]).unwrap();
    fs.take_snapshot(b"s2").unwrap();
    fs.write(f, 0, &[3u8; 64 * 4096]).unwrap();
    // s1 alone sees the first half of 1s; s2 sees the 2s and the second
    // half of 1s, which s1 sees too: the newest that needs them keeps them.
    assert_eq!(held(&fs), [("s1".into(), 32), ("s2".into(), 64)]);
    let fs = crash_keeps_the_space(&region, fs);
    let fs = unmount_keeps_the_space(&region, fs);
    let free_before = fs.statfs().blocks_free;
    fs.delete_snapshot(b"s2").unwrap();
    assert_eq!(held(&fs), [("s1".into(), 64)], "s1 inherits the 1s");
    fs.wait_reclaimed();
    assert_eq!(fs.statfs().blocks_free, free_before + 32, "the 2s are freed");
    let fs = crash_keeps_the_space(&region, fs);
    let fs = unmount_keeps_the_space(&region, fs);
    fs.delete_snapshot(b"s1").unwrap();
    assert!(held(&fs).is_empty());
    let fs = crash_keeps_the_space(&region, fs);
    assert!(
        fs.statfs().blocks_free >= free0 - 64,
        "only the live data and its log remain"
    );
    assert_eq!(read_all(&fs, f), vec![3u8; 64 * 4096]);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// An inode unlinked while a snapshot sees it is kept whole (record, log,
/// pages), also when it was open at a crash, and freed with the last
/// snapshot that needs it; a file made after the newest snapshot is not.
#[test]
fn removed_inodes_are_kept_whole_while_a_snapshot_sees_them() {
    let region = fresh(64, 2);
    let fs = mount(&region);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    fs.write(f, 0, &[1u8; 16 * 4096]).unwrap();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    let g = fs.create(d, b"g", 0o644, 0, 0).unwrap().ino;
    fs.write(g, 0, &[2u8; 8 * 4096]).unwrap();
    let o = fs.create(ROOT_INO, b"open", 0o644, 0, 0).unwrap().ino;
    fs.write(o, 0, &[4u8; 4 * 4096]).unwrap();
    fs.take_snapshot(b"s").unwrap();
    let late = fs.create(ROOT_INO, b"late", 0o644, 0, 0).unwrap().ino;
    fs.write(late, 0, &[3u8; 8 * 4096]).unwrap();
    let free = fs.statfs().blocks_free;
    fs.unlink(ROOT_INO, b"late").unwrap();
    assert!(fs.statfs().blocks_free >= free + 8, "born after the snapshot: freed");
    fs.unlink(ROOT_INO, b"f").unwrap();
    fs.unlink(d, b"g").unwrap();
    fs.rmdir(ROOT_INO, b"d").unwrap();
    fs.open_handle(o).unwrap();
    fs.unlink(ROOT_INO, b"open").unwrap();
    let kept = held(&fs)[0].1;
    assert!(kept >= 16 + 8 + 3, "f, g and d with their logs: {kept}");
    assert!(matches!(fs.getattr(f), Err(Error::NotFound)));
    // The open file's inode ends with the crash: the scan keeps it.
    let fs = {
        let before = fs.statfs();
        drop(fs);
        let fs = mount(&region);
        // Kept, not freed: the same space in use, now held by the snapshot.
        let after = fs.statfs();
        assert_eq!(after.blocks_free, before.blocks_free, "the orphan is kept, not freed");
        assert!(after.snapshot_blocks >= before.snapshot_blocks + 4);
        assert!(held(&fs)[0].1 >= kept + 4);
        fs
    };
    let fs = crash_keeps_the_space(&region, fs);
    let names = names(&fs, ROOT_INO);
    assert!(names.is_empty(), "{names:?}");
    let fs = unmount_keeps_the_space(&region, fs);
    fs.delete_snapshot(b"s").unwrap();
    let fs = crash_keeps_the_space(&region, fs);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
    // Every kept inode's slot and pages came back: fill the image again.
    let fs = mount(&region);
    let files = fs.statfs().files_free;
    for i in 0..files.min(2000) {
        fs.create(ROOT_INO, format!("n{i}").as_bytes(), 0o644, 0, 0).unwrap();
    }
}

/// Deleting a snapshot returns once it is recorded and merged; a thread
/// of the mount frees what nothing needs, and a clean unmount right after
/// the deletion waits for it: nothing leaks into the saved state.
#[test]
fn deleted_snapshots_are_reclaimed_in_the_background() {
    let region = fresh(64, 2);
    let fs = mount(&region);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    fs.write(f, 0, &[1u8; 32 * 4096]).unwrap();
    let g = fs.create(ROOT_INO, b"g", 0o644, 0, 0).unwrap().ino;
    fs.write(g, 0, &[2u8; 16 * 4096]).unwrap();
    fs.take_snapshot(b"a").unwrap();
    fs.write(f, 0, &[3u8; 32 * 4096]).unwrap();
    fs.unlink(ROOT_INO, b"g").unwrap();
    let before = fs.statfs();
    assert!(before.snapshot_blocks >= 32 + 16, "{before:?}");
    fs.delete_snapshot(b"a").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while fs.statfs().blocks_free < before.blocks_free + 48 {
        assert!(std::time::Instant::now() < deadline, "nothing reclaimed in 20 s");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(fs.statfs().snapshot_blocks, 0);
    // Again, unmounting at once, with enough kept inodes (a journal
    // transaction each) that the reclaimer is still busy.
    let files: Vec<u64> = (0..2000)
        .map(|i| {
            fs.create(ROOT_INO, format!("k{i}").as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino
        })
        .collect();
    for &k in &files {
        fs.write(k, 0, b"kept").unwrap();
    }
    fs.take_snapshot(b"b").unwrap();
    fs.write(f, 0, &[4u8; 32 * 4096]).unwrap();
    for i in 0..files.len() {
        fs.unlink(ROOT_INO, format!("k{i}").as_bytes()).unwrap();
    }
    let held = fs.statfs();
    fs.delete_snapshot(b"b").unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
    let fs = mount(&region);
    assert!(fs.mount_report().clean);
    assert!(fs.statfs().blocks_free >= held.blocks_free + 32 + 2000);
    assert!(fs.statfs().files_free >= held.files_free + 2000);
    assert_eq!(read_all(&fs, f), vec![4u8; 32 * 4096]);
    assert!(matches!(fs.getattr(g), Err(Error::NotFound)));
}
