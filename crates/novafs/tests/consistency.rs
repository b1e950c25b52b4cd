//! The consistency mode (NOVA-Fortis §4.6) as an image records it and a
//! mount chooses it: the superblock's default, the mount's override, what
//! the mount reports, and the RELAXED feature bit that covers a relaxed
//! mount from its first write to its clean unmount. (What relaxed writes
//! do is the write path's, tested with it.)
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::*;
use novafs::probe::layout::{
    Superblock, CONSISTENCY_RELAXED, CONSISTENCY_STRICT, FEATURES_INCOMPAT_SUPPORTED, FEATURE_INCOMPAT_RELAXED,
    PAGE_SIZE,
};
use novafs::{Consistency, Error, FormatOptions, Fs, MountOptions, ROOT_INO};
use pm::{MemRegion, Region};
use zerocopy::FromBytes;

use Consistency::{Relaxed, Strict};

/// A 32 MiB two-shard image whose mounts default to `mode`.
fn image(mode: Consistency) -> Arc<dyn Region> {
    let region: Arc<dyn Region> = Arc::new(MemRegion::new(32 << 20));
    Fs::format(region.clone(), &FormatOptions::default().shards(2).consistency(mode)).unwrap();
    region
}

fn open(region: &Arc<dyn Region>, mode: Option<Consistency>) -> novafs::Result<Fs> {
    Fs::open(region.clone(), MountOptions::default().consistency(mode))
}

/// Both superblock copies as the media holds them.
fn copies(region: &Arc<dyn Region>) -> [Superblock; 2] {
    [0, region.len() - PAGE_SIZE].map(|off| {
        let mut buf = vec![0u8; size_of::<Superblock>()];
        region.read(off, &mut buf).unwrap();
        Superblock::read_from_bytes(&buf).unwrap()
    })
}

/// The RELAXED bit in (primary, replica).
fn relaxed_bit(region: &Arc<dyn Region>) -> (bool, bool) {
    let [p, r] = copies(region).map(|sb| sb.features_incompat & FEATURE_INCOMPAT_RELAXED != 0);
    (p, r)
}

#[test]
fn the_feature_bit_and_the_codes_are_the_documented_ones() {
    assert_eq!(FEATURE_INCOMPAT_RELAXED, 1 << 8);
    assert_ne!(FEATURES_INCOMPAT_SUPPORTED & FEATURE_INCOMPAT_RELAXED, 0);
    assert_eq!((CONSISTENCY_STRICT, CONSISTENCY_RELAXED), (0, 1));
    assert_eq!(std::mem::offset_of!(Superblock, consistency), 248);
    assert_eq!(FormatOptions::default().consistency, Strict);
    assert_eq!(MountOptions::default().consistency, None);
}

#[test]
fn mkfs_records_the_mode_and_a_mount_takes_it_unless_told_otherwise() {
    for (recorded, code, other) in [
        (Relaxed, CONSISTENCY_RELAXED, Strict),
        (Strict, CONSISTENCY_STRICT, Relaxed),
    ] {
        let region = image(recorded);
        assert_eq!(copies(&region).map(|sb| sb.consistency), [code, code]);
        for (asked, got) in [(None, recorded), (Some(recorded), recorded), (Some(other), other)] {
            let fs = open(&region, asked).unwrap();
            assert_eq!(fs.consistency(), got, "{recorded} image, mount asks {asked:?}");
            assert_eq!(fs.statfs().consistency, got);
            assert_eq!(fs.writes_relaxed(), got == Relaxed);
            fs.create(ROOT_INO, format!("{asked:?}").as_bytes(), 0o644, 0, 0)
                .unwrap();
            fs.unmount().unwrap();
            // A mount's choice is its own: the image's default stays.
            assert_eq!(copies(&region).map(|sb| sb.consistency), [code, code]);
        }
        assert_fsck_clean(&region);
    }
}

