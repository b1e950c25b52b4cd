//! The latency breakdown's parts (`pm::latency`, `novafs bench
//! --breakdown`) are charged where the papers put them: each operation
//! charges the parts of novafs's work it does and not the others, and
//! nothing is counted while the accounting is off.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use novafs::ROOT_INO;
use pm::latency::{self, Part, Spent};

/// The parts `f` spent time in, on this thread.
fn parts_of(f: impl FnOnce()) -> Vec<Part> {
    let before = Spent::thread();
    f();
    let spent = Spent::thread().since(&before);
    Part::ALL.into_iter().filter(|&p| spent.ns(p) > 0.0).collect()
}

#[track_caller]
fn assert_parts(got: &[Part], has: &[Part], lacks: &[Part]) {
    for p in has {
        assert!(got.contains(p), "{p:?} missing from {got:?}");
    }
    for p in lacks {
        assert!(!got.contains(p), "{p:?} charged in {got:?}");
    }
}

// One test: the switch is global to the process.
#[test]
fn each_operation_charges_the_parts_it_does_and_only_when_on() {
    use Part::*;
    // mkfs's default: metadata replicas, data checksums and parity.
    let region = fresh(32, 1);
    let fs = mount(&region);
    latency::set_enabled(true);

    let mut ino = 0;
    let create = parts_of(|| ino = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino);
    assert_parts(
        &create,
        &[Alloc, Log, Journal, Replica, Index, Lookup],
        &[DataCopy, DataProtect, Free],
    );

    let append = parts_of(|| assert_eq!(fs.write(ino, 0, &[7u8; 4096]).unwrap(), 4096));
    assert_parts(&append, &[Alloc, Log, Replica, DataCopy, DataProtect, Index], &[Free]);

    // Copy-on-write: the old page goes back.
    let overwrite = parts_of(|| assert_eq!(fs.write(ino, 0, &[8u8; 4096]).unwrap(), 4096));
    assert_parts(&overwrite, &[Alloc, Log, DataCopy, DataProtect, Index, Free], &[]);

    let mut buf = [0u8; 4096];
    let read = parts_of(|| assert_eq!(fs.read(ino, 0, &mut buf).unwrap(), 4096));
    assert_eq!(buf, [8u8; 4096]);
    assert_parts(
        &read,
        &[DataCopy, DataProtect],
        &[Alloc, Log, Journal, Replica, Index, Free],
    );

    let unlink = parts_of(|| fs.unlink(ROOT_INO, b"f").unwrap());
    assert_parts(&unlink, &[Log, Journal, Replica, Free], &[DataCopy, DataProtect]);

    latency::set_enabled(false);
    let off = parts_of(|| {
        let f = fs.create(ROOT_INO, b"g", 0o644, 0, 0).unwrap();
        fs.write(f.ino, 0, &[9u8; 4096]).unwrap();
        fs.unlink(ROOT_INO, b"g").unwrap();
    });
    assert_eq!(off, [], "off: nothing counted");
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}
