//! What mount, fsck and scrub make of damage `novafs::inject` does: a
//! damaged copy is read from the other and repaired; damage to both copies
//! fails that object only; stale replicas are never used (NOVA-Fortis §4.2,
//! §4.3).
#![allow(clippy::unwrap_used)]

mod inject_common;

use std::fmt;
use std::sync::Arc;

use inject_common::*;
use novafs::inject::{corrupt, locate, plan, CopyKind, Damage, Located, Target, Which};
use novafs::probe::layout::{INODE_SIZE, LOG_NEXT_OFF, PAGE_SIZE, STRIP_SIZE};
use novafs::probe::{bounds_of, read_superblock};
use novafs::{Error, Fs, HealthCounts, Ino, MountOptions, ROOT_INO};
use pm::{MemRegion, Region};

/// `target` of inode `victim`, damaged in the copies `which` names on
/// a fresh image with replicas: `bytes` bytes from `seed`.
fn damaged(target: Target, which: Which, victim: fn(Files) -> Ino, seed: u64, bytes: u64) -> Damaged {
    let (mem, files) = image_with(true);
    let before = mem.snapshot();
    let sp = spec(target, victim(files), seed).which(which).bytes(bytes);
    let found = locate(&*mem, target, sp.ino).unwrap();
    let damage = corrupt(&*mem, &sp).unwrap();
    assert_eq!(damage.len(), which.copies().len());
    let at = |d: &Damage| {
        found
            .iter()
            .find(|l| l.copy(d.copy.unwrap()) == Some(d.base))
            .unwrap()
            .clone()
    };
    let located = at(&damage[0]);
    let why = format!("{which:?} {}", damage[0]);
    Damaged {
        mem,
        files,
        before,
        located,
        damage,
        why,
    }
}

struct Damaged {
    mem: Arc<MemRegion>,
    files: Files,
    /// The image before the damage.
    before: Vec<u8>,
    /// The structure damaged.
    located: Located,
    damage: Vec<Damage>,
    why: String,
}

impl Damaged {
    /// The bytes of `kind`'s copy of the damaged structure, `range`
    /// inside it, now and before the damage.
    fn copy(&self, kind: CopyKind, range: std::ops::Range<u64>) -> (Vec<u8>, Vec<u8>) {
        let off = self.located.copy(kind).unwrap() + range.start;
        let len = range.end - range.start;
        let then = self.before[off as usize..(off + len) as usize].to_vec();
        (bytes(&self.mem, off, len), then)
    }
}

/// A damage case: the target, the inode it belongs to, how many bytes.
type Case = (Target, fn(Files) -> Ino, u64);

fn file_a(f: Files) -> Ino {
    f.a
}

fn dir_d(f: Files) -> Ino {
    f.d
}

/// The byte ranges of a log page the file system reads (so repairs):
/// its committed entries and its link to the next page. The rest past
/// the tail is never read, and damage there stays until an append
/// overwrites it.
fn committed_ranges(mem: &MemRegion, ino: Ino, page: u64) -> Vec<std::ops::Range<u64>> {
    let mut ranges: Vec<_> = locate(mem, Target::LogEntry, ino)
        .unwrap()
        .iter()
        .map(|e| e.copies[0].1)
        .zip(locate(mem, Target::LogEntry, ino).unwrap().iter().map(|e| e.len))
        .filter(|&(off, _)| page_of(off) == page)
        .map(|(off, len)| off - page..off - page + len)
        .collect();
    assert!(!ranges.is_empty());
    ranges.push(LOG_NEXT_OFF..PAGE_SIZE);
    ranges
}

/// What fsck says of a clean image where one copy of some metadata
/// differs from the other: a problem naming the pages that differ (the
/// copies were written before one fence, so a difference is damage)
/// and, when what fsck reads was damaged in the primary, one saying
/// it was read from the replica; nothing else. `fsck --repair`
/// rewrites them.
fn assert_only_copies_differ(mem: &Arc<MemRegion>, why: &dyn fmt::Display) -> novafs::fsck::Report {
    let region: Arc<dyn Region> = mem.clone();
    let rep = novafs::fsck::check(region, &|_, _| {}).unwrap();
    let differ = |p: &String| p.contains("differ from their replicas");
    let read = |p: &String| p.contains("read from their replicas");
    assert_eq!(
        rep.problems.iter().filter(|p| differ(p)).count(),
        1,
        "{why}: {:?}",
        rep.problems
    );
    assert!(
        rep.problems.iter().all(|p| differ(p) || read(p)),
        "{why}: {:?}",
        rep.problems
    );
    rep
}

