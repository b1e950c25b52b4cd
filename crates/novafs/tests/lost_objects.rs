//! Loss is never silent: an inode with no good copy left (both copies of
//! its record, or of its log, damaged) keeps its names. They are listed
//! by readdir, and lookup, stat and open answer EIO (as ext4 answers an
//! inode that fails its checksum), never ENOENT, until `fsck --repair`
//! removes them; unlink removes such a name meanwhile, and a rename over
//! it replaces it. The inode's number is not given to a new file.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::*;
use novafs::inject::{corrupt, Spec, Target, Which};
use novafs::{Attr, Error, Fs, HealthCounts, RENAME_EXCHANGE, ROOT_INO};
use pm::Region;

/// The tree: /a (a file, also named /d/a2), /b, /d (a directory), /d/c.
struct Tree {
    a: u64,
    b: u64,
    d: u64,
    c: u64,
}

fn contents(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed)).collect()
}

/// The tree on a one-shard image (new inodes take the lowest free
/// number, so a reused number shows), unmounted cleanly or, `crashed`,
/// dropped mounted: the next mount scans the inode tables.
fn tree(crashed: bool) -> (Arc<dyn Region>, Tree) {
    let region = fresh(32, 1);
    let fs = mount(&region);
    let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    fs.write(a, 0, &contents(1, 10_000)).unwrap();
    let b = fs.create(ROOT_INO, b"b", 0o644, 0, 0).unwrap().ino;
    fs.write(b, 0, &contents(2, 5_000)).unwrap();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    let c = fs.create(d, b"c", 0o644, 0, 0).unwrap().ino;
    fs.write(c, 0, &contents(3, 100)).unwrap();
    fs.link(a, d, b"a2").unwrap();
    if crashed {
        drop(fs); // not unmounted: a crash
        return (region, Tree { a, b, d, c });
    }
    fs.unmount().unwrap();
    (region, Tree { a, b, d, c })
}

/// Damages both copies of `target` of inode `ino`: `bytes` bytes (all of
/// a record or a log page when that many), the same bytes of each.
fn destroy(region: &Arc<dyn Region>, target: Target, ino: u64, seed: u64, bytes: u64) {
    let spec = Spec::new(target).which(Which::Both).ino(ino).seed(seed).bytes(bytes);
    let damage = corrupt(&**region, &spec).unwrap();
    assert_eq!(damage.len(), 2, "{damage:?}");
}

fn errno<T: std::fmt::Debug>(r: Result<T, Error>) -> i32 {
    r.unwrap_err().errno()
}

/// Every entry of `dir` readdir_plus lists (without "." and ".."), with
/// the inode of its attributes, None when it has none (lost).
fn plus(fs: &Fs, dir: u64) -> Vec<(String, Option<u64>)> {
    let mut v = Vec::new();
    fs.readdir_plus(dir, 0, u64::MAX, |e, a: Option<&Attr>| {
        if e.name != b"." && e.name != b".." {
            v.push((String::from_utf8(e.name).unwrap(), a.map(|a| a.ino)));
        }
        false
    })
    .unwrap();
    v.sort();
    v
}

fn fsck_problems(region: &Arc<dyn Region>) -> Vec<String> {
    novafs::fsck::check(region.clone(), &|_, _| {}).unwrap().problems
}

