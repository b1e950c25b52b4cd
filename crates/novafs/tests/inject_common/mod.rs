//! Helpers of the fault-injection tests (`inject_targets.rs`,
//! `inject_repair.rs`): a small image whose files are known, and what the
//! file system and fsck make of it after `novafs::inject` damaged it.
#![allow(dead_code, clippy::unwrap_used)]

use std::fmt;
use std::sync::Arc;

use novafs::inject::{CopyKind, Located, Spec, Target};
use novafs::probe::layout::{Inode, Superblock};
use novafs::probe::{bounds_of, read_live_record, read_superblock, InodeTables, Mirrored};
use novafs::{FormatOptions, Fs, Ino, MountOptions, Result, ROOT_INO};
use pm::{MemRegion, Region};

/// The files of [`image`]: "a" (one page of 'A'), "b" (two pages of
/// 'B' then one of 'C' over the second) and the directory "d" holding
/// an empty file "e".
#[derive(Clone, Copy, Debug)]
pub struct Files {
    pub a: Ino,
    pub b: Ino,
    pub d: Ino,
}

/// A 16 MiB image with two shards holding [`Files`], with metadata
/// replicas (the default) or without.
pub fn image_with(replicas: bool) -> (Arc<MemRegion>, Files) {
    let mem = Arc::new(MemRegion::new(16 << 20));
    let region: Arc<dyn Region> = mem.clone();
    Fs::format(
        region.clone(),
        &FormatOptions::default().shards(2).meta_replicas(replicas),
    )
    .unwrap();
    let fs = Fs::open(region, MountOptions::default()).unwrap();
    let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    fs.write(a, 0, &[b'A'; 4096]).unwrap();
    let b = fs.create(ROOT_INO, b"b", 0o644, 0, 0).unwrap().ino;
    fs.write(b, 0, &[b'B'; 8192]).unwrap();
    fs.write(b, 4096, &[b'C'; 4096]).unwrap();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    fs.create(d, b"e", 0o644, 0, 0).unwrap();
    fs.unmount().unwrap();
    (mem, Files { a, b, d })
}

/// [`image_with`] replicas: what `Fs::format` makes by default.
pub fn image() -> (Arc<MemRegion>, Ino, Ino) {
    let (mem, f) = image_with(true);
    (mem, f.a, f.b)
}

/// The offset and (primary) record of live inode `ino`.
pub fn live_record(region: &dyn Region, sb: &Superblock, ino: Ino) -> Result<(u64, Inode)> {
    let off = record_off(region, sb, ino)?;
    Ok((off, read_live_record(region, off, ino)?))
}

pub fn mount(mem: &Arc<MemRegion>) -> Result<Fs> {
    Fs::open(mem.clone(), MountOptions::default())
}

/// The region as the file system writes metadata: both copies at once
/// when the image keeps replicas.
pub fn meta(mem: &Arc<MemRegion>) -> Arc<dyn Region> {
    let (sb, _) = read_superblock(&**mem).unwrap();
    Mirrored::view(mem.clone(), bounds_of(&sb))
}

pub fn read_file(fs: &Fs, ino: Ino, len: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let n = fs.read(ino, 0, &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

pub fn names(fs: &Fs, dir: Ino) -> Result<Vec<Vec<u8>>> {
    let mut names = Vec::new();
    fs.readdir(dir, 0, |e| {
        names.push(e.name);
        false
    })?;
    Ok(names)
}

/// Everything of [`image`] reads as it was written.
pub fn reads_everything(fs: &Fs, f: Files, why: &dyn fmt::Display) {
    assert_eq!(read_file(fs, f.a, 8192).unwrap(), [b'A'; 4096], "{why}");
    let b = read_file(fs, f.b, 8192).unwrap();
    assert_eq!(b[..4096], [b'B'; 4096], "{why}");
    assert_eq!(b[4096..], [b'C'; 4096], "{why}");
    assert_eq!(
        names(fs, ROOT_INO).unwrap(),
        [&b"."[..], b"..", b"a", b"b", b"d"],
        "{why}"
    );
    assert_eq!(names(fs, f.d).unwrap(), [&b"."[..], b"..", b"e"], "{why}");
    assert_eq!(fs.lookup(ROOT_INO, b"d").unwrap().ino, f.d, "{why}");
}

/// Everything of [`image`] but inode `lost` reads as it was written.
pub fn others_read(fs: &Fs, f: Files, lost: Ino, why: &dyn fmt::Display) {
    if lost != f.a {
        assert_eq!(read_file(fs, f.a, 8192).unwrap(), [b'A'; 4096], "{why}");
    }
    assert_ne!(lost, f.b);
    assert_eq!(read_file(fs, f.b, 8192).unwrap()[4096..], [b'C'; 4096], "{why}");
    if lost != f.d {
        assert_eq!(names(fs, f.d).unwrap().len(), 3, "{why}");
    }
    // The root directory still names the lost inode.
    assert_eq!(names(fs, ROOT_INO).unwrap().len(), 5, "{why}");
}

pub fn fsck_problems(mem: &Arc<MemRegion>) -> Vec<String> {
    let region: Arc<dyn Region> = mem.clone();
    match novafs::fsck::check(region, &|_, _| {}) {
        Ok(rep) => rep.problems,
        Err(e) => vec![format!("fsck failed: {e}")],
    }
}

/// Bytes `off..off + len` of the region.
pub fn bytes(mem: &MemRegion, off: u64, len: u64) -> Vec<u8> {
    mem.snapshot()[off as usize..(off + len) as usize].to_vec()
}

/// Whether both copies of a located structure hold the same bytes in
/// `range` (offsets inside the structure).
pub fn copies_equal(mem: &MemRegion, l: &Located, range: std::ops::Range<u64>) -> bool {
    let snap = mem.snapshot();
    let at = |kind| {
        let off = (l.copy(kind).unwrap() + range.start) as usize;
        snap[off..off + (range.end - range.start) as usize].to_vec()
    };
    at(CopyKind::Primary) == at(CopyKind::Replica)
}

pub fn spec(target: Target, ino: Ino, seed: u64) -> Spec {
    Spec::new(target).ino(ino).seed(seed)
}

/// Offset of inode `ino`'s record, where the inode tables put it.
pub fn record_off(region: &dyn Region, sb: &Superblock, ino: Ino) -> Result<u64> {
    InodeTables::load(region, sb, bounds_of(sb))?.locate(ino)
}
