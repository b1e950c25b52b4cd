//! Bad images and media errors: a foreign, newer or damaged image gets a
//! clear error; a damaged object reads as EIO without harming the rest; a
//! damaged primary superblock is repaired from its replica (Fortis §4.2).
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::*;
use novafs::layout::{Superblock, PAGE_SIZE};
use novafs::{Error, Fs, MountOptions, ROOT_INO};
use pm::{MemRegion, Region};
use zerocopy::{FromBytes, IntoBytes};

fn image_with(f: impl FnOnce(&Fs)) -> Arc<MemRegion> {
    let mem = Arc::new(MemRegion::new(32 << 20));
    let region: Arc<dyn Region> = mem.clone();
    Fs::format(
        region.clone(),
        &novafs::FormatOptions {
            shards: Some(2),
            ..Default::default()
        },
    )
    .unwrap();
    let fs = mount(&region);
    f(&fs);
    fs.unmount().unwrap();
    mem
}

fn open(mem: &Arc<MemRegion>) -> novafs::Result<Fs> {
    Fs::open(mem.clone(), MountOptions::default())
}

fn find(mem: &MemRegion, needle: &[u8]) -> u64 {
    let img = mem.snapshot();
    img.windows(needle.len())
        .position(|w| w == needle)
        .expect("marker not found") as u64
}

fn rewrite_superblocks(mem: &MemRegion, edit: impl Fn(&mut Superblock)) {
    for off in [0, mem.len() - PAGE_SIZE] {
        let mut buf = vec![0u8; size_of::<Superblock>()];
        mem.read(off, &mut buf).unwrap();
        let mut sb = Superblock::read_from_bytes(&buf).unwrap();
        edit(&mut sb);
        sb.csum = sb.compute_csum();
        mem.write(off, sb.as_bytes()).unwrap();
    }
}

#[test]
fn foreign_image_is_refused_as_not_novafs() {
    let mem = Arc::new(MemRegion::new(32 << 20));
    mem.write(0, &[0xAB; 8192]).unwrap();
    assert!(matches!(open(&mem), Err(Error::NotNovafs(_))));
}

#[test]
fn newer_format_version_is_refused() {
    let mem = image_with(|_| {});
    rewrite_superblocks(&mem, |sb| sb.version = 99);
    assert!(matches!(open(&mem), Err(Error::TooNew { found: 99, .. })));
}

#[test]
fn damaged_primary_superblock_is_repaired_from_the_replica() {
    let mem = image_with(|fs| {
        fs.create(ROOT_INO, b"kept", 0o644, 0, 0).unwrap();
    });
    mem.write(16, &[0xFF; 32]).unwrap();
    let fs = open(&mem).unwrap();
    assert!(fs.mount_report().superblock_repaired);
    fs.lookup(ROOT_INO, b"kept").unwrap();
    fs.unmount().unwrap();
    let fs = open(&mem).unwrap();
    assert!(!fs.mount_report().superblock_repaired, "primary was rewritten");
    fs.unmount().unwrap();
}

#[test]
fn both_superblocks_damaged_is_a_clear_error() {
    let mem = image_with(|_| {});
    mem.write(16, &[0xFF; 32]).unwrap();
    mem.write(mem.len() - PAGE_SIZE + 16, &[0xFF; 32]).unwrap();
    assert!(matches!(open(&mem), Err(Error::Corrupt(_))));
}

#[test]
fn damaged_dentry_makes_only_its_directory_eio() {
    let mem = image_with(|fs| {
        let d = fs.mkdir(ROOT_INO, b"sub", 0o755, 0, 0).unwrap();
        fs.create(d.ino, b"a-rather-unique-marker-name", 0o644, 0, 0).unwrap();
        let g = fs.create(ROOT_INO, b"good", 0o644, 0, 0).unwrap();
        fs.write(g.ino, 0, b"fine").unwrap();
    });
    let at = find(&mem, b"a-rather-unique-marker-name");
    mem.write(at + 3, b"X").unwrap();
    let region: Arc<dyn Region> = mem.clone();
    let rep = novafs::fsck::check(region, &|_, _| {}).unwrap();
    assert!(
        rep.problems.iter().any(|p| p.contains("checksum")),
        "{:?}",
        rep.problems
    );
    let fs = open(&mem).unwrap();
    let sub = fs.lookup(ROOT_INO, b"sub");
    assert_eq!(sub.map(|_| ()).unwrap_err().errno(), libc::EIO);
    let g = fs.lookup(ROOT_INO, b"good").unwrap();
    assert_eq!(read_all(&fs, g.ino), b"fine");
}

#[test]
fn poisoned_data_page_reads_as_eio_and_the_rest_reads_fine() {
    let mem = image_with(|fs| {
        let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
        let mut data = vec![b'A'; 4096];
        data.extend(b"UNIQUE-SECOND-PAGE-MARKER");
        data.resize(8192, b'B');
        fs.write(f.ino, 0, &data).unwrap();
    });
    let at = find(&mem, b"UNIQUE-SECOND-PAGE-MARKER");
    mem.poison(at, 1).unwrap();
    let fs = open(&mem).unwrap();
    let f = fs.lookup(ROOT_INO, b"f").unwrap();
    let mut buf = vec![0u8; 4096];
    assert_eq!(fs.read(f.ino, 0, &mut buf).unwrap(), 4096);
    assert_eq!(buf, vec![b'A'; 4096]);
    let err = fs.read(f.ino, 4096, &mut buf).unwrap_err();
    assert_eq!(err.errno(), libc::EIO);
}

/// A damaged committed transaction is dropped (its operation undone, which
/// is a consistent state) instead of being applied or blocking the mount.
#[test]
fn damaged_journal_transaction_is_discarded_not_applied() {
    let mem = image_with(|_| {});
    let region: Arc<dyn Region> = mem.clone();
    let fs = mount(&region);
    fs.create(ROOT_INO, b"x", 0o644, 0, 0).unwrap();
    drop(fs);
    // Fake a committed but damaged transaction: tail ahead of head over junk.
    let hdr = novafs::layout::JOURNAL_HEADERS_OFF;
    let head = mem.load_u64(hdr).unwrap();
    let ring = novafs::layout::JOURNAL_RINGS_OFF + head % novafs::layout::JOURNAL_RING_SIZE;
    mem.write(ring, &[7u8; 48]).unwrap();
    mem.store_u64(hdr + 8, head + 48).unwrap();
    let before = mem.snapshot();
    let fs = open(&mem).unwrap();
    assert_eq!(fs.mount_report().journal_discarded, 1);
    fs.lookup(ROOT_INO, b"x").unwrap();
    let after = mem.snapshot();
    assert_eq!(before[..8], after[..8], "no junk applied at offset 0");
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}