fn fsck_repair(region: &Arc<dyn Region>) {
    novafs::fsck::repair(region.clone()).unwrap();
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn names_of_a_lost_inode_stay_listed_and_answer_eio_until_fsck_repair_removes_them() {
    for crashed in [false, true] {
        for seed in 1..=3 {
            let why = format!("crashed {crashed}, seed {seed}");
            let (region, t) = tree(crashed);
            destroy(&region, Target::Inode, t.a, seed, 128);
            let fs = mount(&region);
            assert_eq!(fs.mount_report().clean, !crashed, "{why}");

            assert_eq!(errno(fs.lookup(ROOT_INO, b"a")), libc::EIO, "{why}");
            assert_eq!(errno(fs.lookup(t.d, b"a2")), libc::EIO, "{why}");
            assert_eq!(errno(fs.resolve("/d/a2")), libc::EIO, "{why}");
            assert_eq!(errno(fs.getattr(t.a)), libc::EIO, "{why}");
            assert_eq!(errno(fs.open_handle(t.a)), libc::EIO, "{why}");
            assert_eq!(names(&fs, ROOT_INO), s(&["a", "b", "d"]), "{why}");
            assert_eq!(names(&fs, t.d), s(&["a2", "c"]), "{why}");
            let listed = vec![
                ("a".to_string(), None),
                ("b".to_string(), Some(t.b)),
                ("d".to_string(), Some(t.d)),
            ];
            assert_eq!(plus(&fs, ROOT_INO), listed, "{why}");
            // The rest reads as written.
            assert_eq!(read_all(&fs, t.b), contents(2, 5_000), "{why}");
            assert_eq!(read_all(&fs, t.c), contents(3, 100), "{why}");
            // Counted once (the scan met it first after a crash).
            let h: HealthCounts = fs.health();
            assert_eq!((h.losses, h.last_loss_ino), (1, t.a), "{why}: {h:?}");

            // A lost source cannot move, nor a lost name be exchanged.
            assert_eq!(errno(fs.rename(ROOT_INO, b"a", ROOT_INO, b"z", 0)), libc::EIO, "{why}");
            assert_eq!(
                errno(fs.rename(ROOT_INO, b"b", ROOT_INO, b"a", RENAME_EXCHANGE)),
                libc::EIO,
                "{why}"
            );
            // New files never take the lost inode's number: its names
            // would lead to them.
            for i in 0..8 {
                let n = fs
                    .create(ROOT_INO, format!("new{i}").as_bytes(), 0o644, 0, 0)
                    .unwrap()
                    .ino;
                assert_ne!(n, t.a, "{why}");
            }
            for i in 0..8 {
                fs.unlink(ROOT_INO, format!("new{i}").as_bytes()).unwrap();
            }
            // unlink removes one name; the other still answers EIO.
            fs.unlink(t.d, b"a2").unwrap();
            assert_eq!(errno(fs.lookup(t.d, b"a2")), libc::ENOENT, "{why}");
            assert_eq!(names(&fs, t.d), s(&["c"]), "{why}");
            assert_eq!(errno(fs.lookup(ROOT_INO, b"a")), libc::EIO, "{why}");
            fs.unmount().unwrap();

            // fsck reports what is left; its repair removes the name.
            let problems = fsck_problems(&region);
            let expected = format!("directory {ROOT_INO}: entry 'a' points to missing inode {}", t.a);
            assert!(problems.contains(&expected), "{why}: {problems:?}");
            assert!(!problems.iter().any(|p| p.contains("'a2'")), "{why}: {problems:?}");
            fsck_repair(&region);
            let fs = mount(&region);
            assert_eq!(errno(fs.lookup(ROOT_INO, b"a")), libc::ENOENT, "{why}");
            assert_eq!(names(&fs, ROOT_INO), s(&["b", "d"]), "{why}");
            assert_eq!(read_all(&fs, t.b), contents(2, 5_000), "{why}");
            fs.unmount().unwrap();
            // And leaves nothing for the next check: the lost inode's slot
            // is free again, its pages too.
            assert_eq!(fsck_problems(&region), Vec::<String>::new(), "{why}");
        }
    }
}

#[test]
fn a_rename_over_the_name_of_a_lost_file_replaces_it() {
    let (region, t) = tree(false);
    destroy(&region, Target::Inode, t.a, 7, 128);
    let fs = mount(&region);
    fs.rename(ROOT_INO, b"b", ROOT_INO, b"a", 0).unwrap();
    let now = fs.lookup(ROOT_INO, b"a").unwrap();
    assert_eq!(now.ino, t.b);
    assert_eq!(read_all(&fs, now.ino), contents(2, 5_000));
    assert_eq!(names(&fs, ROOT_INO), s(&["a", "d"]));
    // The lost inode's other name stays, answering EIO.
    assert_eq!(errno(fs.lookup(t.d, b"a2")), libc::EIO);
    // Over a lost name from another directory too.
    fs.rename(t.d, b"c", t.d, b"a2", 0).unwrap();
    assert_eq!(fs.lookup(t.d, b"a2").unwrap().ino, t.c);
    fs.unmount().unwrap();
    // Nothing names the lost inode any more: fsck finds no dangling name.
    let problems = fsck_problems(&region);
    assert!(
        !problems.iter().any(|p| p.contains("points to missing inode")),
        "{problems:?}"
    );
}

#[test]
fn a_directory_or_file_whose_log_is_lost_keeps_its_name_answering_eio() {
    for seed in 1..=3 {
        let why = format!("seed {seed}");
        let (region, t) = tree(false);
        destroy(&region, Target::LogPage, t.d, seed, 4096);
        destroy(&region, Target::LogPage, t.b, seed, 4096);
        let fs = mount(&region);
        assert_eq!(errno(fs.lookup(ROOT_INO, b"d")), libc::EIO, "{why}");
        assert_eq!(errno(fs.lookup(ROOT_INO, b"b")), libc::EIO, "{why}");
        assert_eq!(names(&fs, ROOT_INO), s(&["a", "b", "d"]), "{why}");
        let listed = vec![
            ("a".to_string(), Some(t.a)),
            ("b".to_string(), None),
            ("d".to_string(), None),
        ];
        assert_eq!(plus(&fs, ROOT_INO), listed, "{why}");
        // rmdir cannot tell whether a lost directory is empty.
        assert_eq!(errno(fs.rmdir(ROOT_INO, b"d")), libc::EIO, "{why}");
        assert_eq!(errno(fs.unlink(ROOT_INO, b"d")), libc::EISDIR, "{why}");
        assert_eq!(errno(fs.rmdir(ROOT_INO, b"b")), libc::ENOTDIR, "{why}");
        fs.unlink(ROOT_INO, b"b").unwrap();
        assert_eq!(names(&fs, ROOT_INO), s(&["a", "d"]), "{why}");
        assert_eq!(read_all(&fs, t.a), contents(1, 10_000), "{why}");
        fs.unmount().unwrap();
    }
}

/// After a crash the scan reads each slot's state word: one damaged in
/// the primary alone is read from the replica, so the inode stays live,
/// its pages stay its own and its number stays taken.
#[test]
fn after_a_crash_a_damaged_primary_state_word_gives_way_to_the_replica() {
    for seed in 1..=3 {
        let why = format!("seed {seed}");
        let (region, t) = tree(true);
        let spec = Spec::new(Target::Inode)
            .which(Which::Primary)
            .ino(t.a)
            .seed(seed)
            .bytes(128);
        corrupt(&*region, &spec).unwrap();
        let fs = mount(&region);
        assert!(!fs.mount_report().clean, "{why}");
        // Fill the free space the scan found with other files' data.
        let mut n = 0;
        loop {
            let f = fs
                .create(ROOT_INO, format!("fill{n}").as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino;
            n += 1;
            if fs.write(f, 0, &contents(9, 1 << 20)).is_err() {
                break;
            }
        }
        // Compared whole, not printed: a failure reads other files' pages.
        assert!(read_all(&fs, t.a) == contents(1, 10_000), "{why}: /a changed");
        assert_eq!(fs.lookup(t.d, b"a2").unwrap().ino, t.a, "{why}");
        assert_eq!(fs.health().losses, 0, "{why}");
        fs.unmount().unwrap();
    }
}