fn fsck_repair(mem: &Arc<MemRegion>) {
    let region: Arc<dyn Region> = mem.clone();
    novafs::fsck::repair(region).unwrap();
}

#[test]
fn a_damaged_primary_is_read_from_the_replica_and_repaired() {
    // The whole log page, one entry or 8 bytes of the record: each
    // fails a check in the primary (checksum, length, link, state).
    let cases: [Case; 5] = [
        (Target::Inode, file_a, 8),
        (Target::LogEntry, file_a, 64),
        (Target::LogEntry, dir_d, 64),
        (Target::LogPage, file_a, PAGE_SIZE),
        (Target::LogPage, dir_d, PAGE_SIZE),
    ];
    for (target, victim, n) in cases {
        let seeds = if target == Target::Inode { 12 } else { 3 };
        for seed in 1..=seeds {
            let x = damaged(target, Which::Primary, victim, seed, n);
            let (f, why) = (x.files, &x.why);
            let ino = victim(f);
            // What the file system reads of the structure, so repairs.
            let ranges = match target {
                Target::LogPage => committed_ranges(&x.mem, ino, x.located.copies[0].1),
                _ => std::iter::once(0..x.located.len).collect(),
            };
            let damaged_now = |x: &Damaged| {
                ranges.iter().any(|r| {
                    let (p, _) = x.copy(CopyKind::Primary, r.clone());
                    p != x.copy(CopyKind::Replica, r.clone()).0
                })
            };
            assert!(damaged_now(&x), "{why}: the damage hits what is read");
            // fsck (read-only) reads the replica: the inode is whole,
            // only the copies differ.
            let rep = assert_only_copies_differ(&x.mem, why);
            assert!(
                rep.problems.iter().any(|n| n.contains("read from their replicas")),
                "{why}: {:?}",
                rep.problems
            );
            // A read-only mount reads everything and writes nothing.
            let fs = Fs::open(x.mem.clone(), MountOptions::default().read_only(true)).unwrap();
            reads_everything(&fs, f, why);
            drop(fs);
            assert!(damaged_now(&x), "{why}: a read-only mount repairs nothing");
            let health = || novafs::probe::health(&read_superblock(&*x.mem).unwrap().0);
            assert_eq!(health(), HealthCounts::default(), "{why}");
            // A read-write mount repairs the primary as it reads it,
            // and counts the repair in the superblock at once.
            let fs = mount(&x.mem).unwrap();
            reads_everything(&fs, f, why);
            let counted = health();
            assert!(counted.repairs >= 1 && counted.losses == 0, "{why}: {counted:?}");
            assert_eq!(fs.health(), counted, "{why}");
            fs.unmount().unwrap();
            assert_eq!(health(), counted, "{why}: nothing more at unmount");
            for r in &ranges {
                let (primary, then) = x.copy(CopyKind::Primary, r.clone());
                assert_eq!(primary, x.copy(CopyKind::Replica, r.clone()).0, "{why}: {r:?}");
                assert_eq!(primary, then, "{why}: {r:?} is what it was");
            }
            // The rest of the page past the tail is never read, so
            // never repaired, and means nothing: fsck compares the
            // committed bytes only.
            assert_eq!(fsck_problems(&x.mem), Vec::<String>::new(), "{why}");
            let fs = mount(&x.mem).unwrap();
            reads_everything(&fs, f, why);
            fs.unmount().unwrap();
        }
    }
}

