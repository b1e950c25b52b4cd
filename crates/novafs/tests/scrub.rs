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
    let spec = Spec {
        which,
        ino,
        seed,
        bytes,
        ..Spec::new(target)
    };
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
    assert_eq!(rep.damaged[0].0, f.b);
    assert!(rep.damaged[0].1.contains("data page"), "{rep:?}");
    assert_eq!(read_all(&fs, f.a), contents(1, 5 * 4096));
    assert_eq!((fs.health().losses, fs.health().last_loss_ino), (1, f.b));
    fs.unmount().unwrap();
}

/// Writers keep overwriting and appending while a slow scrub goes over
/// everything: nothing is reported, nothing repaired, every file reads
/// back as last written.
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
                let mut rng = SplitMix(w as u64 + 1);
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
    let rep = fs.scrub(ScrubOptions { rate: Some(64 << 20) }, &|_, _| true).unwrap();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        let (ino, shadow) = w.join().unwrap();
        assert_eq!(read_all(&fs, ino), shadow);
    }
    assert!(rep.damaged.is_empty(), "{rep:?}");
    assert_eq!((rep.data_repaired, rep.metadata_repaired), (0, 0), "{rep:?}");
    assert!(rep.pages > 0);
    assert_eq!(fs.health(), novafs::HealthCounts::default());
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    assert_fsck_clean(&region);
}
