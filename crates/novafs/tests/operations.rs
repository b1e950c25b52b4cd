//! Scenario tests of the POSIX surface, each checked again after a clean
//! remount and after a crash (drop without unmount).
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use novafs::{
    Error, FileType, SetAttr, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE, RENAME_EXCHANGE,
    RENAME_NOREPLACE, ROOT_INO, SEEK_DATA, SEEK_HOLE,
};

#[test]
fn create_write_read_survives_remount_and_crash() {
    let region = fresh(64, 2);
    let fs = mount(&region);
    let f = fs.create(ROOT_INO, b"hello", 0o644, 1, 2).unwrap();
    assert_eq!(f.kind, FileType::RegularFile);
    assert_eq!((f.uid, f.gid, f.perm, f.nlink), (1, 2, 0o644, 1));
    let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(fs.write(f.ino, 0, &data).unwrap(), data.len());
    assert_eq!(read_all(&fs, f.ino), data);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
    let fs = mount(&region);
    assert!(fs.mount_report().clean);
    let f2 = fs.lookup(ROOT_INO, b"hello").unwrap();
    assert_eq!(f2.ino, f.ino);
    assert_eq!(read_all(&fs, f.ino), data);
    fs.write(f.ino, 5000, b"XYZ").unwrap();
    drop(fs); // crash
    assert_fsck_clean(&region);
    let fs = mount(&region);
    assert!(!fs.mount_report().clean);
    let mut expect = data.clone();
    expect[5000..5003].copy_from_slice(b"XYZ");
    assert_eq!(read_all(&fs, f.ino), expect);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// The crash scan reports each shard's thread: the live inodes it
/// visited and the sizes of the regular files among them, which add up to
/// the mount's totals. A clean mount scans nothing.
#[test]
fn the_crash_scan_reports_each_shard() {
    let region = fresh(64, 2);
    let fs = mount(&region);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
    let sizes = [0usize, 1, 4096, 10_000, 70_000];
    for (i, &n) in sizes.iter().enumerate() {
        let f = fs.create(d.ino, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap();
        fs.write(f.ino, 0, &vec![7u8; n]).unwrap();
    }
    fs.symlink(d.ino, b"link", b"a target that is no file data", 0, 0)
        .unwrap();
    fs.unmount().unwrap();
    let fs = mount(&region);
    assert!(fs.mount_report().clean);
    assert!(fs.mount_report().shards.is_empty());
    drop(fs); // crash
    let fs = mount(&region);
    let rep = fs.mount_report();
    assert!(!rep.clean);
    assert_eq!(rep.shards.len(), 2);
    assert_eq!(rep.shards.iter().map(|s| s.inodes).sum::<u64>(), rep.scanned_inodes);
    // The root, d, the five files and the symlink.
    assert_eq!(rep.scanned_inodes, 8);
    let total: usize = sizes.iter().sum();
    assert_eq!(rep.shards.iter().map(|s| s.file_bytes).sum::<u64>(), total as u64);
    assert!(rep.shards.iter().all(|s| s.elapsed <= rep.elapsed));
    fs.unmount().unwrap();
}

#[test]
fn directories_and_namespace_errors() {
    let region = fresh(64, 2);
    let fs = mount(&region);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
    assert_eq!(fs.getattr(ROOT_INO).unwrap().nlink, 3);
    assert!(matches!(fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0), Err(Error::Exists)));
    assert!(matches!(
        fs.create(ROOT_INO, &[b'a'; 256], 0o644, 0, 0),
        Err(Error::NameTooLong)
    ));
    fs.create(d.ino, b"f", 0o600, 0, 0).unwrap();
    assert!(matches!(fs.rmdir(ROOT_INO, b"d"), Err(Error::NotEmpty)));
    assert!(matches!(fs.unlink(ROOT_INO, b"d"), Err(Error::IsDir)));
    assert!(matches!(fs.rmdir(d.ino, b"f"), Err(Error::NotDir)));
    assert_eq!(fs.lookup(d.ino, b"..").unwrap().ino, ROOT_INO);
    fs.unlink(d.ino, b"f").unwrap();
    assert!(matches!(fs.lookup(d.ino, b"f"), Err(Error::NotFound)));
    fs.rmdir(ROOT_INO, b"d").unwrap();
    assert_eq!(fs.getattr(ROOT_INO).unwrap().nlink, 2);
    assert!(matches!(fs.getattr(d.ino), Err(Error::NotFound)));
    let s = fs.symlink(ROOT_INO, b"ln", b"/some/where", 0, 0).unwrap();
    assert_eq!(fs.readlink(s.ino).unwrap(), b"/some/where");
    let n = fs.mknod(ROOT_INO, b"fifo", libc::S_IFIFO | 0o644, 0, 0, 0).unwrap();
    assert_eq!(n.kind, FileType::NamedPipe);
    let c = fs.mknod(ROOT_INO, b"chr", libc::S_IFCHR | 0o600, 0x0103, 0, 0).unwrap();
    assert_eq!(c.rdev, 0x0103);
    drop(fs);
    assert_fsck_clean(&region);
    let fs = mount(&region);
    assert_eq!(names(&fs, ROOT_INO), vec!["chr", "fifo", "ln"]);
    assert_eq!(fs.readlink(s.ino).unwrap(), b"/some/where");
    assert_eq!(fs.getattr(c.ino).unwrap().rdev, 0x0103);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

#[test]
fn rename_forms() {
    let region = fresh(64, 2);
    let fs = mount(&region);
    let a = fs.mkdir(ROOT_INO, b"a", 0o755, 0, 0).unwrap();
    let b = fs.mkdir(ROOT_INO, b"b", 0o755, 0, 0).unwrap();
    let f = fs.create(a.ino, b"f", 0o644, 0, 0).unwrap();
    fs.write(f.ino, 0, b"one").unwrap();
    let g = fs.create(b.ino, b"g", 0o644, 0, 0).unwrap();
    fs.write(g.ino, 0, b"two").unwrap();
    // Within a directory.
    fs.rename(a.ino, b"f", a.ino, b"f2", 0).unwrap();
    assert_eq!(names(&fs, a.ino), vec!["f2"]);
    // Across directories over an existing file.
    fs.rename(a.ino, b"f2", b.ino, b"g", 0).unwrap();
    assert_eq!(names(&fs, a.ino), Vec::<String>::new());
    assert_eq!(fs.lookup(b.ino, b"g").unwrap().ino, f.ino);
    assert!(matches!(fs.getattr(g.ino), Err(Error::NotFound)));
    // NOREPLACE and EXCHANGE.
    let h = fs.create(a.ino, b"h", 0o644, 0, 0).unwrap();
    assert!(matches!(
        fs.rename(a.ino, b"h", b.ino, b"g", RENAME_NOREPLACE),
        Err(Error::Exists)
    ));
    fs.rename(a.ino, b"h", b.ino, b"g", RENAME_EXCHANGE).unwrap();
    assert_eq!(fs.lookup(b.ino, b"g").unwrap().ino, h.ino);
    assert_eq!(fs.lookup(a.ino, b"h").unwrap().ino, f.ino);
    // Directory moves fix "..", link counts, and refuse loops.
    let sub = fs.mkdir(a.ino, b"sub", 0o755, 0, 0).unwrap();
    assert!(matches!(
        fs.rename(ROOT_INO, b"a", sub.ino, b"x", 0),
        Err(Error::Invalid(_))
    ));
    fs.rename(a.ino, b"sub", b.ino, b"sub", 0).unwrap();
    assert_eq!(fs.lookup(sub.ino, b"..").unwrap().ino, b.ino);
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 2);
    assert_eq!(fs.getattr(b.ino).unwrap().nlink, 3);
    // Directory over an empty directory; then over a non-empty one fails.
    let e = fs.mkdir(a.ino, b"e", 0o755, 0, 0).unwrap();
    fs.rename(b.ino, b"sub", a.ino, b"e", 0).unwrap();
    assert!(matches!(fs.getattr(e.ino), Err(Error::NotFound)));
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 3);
    assert_eq!(fs.getattr(b.ino).unwrap().nlink, 2);
    fs.create(sub.ino, b"x", 0o644, 0, 0).unwrap();
    fs.mkdir(b.ino, b"full", 0o755, 0, 0).unwrap();
    let full = fs.lookup(b.ino, b"full").unwrap();
    fs.create(full.ino, b"y", 0o644, 0, 0).unwrap();
    assert!(matches!(
        fs.rename(a.ino, b"e", b.ino, b"full", 0),
        Err(Error::NotEmpty)
    ));
    drop(fs);
    assert_fsck_clean(&region);
    let fs = mount(&region);
    assert_eq!(names(&fs, a.ino), vec!["e", "h"]);
    assert_eq!(names(&fs, b.ino), vec!["full", "g"]);
    assert_eq!(read_all(&fs, f.ino), b"one");
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// rename(2) sets the ctime of what it moves, both inodes of an exchange,
/// and keeps it across a crash, as tmpfs and ext4 do (xfstests generic/003).
#[test]
fn rename_changes_the_moved_inodes_ctime() {
    let region = fresh(32, 2);
    let fs = mount(&region);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    let g = fs.create(ROOT_INO, b"g", 0o644, 0, 0).unwrap();
    let old = SetAttr::default().ctime(1_000_000_000);
    for ino in [d.ino, f.ino, g.ino] {
        fs.setattr(ino, &old).unwrap();
    }
    let ctime = |fs: &novafs::Fs, ino| fs.getattr(ino).unwrap().ctime;
    fs.rename(ROOT_INO, b"f", ROOT_INO, b"f2", 0).unwrap();
    fs.rename(ROOT_INO, b"d", ROOT_INO, b"g", RENAME_EXCHANGE).unwrap();
    let moved = [ctime(&fs, f.ino), ctime(&fs, d.ino), ctime(&fs, g.ino)];
    assert!(moved.iter().all(|&c| c > 1_000_000_000), "{moved:?}");
    drop(fs); // a crash
    let fs = mount(&region);
    assert_eq!([ctime(&fs, f.ino), ctime(&fs, d.ino), ctime(&fs, g.ino)], moved);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// A directory's size and blocks are those of its log, as ext4 reports a
/// directory's blocks: one page when new, more as names are added.
#[test]
fn a_directory_reports_the_pages_its_log_takes() {
    let region = fresh(32, 2);
    let fs = mount(&region);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
    assert_eq!((d.size, d.blocks), (4096, 8));
    for i in 0..200 {
        fs.create(d.ino, format!("{i:0>100}").as_bytes(), 0o644, 0, 0).unwrap();
    }
    let a = fs.getattr(d.ino).unwrap();
    assert!(a.size > 4096 && a.size.is_multiple_of(4096), "{}", a.size);
    assert_eq!(a.blocks, a.size / 512);
    fs.unmount().unwrap();
}

/// A removed directory the kernel still holds (a lookup: someone's working
/// directory; or an open handle) stays until the last reference goes:
/// stat says nlink 0, it lists nothing and takes no names. Then it is
/// gone; after a crash while held, the next mount reclaims it.
#[test]
fn a_removed_directory_lives_until_its_last_reference() {
    let region = fresh(32, 2);
    let fs = mount(&region);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
    let e = fs.mkdir(ROOT_INO, b"e", 0o755, 0, 0).unwrap();
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    fs.remember(d.ino).unwrap();
    fs.open_handle(e.ino).unwrap();
    // A file's lookups are not counted: forgetting them changes nothing.
    fs.remember(f.ino).unwrap();
    fs.forget(f.ino, 5).unwrap();
    fs.rmdir(ROOT_INO, b"d").unwrap();
    fs.rmdir(ROOT_INO, b"e").unwrap();
    for ino in [d.ino, e.ino] {
        assert_eq!(fs.getattr(ino).unwrap().nlink, 0);
        let mut listed = 0;
        fs.readdir(ino, 0, |_| {
            listed += 1;
            false
        })
        .unwrap();
        assert_eq!(listed, 0, "not even . and ..");
        assert!(matches!(fs.create(ino, b"x", 0o644, 0, 0), Err(Error::NotFound)));
        assert!(matches!(fs.mkdir(ino, b"x", 0o755, 0, 0), Err(Error::NotFound)));
        assert!(matches!(fs.link(f.ino, ino, b"x"), Err(Error::NotFound)));
        assert!(matches!(fs.rename(ROOT_INO, b"f", ino, b"x", 0), Err(Error::NotFound)));
    }
    assert!(matches!(fs.lookup(ROOT_INO, b"d"), Err(Error::NotFound)));
    fs.forget(d.ino, 1).unwrap();
    assert!(matches!(fs.getattr(d.ino), Err(Error::NotFound)));
    assert_eq!(fs.getattr(f.ino).unwrap().nlink, 1);
    drop(fs); // a crash while e is still held
    let fs = mount(&region);
    assert_eq!(fs.mount_report().orphans_reclaimed, 1);
    assert!(matches!(fs.getattr(e.ino), Err(Error::NotFound)));
    assert_eq!(names(&fs, ROOT_INO), ["f"]);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// A listing bounded where it started ends, and returns every entry that
/// stayed put once, while each entry it returns is renamed within the
/// directory (which gives it a new offset) as it goes (generic/736).
#[test]
fn a_listing_ends_while_its_entries_are_renamed() {
    let region = fresh(32, 2);
    let fs = mount(&region);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
    for i in 0..500 {
        fs.create(d.ino, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap();
    }
    let end = fs.listing_end(d.ino).unwrap();
    let (mut offset, mut seen) = (0, Vec::new());
    loop {
        let mut batch = Vec::new();
        fs.readdir_to(d.ino, offset, end, |e| {
            batch.push(e);
            batch.len() == 32
        })
        .unwrap();
        let Some(last) = batch.last() else { break };
        offset = last.next_offset;
        for e in batch.into_iter().filter(|e| e.name.starts_with(b"f")) {
            let name = String::from_utf8(e.name).unwrap();
            fs.rename(d.ino, name.as_bytes(), d.ino, format!("renamed-{name}").as_bytes(), 0)
                .unwrap();
            seen.push(name);
        }
        assert!(seen.len() <= 500, "the listing goes on");
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 500);
    assert_eq!(names(&fs, d.ino).len(), 500);
    fs.unmount().unwrap();
}

/// FALLOC_FL_ZERO_RANGE: the range reads as zeros and is allocated, the
/// bytes around it stay, with KEEP_SIZE the size too; without it the file
/// grows; all in one commit that survives a crash.
#[test]
fn zero_range_zeroes_allocates_and_grows() {
    let region = fresh(32, 2);
    let fs = mount(&region);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    let data: Vec<u8> = (0..4 * 4096 + 100).map(|i| (i % 251) as u8 + 1).collect();
    fs.write(f, 0, &data).unwrap();
    let mut want = data.clone();
    fs.fallocate(f, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 1000, 9000)
        .unwrap();
    want[1000..10_000].fill(0);
    assert_eq!(read_all(&fs, f), want);
    // Past the end, without KEEP_SIZE: the file grows, all of it zeros
    // and allocated (no hole to seek to before the end).
    fs.fallocate(f, FALLOC_FL_ZERO_RANGE, 20_000, 30_000).unwrap();
    want.resize(50_000, 0);
    assert_eq!(read_all(&fs, f), want);
    let a = fs.getattr(f).unwrap();
    assert_eq!(a.size, 50_000);
    assert_eq!(
        fs.lseek(f, 20_480, SEEK_HOLE).unwrap(),
        49_152,
        "zeroed whole pages are allocated"
    );
    assert!(matches!(
        fs.fallocate(f, FALLOC_FL_ZERO_RANGE | FALLOC_FL_PUNCH_HOLE, 0, 10),
        Err(Error::NotSupported(_))
    ));
    drop(fs); // a crash
    let fs = mount(&region);
    assert_eq!(read_all(&fs, f), want);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// chattr +i and +a, enforced by every operation, kept across a crash and
/// changeable (only the flags) while set; an unknown flag is EOPNOTSUPP.
#[test]
fn immutable_and_append_only_flags_are_enforced() {
    use novafs::probe::layout::{FLAG_APPEND, FLAG_IMMUTABLE, FLAG_NODUMP};
    fn eperm<T>(r: novafs::Result<T>) -> bool {
        matches!(r, Err(Error::NotPermitted))
    }
    let region = fresh(32, 2);
    let fs = mount(&region);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    let f = fs.create(d, b"f", 0o644, 0, 0).unwrap().ino;
    fs.write(f, 0, b"abc").unwrap();
    let other = fs.create(ROOT_INO, b"other", 0o644, 0, 0).unwrap().ino;
    let chmod = SetAttr::default().mode(0o600);
    // Immutable file: no data, attribute, name or link change.
    assert_eq!(fs.set_flags(f, FLAG_IMMUTABLE).unwrap().flags, FLAG_IMMUTABLE);
    assert!(eperm(fs.write(f, 3, b"d")));
    assert!(eperm(fs.setattr(f, &chmod)));
    assert!(eperm(fs.fallocate(f, 0, 0, 4096)));
    assert!(eperm(fs.unlink(d, b"f")));
    assert!(eperm(fs.rename(d, b"f", d, b"g", 0)));
    assert!(eperm(fs.rename(ROOT_INO, b"other", d, b"f", 0)), "replacing it");
    assert!(eperm(fs.link(f, ROOT_INO, b"f2")));
    assert!(eperm(fs.check_open(f, true, true)));
    fs.check_open(f, false, false).unwrap();
    // Append-only file: appends only.
    fs.set_flags(f, FLAG_APPEND | FLAG_NODUMP).unwrap();
    assert!(eperm(fs.check_open(f, true, false)));
    fs.check_open(f, true, true).unwrap();
    fs.write(f, 3, b"def").unwrap();
    assert!(eperm(fs.write(f, 0, b"X")));
    assert!(eperm(fs.setattr(f, &SetAttr::default().size(0))));
    assert!(eperm(fs.fallocate(
        f,
        FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
        0,
        4096
    )));
    fs.fallocate(f, FALLOC_FL_KEEP_SIZE, 0, 8192).unwrap();
    assert!(eperm(fs.unlink(d, b"f")));
    // Immutable directory: no name added or removed; its files still change.
    fs.set_flags(f, 0).unwrap();
    fs.set_flags(d, FLAG_IMMUTABLE).unwrap();
    assert!(eperm(fs.create(d, b"new", 0o644, 0, 0)));
    assert!(eperm(fs.unlink(d, b"f")));
    assert!(eperm(fs.rename(ROOT_INO, b"other", d, b"o", 0)));
    fs.write(f, 0, b"ABC").unwrap();
    // Append-only directory: names come, none go.
    fs.set_flags(d, FLAG_APPEND).unwrap();
    fs.rename(ROOT_INO, b"other", d, b"o", 0).unwrap();
    assert!(eperm(fs.unlink(d, b"o")));
    assert!(matches!(fs.set_flags(f, 0x4000), Err(Error::NotSupported(_))));
    fs.set_flags(other, FLAG_NODUMP).unwrap();
    drop(fs); // a crash
    let fs = mount(&region);
    assert_eq!(fs.getattr(d).unwrap().flags, FLAG_APPEND);
    assert_eq!(fs.getattr(other).unwrap().flags, FLAG_NODUMP);
    assert_eq!(read_all(&fs, f), b"ABCdef");
    assert!(eperm(fs.unlink(d, b"o")));
    fs.set_flags(d, 0).unwrap();
    fs.unlink(d, b"o").unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

#[test]
fn hard_links_and_open_unlinked_files() {
    let region = fresh(64, 2);
    let fs = mount(&region);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    fs.write(f.ino, 0, &[7u8; 9000]).unwrap();
    fs.link(f.ino, ROOT_INO, b"g").unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().nlink, 2);
    fs.unlink(ROOT_INO, b"f").unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().nlink, 1);
    fs.open_handle(f.ino).unwrap();
    fs.unlink(ROOT_INO, b"g").unwrap();
    assert_eq!(read_all(&fs, f.ino), vec![7u8; 9000]);
    let free_before = fs.statfs().blocks_free;
    fs.release_handle(f.ino).unwrap();
    assert!(matches!(fs.getattr(f.ino), Err(Error::NotFound)));
    assert!(fs.statfs().blocks_free > free_before);
    // Open, unlink, crash: the next mount reclaims it.
    let h = fs.create(ROOT_INO, b"h", 0o644, 0, 0).unwrap();
    fs.write(h.ino, 0, &[1u8; 100_000]).unwrap();
    fs.open_handle(h.ino).unwrap();
    fs.unlink(ROOT_INO, b"h").unwrap();
    let free_open = fs.statfs().blocks_free;
    drop(fs);
    assert_fsck_clean(&region);
    let fs = mount(&region);
    assert_eq!(fs.mount_report().orphans_reclaimed, 1);
    assert!(fs.statfs().blocks_free > free_open);
    assert!(matches!(fs.getattr(h.ino), Err(Error::NotFound)));
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// `relink` names an unlinked open file again, and only such a file; it
/// then lives on after its handle goes, across a remount.
#[test]
fn relink_gives_an_unlinked_open_file_a_name_again() {
    let region = fresh(64, 2);
    let fs = mount(&region);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    fs.write(f.ino, 0, &[3u8; 7000]).unwrap();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
    assert!(
        matches!(fs.relink(f.ino, d.ino, b"again"), Err(Error::NotFound)),
        "it has a name"
    );
    fs.open_handle(f.ino).unwrap();
    fs.unlink(ROOT_INO, b"f").unwrap();
    assert!(matches!(
        fs.relink(f.ino, d.ino, b"."),
        Err(Error::Invalid(_)) | Err(Error::Exists)
    ));
    let a = fs.relink(f.ino, d.ino, b"again").unwrap();
    assert_eq!(a.nlink, 1);
    fs.release_handle(f.ino).unwrap();
    assert_eq!(fs.lookup(d.ino, b"again").unwrap().ino, f.ino);
    // Unlinked and closed: gone, so nothing to name.
    let g = fs.create(ROOT_INO, b"g", 0o644, 0, 0).unwrap();
    fs.unlink(ROOT_INO, b"g").unwrap();
    assert!(matches!(fs.relink(g.ino, d.ino, b"g"), Err(Error::NotFound)));
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
    let fs = mount(&region);
    assert_eq!(fs.mount_report().orphans_reclaimed, 0);
    assert_eq!(read_all(&fs, fs.lookup(d.ino, b"again").unwrap().ino), vec![3u8; 7000]);
    fs.unmount().unwrap();
}

#[test]
fn truncate_fallocate_holes_and_seek() {
    let region = fresh(64, 2);
    let fs = mount(&region);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    fs.write(f.ino, 0, &[0xAA; 10_000]).unwrap();
    fs.setattr(f.ino, &SetAttr::default().size(5000)).unwrap();
    fs.setattr(f.ino, &SetAttr::default().size(12_000)).unwrap();
    let got = read_all(&fs, f.ino);
    assert_eq!(&got[..5000], &[0xAA; 5000][..]);
    assert!(got[5000..].iter().all(|&b| b == 0), "extended bytes read as zero");
    // Sparse write far away: the hole stays unallocated.
    fs.write(f.ino, 1 << 30, b"end").unwrap();
    let a = fs.getattr(f.ino).unwrap();
    assert_eq!(a.size, (1 << 30) + 3);
    assert_eq!(a.blocks, 3 * 8, "two pages left by the truncate, one at 1 GiB");
    assert_eq!(fs.lseek(f.ino, 0, SEEK_DATA).unwrap(), 0);
    assert_eq!(fs.lseek(f.ino, 0, SEEK_HOLE).unwrap(), 2 * 4096);
    assert_eq!(fs.lseek(f.ino, 5 * 4096, SEEK_DATA).unwrap(), 1 << 30);
    assert!(matches!(fs.lseek(f.ino, a.size, SEEK_DATA), Err(Error::NoSuchOffset)));
    // Punch a hole through the middle of the first pages.
    fs.fallocate(f.ino, 0x03, 100, 5000).unwrap();
    let mut buf = vec![0u8; 6000];
    fs.read(f.ino, 0, &mut buf).unwrap();
    assert_eq!(&buf[..100], &[0xAA; 100][..]);
    assert!(buf[100..5100].iter().all(|&b| b == 0));
    assert_eq!(&buf[5100..6000], &[0u8; 900][..]);
    // Preallocate with KEEP_SIZE and without.
    let g = fs.create(ROOT_INO, b"g", 0o644, 0, 0).unwrap();
    fs.fallocate(g.ino, 0x01, 0, 8192).unwrap();
    assert_eq!(fs.getattr(g.ino).unwrap().size, 0);
    assert_eq!(fs.getattr(g.ino).unwrap().blocks, 16);
    fs.fallocate(g.ino, 0, 0, 10_000).unwrap();
    assert_eq!(fs.getattr(g.ino).unwrap().size, 10_000);
    assert_eq!(read_all(&fs, g.ino), vec![0u8; 10_000]);
    assert!(matches!(fs.fallocate(g.ino, 0x02, 0, 10), Err(Error::Invalid(_))));
    drop(fs);
    assert_fsck_clean(&region);
    let fs = mount(&region);
    let mut buf2 = vec![0u8; 6000];
    fs.read(f.ino, 0, &mut buf2).unwrap();
    assert_eq!(buf, buf2);
    assert_eq!(fs.getattr(f.ino).unwrap().size, (1 << 30) + 3);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

#[test]
fn readdir_offsets_stay_valid_while_the_directory_changes() {
    let region = fresh(64, 2);
    let fs = mount(&region);
    for i in 0..100 {
        fs.create(ROOT_INO, format!("f{i:03}").as_bytes(), 0o644, 0, 0).unwrap();
    }
    let mut first = Vec::new();
    fs.readdir(ROOT_INO, 0, |e| {
        first.push(e);
        first.len() == 52
    })
    .unwrap();
    let resume = first.last().unwrap().next_offset;
    // Remove some already-listed names and some not yet listed, add new ones.
    fs.unlink(ROOT_INO, b"f000").unwrap();
    fs.unlink(ROOT_INO, b"f099").unwrap();
    fs.create(ROOT_INO, b"new", 0o644, 0, 0).unwrap();
    let mut rest = Vec::new();
    fs.readdir(ROOT_INO, resume, |e| {
        rest.push(String::from_utf8(e.name).unwrap());
        false
    })
    .unwrap();
    assert_eq!(rest.len(), 100 - 50 - 1 + 1);
    assert!(rest.contains(&"new".to_string()) && !rest.contains(&"f099".to_string()));
    assert!(!rest.contains(&"f049".to_string()) && rest.contains(&"f050".to_string()));
    fs.unmount().unwrap();
}

#[test]
fn setattr_changes_survive_remount() {
    let region = fresh(64, 2);
    let fs = mount(&region);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    let set = SetAttr::default().mode(0o4711).uid(42).gid(43).atime(11).mtime(22);
    let a = fs.setattr(f.ino, &set).unwrap();
    assert_eq!((a.perm, a.uid, a.gid, a.atime, a.mtime), (0o4711, 42, 43, 11, 22));
    drop(fs);
    let fs = mount(&region);
    let b = fs.getattr(f.ino).unwrap();
    assert_eq!(a, b);
    fs.unmount().unwrap();
}

/// create_open registers the handle with the create: an unlink right after
/// leaves the file readable until release, then frees it.
#[test]
fn create_open_keeps_the_file_alive_across_an_immediate_unlink() {
    let region = fresh(64, 2);
    let fs = mount(&region);
    let f = fs.create_open(ROOT_INO, b"tmp", 0o600, 0, 0).unwrap();
    fs.write(f.ino, 0, b"data").unwrap();
    fs.unlink(ROOT_INO, b"tmp").unwrap();
    assert_eq!(read_all(&fs, f.ino), b"data");
    fs.release_handle(f.ino).unwrap();
    assert!(matches!(fs.getattr(f.ino), Err(Error::NotFound)));
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// POSIX group inheritance, decided by the core under the parent's lock
/// (every front end gets it): in a set-group-ID directory new nodes take
/// the directory's group, and new subdirectories its set-group-ID bit too.
#[test]
fn set_group_id_directories_pass_their_group_on() {
    let region = fresh(32, 1);
    let fs = mount(&region);
    let plain = fs.mkdir(ROOT_INO, b"plain", 0o755, 10, 20).unwrap();
    let f = fs.create(plain.ino, b"f", 0o644, 11, 21).unwrap();
    assert_eq!((f.uid, f.gid), (11, 21), "no set-group-ID: the caller's group");
    let shared = fs.mkdir(ROOT_INO, b"shared", 0o2775, 10, 20).unwrap();
    assert_eq!(shared.perm, 0o2775);
    let f = fs.create(shared.ino, b"f", 0o644, 11, 21).unwrap();
    assert_eq!(
        (f.uid, f.gid, f.perm),
        (11, 20, 0o644),
        "files take the group, not the bit"
    );
    let d = fs.mkdir(shared.ino, b"sub", 0o755, 11, 21).unwrap();
    assert_eq!(
        (d.gid, d.perm),
        (20, 0o2755),
        "subdirectories take the group and the bit"
    );
    let n = fs.mknod(shared.ino, b"fifo", libc::S_IFIFO | 0o600, 0, 11, 21).unwrap();
    let l = fs.symlink(shared.ino, b"l", b"f", 11, 21).unwrap();
    assert_eq!((n.gid, l.gid), (20, 20));
    drop(fs);
    let fs = mount(&region);
    let d = fs.resolve("/shared/sub").unwrap();
    assert_eq!((d.gid, d.perm), (20, 0o2755), "after a crash too");
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// readdir with attributes, in batches: every entry exactly once with its
/// own attributes, across batch boundaries, resumable from any offset.
#[test]
fn readdir_plus_lists_every_entry_once_with_its_attributes() {
    let region = fresh(32, 1);
    let fs = mount(&region);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
    for i in 0..150u32 {
        let f = fs.create(d.ino, format!("f{i:03}").as_bytes(), 0o600, i, 0).unwrap();
        fs.write(f.ino, 0, &vec![1u8; i as usize]).unwrap();
    }
    let mut seen = Vec::new();
    fs.readdir_plus(d.ino, 0, u64::MAX, |e, a| {
        let a = a.expect("nothing is lost");
        assert_eq!(e.ino, a.ino);
        seen.push((String::from_utf8(e.name).unwrap(), a.uid, a.size, e.next_offset));
        false
    })
    .unwrap();
    assert_eq!(seen.len(), 152, ". and .. and 150 files");
    for (name, uid, size, _) in &seen[2..] {
        let i: u32 = name[1..].parse().unwrap();
        assert_eq!((*uid, *size), (i, u64::from(i)), "{name}");
    }
    // Stop after 100, resume from the last offset: the rest, once each.
    let mut first = 0;
    let mut resume = 0;
    fs.readdir_plus(d.ino, 0, u64::MAX, |e, _| {
        first += 1;
        resume = e.next_offset;
        first == 100
    })
    .unwrap();
    let mut rest = 0;
    fs.readdir_plus(d.ino, resume, u64::MAX, |_, _| {
        rest += 1;
        false
    })
    .unwrap();
    assert_eq!(
        first + rest,
        152,
        "resuming after the last entry seen lists the rest once"
    );
    assert!(matches!(
        fs.readdir_plus(99_999, 0, u64::MAX, |_, _| false),
        Err(Error::NotFound)
    ));
}

/// Access times: never by default; relatime as Linux (after a change, or
/// a day old); strictatime on every read; nodiratime leaves directories;
/// an update is durable like any change.
#[test]
fn reads_update_access_times_as_the_mount_asks() {
    use novafs::{Atime, MountOptions};
    let region = fresh(64, 1);
    let with = |atime, no_dir_atime| {
        let o = MountOptions::default().atime(atime).no_dir_atime(no_dir_atime);
        novafs::Fs::open(region.clone(), o).unwrap()
    };
    let fs = mount(&region);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    fs.write(f, 0, b"data").unwrap();
    let mut buf = [0u8; 4];
    let atime = |fs: &novafs::Fs, ino| fs.getattr(ino).unwrap().atime;
    let written = fs.getattr(f).unwrap();
    fs.read(f, 0, &mut buf).unwrap();
    fs.readdir(d, 0, |_| false).unwrap();
    assert_eq!(atime(&fs, f), written.atime, "the library's default is noatime");
    fs.unmount().unwrap();

    let fs = with(Atime::Relative, false);
    fs.read(f, 0, &mut buf).unwrap();
    let first = fs.getattr(f).unwrap();
    assert!(first.atime > first.mtime && first.atime > first.ctime, "{first:?}");
    assert_eq!(
        (first.mtime, first.ctime),
        (written.mtime, written.ctime),
        "a read changes only atime"
    );
    fs.read(f, 0, &mut buf).unwrap();
    assert_eq!(atime(&fs, f), first.atime, "relatime: not again until a change");
    fs.write(f, 0, b"more").unwrap();
    fs.read(f, 0, &mut buf).unwrap();
    assert!(
        atime(&fs, f) > fs.getattr(f).unwrap().mtime,
        "relatime: again after a write"
    );
    let dir_before = atime(&fs, d);
    fs.readdir(d, 0, |_| false).unwrap();
    assert!(atime(&fs, d) > dir_before, "a listing is a read of the directory");
    let kept = atime(&fs, f);
    drop(fs); // crash: the update was durable
    let fs = mount(&region);
    assert_eq!(atime(&fs, f), kept);
    fs.unmount().unwrap();

    let fs = with(Atime::Strict, true);
    let d_before = atime(&fs, d);
    let mut last = atime(&fs, f);
    for _ in 0..3 {
        fs.read(f, 0, &mut buf).unwrap();
        let now = atime(&fs, f);
        assert!(now > last, "strictatime: every read");
        last = now;
    }
    fs.readdir(d, 0, |_| false).unwrap();
    assert_eq!(atime(&fs, d), d_before, "nodiratime");
    fs.unmount().unwrap();

    let ro = novafs::Fs::open(
        region.clone(),
        MountOptions::default().read_only(true).atime(Atime::Strict),
    )
    .unwrap();
    ro.read(f, 0, &mut buf).unwrap();
    assert_eq!(atime(&ro, f), last, "a read-only mount writes nothing");
    drop(ro);
    assert_fsck_clean(&region);
}

/// RENAME_WHITEOUT (overlayfs): the old name becomes a character device
/// 0:0 owned by the caller, in the same commit as the rename.
#[test]
fn rename_whiteout_leaves_a_whiteout_at_the_old_name() {
    use novafs::RENAME_WHITEOUT;
    let region = fresh(64, 2);
    let fs = mount(&region);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    fs.write(a, 0, b"lower").unwrap();
    let b = fs.create(d, b"b", 0o644, 0, 0).unwrap().ino;
    let files_free = fs.statfs().files_free;
    fs.rename_as(ROOT_INO, b"a", d, b"b", RENAME_WHITEOUT, 7, 8).unwrap();
    let check = |fs: &novafs::Fs| {
        let w = fs.lookup(ROOT_INO, b"a").unwrap();
        assert_eq!(
            (w.kind, w.perm, w.rdev, w.uid, w.gid, w.nlink),
            (FileType::CharDevice, 0, 0, 7, 8, 1)
        );
        let moved = fs.lookup(d, b"b").unwrap();
        assert_eq!(moved.ino, a);
        assert_eq!(read_all(fs, a), b"lower");
        let listed: Vec<(Vec<u8>, u64)> = {
            let mut v = Vec::new();
            fs.readdir(ROOT_INO, 0, |e| {
                v.push((e.name, e.ino));
                false
            })
            .unwrap();
            v
        };
        assert!(listed.contains(&(b"a".to_vec(), w.ino)), "{listed:?}");
        w.ino
    };
    let w = check(&fs);
    assert!(
        matches!(fs.getattr(b), Err(Error::NotFound)),
        "the replaced file is gone"
    );
    assert_eq!(
        fs.statfs().files_free,
        files_free,
        "one inode in (the whiteout), one out (b)"
    );
    // Refused combinations change nothing and leak no slot.
    let c = fs.create(ROOT_INO, b"c", 0o644, 0, 0).unwrap().ino;
    let free = fs.statfs().files_free;
    assert!(matches!(
        fs.rename(ROOT_INO, b"c", d, b"b", RENAME_WHITEOUT | RENAME_NOREPLACE),
        Err(Error::Exists)
    ));
    assert!(matches!(
        fs.rename(ROOT_INO, b"c", d, b"b", RENAME_WHITEOUT | RENAME_EXCHANGE),
        Err(Error::Invalid(_))
    ));
    assert_eq!(fs.statfs().files_free, free);
    assert_eq!(fs.lookup(ROOT_INO, b"c").unwrap().ino, c);
    // A whiteout in the same directory, over nothing.
    fs.rename(ROOT_INO, b"c", ROOT_INO, b"c2", RENAME_WHITEOUT).unwrap();
    assert_eq!(fs.lookup(ROOT_INO, b"c").unwrap().kind, FileType::CharDevice);
    assert_eq!(fs.lookup(ROOT_INO, b"c2").unwrap().ino, c);
    drop(fs); // crash
    assert_fsck_clean(&region);
    let fs = mount(&region);
    assert_eq!(check(&fs), w);
    assert_eq!(fs.lookup(ROOT_INO, b"c").unwrap().kind, FileType::CharDevice);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}