#[test]
fn a_damaged_replica_alone_changes_nothing_read() {
    let cases: [Case; 5] = [
        (Target::Inode, file_a, INODE_SIZE),
        (Target::LogEntry, file_a, 64),
        (Target::LogEntry, dir_d, 64),
        (Target::LogPage, file_a, PAGE_SIZE),
        (Target::LogPage, dir_d, PAGE_SIZE),
    ];
    for (target, victim, n) in cases {
        let x = damaged(target, Which::Replica, victim, 1, n);
        let why = &x.why;
        assert_eq!(x.damage[0].copy, Some(CopyKind::Replica));
        let rep = assert_only_copies_differ(&x.mem, why);
        assert!(
            !rep.problems.iter().any(|n| n.contains("read from their replicas")),
            "{why}: {:?}",
            rep.problems
        );
        let fs = mount(&x.mem).unwrap();
        reads_everything(&fs, x.files, why);
        fs.unmount().unwrap();
        let (primary, then) = x.copy(CopyKind::Primary, 0..x.located.len);
        assert_eq!(primary, then, "{why}: the primary is untouched");
        // Nothing reads the replica while the primary is sound, so a
        // clean mount does not rewrite it; fsck sees the difference and
        // its repair copies the primary over.
        let (replica, _) = x.copy(CopyKind::Replica, 0..x.located.len);
        assert_ne!(replica, then, "{why}: a mount does not scrub replicas");
        assert_only_copies_differ(&x.mem, why);
        fsck_repair(&x.mem);
        let (replica, then) = x.copy(CopyKind::Replica, 0..x.located.len);
        assert_eq!(replica, then, "{why}");
        assert_eq!(fsck_problems(&x.mem), Vec::<String>::new(), "{why}");
        let fs = mount(&x.mem).unwrap();
        reads_everything(&fs, x.files, why);
        fs.unmount().unwrap();
    }
}

#[test]
fn both_copies_of_a_log_damaged_fail_that_inode_only() {
    let cases: [Case; 4] = [
        (Target::LogEntry, file_a, 64),
        (Target::LogEntry, dir_d, 64),
        (Target::LogPage, file_a, PAGE_SIZE),
        (Target::LogPage, dir_d, PAGE_SIZE),
    ];
    for (target, victim, n) in cases {
        for seed in 1..=3 {
            let x = damaged(target, Which::Both, victim, seed, n);
            let (f, why) = (x.files, &x.why);
            let ino = victim(f);
            let problems = fsck_problems(&x.mem);
            assert!(
                problems.iter().any(|p| p.starts_with(&format!("inode {ino}: "))),
                "{why}: {problems:?}"
            );
            let fs = mount(&x.mem).unwrap();
            let err = fs.getattr(ino).map(|_| ()).unwrap_err();
            assert!(matches!(err, Error::Corrupt(_)), "{why}: {err}");
            assert_eq!(err.errno(), libc::EIO);
            if ino == f.d {
                assert_eq!(names(&fs, f.d).unwrap_err().errno(), libc::EIO, "{why}");
            } else {
                assert_eq!(read_file(&fs, ino, 4096).unwrap_err().errno(), libc::EIO, "{why}");
            }
            others_read(&fs, f, ino, why);
            // Met twice, counted once, in the superblock before unmount.
            let lost = novafs::probe::health(&read_superblock(&*x.mem).unwrap().0);
            assert_eq!((lost.losses, lost.last_loss_ino), (1, ino), "{why}: {lost:?}");
            assert_eq!(fs.health(), lost, "{why}");
            fs.unmount().unwrap();
            // fsck reports the counters; a new mount counts the loss again.
            let rep = novafs::fsck::check(x.mem.clone(), &|_, _| {}).unwrap();
            assert!(
                rep.notes
                    .iter()
                    .any(|n| n.contains("1 object(s) lost since mkfs (last: inode")),
                "{why}: {:?}",
                rep.notes
            );
            // Nothing was "repaired" from a damaged replica.
            let (primary, _) = x.copy(CopyKind::Primary, 0..x.located.len);
            let (replica, _) = x.copy(CopyKind::Replica, 0..x.located.len);
            let base = x.located.copies[0].1;
            let d = &x.damage[0];
            let hit = (d.off - base) as usize..(d.off - base + d.len) as usize;
            let (_, then) = x.copy(CopyKind::Primary, 0..x.located.len);
            assert_ne!(primary[hit.clone()], then[hit.clone()], "{why}");
            assert_ne!(replica[hit.clone()], then[hit], "{why}");
        }
    }
}

#[test]
fn both_inode_record_copies_damaged_fail_that_file_only() {
    let mut eio = 0;
    for seed in 1..=12 {
        let x = damaged(Target::Inode, Which::Both, file_a, seed, 8);
        let (f, why) = (x.files, &x.why);
        assert!(!fsck_problems(&x.mem).is_empty(), "{why}");
        let fs = mount(&x.mem).unwrap();
        let err = fs.getattr(f.a).map(|_| ()).unwrap_err();
        // The valid bit hit: the slot reads as free; else a checksum or
        // pointer check fails.
        assert!(matches!(err, Error::NotFound | Error::Corrupt(_)), "{why}: {err}");
        eio += usize::from(matches!(err, Error::Corrupt(_)));
        others_read(&fs, f, f.a, why);
        fs.unmount().unwrap();
    }
    assert!(eio > 0);
}

