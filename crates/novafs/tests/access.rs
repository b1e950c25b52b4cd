//! The permission checks a caller without a kernel relies on
//! (`Fs::permission` and the rules beside it), against references written
//! from POSIX and the Linux VFS, enumerated over every mode, every ACL of
//! a few entries and every capability that matters, with exact errnos.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use novafs::{
    Access, Attr, Caps, Cred, Error, Fs, SetAttr, FLAG_APPEND, FLAG_IMMUTABLE, RENAME_EXCHANGE, RENAME_NOREPLACE,
    RENAME_WHITEOUT, ROOT_INO,
};

const OWNER: u32 = 1000;
const GROUP: u32 = 100;
const EACCES: i32 = libc::EACCES;
const EPERM: i32 = libc::EPERM;

fn errno<T>(r: novafs::Result<T>) -> Result<T, i32> {
    r.map_err(|e| e.errno())
}

fn wants() -> impl Iterator<Item = Access> {
    (0..8).map(|b| Access::from_bits(b).unwrap())
}

/// Callers of every class for a node owned by OWNER:GROUP.
fn callers() -> Vec<(&'static str, Cred)> {
    vec![
        ("owner", Cred::new(OWNER, 555, &[])),
        ("owner in the group", Cred::new(OWNER, GROUP, &[])),
        ("group member", Cred::new(2000, GROUP, &[])),
        ("supplementary member", Cred::new(2000, 555, &[7, GROUP])),
        ("other", Cred::new(2000, 555, &[7])),
    ]
}

/// POSIX's classes: the owner's bits for the owner, the group's for a
/// member (by its group or a supplementary one), the others' for the rest.
fn by_class(perm: u32, cred: &Cred, want: Access) -> Result<(), i32> {
    let class = if cred.uid == OWNER {
        perm >> 6
    } else if cred.gid == GROUP || cred.groups.contains(&GROUP) {
        perm >> 3
    } else {
        perm
    };
    if want.bits() & !class & 7 == 0 {
        Ok(())
    } else {
        Err(EACCES)
    }
}

/// What the capabilities allow whatever the mode: on a directory
/// DAC_READ_SEARCH reads and searches, DAC_OVERRIDE does anything; on a
/// file DAC_READ_SEARCH reads, DAC_OVERRIDE reads and writes, and executes
/// when some x bit is set.
fn by_caps(is_dir: bool, perm: u32, caps: Caps, want: Access) -> bool {
    let (r, w, x) = (
        want.contains(Access::READ),
        want.contains(Access::WRITE),
        want.contains(Access::EXEC),
    );
    let search = caps.contains(Caps::DAC_READ_SEARCH);
    let over = caps.contains(Caps::DAC_OVERRIDE);
    if is_dir {
        over || (search && !w)
    } else {
        (search && r && !w && !x) || (over && (!x || perm & 0o111 != 0))
    }
}

fn fixture() -> (Fs, Attr, Attr) {
    let fs = mount(&fresh(64, 2));
    let f = fs.create(ROOT_INO, b"f", 0o644, OWNER, GROUP).unwrap();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, OWNER, GROUP).unwrap();
    (fs, f, d)
}

fn chmod(fs: &Fs, ino: u64, perm: u32) {
    fs.setattr(ino, &SetAttr::default().mode(perm)).unwrap();
}

