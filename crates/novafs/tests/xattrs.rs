//! Extended attributes and POSIX ACLs through the library: every
//! namespace, every error case, values inline and in data pages, and the
//! state after a remount, a crash, log GC and fsck.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use novafs::{Error, Fs, Make, SetAttr, ROOT_INO, XATTR_CREATE, XATTR_REPLACE};

fn value(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn names(fs: &Fs, ino: u64) -> Vec<String> {
    let list = fs.listxattr(ino).unwrap();
    assert!(list.is_empty() || list.ends_with(&[0]), "every name ends in NUL");
    list.split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8(n.to_vec()).unwrap())
        .collect()
}

/// A POSIX ACL in the kernel's xattr format; named entries (tags 2 and 8)
/// take `id`.
fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}
const NONE: u32 = u32::MAX;
const ACCESS: &[u8] = b"system.posix_acl_access";
const DEFAULT: &[u8] = b"system.posix_acl_default";

#[test]
fn every_namespace_and_size_reads_back_after_remount_and_crash() {
    let region = fresh(64, 2);
    let fs = mount(&region);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    let l = fs.symlink(ROOT_INO, b"l", b"f", 0, 0).unwrap().ino;
    let cases: Vec<(u64, &[u8], Vec<u8>)> = vec![
        (f, b"user.empty", vec![]),
        (f, b"user.small", value(1, 100)),
        // 1024 bytes do not fit the entry: data pages.
        (f, b"user.pages", value(2, 60_000)),
        (f, b"user.max", value(3, 65_536)),
        (f, b"trusted.t", value(4, 900)),
        (d, b"security.selinux", b"system_u:object_r:tmp_t:s0\0".to_vec()),
        (d, b"user.dir", value(5, 5000)),
        (l, b"trusted.link", value(6, 10)),
    ];
    let before = fs.getattr(f).unwrap().ctime;
    let xattr_bit = novafs::probe::layout::FEATURE_INCOMPAT_XATTR;
    assert_eq!(
        fs.superblock().features_incompat & xattr_bit,
        0,
        "set by the first xattr only"
    );
    for (ino, name, v) in &cases {
        fs.setxattr(*ino, name, v, 0).unwrap();
    }
    assert!(fs.getattr(f).unwrap().ctime > before, "setxattr changes ctime");
    assert_ne!(fs.superblock().features_incompat & xattr_bit, 0);
    let check = |fs: &Fs| {
        for (ino, name, v) in &cases {
            assert_eq!(
                &fs.getxattr(*ino, name).unwrap(),
                v,
                "{}",
                String::from_utf8_lossy(name)
            );
        }
        assert_eq!(
            names(fs, f),
            ["trusted.t", "user.empty", "user.max", "user.pages", "user.small"]
        );
        assert_eq!(names(fs, d), ["security.selinux", "user.dir"]);
        assert_eq!(names(fs, l), ["trusted.link"]);
    };
    check(&fs);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
    let fs = mount(&region);
    check(&fs);
    fs.setxattr(f, b"user.small", b"after", 0).unwrap();
    drop(fs); // crash
    let fs = mount(&region);
    assert_eq!(fs.getxattr(f, b"user.small").unwrap(), b"after");
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

#[test]
fn errors_are_the_ones_linux_gives() {
    let region = fresh(64, 1);
    let fs = mount(&region);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    let l = fs.symlink(ROOT_INO, b"l", b"f", 0, 0).unwrap().ino;
    let p = fs.mknod(ROOT_INO, b"p", libc::S_IFIFO | 0o644, 0, 0, 0).unwrap().ino;
    let errno = |r: Result<(), Error>| r.unwrap_err().errno();
    assert!(matches!(fs.getxattr(f, b"user.none"), Err(Error::NoData)));
    assert_eq!(errno(fs.removexattr(f, b"user.none")), libc::ENODATA);
    assert_eq!(errno(fs.setxattr(f, b"user.a", b"1", XATTR_REPLACE)), libc::ENODATA);
    fs.setxattr(f, b"user.a", b"1", XATTR_CREATE).unwrap();
    assert_eq!(errno(fs.setxattr(f, b"user.a", b"2", XATTR_CREATE)), libc::EEXIST);
    fs.setxattr(f, b"user.a", b"2", XATTR_REPLACE).unwrap();
    assert_eq!(fs.getxattr(f, b"user.a").unwrap(), b"2");
    assert_eq!(errno(fs.setxattr(f, b"user.a", b"2", 4)), libc::EINVAL);
    assert_eq!(errno(fs.setxattr(f, b"user.big", &[0; 65_537], 0)), libc::E2BIG);
    assert_eq!(errno(fs.setxattr(f, b"", b"x", 0)), libc::ERANGE);
    let long = [b"user.".as_slice(), &[b'n'; 251]].concat();
    assert_eq!(errno(fs.setxattr(f, &long, b"x", 0)), libc::ERANGE);
    fs.setxattr(f, &long[..255], b"x", 0).unwrap();
    assert_eq!(errno(fs.setxattr(f, b"foo.bar", b"x", 0)), libc::EOPNOTSUPP);
    assert_eq!(errno(fs.setxattr(f, b"system.other", b"x", 0)), libc::EOPNOTSUPP);
    assert_eq!(errno(fs.setxattr(f, b"user.", b"x", 0)), libc::EINVAL);
    // user.* belongs to regular files and directories.
    assert_eq!(errno(fs.setxattr(l, b"user.a", b"x", 0)), libc::EPERM);
    assert_eq!(errno(fs.setxattr(p, b"user.a", b"x", 0)), libc::EPERM);
    assert!(matches!(fs.getxattr(l, b"user.a"), Err(Error::NoData)));
    fs.setxattr(p, b"trusted.a", b"x", 0).unwrap();
    // ACLs: not on symlinks, a default ACL only on directories, and the
    // value must be a valid ACL.
    let plain = acl(&[(1, 6, NONE), (4, 4, NONE), (0x20, 4, NONE)]);
    assert_eq!(errno(fs.setxattr(l, ACCESS, &plain, 0)), libc::EOPNOTSUPP);
    assert_eq!(errno(fs.setxattr(f, DEFAULT, &plain, 0)), libc::EACCES);
    assert_eq!(errno(fs.setxattr(f, ACCESS, b"junk", 0)), libc::EINVAL);
    let no_mask = acl(&[(1, 6, NONE), (2, 4, 7), (4, 4, NONE), (0x20, 4, NONE)]);
    assert_eq!(errno(fs.setxattr(f, ACCESS, &no_mask, 0)), libc::EINVAL);
    // chattr +i and +a hold the attributes too.
    fs.set_flags(f, novafs::probe::layout::FLAG_IMMUTABLE).unwrap();
    assert_eq!(errno(fs.setxattr(f, b"user.b", b"x", 0)), libc::EPERM);
    assert_eq!(errno(fs.removexattr(f, b"user.a")), libc::EPERM);
    assert_eq!(fs.getxattr(f, b"user.a").unwrap(), b"2");
    fs.set_flags(f, novafs::probe::layout::FLAG_APPEND).unwrap();
    assert_eq!(errno(fs.setxattr(f, b"user.b", b"x", 0)), libc::EPERM);
    fs.set_flags(f, 0).unwrap();
    fs.unmount().unwrap();
    // A read-only mount reads and refuses changes.
    let ro = Fs::open(region.clone(), novafs::MountOptions::default().read_only(true)).unwrap();
    assert_eq!(ro.getxattr(f, b"user.a").unwrap(), b"2");
    assert_eq!(errno(ro.setxattr(f, b"user.a", b"3", 0)), libc::EROFS);
    assert_eq!(errno(ro.removexattr(f, b"user.a")), libc::EROFS);
}

#[test]
fn the_list_is_bounded_and_a_full_device_loses_nothing() {
    let region = fresh(16, 1);
    let fs = mount(&region);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    // 256 names of 255 bytes, each with its NUL, fill XATTR_LIST_MAX (64 KiB).
    let name = |i: usize| format!("user.{i:0>250}").into_bytes();
    for i in 0..256 {
        fs.setxattr(f, &name(i), b"v", 0).unwrap();
    }
    assert_eq!(fs.listxattr(f).unwrap().len(), 65_536);
    assert!(matches!(fs.setxattr(f, &name(256), b"v", 0), Err(Error::NoSpace)));
    fs.setxattr(f, &name(3), b"replacing takes no more room", 0).unwrap();
    // Large values until the device is full: the failing one changes nothing.
    let g = fs.create(ROOT_INO, b"g", 0o644, 0, 0).unwrap().ino;
    let mut stored = 0;
    let err = loop {
        match fs.setxattr(g, format!("user.v{stored}").as_bytes(), &value(stored as u8, 65_536), 0) {
            Ok(()) => stored += 1,
            Err(e) => break e,
        }
        assert!(stored < 1000, "a 16 MiB device never filled");
    };
    assert!(matches!(err, Error::NoSpace), "{err}");
    assert_eq!(names(&fs, g).len(), stored);
    assert!(matches!(
        fs.getxattr(g, format!("user.v{stored}").as_bytes()),
        Err(Error::NoData)
    ));
    // Removing them gives the space back.
    for i in 0..stored {
        fs.removexattr(g, format!("user.v{i}").as_bytes()).unwrap();
    }
    fs.setxattr(g, b"user.again", &value(9, 65_536), 0).unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

#[test]
fn replaced_and_removed_values_and_deleted_files_give_their_pages_back() {
    let region = fresh(64, 1);
    let fs = mount(&region);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    let free0 = fs.statfs().blocks_free;
    fs.setxattr(f, b"user.v", &value(1, 40_000), 0).unwrap();
    let free1 = fs.statfs().blocks_free;
    assert!(free0 - free1 >= 10, "a 40,000-byte value takes 10 pages");
    for round in 0..50u8 {
        fs.setxattr(f, b"user.v", &value(round, 40_000), 0).unwrap();
    }
    // Log growth may hold a page or two more; the values' pages came back.
    assert!(free1 - fs.statfs().blocks_free <= 4, "replaced values leaked pages");
    fs.removexattr(f, b"user.v").unwrap();
    fs.setxattr(f, b"user.w", &value(7, 9000), 0).unwrap();
    fs.unlink(ROOT_INO, b"f").unwrap();
    // The root's log may have grown by a page (and its mirror).
    assert!(fs.statfs().blocks_free + 2 >= free0, "an unlinked file's values leaked");
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

#[test]
fn thorough_gc_keeps_every_attribute() {
    let region = fresh(64, 1);
    let fs = mount(&region);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    fs.setxattr(f, b"user.pages", &value(1, 7000), 0).unwrap();
    fs.setxattr(f, b"user.gone", b"x", 0).unwrap();
    fs.removexattr(f, b"user.gone").unwrap();
    // Names that stay, one every 32 sets, leave a live entry on every log
    // page: fast GC cannot free them, and thorough GC compacts.
    let mut stays = Vec::new();
    for i in 0..2000u32 {
        let name = format!("user.k{}", i % 4);
        fs.setxattr(f, name.as_bytes(), &i.to_le_bytes(), 0).unwrap();
        if i % 32 == 0 {
            stays.push(format!("user.stay{i:04}"));
            fs.setxattr(f, stays[stays.len() - 1].as_bytes(), &i.to_le_bytes(), 0)
                .unwrap();
        }
    }
    assert!(fs.gc_stats().thorough_runs > 0, "the churn compacted the log");
    let check = |fs: &Fs| {
        assert_eq!(fs.getxattr(f, b"user.pages").unwrap(), value(1, 7000));
        for k in 0..4u32 {
            let last = 1996 + k;
            assert_eq!(
                fs.getxattr(f, format!("user.k{k}").as_bytes()).unwrap(),
                last.to_le_bytes()
            );
        }
        for s in &stays {
            let i: u32 = s["user.stay".len()..].parse().unwrap();
            assert_eq!(fs.getxattr(f, s.as_bytes()).unwrap(), i.to_le_bytes());
        }
        let mut want = vec!["user.k0", "user.k1", "user.k2", "user.k3", "user.pages"];
        want.extend(stays.iter().map(String::as_str));
        want.sort();
        let mut got = names(fs, f);
        got.sort();
        assert_eq!(got, want);
    };
    check(&fs);
    drop(fs);
    let fs = mount(&region);
    check(&fs);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

#[test]
fn an_access_acl_and_the_mode_move_together() {
    let region = fresh(64, 1);
    let fs = mount(&region);
    let f = fs.create(ROOT_INO, b"f", 0o4644, 0, 0).unwrap().ino;
    // A named user and a mask: kept, and the group bits are the mask's.
    let full = acl(&[
        (1, 6, NONE),
        (2, 4, 1001),
        (4, 4, NONE),
        (0x10, 6, NONE),
        (0x20, 0, NONE),
    ]);
    fs.setxattr(f, ACCESS, &full, 0).unwrap();
    assert_eq!(fs.getattr(f).unwrap().perm, 0o4660);
    assert_eq!(fs.getxattr(f, ACCESS).unwrap(), full);
    // chmod rewrites the owner, mask and other entries.
    let set = SetAttr::default().mode(0o751);
    fs.setattr(f, &set).unwrap();
    let after = acl(&[
        (1, 7, NONE),
        (2, 4, 1001),
        (4, 4, NONE),
        (0x10, 5, NONE),
        (0x20, 1, NONE),
    ]);
    assert_eq!(fs.getxattr(f, ACCESS).unwrap(), after);
    // An ACL the mode alone says is not kept: only the mode changes.
    let plain = acl(&[(1, 6, NONE), (4, 0, NONE), (0x20, 4, NONE)]);
    fs.setxattr(f, ACCESS, &plain, 0).unwrap();
    assert_eq!(fs.getattr(f).unwrap().perm, 0o604);
    assert!(matches!(fs.getxattr(f, ACCESS), Err(Error::NoData)));
    assert!(names(&fs, f).is_empty());
    drop(fs);
    let fs = mount(&region);
    assert_eq!(fs.getattr(f).unwrap().perm, 0o604);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

#[test]
fn new_nodes_inherit_a_default_acl_and_else_take_the_umask() {
    let region = fresh(64, 1);
    let fs = mount(&region);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    let mk = |parent, name: &[u8], mode, umask| {
        let m = Make::new(mode, 0, 0).umask(umask);
        fs.make(parent, name, &m).unwrap()
    };
    // No default ACL: the umask applies.
    assert_eq!(mk(d, b"plain", libc::S_IFREG | 0o666, 0o022).perm, 0o644);
    assert_eq!(mk(d, b"plaindir", libc::S_IFDIR | 0o777, 0o077).perm, 0o700);
    let default = acl(&[
        (1, 7, NONE),
        (2, 7, 1001),
        (4, 5, NONE),
        (0x10, 7, NONE),
        (0x20, 0, NONE),
    ]);
    fs.setxattr(d, DEFAULT, &default, 0).unwrap();
    // A file asking 0o666 under umask 022: the umask gives way to the ACL.
    let f = mk(d, b"f", libc::S_IFREG | 0o666, 0o022);
    assert_eq!(f.perm, 0o660);
    let f_acl = acl(&[
        (1, 6, NONE),
        (2, 7, 1001),
        (4, 5, NONE),
        (0x10, 6, NONE),
        (0x20, 0, NONE),
    ]);
    assert_eq!(fs.getxattr(f.ino, ACCESS).unwrap(), f_acl);
    assert!(matches!(fs.getxattr(f.ino, DEFAULT), Err(Error::NoData)));
    // A directory inherits the default ACL as its own default too.
    let sub = mk(d, b"sub", libc::S_IFDIR | 0o777, 0o022);
    assert_eq!(sub.perm, 0o770);
    assert_eq!(fs.getxattr(sub.ino, DEFAULT).unwrap(), default);
    let sub_acl = acl(&[
        (1, 7, NONE),
        (2, 7, 1001),
        (4, 5, NONE),
        (0x10, 7, NONE),
        (0x20, 0, NONE),
    ]);
    assert_eq!(fs.getxattr(sub.ino, ACCESS).unwrap(), sub_acl);
    // ... and passes it on.
    assert_eq!(mk(sub.ino, b"deeper", libc::S_IFREG | 0o600, 0o077).perm, 0o600);
    // Symlinks take neither.
    let l = fs.symlink(d, b"l", b"f", 0, 0).unwrap();
    assert_eq!(l.perm, 0o777);
    assert!(names(&fs, l.ino).is_empty());
    // Removing the default ACL ends the inheritance.
    fs.removexattr(d, DEFAULT).unwrap();
    assert_eq!(mk(d, b"after", libc::S_IFREG | 0o666, 0o022).perm, 0o644);
    drop(fs);
    let fs = mount(&region);
    assert_eq!(fs.getxattr(sub.ino, DEFAULT).unwrap(), default);
    assert_eq!(fs.getattr(f.ino).unwrap().perm, 0o660);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// A value in data pages is covered like file data: one damaged strip is
/// rebuilt from parity (by the read or by scrub); damage parity cannot
/// undo is EIO for that attribute only, never a wrong value.
#[test]
fn a_damaged_value_is_repaired_or_eio_never_wrong() {
    use novafs::inject::{corrupt, Spec, Target, Which};
    use novafs::ScrubOptions;
    let region = fresh(32, 1);
    let fs = mount(&region);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    let big = value(3, 9000);
    fs.setxattr(f, b"user.big", &big, 0).unwrap();
    fs.setxattr(f, b"user.small", b"inline", 0).unwrap();
    fs.unmount().unwrap();
    let damage = |seed, bytes| {
        let spec = Spec::new(Target::DataPage)
            .which(Which::Primary)
            .ino(f)
            .seed(seed)
            .bytes(bytes);
        corrupt(&*region, &spec).unwrap()
    };
    // One strip: a scrub repairs it, a second finds nothing.
    let d = damage(1, 8);
    assert!(d[0].what.contains("extended attribute"), "{:?}", d[0].what);
    let fs = mount(&region);
    let rep = fs.scrub(ScrubOptions::default(), &|_, _| true).unwrap();
    assert_eq!(rep.data_repaired, 1, "{rep:?}");
    assert_eq!(fs.getxattr(f, b"user.big").unwrap(), big);
    assert_eq!(
        fs.scrub(ScrubOptions::default(), &|_, _| true).unwrap().data_repaired,
        0
    );
    fs.unmount().unwrap();
    // Two strips of one page: EIO for that value, the rest reads.
    damage(2, 600);
    let fs = mount(&region);
    assert_eq!(fs.getxattr(f, b"user.big").err().map(|e| e.errno()), Some(libc::EIO));
    assert_eq!(fs.getxattr(f, b"user.small").unwrap(), b"inline");
    assert_eq!(names(&fs, f), ["user.big", "user.small"]);
    // Setting it anew heals it.
    fs.setxattr(f, b"user.big", &big, 0).unwrap();
    assert_eq!(fs.getxattr(f, b"user.big").unwrap(), big);
}

/// Without data protection the value's own CRC32C still catches damage.
#[test]
fn without_data_protection_the_value_checksum_catches_damage() {
    use novafs::inject::{corrupt, Spec, Target, Which};
    let region: std::sync::Arc<dyn pm::Region> = std::sync::Arc::new(pm::MemRegion::new(32 << 20));
    let opts = novafs::FormatOptions::default().data_csum(false).data_parity(false);
    Fs::format(region.clone(), &opts).unwrap();
    let fs = mount(&region);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    fs.setxattr(f, b"user.big", &value(5, 5000), 0).unwrap();
    fs.unmount().unwrap();
    // A whole page: value bytes for sure.
    let spec = Spec::new(Target::DataPage)
        .which(Which::Primary)
        .ino(f)
        .seed(3)
        .bytes(4096);
    corrupt(&*region, &spec).unwrap();
    let fs = mount(&region);
    assert_eq!(fs.getxattr(f, b"user.big").err().map(|e| e.errno()), Some(libc::EIO));
    assert_eq!(fs.health().losses, 1);
}
