//! Salvage comes before loss: a file whose log holds one write entry
//! damaged in both copies is kept by `fsck --repair`, under its name.
//! What the rest of the log proves reads back exactly (every page a later
//! write entry rewrote, whole); every other byte up to the size the log
//! still proves reads EIO (the damaged entry may have written it, and the
//! pages it replaced may be another file's now), until a write over the
//! whole page replaces it. fsck names the file and the lost bytes.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::*;
use novafs::inject::{corrupt, locate, plan, CopyKind, Spec, Target, Which};
use novafs::{Fs, ROOT_INO};
use pm::Region;

const PS: u64 = 4096;

/// The bytes of write number `n` of a scenario.
fn data(n: usize, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(n as u8 * 17 + 1))
        .collect()
}

/// Writes `(offset, length)` in order, to a new file /f of a fresh image
/// with a second file /g beside it; returns the region, /f's inode and
/// /f's contents as written.
fn scenario(writes: &[(u64, u64)]) -> (Arc<dyn Region>, u64, Vec<u8>) {
    let region = fresh(32, 1);
    let fs = mount(&region);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    let g = fs.create(ROOT_INO, b"g", 0o644, 0, 0).unwrap().ino;
    let mut truth = Vec::new();
    for (n, &(off, len)) in writes.iter().enumerate() {
        let d = data(n, len);
        fs.write(f, off, &d).unwrap();
        let end = (off + len) as usize;
        if truth.len() < end {
            truth.resize(end, 0);
        }
        truth[off as usize..end].copy_from_slice(&d);
    }
    fs.write(g, 0, &truth).unwrap();
    fs.unmount().unwrap();
    (region, f, truth)
}

/// A write entry of /f as the media holds it: where (primary), and the
/// file pages it maps and the size it leaves (FORMAT.md "Logs").
#[derive(Clone, Debug)]
struct Written {
    at: u64,
    pages: std::ops::Range<u64>,
    size: u64,
}

/// /f's write entries, in log order (one write may take several, one per
/// run of data pages contiguous on the media).
fn write_entries(region: &Arc<dyn Region>, ino: u64) -> Vec<Written> {
    let word = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    locate(&**region, Target::LogEntry, ino)
        .unwrap()
        .into_iter()
        .filter(|l| l.what == "log entry (write)")
        .map(|l| {
            let at = l.copy(CopyKind::Primary).unwrap();
            let mut b = [0u8; 64];
            region.read(at, &mut b).unwrap();
            let (pgoff, npages) = (
                word(&b, 16),
                u64::from(u32::from_le_bytes(b[32..36].try_into().unwrap())),
            );
            Written {
                at,
                pages: pgoff..pgoff + npages,
                size: word(&b, 40),
            }
        })
        .collect()
}

/// Damages both copies of the write entry at `entry` (primary offset)
/// with the inject tool: the first seed from `seed` on whose damage hits
/// that entry, where it must (`head`: its type and length bytes) or must
/// not. Returns the seed used.
fn damage_entry(region: &Arc<dyn Region>, ino: u64, entry: u64, seed: u64, head: bool) -> u64 {
    for s in seed.. {
        let spec = Spec::new(Target::LogEntry).which(Which::Both).ino(ino).seed(s).bytes(8);
        let p = plan(&**region, &spec).unwrap();
        let hits_head = p[0].off - p[0].base < 2;
        if p[0].base == entry && hits_head == head {
            let done = corrupt(&**region, &spec).unwrap();
            assert_eq!(done.len(), 2, "{done:?}");
            return s;
        }
    }
    unreachable!()
}

/// What /f must hold after the repair: its size, and each page's bytes,
/// or None for EIO. Entry `damaged` is the lost one: every page up to the
/// largest size known at or after it is lost but for those a later entry
/// maps (written whole then, from what the file held).
fn expected(entries: &[Written], damaged: usize, truth: &[u8]) -> (u64, Vec<Option<Vec<u8>>>) {
    let later = &entries[damaged + 1..];
    let size = match later.last() {
        Some(w) => w.size,
        None => damaged.checked_sub(1).map_or(0, |i| entries[i].size),
    };
    assert!(size <= truth.len() as u64);
    let pages = (0..size.div_ceil(PS))
        .map(|p| {
            let (a, b) = ((p * PS) as usize, ((p + 1) * PS).min(size) as usize);
            later.iter().any(|w| w.pages.contains(&p)).then(|| truth[a..b].to_vec())
        })
        .collect();
    (size, pages)
}