#[test]
fn every_mode_answers_each_class_as_posix_says() {
    let (fs, f, d) = fixture();
    let mut checked = 0;
    for perm in 0..0o1000 {
        for ino in [f.ino, d.ino] {
            chmod(&fs, ino, perm);
            for (who, cred) in callers() {
                for want in wants() {
                    let got = errno(fs.permission(ino, &cred, want));
                    assert_eq!(got, by_class(perm, &cred, want), "{who} wants {want:?} of {perm:o}");
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 512 * 2 * 5 * 8);
}

#[test]
fn capabilities_override_the_mode_as_linux_lets_them() {
    let (fs, f, d) = fixture();
    let sets = [
        Caps::DAC_READ_SEARCH,
        Caps::DAC_OVERRIDE,
        Caps::DAC_READ_SEARCH | Caps::DAC_OVERRIDE,
        Caps::ALL,
        Caps::FOWNER | Caps::CHOWN,
    ];
    for perm in 0..0o1000 {
        for (ino, is_dir) in [(f.ino, false), (d.ino, true)] {
            chmod(&fs, ino, perm);
            for caps in sets {
                let cred = Cred::new(2000, 555, &[]).caps(caps);
                for want in wants() {
                    let expect = if by_caps(is_dir, perm, caps, want) {
                        Ok(())
                    } else {
                        by_class(perm, &cred, want)
                    };
                    let got = errno(fs.permission(ino, &cred, want));
                    assert_eq!(got, expect, "{caps:?} wants {want:?} of {perm:o} (dir: {is_dir})");
                }
            }
        }
    }
    // Root executes no file without an x bit, searches any directory.
    chmod(&fs, f.ino, 0o666);
    chmod(&fs, d.ino, 0);
    assert_eq!(errno(fs.permission(f.ino, &Cred::root(), Access::EXEC)), Err(EACCES));
    assert_eq!(errno(fs.permission(d.ino, &Cred::root(), Access::EXEC)), Ok(()));
    chmod(&fs, f.ino, 0o001);
    assert_eq!(
        errno(fs.permission(f.ino, &Cred::root(), Access::READ | Access::WRITE | Access::EXEC)),
        Ok(())
    );
}

/// A POSIX ACL in the kernel's xattr format.
fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}
const USER_OBJ: u16 = 1;
const USER: u16 = 2;
const GROUP_OBJ: u16 = 4;
const NAMED_GROUP: u16 = 8;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;
const ANY: u32 = u32::MAX;
const ACCESS_ACL: &[u8] = b"system.posix_acl_access";
const NAMED: u32 = 1001;
const NAMED_GID: u32 = 200;

/// The entries of the ACLs enumerated: owner, named user, owning group,
/// named group, mask, other.
#[derive(Clone, Copy, Debug)]
struct Entries {
    user_obj: u32,
    user: u32,
    group_obj: u32,
    group: u32,
    mask: u32,
    other: u32,
}

/// POSIX.1e's check (owner; a named user, masked; any matching group,
/// masked, or refused; other), with Linux's one exception: an ACL whose
/// mask is empty (the mode's group bits clear) is not read, and the mode
/// decides as it would alone.
fn by_acl(e: &Entries, cred: &Cred, want: Access) -> Result<(), i32> {
    let w = want.bits();
    let ok = |p: u32| if w & !p & 7 == 0 { Ok(()) } else { Err(EACCES) };
    if cred.uid == OWNER {
        return ok(e.user_obj);
    }
    if e.mask == 0 {
        let perm = e.user_obj << 6 | e.mask << 3 | e.other;
        return by_class(perm, cred, want);
    }
    if cred.uid == NAMED {
        return ok(e.user & e.mask);
    }
    let groups = [(GROUP, e.group_obj), (NAMED_GID, e.group)];
    let matching: Vec<u32> = groups
        .iter()
        .filter(|(g, _)| cred.gid == *g || cred.groups.contains(g))
        .map(|(_, p)| p & e.mask)
        .collect();
    if matching.is_empty() {
        return ok(e.other);
    }
    if matching.iter().any(|&p| ok(p).is_ok()) {
        Ok(())
    } else {
        Err(EACCES)
    }
}

#[test]
fn every_acl_of_a_named_user_and_group_answers_as_posix_1e_says() {
    let (fs, f, _) = fixture();
    let callers = [
        Cred::new(OWNER, 555, &[]),
        Cred::new(NAMED, 555, &[]),
        // The named user's entry decides, not the groups it is in.
        Cred::new(NAMED, GROUP, &[NAMED_GID]),
        Cred::new(2000, GROUP, &[]),
        Cred::new(2000, 555, &[NAMED_GID]),
        Cred::new(2000, GROUP, &[NAMED_GID]),
        Cred::new(2000, 555, &[]),
    ];
    let mut checked = 0;
    for bits in 0..8u32.pow(6) {
        let p = |i: u32| (bits >> (3 * i)) & 7;
        let e = Entries {
            user_obj: p(0),
            user: p(1),
            group_obj: p(2),
            group: p(3),
            mask: p(4),
            other: p(5),
        };
        // Half of the owner's and other's values are enough: they are
        // read alone, and the mask and the named entries are what vary.
        if e.user_obj & 1 != e.other & 1 {
            continue;
        }
        let value = acl(&[
            (USER_OBJ, e.user_obj as u16, ANY),
            (USER, e.user as u16, NAMED),
            (GROUP_OBJ, e.group_obj as u16, ANY),
            (NAMED_GROUP, e.group as u16, NAMED_GID),
            (MASK, e.mask as u16, ANY),
            (OTHER, e.other as u16, ANY),
        ]);
        fs.setxattr(f.ino, ACCESS_ACL, &value, 0).unwrap();
        assert_eq!(fs.getattr(f.ino).unwrap().perm, e.user_obj << 6 | e.mask << 3 | e.other);
        for cred in &callers {
            for want in wants() {
                let got = errno(fs.permission(f.ino, cred, want));
                assert_eq!(got, by_acl(&e, cred, want), "{cred:?} wants {want:?} under {e:?}");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 8usize.pow(6) / 2 * 7 * 8);
}

#[test]
fn an_acl_without_a_mask_is_the_mode_and_a_masked_group_is_refused_not_other() {
    let (fs, f, _) = fixture();
    // No named entries, no mask: the mode says it all and nothing is kept.
    let plain = acl(&[(USER_OBJ, 6, ANY), (GROUP_OBJ, 4, ANY), (OTHER, 0, ANY)]);
    fs.setxattr(f.ino, ACCESS_ACL, &plain, 0).unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().perm, 0o640);
    let member = Cred::new(2000, GROUP, &[]);
    let other = Cred::new(2000, 555, &[]);
    assert_eq!(errno(fs.permission(f.ino, &member, Access::READ)), Ok(()));
    assert_eq!(errno(fs.permission(f.ino, &other, Access::READ)), Err(EACCES));
    // A member of a group whose entry lacks the right is refused even
    // where other would be granted.
    let strict = acl(&[
        (USER_OBJ, 6, ANY),
        (GROUP_OBJ, 0, ANY),
        (NAMED_GROUP, 0, NAMED_GID),
        (MASK, 7, ANY),
        (OTHER, 4, ANY),
    ]);
    fs.setxattr(f.ino, ACCESS_ACL, &strict, 0).unwrap();
    assert_eq!(errno(fs.permission(f.ino, &other, Access::READ)), Ok(()));
    assert_eq!(errno(fs.permission(f.ino, &member, Access::READ)), Err(EACCES));
    let in_named = Cred::new(2000, 555, &[NAMED_GID]);
    assert_eq!(errno(fs.permission(f.ino, &in_named, Access::READ)), Err(EACCES));
    // chmod rewrites the mask: the named group loses what the mask drops.
    let shared = acl(&[
        (USER_OBJ, 6, ANY),
        (GROUP_OBJ, 0, ANY),
        (NAMED_GROUP, 6, NAMED_GID),
        (MASK, 6, ANY),
        (OTHER, 0, ANY),
    ]);
    fs.setxattr(f.ino, ACCESS_ACL, &shared, 0).unwrap();
    assert_eq!(errno(fs.permission(f.ino, &in_named, Access::WRITE)), Ok(()));
    chmod(&fs, f.ino, 0o640);
    assert_eq!(errno(fs.permission(f.ino, &in_named, Access::WRITE)), Err(EACCES));
    assert_eq!(errno(fs.permission(f.ino, &in_named, Access::READ)), Ok(()));
}

#[test]
fn writes_to_immutable_nodes_are_eperm_and_to_a_snapshot_erofs() {
    let (fs, f, d) = fixture();
    let fifo = fs
        .mknod(ROOT_INO, b"p", libc::S_IFIFO | 0o666, 0, OWNER, GROUP)
        .unwrap();
    fs.set_flags(f.ino, FLAG_IMMUTABLE).unwrap();
    let owner = Cred::new(OWNER, GROUP, &[]);
    assert_eq!(errno(fs.permission(f.ino, &Cred::root(), Access::WRITE)), Err(EPERM));
    assert_eq!(errno(fs.permission(f.ino, &owner, Access::READ)), Ok(()));
    // Append-only is open's and the namespace's to refuse, not a write's.
    fs.set_flags(f.ino, FLAG_APPEND).unwrap();
    assert_eq!(errno(fs.permission(f.ino, &owner, Access::WRITE)), Ok(()));
    fs.set_flags(f.ino, 0).unwrap();
    fs.take_snapshot(b"s").unwrap();
    let view = fs.open_snapshot(b"s").unwrap();
    for ino in [f.ino, d.ino, ROOT_INO] {
        assert_eq!(errno(view.permission(ino, &owner, Access::WRITE)), Err(libc::EROFS));
        assert_eq!(errno(view.permission(ino, &Cred::root(), Access::READ)), Ok(()));
    }
    // A FIFO's writers do not write the file system.
    assert_eq!(errno(view.permission(fifo.ino, &owner, Access::WRITE)), Ok(()));
    assert_eq!(errno(view.may_create(d.ino, &owner)), Err(libc::EROFS));
    assert_eq!(errno(view.may_delete(ROOT_INO, &owner, b"f", false)), Err(libc::EROFS));
}

#[test]
fn creating_needs_write_and_search_and_a_live_directory() {
    let (fs, _, d) = fixture();
    let other = Cred::new(2000, 555, &[]);
    for (perm, expect) in [
        (0o777, Ok(())),
        (0o775, Err(EACCES)),
        (0o776, Err(EACCES)),
        (0o773, Ok(())),
    ] {
        chmod(&fs, d.ino, perm);
        assert_eq!(errno(fs.may_create(d.ino, &other)), expect, "{perm:o}");
        assert_eq!(
            errno(fs.may_lookup(d.ino, &other)),
            by_class(perm, &other, Access::EXEC)
        );
    }
    chmod(&fs, d.ino, 0o777);
    assert_eq!(errno(fs.may_mknod(d.ino, &other, libc::S_IFIFO | 0o644)), Ok(()));
    assert_eq!(errno(fs.may_mknod(d.ino, &other, libc::S_IFCHR | 0o644)), Err(EPERM));
    let mknod = other.clone().caps(Caps::MKNOD);
    assert_eq!(errno(fs.may_mknod(d.ino, &mknod, libc::S_IFBLK | 0o644)), Ok(()));
    let f = fs.create(d.ino, b"x", 0o644, OWNER, GROUP).unwrap();
    assert_eq!(errno(fs.may_create(f.ino, &Cred::root())), Err(libc::ENOTDIR));
    fs.set_flags(d.ino, FLAG_IMMUTABLE).unwrap();
    assert_eq!(errno(fs.may_create(d.ino, &Cred::root())), Err(EPERM));
    fs.set_flags(d.ino, 0).unwrap();
    // A removed directory someone still holds takes no names.
    fs.unlink(d.ino, b"x").unwrap();
    fs.remember(d.ino).unwrap();
    fs.rmdir(ROOT_INO, b"d").unwrap();
    assert_eq!(errno(fs.may_create(d.ino, &Cred::root())), Err(libc::ENOENT));
}

#[test]
fn sticky_directories_let_only_owners_and_cap_fowner_delete() {
    let fs = mount(&fresh(64, 2));
    let (dir_owner, victim_owner, stranger) = (10, 20, 30);
    let d = fs.mkdir(ROOT_INO, b"tmp", 0o1777, dir_owner, 0).unwrap();
    fs.create(d.ino, b"f", 0o644, victim_owner, 0).unwrap();
    fs.mkdir(d.ino, b"sub", 0o755, victim_owner, 0).unwrap();
    let cases = [
        (Cred::new(victim_owner, 5, &[]), Ok(())),
        (Cred::new(dir_owner, 5, &[]), Ok(())),
        (Cred::new(stranger, 5, &[]), Err(EPERM)),
        (Cred::new(stranger, 5, &[]).caps(Caps::FOWNER), Ok(())),
        // DAC_OVERRIDE passes the mode, not the sticky bit.
        (Cred::new(stranger, 5, &[]).caps(Caps::DAC_OVERRIDE), Err(EPERM)),
    ];
    for (cred, expect) in &cases {
        assert_eq!(errno(fs.may_delete(d.ino, cred, b"f", false)), *expect, "{cred:?}");
        assert_eq!(errno(fs.may_delete(d.ino, cred, b"sub", true)), *expect, "{cred:?}");
    }
    // Without the sticky bit anyone who may write the directory may delete.
    chmod(&fs, d.ino, 0o777);
    for (cred, _) in &cases {
        assert_eq!(errno(fs.may_delete(d.ino, cred, b"f", false)), Ok(()));
    }
    // Write and search permission first: EACCES before the sticky rule.
    chmod(&fs, d.ino, 0o1755);
    let stranger = Cred::new(stranger, 5, &[]);
    assert_eq!(errno(fs.may_delete(d.ino, &stranger, b"f", false)), Err(EACCES));
    assert_eq!(
        errno(fs.may_delete(d.ino, &stranger, b"none", false)),
        Err(libc::ENOENT)
    );
    // The wrong type, after the permission.
    let root = Cred::root();
    assert_eq!(errno(fs.may_delete(d.ino, &root, b"f", true)), Err(libc::ENOTDIR));
    assert_eq!(errno(fs.may_delete(d.ino, &root, b"sub", false)), Err(libc::EISDIR));
    // An immutable or append-only victim or an append-only directory.
    let f = fs.lookup(d.ino, b"f").unwrap().ino;
    for flag in [FLAG_IMMUTABLE, FLAG_APPEND] {
        fs.set_flags(f, flag).unwrap();
        assert_eq!(errno(fs.may_delete(d.ino, &root, b"f", false)), Err(EPERM));
        fs.set_flags(f, 0).unwrap();
        fs.set_flags(d.ino, flag).unwrap();
        assert_eq!(errno(fs.may_delete(d.ino, &root, b"f", false)), Err(EPERM));
        fs.set_flags(d.ino, 0).unwrap();
    }
    assert_eq!(errno(fs.may_delete(d.ino, &root, b"f", false)), Ok(()));
}

#[test]
fn renaming_a_directory_away_needs_write_on_it_for_its_dotdot() {
    let fs = mount(&fresh(64, 2));
    let user = Cred::new(OWNER, GROUP, &[]);
    let a = fs.mkdir(ROOT_INO, b"a", 0o777, OWNER, GROUP).unwrap().ino;
    let b = fs.mkdir(ROOT_INO, b"b", 0o777, OWNER, GROUP).unwrap().ino;
    let sub = fs.mkdir(a, b"sub", 0o555, OWNER, GROUP).unwrap().ino;
    fs.create(a, b"f", 0o444, OWNER, GROUP).unwrap();
    // Within its parent a read-only directory moves; to another it may not.
    assert_eq!(errno(fs.may_rename((a, b"sub"), (a, b"sub2"), &user, 0)), Ok(()));
    assert_eq!(errno(fs.may_rename((a, b"sub"), (b, b"sub"), &user, 0)), Err(EACCES));
    // A file's ".." does not exist: its own mode does not matter.
    assert_eq!(errno(fs.may_rename((a, b"f"), (b, b"f"), &user, 0)), Ok(()));
    chmod(&fs, sub, 0o755);
    assert_eq!(errno(fs.may_rename((a, b"sub"), (b, b"sub"), &user, 0)), Ok(()));
    // The exchange's other directory moves too.
    let other = fs.mkdir(b, b"other", 0o555, OWNER, GROUP).unwrap().ino;
    assert_eq!(
        errno(fs.may_rename((a, b"sub"), (b, b"other"), &user, RENAME_EXCHANGE)),
        Err(EACCES)
    );
    chmod(&fs, other, 0o755);
    assert_eq!(
        errno(fs.may_rename((a, b"sub"), (b, b"other"), &user, RENAME_EXCHANGE)),
        Ok(())
    );
    // Replacing: the target is deleted, with its type checked against the
    // source's; creating: the target directory must be writable.
    assert_eq!(
        errno(fs.may_rename((a, b"f"), (b, b"other"), &user, 0)),
        Err(libc::EISDIR)
    );
    assert_eq!(
        errno(fs.may_rename((a, b"sub"), (a, b"f"), &user, 0)),
        Err(libc::ENOTDIR)
    );
    chmod(&fs, b, 0o555);
    assert_eq!(errno(fs.may_rename((a, b"f"), (b, b"new"), &user, 0)), Err(EACCES));
    chmod(&fs, b, 0o777);
    // The flags' own errors, and a whiteout needs CAP_MKNOD.
    assert_eq!(
        errno(fs.may_rename((a, b"f"), (a, b"sub"), &user, RENAME_NOREPLACE)),
        Err(libc::EEXIST)
    );
    assert_eq!(
        errno(fs.may_rename((a, b"f"), (a, b"none"), &user, RENAME_EXCHANGE)),
        Err(libc::ENOENT)
    );
    assert_eq!(
        errno(fs.may_rename((a, b"none"), (a, b"x"), &user, 0)),
        Err(libc::ENOENT)
    );
    assert_eq!(
        errno(fs.may_rename((a, b"f"), (a, b"g"), &user, RENAME_WHITEOUT)),
        Err(EPERM)
    );
    let mknod = user.clone().caps(Caps::MKNOD);
    assert_eq!(
        errno(fs.may_rename((a, b"f"), (a, b"g"), &mknod, RENAME_WHITEOUT)),
        Ok(())
    );
    // Onto another name of the same inode: nothing to do, nothing asked.
    let f = fs.lookup(a, b"f").unwrap().ino;
    fs.link(f, b, b"f2").unwrap();
    chmod(&fs, a, 0o555);
    assert_eq!(errno(fs.may_rename((a, b"f"), (b, b"f2"), &user, 0)), Ok(()));
    assert_eq!(errno(fs.may_rename((a, b"f"), (b, b"f3"), &user, 0)), Err(EACCES));
}

#[test]
fn setattr_asks_what_chmod_chown_utimes_truncate_and_chattr_ask() {
    let (fs, f, d) = fixture();
    let owner = Cred::new(OWNER, 555, &[GROUP, 300]);
    let stranger = Cred::new(2000, 555, &[]);
    let set = SetAttr::default;
    let now = novafs::time::now_ns();
    let cases: Vec<(&str, Cred, SetAttr, Result<(), i32>)> = vec![
        ("chmod by the owner", owner.clone(), set().mode(0o600), Ok(())),
        ("chmod by another", stranger.clone(), set().mode(0o600), Err(EPERM)),
        (
            "chmod with CAP_FOWNER",
            stranger.clone().caps(Caps::FOWNER),
            set().mode(0o600),
            Ok(()),
        ),
        ("chown to oneself", owner.clone(), set().uid(Some(OWNER)), Ok(())),
        ("chown away", owner.clone(), set().uid(Some(2000)), Err(EPERM)),
        (
            "chown of another's file to its owner",
            stranger.clone(),
            set().uid(Some(OWNER)),
            Err(EPERM),
        ),
        (
            "chown with CAP_CHOWN",
            Cred::new(1, 1, &[]).caps(Caps::CHOWN),
            set().uid(Some(5)),
            Ok(()),
        ),
        ("chgrp to one's own group", owner.clone(), set().gid(Some(300)), Ok(())),
        (
            "chgrp to the same group",
            Cred::new(OWNER, 1, &[]),
            set().gid(Some(GROUP)),
            Ok(()),
        ),
        ("chgrp elsewhere", owner.clone(), set().gid(Some(400)), Err(EPERM)),
        (
            "chgrp of another's file",
            Cred::new(2000, 300, &[]),
            set().gid(Some(300)),
            Err(EPERM),
        ),
        (
            "explicit times by the owner",
            owner.clone(),
            set().mtime(Some(5)),
            Ok(()),
        ),
        (
            "explicit times by another",
            stranger.clone(),
            set().mtime(Some(5)),
            Err(EPERM),
        ),
        (
            "touch by a writer",
            Cred::new(2000, GROUP, &[]),
            set().atime(Some(now)).mtime(Some(now)).times_now(true),
            Ok(()),
        ),
        (
            "touch by a reader",
            stranger.clone(),
            set().atime(Some(now)).mtime(Some(now)).times_now(true),
            Err(EACCES),
        ),
        (
            "one time now is explicit",
            Cred::new(2000, GROUP, &[]),
            set().mtime(Some(now)).times_now(true),
            Err(EPERM),
        ),
        (
            "truncate by a writer",
            Cred::new(2000, GROUP, &[]),
            set().size(Some(0)),
            Ok(()),
        ),
        (
            "truncate by a reader",
            stranger.clone(),
            set().size(Some(0)),
            Err(EACCES),
        ),
        (
            "chattr by the owner",
            owner.clone(),
            set().flags(Some(novafs::FLAG_NODUMP)),
            Ok(()),
        ),
        (
            "chattr +i by the owner",
            owner.clone(),
            set().flags(Some(FLAG_IMMUTABLE)),
            Err(EPERM),
        ),
        (
            "chattr +i with CAP_LINUX_IMMUTABLE",
            owner.clone().caps(Caps::LINUX_IMMUTABLE),
            set().flags(Some(FLAG_IMMUTABLE)),
            Ok(()),
        ),
        ("nothing", stranger.clone(), set(), Ok(())),
    ];
    chmod(&fs, f.ino, 0o664);
    for (what, cred, change, expect) in cases {
        let got = errno(fs.setattr_allowed(f.ino, &cred, &change));
        assert_eq!(got.map(|s| s == change), expect.map(|()| true), "{what}");
    }
    assert_eq!(
        errno(fs.setattr_allowed(d.ino, &Cred::root(), &set().size(Some(0)))),
        Err(libc::EISDIR)
    );
    // Immutable or append-only: EPERM for all but touch on append-only.
    let touch = set().atime(Some(now)).mtime(Some(now)).times_now(true);
    for flag in [FLAG_IMMUTABLE, FLAG_APPEND] {
        fs.set_flags(f.ino, flag).unwrap();
        for change in [
            set().mode(0o600),
            set().uid(Some(OWNER)),
            set().mtime(Some(1)),
            set().size(Some(0)),
        ] {
            assert_eq!(
                errno(fs.setattr_allowed(f.ino, &Cred::root(), &change)),
                Err(EPERM),
                "{change:?}"
            );
        }
        let expect = if flag == FLAG_APPEND { Ok(touch) } else { Err(EPERM) };
        assert_eq!(errno(fs.setattr_allowed(f.ino, &Cred::root(), &touch)), expect);
        fs.set_flags(f.ino, 0).unwrap();
    }
}

#[test]
fn setattr_clears_the_set_id_bits_linux_clears() {
    let (fs, f, d) = fixture();
    let set = SetAttr::default;
    let member = Cred::new(OWNER, GROUP, &[]);
    let outsider = Cred::new(OWNER, 555, &[]);
    // chmod: set-group-ID stays for a member of the (new) group or with
    // CAP_FSETID.
    let sgid = set().mode(0o2755);
    assert_eq!(fs.setattr_allowed(f.ino, &member, &sgid).unwrap(), sgid);
    assert_eq!(fs.setattr_allowed(f.ino, &outsider, &sgid).unwrap(), set().mode(0o755));
    let fsetid = outsider.clone().caps(Caps::FSETID);
    assert_eq!(fs.setattr_allowed(f.ino, &fsetid, &sgid).unwrap(), sgid);
    // The group the same change gives the file is the one that counts.
    let in_300 = Cred::new(OWNER, 555, &[300]);
    let to_300 = set().mode(0o2745).gid(Some(300));
    assert_eq!(fs.setattr_allowed(f.ino, &in_300, &to_300).unwrap(), to_300);
    assert_eq!(fs.setattr_allowed(f.ino, &in_300, &sgid).unwrap(), set().mode(0o755));
    // chown: set-user-ID goes always, set-group-ID with group execution
    // or for a caller outside the file's group; on every kind but
    // directories.
    let chown = set().uid(Some(5));
    for (perm, kept) in [(0o6755, 0o755), (0o6745, 0o2745), (0o4700, 0o700), (0o644, 0o644)] {
        chmod(&fs, f.ino, perm);
        let got = fs.setattr_allowed(f.ino, &Cred::root(), &chown).unwrap();
        let expect = if kept == perm { chown } else { chown.mode(Some(kept)) };
        assert_eq!(got, expect, "{perm:o}");
    }
    chmod(&fs, f.ino, 0o2745);
    // CAP_CHOWN alone suffices, as through the mount (not on ext4).
    let by_outsider = Cred::new(1, 555, &[]).caps(Caps::CHOWN);
    assert_eq!(
        fs.setattr_allowed(f.ino, &by_outsider, &chown).unwrap(),
        chown.mode(Some(0o745))
    );
    chmod(&fs, d.ino, 0o6755);
    assert_eq!(fs.setattr_allowed(d.ino, &Cred::root(), &chown).unwrap(), chown);
    for kind in [libc::S_IFIFO, libc::S_IFCHR, libc::S_IFBLK, libc::S_IFSOCK] {
        let node = fs
            .mknod(
                ROOT_INO,
                format!("n{kind:o}").as_bytes(),
                kind | 0o6555,
                0,
                OWNER,
                GROUP,
            )
            .unwrap();
        let got = fs.setattr_allowed(node.ino, &member, &set().gid(Some(GROUP))).unwrap();
        assert_eq!(got, set().gid(Some(GROUP)).mode(Some(0o555)), "{kind:o}");
    }
    // A truncation by a writer without CAP_FSETID clears them too.
    chmod(&fs, f.ino, 0o4766);
    let writer = Cred::new(2000, 555, &[]);
    let truncate = set().size(Some(0));
    assert_eq!(
        fs.setattr_allowed(f.ino, &writer, &truncate).unwrap(),
        truncate.mode(Some(0o766))
    );
    let writer = writer.caps(Caps::FSETID);
    assert_eq!(fs.setattr_allowed(f.ino, &writer, &truncate).unwrap(), truncate);
}

/// Inode, caller, name, writing, and the answer.
type XattrCase<'a> = (u64, Cred, &'a [u8], bool, Result<(), i32>);

#[test]
fn xattr_namespaces_answer_with_linuxs_errnos() {
    let (fs, f, d) = fixture();
    let l = fs.symlink(ROOT_INO, b"l", b"f", OWNER, GROUP).unwrap();
    let p = fs
        .mknod(ROOT_INO, b"p", libc::S_IFIFO | 0o666, 0, OWNER, GROUP)
        .unwrap();
    chmod(&fs, f.ino, 0o640);
    let owner = Cred::new(OWNER, 555, &[]);
    let member = Cred::new(2000, GROUP, &[]);
    let stranger = Cred::new(2000, 555, &[]);
    let admin = stranger.clone().caps(Caps::SYS_ADMIN);
    let (r, w) = (false, true);
    let cases: Vec<XattrCase<'_>> = vec![
        (f.ino, owner.clone(), b"user.a", w, Ok(())),
        (f.ino, member.clone(), b"user.a", r, Ok(())),
        (f.ino, member.clone(), b"user.a", w, Err(EACCES)),
        (f.ino, stranger.clone(), b"user.a", r, Err(EACCES)),
        (l.ino, owner.clone(), b"user.a", r, Err(libc::ENODATA)),
        (l.ino, owner.clone(), b"user.a", w, Err(EPERM)),
        (p.ino, owner.clone(), b"user.a", w, Err(EPERM)),
        (f.ino, owner.clone(), b"trusted.a", r, Err(libc::ENODATA)),
        (f.ino, owner.clone(), b"trusted.a", w, Err(EPERM)),
        (f.ino, admin.clone(), b"trusted.a", w, Ok(())),
        (l.ino, admin.clone(), b"trusted.a", r, Ok(())),
        (f.ino, stranger.clone(), b"security.selinux", r, Ok(())),
        (f.ino, owner.clone(), b"security.selinux", w, Err(EPERM)),
        (f.ino, admin.clone(), b"security.selinux", w, Ok(())),
        (f.ino, admin.clone(), b"security.capability", w, Err(EPERM)),
        (
            f.ino,
            stranger.clone().caps(Caps::SETFCAP),
            b"security.capability",
            w,
            Ok(()),
        ),
        (f.ino, stranger.clone(), ACCESS_ACL, r, Ok(())),
        (f.ino, stranger.clone(), ACCESS_ACL, w, Err(EPERM)),
        (f.ino, owner.clone(), ACCESS_ACL, w, Ok(())),
        (f.ino, stranger.clone().caps(Caps::FOWNER), ACCESS_ACL, w, Ok(())),
        // Refused by the core after: EOPNOTSUPP, EACCES.
        (l.ino, stranger.clone(), ACCESS_ACL, w, Ok(())),
        (f.ino, stranger.clone(), b"system.posix_acl_default", w, Ok(())),
        (d.ino, stranger.clone(), b"system.posix_acl_default", w, Err(EPERM)),
        // Unknown namespaces need the permission, then the core refuses.
        (f.ino, stranger.clone(), b"other.a", r, Err(EACCES)),
    ];
    for (ino, cred, name, writing, expect) in cases {
        let got = errno(fs.xattr_allowed(ino, &cred, name, writing));
        let name = String::from_utf8_lossy(name);
        assert_eq!(got, expect, "{cred:?} {name} writing: {writing} on {ino}");
    }
    // A sticky directory's user attributes are its owner's to write.
    chmod(&fs, d.ino, 0o1777);
    assert_eq!(errno(fs.xattr_allowed(d.ino, &stranger, b"user.a", w)), Err(EPERM));
    assert_eq!(errno(fs.xattr_allowed(d.ino, &stranger, b"user.a", r)), Ok(()));
    assert_eq!(errno(fs.xattr_allowed(d.ino, &owner, b"user.a", w)), Ok(()));
    // Immutable or append-only: nothing is written, not even by root.
    for flag in [FLAG_IMMUTABLE, FLAG_APPEND] {
        fs.set_flags(f.ino, flag).unwrap();
        for name in [&b"user.a"[..], b"trusted.a", b"security.a", ACCESS_ACL] {
            assert_eq!(errno(fs.xattr_allowed(f.ino, &Cred::root(), name, w)), Err(EPERM));
            assert_eq!(errno(fs.xattr_allowed(f.ino, &Cred::root(), name, r)), Ok(()));
        }
        fs.set_flags(f.ino, 0).unwrap();
    }
}

#[test]
fn a_missing_inode_is_enoent() {
    let (fs, f, _) = fixture();
    fs.unlink(ROOT_INO, b"f").unwrap();
    let e = fs.permission(f.ino, &Cred::root(), Access::READ).unwrap_err();
    assert!(matches!(e, Error::NotFound), "{e:?}");
    assert_eq!(errno(fs.owner_or_capable(ROOT_INO, &Cred::new(1, 1, &[]))), Err(EPERM));
    assert_eq!(errno(fs.owner_or_capable(ROOT_INO, &Cred::new(0, 1, &[]))), Ok(()));
}