#[test]
fn a_read_only_mount_reports_the_mode_but_its_writes_do_not_go_relaxed() {
    let region = image(Relaxed);
    let before = copies(&region).map(|sb| sb.features_incompat);
    for asked in [None, Some(Relaxed)] {
        let fs = Fs::open(
            region.clone(),
            MountOptions::default().read_only(true).consistency(asked),
        )
        .unwrap();
        assert_eq!(fs.consistency(), Relaxed);
        assert_eq!(fs.statfs().consistency, Relaxed);
        assert!(!fs.writes_relaxed());
        assert_eq!(relaxed_bit(&region), (false, false), "a read-only mount writes nothing");
        fs.unmount().unwrap();
    }
    assert_eq!(copies(&region).map(|sb| sb.features_incompat), before);
    // A snapshot view of a relaxed mount reports the mount's mode.
    let fs = open(&region, None).unwrap();
    fs.take_snapshot(b"s").unwrap();
    let view = fs.open_snapshot(b"s").unwrap();
    assert_eq!(view.consistency(), Relaxed);
    assert!(fs.writes_relaxed() && !view.writes_relaxed());
    drop(view);
    fs.unmount().unwrap();
}

#[test]
fn the_relaxed_bit_is_set_while_a_relaxed_mount_lives_and_cleared_by_its_clean_unmount() {
    let region = image(Strict);
    assert_eq!(relaxed_bit(&region), (false, false));
    let fs = open(&region, Some(Relaxed)).unwrap();
    assert_eq!(
        relaxed_bit(&region),
        (true, true),
        "durable in both copies once mounted"
    );
    assert_eq!(
        fs.superblock().features_incompat & FEATURE_INCOMPAT_RELAXED,
        FEATURE_INCOMPAT_RELAXED
    );
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    fs.write(f.ino, 0, b"bytes").unwrap();
    fs.write(f.ino, 0, b"BY").unwrap(); // an overwrite: in place
    fs.take_snapshot(b"s").unwrap(); // another superblock update keeps it
    assert_eq!(relaxed_bit(&region), (true, true));
    fs.unmount().unwrap();
    assert_eq!(relaxed_bit(&region), (false, false), "the clean unmount clears it");
    assert_fsck_clean(&region);
    let fs = open(&region, Some(Strict)).unwrap();
    assert_eq!(read_all(&fs, f.ino), b"BYtes");
    fs.unmount().unwrap();
}

#[test]
fn a_strict_mount_never_sets_the_relaxed_bit() {
    for recorded in [Strict, Relaxed] {
        let region = image(recorded);
        let fs = open(&region, Some(Strict)).unwrap();
        let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
        fs.write(f.ino, 0, b"bytes").unwrap();
        assert_eq!(relaxed_bit(&region), (false, false), "{recorded} image");
        fs.unmount().unwrap();
        assert_eq!(relaxed_bit(&region), (false, false), "{recorded} image");
    }
}

#[test]
fn a_crashed_relaxed_mount_leaves_the_bit_until_a_clean_unmount_even_a_strict_one() {
    let region = image(Relaxed);
    let fs = open(&region, None).unwrap();
    fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    drop(fs); // a crash
    assert_eq!(relaxed_bit(&region), (true, true));
    let fsck = novafs::fsck::check(region.clone(), &|_, _| {}).unwrap();
    assert!(fsck.is_clean(), "{:?}", fsck.problems);
    assert!(
        fsck.notes
            .contains(&"a relaxed mount is in use or crashed: the next mount reseals its data-write intents".into()),
        "{:?}",
        fsck.notes
    );
    let fs = open(&region, Some(Strict)).unwrap();
    assert!(!fs.mount_report().clean);
    assert_eq!(fs.consistency(), Strict);
    assert_eq!(
        relaxed_bit(&region),
        (true, true),
        "kept by a strict mount after the crash"
    );
    fs.lookup(ROOT_INO, b"f").unwrap();
    fs.unmount().unwrap();
    assert_eq!(relaxed_bit(&region), (false, false));
}