/// Checks every page of /f against `want`.
fn check_pages(fs: &Fs, f: u64, size: u64, want: &[Option<Vec<u8>>], why: &str) {
    assert_eq!(fs.getattr(f).unwrap().size, size, "{why}: size");
    for (p, w) in want.iter().enumerate() {
        let off = p as u64 * PS;
        let mut buf = vec![0u8; (size - off).min(PS) as usize];
        match (fs.read(f, off, &mut buf), w) {
            (Ok(n), Some(w)) => assert!(n == w.len() && &buf == w, "{why}: page {p} differs"),
            (Err(e), None) => assert_eq!(e.errno(), libc::EIO, "{why}: page {p}"),
            (r, w) => panic!("{why}: page {p}: read {:?}, wanted {}", r.map(|_| ()), w.is_some()),
        }
    }
}

/// Runs `fsck --repair`, which must keep inode `f`.
fn salvaged(region: &Arc<dyn Region>, f: u64) -> Vec<String> {
    let done = novafs::fsck::repair(region.clone()).unwrap();
    assert!(
        done.iter().any(|l| l.contains(&format!("salvaged inode {f}"))),
        "{done:#?}"
    );
    assert!(!done.iter().any(|l| l.starts_with("freed")), "{done:#?}");
    done
}

fn run(writes: &[(u64, u64)], which: Pick, seed: u64) {
    let (region, f, truth) = scenario(writes);
    let entries = write_entries(&region, f);
    let damaged = which.of(entries.len());
    let used = damage_entry(&region, f, entries[damaged].at, seed, false);
    let why = format!("writes {writes:?}, entries {entries:?}, entry {damaged} damaged (seed {used})");
    let before = novafs::fsck::check(region.clone(), &|_, _| {}).unwrap();
    assert!(!before.is_clean(), "{why}: damage unreported");
    salvaged(&region, f);
    let (size, want) = expected(&entries, damaged, &truth);
    let lost: Vec<usize> = (0..want.len()).filter(|&p| want[p].is_none()).collect();
    // fsck is clean, and names the file and its lost bytes.
    let rep = novafs::fsck::check(region.clone(), &|_, _| {}).unwrap();
    assert!(rep.is_clean(), "{why}: {:#?}", rep.problems);
    let told: Vec<&String> = rep.notes.iter().filter(|n| n.contains("were lost")).collect();
    assert_eq!(told.is_empty(), lost.is_empty(), "{why}: {:#?}", rep.notes);
    for &p in &lost {
        let (a, b) = (p as u64 * PS, ((p as u64 + 1) * PS).min(size));
        assert!(
            told.iter().any(|n| {
                n.contains("(/f)") && n.contains("restore them from a snapshot or a backup") && {
                    let r = n.split("bytes ").nth(1).unwrap().split(' ').next().unwrap();
                    let (s, e) = r.split_once("..").unwrap();
                    s.parse::<u64>().unwrap() <= a && b <= e.parse::<u64>().unwrap()
                }
            }),
            "{why}: page {p} not reported: {told:#?}"
        );
    }
    let fs = mount(&region);
    assert_eq!(fs.lookup(ROOT_INO, b"f").unwrap().ino, f, "{why}");
    check_pages(&fs, f, size, &want, &why);
    // The other file is untouched.
    let g = fs.lookup(ROOT_INO, b"g").unwrap().ino;
    assert_eq!(read_all(&fs, g), truth, "{why}: /g");
    let mut want = want;
    if let Some(&p) = lost.first() {
        let off = p as u64 * PS;
        // Part of a lost page cannot be written: the rest is unknown.
        assert_eq!(fs.write(f, off + 1, b"x").unwrap_err().errno(), libc::EIO, "{why}");
        let whole = vec![0xA5u8; (size - off).min(PS) as usize];
        fs.write(f, off, &whole).unwrap();
        want[p] = Some(whole);
    }
    check_pages(&fs, f, size, &want, &why);
    fs.unmount().unwrap();
    let fs = mount(&region);
    check_pages(&fs, f, size, &want, &format!("{why}, remounted"));
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// Which of a file's write entries to damage.
#[derive(Clone, Copy, Debug)]
enum Pick {
    First,
    Middle,
    Last,
}

impl Pick {
    fn of(self, n: usize) -> usize {
        match self {
            Pick::First => 0,
            Pick::Middle => n / 2,
            Pick::Last => n - 1,
        }
    }
}

/// Disjoint appends, overlapping rewrites, and whole-page rewrites.
const SCENARIOS: [&[(u64, u64)]; 3] = [
    &[(0, 5000), (5000, 6000), (11000, 3000), (14000, 4000)],
    &[(0, 12000), (2000, 3000), (8192, 4096), (100, 50)],
    &[(0, 8192), (4096, 8192), (0, 4096), (12288, 100)],
];

#[test]
fn a_write_entry_damaged_in_both_copies_loses_only_what_no_later_entry_proves() {
    let seeds: u64 = std::env::var("NOVAFS_SALVAGE_SEEDS").map_or(2, |s| s.parse().unwrap());
    for writes in SCENARIOS {
        for which in [Pick::First, Pick::Middle, Pick::Last] {
            for seed in 0..seeds {
                run(writes, which, 1 + seed * 1000);
            }
        }
    }
}

#[test]
fn lost_pages_survive_thorough_log_gc() {
    let writes = SCENARIOS[0];
    let (region, f, truth) = scenario(writes);
    let entries = write_entries(&region, f);
    damage_entry(&region, f, entries[1].at, 7, false);
    salvaged(&region, f);
    let (size, want) = expected(&entries, 1, &truth);
    assert!(want.iter().any(Option::is_none));
    let fs = mount(&region);
    // Rewrites of a page no entry lost: the log fills with dead entries
    // until thorough GC compacts it. An attribute that stays every 32
    // rewrites leaves a live entry on every log page, so fast GC cannot
    // free them and thorough GC must.
    let last = want.len() as u64 - 1;
    let page = truth[(last * PS) as usize..].to_vec();
    for i in 0..1000 {
        fs.write(f, last * PS, &page).unwrap();
        if i % 32 == 0 {
            fs.setxattr(f, format!("user.stay{i}").as_bytes(), b"x", 0).unwrap();
        }
    }
    assert!(fs.gc_stats().thorough_runs > 0, "thorough GC did not run");
    check_pages(&fs, f, size, &want, "after thorough GC");
    fs.unmount().unwrap();
    let fs = mount(&region);
    check_pages(&fs, f, size, &want, "after thorough GC, remounted");
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// A lost page is data, not a hole: SEEK_HOLE passes over it, and
/// preallocation leaves it lost instead of zeroing it.
#[test]
fn lost_pages_are_no_holes() {
    let writes = SCENARIOS[0];
    let (region, f, truth) = scenario(writes);
    let entries = write_entries(&region, f);
    damage_entry(&region, f, entries[2].at, 3, false);
    salvaged(&region, f);
    let (size, want) = expected(&entries, 2, &truth);
    let fs = mount(&region);
    assert_eq!(fs.lseek(f, 0, libc::SEEK_HOLE as u32).unwrap(), size);
    assert_eq!(fs.lseek(f, 0, libc::SEEK_DATA as u32).unwrap(), 0);
    fs.fallocate(f, 0, 0, size).unwrap();
    check_pages(&fs, f, size, &want, "after fallocate");
    fs.unmount().unwrap();
}

/// What is not salvaged: when the damage hits the entry's type and
/// length bytes, nothing says where the next entry starts or that it was
/// a write; the repair frees the file as before, and says so.
#[test]
fn a_write_entry_whose_head_is_damaged_in_both_copies_is_not_salvaged() {
    let writes = SCENARIOS[1];
    let (region, f, _) = scenario(writes);
    let entries = write_entries(&region, f);
    damage_entry(&region, f, entries[1].at, 1, true);
    let done = novafs::fsck::repair(region.clone()).unwrap();
    assert!(
        done.iter().any(|l| l.starts_with(&format!("freed: inode {f}"))),
        "{done:#?}"
    );
    assert_fsck_clean(&region);
}