#[test]
fn poisoned_primary_metadata_is_read_from_the_replica() {
    for target in [Target::Inode, Target::LogEntry, Target::LogPage] {
        let (mem, f) = image_with(true);
        let sp = spec(target, f.a, 1).which(Which::Primary).bytes(64);
        let d = plan(&*mem, &sp).unwrap();
        let (sb, _) = read_superblock(&*mem).unwrap();
        let tail = live_record(&*mem, &sb, f.a).unwrap().1.log_tail;
        mem.poison(d[0].off, d[0].len).unwrap();
        let fs = mount(&mem).unwrap();
        reads_everything(&fs, f, &d[0]);
        fs.unmount().unwrap();
        // fsck reads around the media error too, and reports the lost
        // copy as a difference between the copies, unless it lies past
        // the log's tail, where nothing is committed.
        let past_tail = target == Target::LogPage && d[0].off >= tail && page_of(d[0].off) == page_of(tail);
        if past_tail {
            assert_eq!(fsck_problems(&mem), Vec::<String>::new(), "{}", d[0]);
        } else {
            assert_only_copies_differ(&mem, &d[0]);
        }
        // Both copies poisoned: that inode reads as EIO.
        let (mem, f) = image_with(true);
        let both = sp.which(Which::Both);
        for d in plan(&*mem, &both).unwrap() {
            mem.poison(d.off, d.len).unwrap();
        }
        let fs = mount(&mem).unwrap();
        assert_eq!(fs.getattr(f.a).map(|_| ()).unwrap_err().errno(), libc::EIO, "{target}");
        others_read(&fs, f, f.a, &target);
    }
}

#[test]
fn fixed_area_page_2_is_read_from_its_replica_when_the_primary_is_damaged() {
    // Page 2 of the fixed area (the recovery inode, the reserved
    // slots, the inode-table heads) is mirrored at `data_end`.
    let (mem, f1) = image_with(true);
    let before = mem.snapshot();
    let (sb, _) = read_superblock(&*mem).unwrap();
    let bounds = bounds_of(&sb);
    // Seed 1 picks the inode-table heads.
    let heads = spec(Target::FixedArea, 0, 1).bytes(16);
    let d = corrupt(&*mem, &heads).unwrap();
    assert!(d[0].what.ends_with("inode-table heads"), "{}", d[0]);
    let m = bounds.mirror(d[0].off).unwrap();
    assert_eq!(
        bytes(&mem, m, 16),
        before[m as usize..m as usize + 16],
        "the replica is intact"
    );
    assert_only_copies_differ(&mem, &d[0]);
    let fs = mount(&mem).unwrap();
    reads_everything(&fs, f1, &d[0]);
    fs.unmount().unwrap();
    // Its replica damaged instead: nothing read changes; fsck sees the
    // copies differ.
    let (mem, f2) = image_with(true);
    let d = corrupt(&*mem, &heads.which(Which::Replica)).unwrap();
    assert!(
        d[0].what.ends_with("inode-table heads") && d[0].base >= sb.data_end,
        "{}",
        d[0]
    );
    assert_only_copies_differ(&mem, &d[0]);
    let fs = mount(&mem).unwrap();
    reads_everything(&fs, f2, &d[0]);
    fs.unmount().unwrap();
    // Its primary poisoned: the mount reads the replica.
    let (mem, f3) = image_with(true);
    let d = plan(&*mem, &heads).unwrap();
    mem.poison(d[0].off, d[0].len).unwrap();
    let fs = mount(&mem).unwrap();
    reads_everything(&fs, f3, &d[0]);
    fs.unmount().unwrap();
    // The recovery inode's primary damaged: the mount takes the saved
    // allocator state from the replica; the unmount saves the state
    // again, in both copies.
    let (mem, f4) = image_with(true);
    let off = novafs::probe::layout::RECOVERY_INODE_OFF;
    let mut buf = [0u8; 16];
    mem.read(off, &mut buf).unwrap();
    buf.iter_mut().for_each(|b| *b ^= 0x33);
    mem.write(off, &buf).unwrap();
    assert_only_copies_differ(&mem, &"recovery inode");
    let fs = mount(&mem).unwrap();
    assert!(fs.mount_report().clean, "the replica's saved state, no scan");
    reads_everything(&fs, f4, &"recovery inode");
    fs.unmount().unwrap();
    let mirror = bounds.mirror(off).unwrap();
    assert_eq!(bytes(&mem, off, INODE_SIZE), bytes(&mem, mirror, INODE_SIZE));
    assert_eq!(fsck_problems(&mem), Vec::<String>::new());
}

