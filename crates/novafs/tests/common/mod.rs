//! Helpers shared by the integration tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;

use novafs::{FormatOptions, Fs, MountOptions};
use pm::{MemRegion, Region};

/// A freshly formatted heap region of `mib` MiB with `shards` shards.
pub fn fresh(mib: u64, shards: u32) -> Arc<dyn Region> {
    let region: Arc<dyn Region> = Arc::new(MemRegion::new(mib << 20));
    Fs::format(region.clone(), &FormatOptions::default().shards(shards)).unwrap();
    region
}

pub fn mount(region: &Arc<dyn Region>) -> Fs {
    Fs::open(region.clone(), MountOptions::default()).unwrap()
}

/// Reads a whole file.
pub fn read_all(fs: &Fs, ino: u64) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size as usize;
    let mut buf = vec![0u8; size];
    let n = fs.read(ino, 0, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

/// Names in a directory, sorted, without "." and "..".
pub fn names(fs: &Fs, dir: u64) -> Vec<String> {
    let mut v = Vec::new();
    fs.readdir(dir, 0, |e| {
        if e.name != b"." && e.name != b".." {
            v.push(String::from_utf8(e.name).unwrap());
        }
        false
    })
    .unwrap();
    v.sort();
    v
}

/// Runs fsck on the image and panics with its findings if it is not clean.
pub fn assert_fsck_clean(region: &Arc<dyn Region>) {
    let rep = novafs::fsck::check(region.clone(), &|_, _| {}).unwrap();
    assert!(rep.is_clean(), "fsck problems: {:#?}", rep.problems);
}
