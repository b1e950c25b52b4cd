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
    let rep = fs.scrub(ScrubOptions { rate: Some(64 << 20) }, &|_, _| true).unwrap();
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
    use novafs::layout::{decode, Bounds, Superblock, CHUNK_FOOTER_OFF, INODE_HEADS_OFF, INODE_SIZE};

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
    let read = |off, len| {
        let mut b = vec![0u8; len];
        region.read(off, &mut b).unwrap();
        b
    };
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