#[test]
fn a_damaged_file_record_fails_that_file_only_without_replicas() {
    let mut eio = 0;
    for seed in 1..=12 {
        let (mem, f) = image_with(false);
        let d = corrupt(&*mem, &spec(Target::Inode, f.a, seed)).unwrap();
        let fs = mount(&mem).unwrap();
        let err = fs.getattr(f.a).map(|_| ()).unwrap_err();
        // The valid bit hit: the slot reads as free; else a checksum
        // or pointer check fails.
        assert!(matches!(err, Error::NotFound | Error::Corrupt(_)), "{}: {err}", d[0]);
        if matches!(err, Error::Corrupt(_)) {
            assert_eq!(err.errno(), libc::EIO);
            eio += 1;
        }
        let fb = fs.lookup(ROOT_INO, b"b").unwrap();
        assert_eq!(read_file(&fs, fb.ino, 8192).unwrap()[4096..], [b'C'; 4096]);
        assert_eq!(fb.ino, f.b);
    }
    assert!(eio > 0);
}

#[test]
fn damaged_log_entries_and_pages_are_found_by_fsck_without_replicas() {
    for target in [Target::LogEntry, Target::LogPage] {
        let (mem, f) = image_with(false);
        // The first log page of "a" holds all its entries: damage there
        // always hits an entry, the end mark or the next pointer.
        let sp = spec(target, f.a, 1).bytes(PAGE_SIZE);
        let d = corrupt(&*mem, &sp).unwrap();
        assert_eq!(d[0].copy, None);
        assert!(!fsck_problems(&mem).is_empty(), "{target}: {}", d[0]);
        let fs = mount(&mem).unwrap();
        assert!(fs.getattr(f.a).is_err(), "{target}");
        let b = fs.lookup(ROOT_INO, b"b").unwrap();
        assert_eq!(read_file(&fs, b.ino, 4096).unwrap(), [b'B'; 4096]);
    }
}

#[test]
fn a_damaged_primary_superblock_is_repaired_from_the_replica() {
    let (mem, a, _) = image();
    let d = corrupt(&*mem, &spec(Target::Superblock, 0, 5)).unwrap();
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].copy, Some(CopyKind::Primary));
    assert!(
        d[0].to_string().starts_with("superblock (primary) at 0x0 (440 bytes)"),
        "{}",
        d[0]
    );
    assert!(read_superblock(&*mem).unwrap().1, "primary reads as damaged");
    let fs = mount(&mem).unwrap();
    assert!(fs.mount_report().superblock_repaired);
    assert_eq!(read_file(&fs, a, 4096).unwrap(), [b'A'; 4096]);
    drop(fs);
    assert!(!read_superblock(&*mem).unwrap().1, "the mount rewrote the primary");
}

#[test]
fn both_superblocks_damaged_is_a_clear_error() {
    let (mem, _, _) = image();
    let sp = spec(Target::Superblock, 0, 2).which(Which::Both);
    let d = corrupt(&*mem, &sp).unwrap();
    assert_eq!(
        d.iter().map(|d| d.copy).collect::<Vec<_>>(),
        [Some(CopyKind::Primary), Some(CopyKind::Replica)]
    );
    assert_eq!(d[0].off, d[1].off - d[1].base, "the same bytes of each copy");
    let err = mount(&mem).map(|_| ()).unwrap_err();
    assert!(matches!(err, Error::Corrupt(_) | Error::NotNovafs(_)), "{err}");
    // Still locatable, so a second injection works on a dead image.
    let d = corrupt(&*mem, &sp.which(Which::Replica)).unwrap();
    assert_eq!(d[0].base, mem.len() - PAGE_SIZE);
}

