//! Relaxed mode (NOVA-Fortis §4.6) through the library: overwrites go in
//! place and journal only the new mtime; what must stay copy-on-write
//! does; a crash in the middle of an in-place overwrite is resealed, so
//! reads after it check whole; and an image moves between the modes.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::*;
use novafs::inject::{self, CopyKind, Target};
use novafs::probe::layout;
use novafs::{Consistency, FormatOptions, Fs, MountOptions, SetAttr, ROOT_INO};
use pm::{MemRegion, Region};

const PS: usize = 4096;

fn image(relaxed: bool) -> Arc<dyn Region> {
    let region: Arc<dyn Region> = Arc::new(MemRegion::new(32 << 20));
    let mode = if relaxed {
        Consistency::Relaxed
    } else {
        Consistency::Strict
    };
    Fs::format(region.clone(), &FormatOptions::default().shards(2).consistency(mode)).unwrap();
    region
}

fn mount_as(region: &Arc<dyn Region>, mode: Consistency) -> Fs {
    Fs::open(region.clone(), MountOptions::default().consistency(Some(mode))).unwrap()
}

/// The data pages file `ino` maps, as the unmounted image says.
fn data_pages(region: &Arc<dyn Region>, ino: u64) -> Vec<u64> {
    inject::locate(&**region, Target::DataPage, ino)
        .unwrap()
        .iter()
        .map(|l| l.copy(CopyKind::Primary).unwrap())
        .collect()
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

/// A file of `pages` pages of pattern 1, cleanly unmounted.
fn with_file(region: &Arc<dyn Region>, pages: usize) -> (u64, Vec<u8>) {
    let fs = mount(region);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    let data = pattern(1, pages * PS);
    fs.write(f, 0, &data).unwrap();
    fs.unmount().unwrap();
    (f, data)
}

#[test]
fn overwrites_go_in_place_in_relaxed_mode_and_copy_in_strict_mode() {
    for mode in [Consistency::Relaxed, Consistency::Strict] {
        let region = image(mode == Consistency::Relaxed);
        let (f, mut truth) = with_file(&region, 3);
        let before = data_pages(&region, f);
        let fs = mount(&region);
        assert_eq!(fs.consistency(), mode);
        let mtime = fs.getattr(f).unwrap().mtime;
        let j0 = fs.journal_stats();
        // Inside one strip, across strips, across pages, a whole page.
        for (off, len, seed) in [(100, 7, 2), (1000, 600, 3), (PS - 300, 900, 4), (2 * PS, PS, 5)] {
            let bytes = pattern(seed, len);
            fs.write(f, off as u64, &bytes).unwrap();
            truth[off..off + len].copy_from_slice(&bytes);
        }
        let j = fs.journal_stats().since(&j0);
        assert_eq!(read_all(&fs, f), truth);
        assert!(fs.getattr(f).unwrap().mtime > mtime, "{mode}: mtime did not move");
        let mtime = fs.getattr(f).unwrap().mtime;
        fs.unmount().unwrap();
        let after = data_pages(&region, f);
        if mode == Consistency::Relaxed {
            assert_eq!(after, before, "relaxed: the pages moved");
            // No transaction: an intent per page (its words, one fence),
            // and one fence that ends each write; the page-spanning one
            // fences its first page before moving the intent on.
            assert_eq!((j.txns, j.words, j.fences), (0, 4, 2 + 2 + 4 + 2), "{j:?}");
            assert_eq!(j.journal_bytes, 5 * 32 + 4 * 8, "{j:?}");
            assert_eq!(j.applied_bytes, 4 * 64, "{j:?}");
        } else {
            // Freed pages may come back, but not all in their places.
            assert_ne!(after, before, "strict: no page moved");
            assert_eq!(j.txns, 0, "{j:?}");
        }
        let fs = mount(&region);
        assert_eq!(read_all(&fs, f), truth, "{mode}: after a remount");
        assert_eq!(fs.getattr(f).unwrap().mtime, mtime, "{mode}: mtime after a remount");
        fs.unmount().unwrap();
        assert_fsck_clean(&region);
    }
}

#[test]
fn what_must_stay_copy_on_write_does() {
    let region = image(true);
    let (f, mut truth) = with_file(&region, 2);
    let fs = mount(&region);
    // A snapshot holds the pages: they are copied, and it keeps them.
    fs.take_snapshot(b"s").unwrap();
    fs.write(f, 10, b"after").unwrap();
    truth[10..15].copy_from_slice(b"after");
    let snap = fs.open_snapshot(b"s").unwrap();
    assert_eq!(
        read_all(&snap, f),
        pattern(1, 2 * PS),
        "the snapshot saw an in-place write"
    );
    drop(snap);
    // A write that grows the file, and one into a hole.
    fs.write(f, (2 * PS - 2) as u64, b"grow").unwrap();
    truth.truncate(2 * PS - 2);
    truth.extend_from_slice(b"grow");
    fs.write(f, (5 * PS) as u64, b"hole").unwrap();
    truth.resize(5 * PS, 0);
    truth.extend_from_slice(b"hole");
    assert_eq!(read_all(&fs, f), truth);
    fs.unmount().unwrap();
    let fs = mount(&region);
    assert_eq!(read_all(&fs, f), truth);
    let snap = fs.open_snapshot(b"s").unwrap();
    assert_eq!(read_all(&snap, f), pattern(1, 2 * PS));
    drop(snap);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

#[test]
fn setattrs_change_the_newest_setattr_in_place() {
    let region = image(true);
    let fs = mount(&region);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    fs.setattr(f, &SetAttr::default().mode(Some(0o600))).unwrap();
    let j0 = fs.journal_stats();
    fs.setattr(f, &SetAttr::default().mode(Some(0o640))).unwrap();
    fs.setattr(f, &SetAttr::default().uid(Some(7)).gid(Some(8))).unwrap();
    fs.setattr(f, &SetAttr::default().atime(Some(11)).mtime(Some(22)))
        .unwrap();
    let j = fs.journal_stats().since(&j0);
    assert_eq!(j.txns, 3, "{j:?}");
    let want = fs.getattr(f).unwrap();
    assert_eq!(
        (want.perm, want.uid, want.gid, want.atime, want.mtime),
        (0o640, 7, 8, 11, 22)
    );
    drop(fs); // crash: the in-place changes are durable
    let fs = mount(&region);
    assert_eq!(fs.getattr(f).unwrap(), want);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// A crash while a relaxed overwrite had changed part of a page in place
/// and not yet its checksums or parity: the intent it left makes the next
/// mount reseal the page, which then reads as it is, and fsck finds it
/// clean. Without the reseal the read would "repair" the page from its
/// stale parity.
#[test]
fn a_crash_inside_an_in_place_overwrite_is_resealed_at_the_next_mount() {
    let region = image(true);
    let (f, mut truth) = with_file(&region, 1);
    let page = data_pages(&region, f)[0];
    let (sb, _) = novafs::probe::read_superblock(&*region).unwrap();
    // What the overwrite stored before the crash: its intent in shard 1's
    // header line (the journal headers keep no replica), then a torn part
    // of its bytes.
    let intent_word = sb.journal_headers_off + 64 + layout::JOURNAL_INTENT_FIELD;
    region.store_u64(intent_word, page | layout::INTENT_VALID).unwrap();
    let torn = pattern(9, 40);
    region.write(page + 1000, &torn).unwrap();
    truth[1000..1040].copy_from_slice(&torn);
    let fs = mount(&region);
    assert_eq!(fs.mount_report().intents_resealed, 1);
    assert_eq!(region.load_u64(intent_word).unwrap(), 0, "the intent stayed");
    assert_eq!(read_all(&fs, f), truth);
    assert_eq!(fs.health().data_repairs, 0);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// Stores what a relaxed overwrite puts in shard 1's header line before
/// its first byte changes (FORMAT.md "Journal header"): the redo words
/// for entry `entry` taking time `time`, tied to the intent word of
/// generation `tied_gen` and to the slot `slot`, then the intent word
/// itself, naming `page` with generation `gen`. Returns the intent
/// word's offset.
fn store_intent(
    region: &Arc<dyn Region>,
    page: u64,
    gen: u64,
    tied_gen: u64,
    entry: u64,
    time: i64,
    slot: &[u8; 64],
) -> u64 {
    let (sb, _) = novafs::probe::read_superblock(&**region).unwrap();
    let hdr = sb.journal_headers_off + 64;
    let mut ties = Vec::new();
    for w in [tied_gen << 1, entry, time as u64] {
        ties.extend_from_slice(&w.to_le_bytes());
    }
    let check = u64::from(crc32c::crc32c(&ties)) | u64::from(layout::entry_identity(slot)) << 32;
    region.store_u64(hdr + 16, entry).unwrap();
    region.store_u64(hdr + 24, time as u64).unwrap();
    region.store_u64(hdr + 32, check).unwrap();
    let word = page | gen << 1 | layout::INTENT_VALID;
    region.store_u64(hdr + layout::JOURNAL_INTENT_FIELD, word).unwrap();
    hdr + layout::JOURNAL_INTENT_FIELD
}

/// A crash inside an in-place overwrite after its entry's new mtime
/// reached the media but not the entry's new checksum (both copies): the
/// intent's redo words make recovery set the new time again and
/// recompute the checksum, so the entry is whole and the file has the
/// new mtime. Redo words left by an older intent (another generation), or
/// naming a slot that holds another entry now, are not applied.
#[test]
fn a_crash_between_an_entry_s_new_time_and_its_checksum_is_redone() {
    let mtime_off = std::mem::offset_of!(layout::WriteEntry, mtime) as u64;
    for case in ["redone", "stale words", "another entry"] {
        let region = image(true);
        let (f, truth) = with_file(&region, 1);
        let page = data_pages(&region, f)[0];
        let entries = inject::locate(&*region, Target::LogEntry, f).unwrap();
        let newest = entries.last().unwrap();
        let mut slot = [0u8; 64];
        region.read(newest.copy(CopyKind::Primary).unwrap(), &mut slot).unwrap();
        let old = {
            let fs = mount(&region);
            let a = fs.getattr(f).unwrap();
            fs.unmount().unwrap();
            a
        };
        let time = old.mtime + 12_345;
        let entry = newest.copy(CopyKind::Primary).unwrap();
        let mut tied_slot = slot;
        let tied_gen = match case {
            "stale words" => 6,
            "another entry" => {
                tied_slot[8] ^= 1; // another epoch: another entry
                7
            }
            _ => 7,
        };
        let intent = store_intent(&region, page, 7, tied_gen, entry, time, &tied_slot);
        if case == "redone" {
            // The new time in both copies, the checksum in neither.
            for kind in [CopyKind::Primary, CopyKind::Replica] {
                region
                    .store_u64(newest.copy(kind).unwrap() + mtime_off, time as u64)
                    .unwrap();
            }
        }
        let fs = mount(&region);
        assert_eq!(fs.mount_report().intents_resealed, 1, "{case}");
        assert_eq!(
            region.load_u64(intent).unwrap(),
            7 << 1,
            "{case}: the intent stayed, or lost its generation"
        );
        let want = if case == "redone" { time } else { old.mtime };
        assert_eq!(fs.getattr(f).unwrap().mtime, want, "{case}");
        assert_eq!(read_all(&fs, f), truth, "{case}");
        let h = fs.health();
        assert_eq!((h.data_repairs, h.repairs, h.losses), (0, 0, 0), "{case}: {h:?}");
        fs.unmount().unwrap();
        assert_fsck_clean(&region);
    }
}

/// The same crash with a line of the page lost to a media error: the
/// reseal cannot read the page, and the mount goes on all the same; the
/// read rebuilds the lost strip from parity (the torn bytes are in
/// another strip, so parity still matches the rest) and is right.
#[test]
fn an_intent_on_a_page_the_media_cannot_read_does_not_stop_the_mount() {
    let mem = Arc::new(MemRegion::new(32 << 20));
    let region: Arc<dyn Region> = mem.clone();
    Fs::format(
        region.clone(),
        &FormatOptions::default().shards(2).consistency(Consistency::Relaxed),
    )
    .unwrap();
    let (f, truth) = with_file(&region, 1);
    let page = data_pages(&region, f)[0];
    let (sb, _) = novafs::probe::read_superblock(&*region).unwrap();
    let intent_word = sb.journal_headers_off + layout::JOURNAL_INTENT_FIELD;
    region.store_u64(intent_word, page | layout::INTENT_VALID).unwrap();
    mem.poison(page + 3 * 512, 64).unwrap();
    let fs = mount(&region);
    assert_eq!(fs.mount_report().intents_resealed, 0);
    assert_eq!(region.load_u64(intent_word).unwrap(), 0, "the intent stayed");
    assert!(read_all(&fs, f) == truth);
    fs.unmount().unwrap();
}

#[test]
fn an_image_moves_between_the_modes() {
    let region = image(false);
    let (f, mut truth) = with_file(&region, 2);
    for round in 0..4u8 {
        let mode = if round % 2 == 0 {
            Consistency::Relaxed
        } else {
            Consistency::Strict
        };
        let fs = mount_as(&region, mode);
        assert_eq!(fs.consistency(), mode);
        let bytes = pattern(round + 20, 700);
        let off = 300 + usize::from(round) * 1500;
        fs.write(f, off as u64, &bytes).unwrap();
        truth[off..off + 700].copy_from_slice(&bytes);
        fs.setattr(f, &SetAttr::default().mode(Some(0o600 + u32::from(round))))
            .unwrap();
        assert_eq!(read_all(&fs, f), truth);
        if round == 2 {
            drop(fs); // a crash of a relaxed mount
        } else {
            fs.unmount().unwrap();
        }
        assert_fsck_clean(&region);
    }
    let fs = mount(&region);
    assert_eq!(fs.consistency(), Consistency::Strict, "the image's default stayed");
    assert_eq!(read_all(&fs, f), truth);
    assert_eq!(fs.getattr(f).unwrap().perm, 0o603);
    fs.unmount().unwrap();
}

/// Threads overwriting their own files and one shared file at once: each
/// write lands whole (the inode lock orders them), the journal shards'
/// intents never cross (each shard holds one at a time), and after a
/// crash every page reads checked, fsck and a scrub find nothing.
#[test]
fn threads_overwriting_in_place_at_once_lose_nothing() {
    const THREADS: usize = 6;
    const ROUNDS: usize = 300;
    let region = image(true);
    let fs = mount(&region);
    let shared = fs.create(ROOT_INO, b"shared", 0o644, 0, 0).unwrap().ino;
    fs.write(shared, 0, &vec![0u8; THREADS * PS]).unwrap();
    let own: Vec<u64> = (0..THREADS)
        .map(|t| {
            let f = fs
                .create(ROOT_INO, format!("f{t}").as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino;
            fs.write(f, 0, &pattern(t as u8, 4 * PS)).unwrap();
            f
        })
        .collect();
    let j0 = fs.journal_stats();
    let truths: Vec<Vec<u8>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (fs, own) = (&fs, own[t]);
                s.spawn(move || {
                    let mut truth = pattern(t as u8, 4 * PS);
                    let mut x = t as u64 + 1;
                    for round in 0..ROUNDS {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        let off = (x >> 33) as usize % (4 * PS - 1000);
                        let len = 1 + (x >> 20) as usize % 1000;
                        let bytes = pattern((round + t) as u8, len);
                        fs.write(own, off as u64, &bytes).unwrap();
                        truth[off..off + len].copy_from_slice(&bytes);
                        // Each thread's own page of the shared file.
                        fs.write(shared, (t * PS + round % 4000) as u64, &[round as u8; 96])
                            .unwrap();
                    }
                    truth
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(
        fs.journal_stats().since(&j0).words >= (2 * THREADS * ROUNDS) as u64,
        "the writes went copy-on-write"
    );
    let shared_truth = read_all(&fs, shared);
    drop(fs); // crash
    let fs = mount(&region);
    for (t, truth) in truths.iter().enumerate() {
        assert!(read_all(&fs, own[t]) == *truth, "thread {t}'s file");
    }
    assert!(read_all(&fs, shared) == shared_truth, "the shared file");
    let rep = fs.scrub(novafs::ScrubOptions::default(), &|_, _| true).unwrap();
    assert!(
        rep.damaged.is_empty() && rep.data_repaired == 0 && rep.metadata_repaired == 0,
        "{rep:?}"
    );
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// A full file system: copy-on-write needs a free page for every page it
/// rewrites, an overwrite in place none, so relaxed mode keeps rewriting
/// files the device has no room to copy.
#[test]
fn overwrites_in_place_need_no_free_space() {
    for mode in [Consistency::Strict, Consistency::Relaxed] {
        let region: Arc<dyn Region> = Arc::new(MemRegion::new(16 << 20));
        Fs::format(region.clone(), &FormatOptions::default().shards(2).consistency(mode)).unwrap();
        let fs = mount(&region);
        let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
        fs.write(f, 0, &pattern(1, 8 * PS)).unwrap();
        let filler = fs.create(ROOT_INO, b"filler", 0o644, 0, 0).unwrap().ino;
        let mut size = 0u64;
        while fs.write(filler, size, &[7u8; PS]).is_ok() {
            size += PS as u64;
        }
        assert_eq!(fs.statfs().blocks_avail, 0, "{mode}: not full");
        let r = fs.write(f, 100, &[9u8; 3 * PS]);
        match mode {
            Consistency::Strict => assert!(matches!(r, Err(novafs::Error::NoSpace)), "{mode}: {r:?}"),
            Consistency::Relaxed => {
                assert_eq!(r.unwrap(), 3 * PS);
                let mut want = pattern(1, 8 * PS);
                want[100..100 + 3 * PS].fill(9);
                assert!(read_all(&fs, f) == want);
            }
        }
        fs.unmount().unwrap();
        assert_fsck_clean(&region);
    }
}

fn mount_batching(region: &Arc<dyn Region>, words: usize, interval: std::time::Duration) -> Fs {
    let batch = novafs::Batching { words, interval };
    Fs::open(region.clone(), MountOptions::default().batch(Some(batch))).unwrap()
}

const HOUR: std::time::Duration = std::time::Duration::from_secs(3600);

/// FGM's batching (§III-C1): in-place setattrs wait in a running
/// transaction, which commits when full, at fsync, on the timer and at a
/// clean unmount; a crash before loses them and nothing else. An
/// overwrite in place is durable with its new mtime when it returns, and
/// commits a batch that holds words of the entry it changes first.
#[test]
fn batched_changes_wait_for_a_commit_and_a_crash_loses_only_them() {
    let region = image(true);
    let (f, mut truth) = with_file(&region, 2);
    let fs = mount_batching(&region, 64, HOUR);
    // Appended (the newest entry is a write entry): durable at once, and
    // the newest entry from now on.
    fs.setattr(f, &SetAttr::default().mode(Some(0o604))).unwrap();
    let j0 = fs.journal_stats();
    for i in 0..20u8 {
        fs.write(f, u64::from(i) * 100, &[i; 50]).unwrap();
        truth[usize::from(i) * 100..usize::from(i) * 100 + 50].fill(i);
    }
    let written = fs.getattr(f).unwrap();
    fs.setattr(f, &SetAttr::default().mode(Some(0o600))).unwrap();
    fs.setattr(f, &SetAttr::default().uid(Some(7))).unwrap();
    // In place and in the batch: nothing full, nothing committed.
    let j = fs.journal_stats().since(&j0);
    assert_eq!((j.txns, j.words), (0, 20), "{j:?}");
    assert_eq!(fs.getattr(f).unwrap().perm, 0o600);
    drop(fs); // crash
    let fs = mount_batching(&region, 64, HOUR);
    assert!(read_all(&fs, f) == truth, "data written in place is durable");
    assert_eq!(
        fs.getattr(f).unwrap(),
        written,
        "the batch reached the media, or a write's mtime did not"
    );
    // An overwrite commits the batch that holds its entry's words first.
    fs.setattr(f, &SetAttr::default().mode(Some(0o620))).unwrap();
    let j0 = fs.journal_stats();
    fs.write(f, 3, b"y").unwrap();
    truth[3] = b'y';
    assert_eq!(fs.journal_stats().since(&j0).txns, 1);
    let want = fs.getattr(f).unwrap();
    assert_eq!(want.perm, 0o620);
    drop(fs);
    let fs = mount_batching(&region, 64, HOUR);
    assert_eq!(fs.getattr(f).unwrap(), want);
    // fsync commits it, whole.
    fs.setattr(f, &SetAttr::default().mode(Some(0o640))).unwrap();
    fs.setattr(f, &SetAttr::default().gid(Some(9))).unwrap();
    let j0 = fs.journal_stats();
    fs.fsync(f).unwrap();
    assert_eq!(fs.journal_stats().since(&j0).txns, 1);
    let want = fs.getattr(f).unwrap();
    drop(fs);
    let fs = mount_batching(&region, 64, HOUR);
    assert_eq!(fs.getattr(f).unwrap(), want);
    // A clean unmount commits it.
    fs.setattr(f, &SetAttr::default().uid(Some(5))).unwrap();
    let want = fs.getattr(f).unwrap();
    fs.unmount().unwrap();
    let fs = mount(&region);
    assert_eq!(fs.getattr(f).unwrap(), want);
    assert!(read_all(&fs, f) == truth);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

#[test]
fn a_full_running_transaction_and_the_timer_commit_it() {
    let region = image(true);
    let fs = mount(&region);
    let files: Vec<u64> = (0..6)
        .map(|i| {
            let f = fs
                .create(ROOT_INO, format!("f{i}").as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino;
            fs.setattr(f, &SetAttr::default().mode(Some(0o600))).unwrap();
            f
        })
        .collect();
    fs.unmount().unwrap();
    // Three words a chmod in place (the newest setattr's checksum, mode
    // and ctime): three files fill nine.
    let fs = mount_batching(&region, 9, HOUR);
    let j0 = fs.journal_stats();
    for &f in &files[..2] {
        fs.setattr(f, &SetAttr::default().mode(Some(0o640))).unwrap();
    }
    assert_eq!(fs.journal_stats().since(&j0).txns, 0);
    fs.setattr(files[2], &SetAttr::default().mode(Some(0o640))).unwrap();
    assert_eq!(fs.journal_stats().since(&j0).txns, 1, "full at 9 words");
    drop(fs);
    // The timer.
    let fs = mount_batching(&region, 1000, std::time::Duration::from_millis(20));
    fs.setattr(files[5], &SetAttr::default().mode(Some(0o604))).unwrap();
    let want = fs.getattr(files[5]).unwrap();
    let t0 = std::time::Instant::now();
    let j0 = fs.journal_stats();
    while fs.journal_stats().since(&j0).txns == 0 {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "the timer never committed"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    drop(fs);
    let fs = mount(&region);
    assert_eq!(fs.getattr(files[5]).unwrap(), want);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// A snapshot takes the running transaction's changes with it, and later
/// ones do not reach what it keeps.
#[test]
fn a_snapshot_commits_the_running_transaction_first() {
    let region = image(true);
    let (f, _) = with_file(&region, 1);
    let fs = mount_batching(&region, 64, HOUR);
    fs.setattr(f, &SetAttr::default().mode(Some(0o604))).unwrap(); // appended
    fs.setattr(f, &SetAttr::default().mode(Some(0o600))).unwrap(); // in place, batched
    fs.take_snapshot(b"s").unwrap();
    // The snapshot holds the entry now: appended, durable at once.
    fs.setattr(f, &SetAttr::default().mode(Some(0o640))).unwrap();
    let snap = fs.open_snapshot(b"s").unwrap();
    assert_eq!(snap.getattr(f).unwrap().perm, 0o600);
    drop(snap);
    drop(fs); // crash
    let fs = mount(&region);
    assert_eq!(fs.getattr(f).unwrap().perm, 0o640);
    assert_eq!(fs.open_snapshot(b"s").unwrap().getattr(f).unwrap().perm, 0o600);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

#[test]
fn batching_is_refused_in_strict_mode() {
    let region = image(false);
    let r = Fs::open(
        region.clone(),
        MountOptions::default().batch(Some(novafs::Batching::default())),
    );
    assert!(matches!(r, Err(novafs::Error::Invalid(_))), "{:?}", r.err());
}