#[test]
fn an_unknown_mode_in_the_superblock_is_refused_at_mount_and_fsck_resets_it() {
    let region = image(Relaxed);
    rewrite_superblocks(&*region, |sb| sb.consistency = 7);
    let want = "the superblock records consistency mode 7, which this novafs does not know \
                (0 = strict, 1 = relaxed); fsck --repair resets it to strict";
    for (read_only, asked) in [(false, None), (false, Some(Strict)), (true, None)] {
        let opts = MountOptions::default().read_only(read_only).consistency(asked);
        match Fs::open(region.clone(), opts) {
            Err(Error::Corrupt(c)) => {
                assert_eq!(c.detail(), want);
                assert_eq!(c.structure(), novafs::Structure::Superblock);
            }
            Err(e) => panic!("read_only {read_only}, {asked:?}: {e}"),
            Ok(_) => panic!("read_only {read_only}, {asked:?}: mounted"),
        }
    }
    assert_eq!(relaxed_bit(&region), (false, false), "the refused mounts wrote nothing");
    let info = novafs::inspect(region.clone()).unwrap();
    assert_eq!(info.geometry.consistency, Err(7));
    let fsck = novafs::fsck::check(region.clone(), &|_, _| {}).unwrap();
    assert_eq!(
        fsck.problems,
        [
            "the superblock records consistency mode 7, which is neither 0 (strict) nor 1 (relaxed): \
          no mount takes the image; fsck --repair resets it to strict"
        ]
    );
    let done = novafs::fsck::repair(region.clone()).unwrap();
    assert!(
        done.contains(&"consistency mode 7 in the superblock reset to strict".to_string()),
        "{done:?}"
    );
    assert_eq!(copies(&region).map(|sb| sb.consistency), [CONSISTENCY_STRICT; 2]);
    assert_eq!(relaxed_bit(&region), (false, false));
    assert_fsck_clean(&region);
    let fs = open(&region, None).unwrap();
    assert_eq!(fs.consistency(), Strict);
    fs.unmount().unwrap();
}

#[test]
fn inspect_shows_the_default_mode_and_a_live_relaxed_mount() {
    let region = image(Relaxed);
    let g = novafs::inspect(region.clone()).unwrap().geometry;
    assert_eq!((g.consistency, g.relaxed_mount), (Ok(Relaxed), false));
    let fs = open(&region, None).unwrap();
    let g = novafs::inspect(region.clone()).unwrap().geometry;
    assert_eq!((g.consistency, g.relaxed_mount), (Ok(Relaxed), true));
    fs.unmount().unwrap();
    let fs = open(&region, Some(Strict)).unwrap();
    let g = novafs::inspect(region.clone()).unwrap().geometry;
    assert_eq!((g.consistency, g.relaxed_mount), (Ok(Relaxed), false));
    fs.unmount().unwrap();
}

#[test]
fn tune_changes_the_default_mode_of_an_unmounted_image_only() {
    let region = image(Strict);
    assert_eq!(novafs::tune::set_consistency(&*region, Relaxed).unwrap(), Strict);
    assert_eq!(copies(&region).map(|sb| sb.consistency), [CONSISTENCY_RELAXED; 2]);
    assert_eq!(novafs::tune::set_consistency(&*region, Relaxed).unwrap(), Relaxed);
    let fs = open(&region, None).unwrap();
    assert_eq!(fs.consistency(), Relaxed);
    // A mounted image (its superblock says so) is refused, and unchanged.
    let err = novafs::tune::set_consistency(&*region, Strict).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid argument: the image is mounted, or was not cleanly unmounted: unmount it \
         (or mount and unmount it, or run fsck --repair) first"
    );
    assert_eq!(copies(&region).map(|sb| sb.consistency), [CONSISTENCY_RELAXED; 2]);
    fs.unmount().unwrap();
    assert_eq!(novafs::tune::set_consistency(&*region, Strict).unwrap(), Relaxed);
    let fs = open(&region, None).unwrap();
    assert_eq!(fs.consistency(), Strict);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

#[test]
fn a_rebuild_by_tune_keeps_the_default_mode() {
    let region = image(Relaxed);
    let fs = open(&region, None).unwrap();
    fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    fs.unmount().unwrap();
    let to: Arc<dyn Region> = Arc::new(MemRegion::new(region.len()));
    let mut features = novafs::tune::Features::of(&*region).unwrap();
    features.data_parity = false;
    novafs::tune::rebuild(region, to.clone(), features, None, &|_, _| {}).unwrap();
    assert_eq!(copies(&to).map(|sb| sb.consistency), [CONSISTENCY_RELAXED; 2]);
    let fs = open(&to, None).unwrap();
    assert_eq!(fs.consistency(), Relaxed);
    fs.unmount().unwrap();
}