/// The data protection structures themselves damaged: one checksum
/// copy is rewritten from the data and the other copy; parity is only
/// read when a strip needs rebuilding, so damage to it alone changes
/// nothing read, but then a damaged strip is EIO; both checksum copies
/// of a strip damaged leave it unverifiable: EIO, that file only.
#[test]
fn damaged_checksums_or_parity_are_repaired_or_confined() {
    let mut whole = vec![b'B'; 4096];
    whole.extend([b'C'; 4096]);
    let read_b = |mem: &Arc<MemRegion>, b: Ino| {
        let fs = mount(mem).unwrap();
        let before = fs.health().data_repairs; // counted since mkfs
        let r = read_file(&fs, b, 8192);
        let repairs = fs.health().data_repairs - before;
        fs.unmount().unwrap();
        (r, repairs)
    };
    // One checksum copy, either one: read fine; the first is rewritten.
    for which in [Which::Primary, Which::Replica] {
        let (mem, _, b) = image();
        let sp = spec(Target::DataChecksums, b, 1).which(which).bytes(32);
        corrupt(&*mem, &sp).unwrap();
        let (r, repairs) = read_b(&mem, b);
        assert!(r.unwrap() == whole, "{which:?}");
        assert_eq!(
            repairs > 0,
            which == Which::Primary,
            "{which:?}: the second copy is read only when needed"
        );
        assert_eq!(read_b(&mem, b).1, 0, "{which:?}: repaired on the media");
    }
    // Both copies of the checksums: the data cannot be verified.
    let (mem, a, b) = image();
    let sp = spec(Target::DataChecksums, b, 1).which(Which::Both).bytes(32);
    corrupt(&*mem, &sp).unwrap();
    assert_eq!(read_b(&mem, b).0.unwrap_err().errno(), libc::EIO);
    let fs = mount(&mem).unwrap();
    assert_eq!(read_file(&fs, a, 4096).unwrap(), [b'A'; 4096]);
    fs.unmount().unwrap();
    // Parity alone: nothing read changes; with a bad strip too: EIO.
    let (mem, _, b) = image();
    let p = corrupt(&*mem, &spec(Target::Parity, b, 1).bytes(512)).unwrap();
    assert_eq!(read_b(&mem, b).0.unwrap(), whole);
    let page = mem.snapshot();
    let data = locate(&*mem, Target::DataPage, b).unwrap();
    // The data page whose parity was damaged: the same index.
    let sb = read_superblock(&*mem).unwrap().0;
    let index = (p[0].base - sb.parity_off) / STRIP_SIZE;
    let victim = data
        .iter()
        .find(|l| (l.copies[0].1 - sb.data_start) / PAGE_SIZE == index)
        .unwrap();
    let at = victim.copies[0].1 + 10;
    mem.write(at, &[page[at as usize] ^ 0xFF]).unwrap();
    assert_eq!(read_b(&mem, b).0.unwrap_err().errno(), libc::EIO);
}

/// Data pages are protected by strip checksums and parity (Fortis
/// §4.3, on by default): one poisoned strip is rebuilt, two in the same
/// page make that file EIO and nothing else.
#[test]
fn a_poisoned_data_strip_is_rebuilt_and_two_are_eio_for_that_file_only() {
    let (mem, a, b) = image();
    let d = plan(&*mem, &spec(Target::DataPage, b, 1)).unwrap();
    let page = d[0].off - d[0].off % PAGE_SIZE;
    let mut whole = vec![b'B'; 4096];
    whole.extend([b'C'; 4096]);
    mem.poison(page + 100, 1).unwrap();
    let fs = mount(&mem).unwrap();
    assert!(read_file(&fs, b, 8192).unwrap() == whole, "rebuilt from parity");
    assert!(fs.health().data_repairs > 0);
    fs.unmount().unwrap();
    mem.poison(page + 3000, 1).unwrap();
    let fs = mount(&mem).unwrap();
    assert_eq!(read_file(&fs, b, 8192).unwrap_err().errno(), libc::EIO);
    assert_eq!(read_file(&fs, a, 4096).unwrap(), [b'A'; 4096]);
    assert_eq!((fs.health().losses, fs.health().last_loss_ino), (1, b));
}

fn mount_skipping(mem: &Arc<MemRegion>) -> Fs {
    let opts = MountOptions::default().meta_replicas(novafs::MetaReplicas::Skipped);
    Fs::open(mem.clone(), opts).unwrap()
}

fn stale(mem: &MemRegion) -> bool {
    bounds_of(&read_superblock(mem).unwrap().0).stale
}

/// A mount without metadata protection leaves the replicas behind and
/// says so before its first write; fsck accepts the difference; the
/// next protected mount rewrites every replica, after which damage to
/// a primary is repaired again, whether the skipping mount ended
/// cleanly or crashed.
#[test]
fn a_mount_without_protection_leaves_stale_replicas_that_the_next_protected_mount_rewrites() {
    for crash in [false, true] {
        let (mem, f) = image_with(true);
        let fs = mount_skipping(&mem);
        assert!(stale(&mem), "stale from the start of the mount");
        fs.write(f.a, 0, &[b'Z'; 4096]).unwrap();
        let (sb, _) = read_superblock(&*mem).unwrap();
        let (off, rec) = live_record(&*mem, &sb, f.a).unwrap();
        let m = bounds_of(&sb).mirror(off).unwrap();
        let replica_tail = mem.load_u64(m + novafs::probe::layout::INODE_TAIL_OFF).unwrap();
        assert_ne!(replica_tail, rec.log_tail, "the replica was not written");
        if crash {
            drop(fs);
        } else {
            fs.unmount().unwrap();
            let rep = novafs::fsck::check(mem.clone(), &|_, _| {}).unwrap();
            assert_eq!(rep.problems, Vec::<String>::new());
            assert!(
                rep.notes.iter().any(|n| n.contains("replicas are stale")),
                "{:?}",
                rep.notes
            );
        }
        assert!(stale(&mem));
        // A read-only mount cannot rewrite them and leaves them stale.
        drop(Fs::open(mem.clone(), MountOptions::default().read_only(true)).unwrap());
        assert!(stale(&mem));
        let fs = mount(&mem).unwrap();
        assert!(fs.mount_report().replicas_refreshed, "crash {crash}");
        assert!(!stale(&mem));
        assert_eq!(
            mem.load_u64(m + novafs::probe::layout::INODE_TAIL_OFF).unwrap(),
            rec.log_tail
        );
        fs.unmount().unwrap();
        assert_eq!(fsck_problems(&mem), Vec::<String>::new(), "crash {crash}");
        // The replicas are whole again: a damaged primary reads from them.
        let sp = spec(Target::LogPage, f.a, 1).bytes(PAGE_SIZE);
        corrupt(&*mem, &sp).unwrap();
        let fs = mount(&mem).unwrap();
        assert_eq!(read_file(&fs, f.a, 8192).unwrap(), [b'Z'; 4096], "crash {crash}");
        fs.unmount().unwrap();
    }
}

/// While the replicas are stale nothing reads them: a damaged primary
/// is EIO, never the older contents its replica still holds.
#[test]
fn a_stale_replica_is_never_used_for_repair() {
    let (mem, f) = image_with(true);
    let fs = mount_skipping(&mem);
    fs.write(f.a, 0, &[b'Z'; 4096]).unwrap();
    fs.unmount().unwrap();
    let sp = spec(Target::LogPage, f.a, 1).bytes(PAGE_SIZE);
    corrupt(&*mem, &sp).unwrap();
    for opts in [
        MountOptions::default().read_only(true),
        MountOptions::default().meta_replicas(novafs::MetaReplicas::Skipped),
    ] {
        let fs = Fs::open(mem.clone(), opts).unwrap();
        let err = read_file(&fs, f.a, 8192).unwrap_err();
        assert_eq!(err.errno(), libc::EIO, "{opts:?}: {err}");
        drop(fs);
    }
    assert!(fsck_problems(&mem)
        .iter()
        .any(|p| p.starts_with(&format!("inode {}: ", f.a))));
}

#[test]
fn requiring_protection_refuses_an_image_without_replicas() {
    let (mem, _) = image_with(false);
    let opts = MountOptions::default().meta_replicas(novafs::MetaReplicas::Required);
    let err = Fs::open(mem.clone(), opts).map(|_| ()).unwrap_err();
    assert!(
        err.to_string().contains("novafs tune --enable meta-protection"),
        "{err}"
    );
    // Skipping on an image without replicas changes nothing.
    mount_skipping(&mem).unmount().unwrap();
    assert!(!stale(&mem));
    let (mem, _) = image_with(true);
    Fs::open(mem.clone(), opts).unwrap().unmount().unwrap();
}

/// The page holding offset `off`.
fn page_of(off: u64) -> u64 {
    off - off % PAGE_SIZE
}
