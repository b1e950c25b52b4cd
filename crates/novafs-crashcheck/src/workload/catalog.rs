//! The hand-written scenarios: one per operation type and form, a few
//! multi-operation sequences, and inode-table growth.

use novafs::{FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE};
use novafs::{RENAME_EXCHANGE, RENAME_NOREPLACE, RENAME_WHITEOUT};
use novafs_ops::{At, Op};

use super::Workload;

/// Sets ACL `name` of `path` to `(tag, perm)` entries; named users'
/// entries (tag 2) are for uid 1001, the others take no id.
fn set_acl(path: &str, name: &str, entries: &[(u16, u16)]) -> Op {
    let mut value = 2u32.to_le_bytes().to_vec();
    for &(tag, perm) in entries {
        let id = if tag == 2 { 1001 } else { u32::MAX };
        value.extend_from_slice(&tag.to_le_bytes());
        value.extend_from_slice(&perm.to_le_bytes());
        value.extend_from_slice(&id.to_le_bytes());
    }
    Op::SetXattr {
        at: path.into(),
        name: name.into(),
        value,
        flags: 0,
    }
}

/// The hand-written scenarios: one per operation type and form, plus a few
/// multi-operation sequences. Log growth, GC and journal wrap-around
/// workloads are built by [`generated`] (they need a trial run).
pub fn catalog() -> Vec<Workload> {
    let w = Workload::new;
    let f = || vec![Op::create("/f")];
    let f_with = |len: u64| vec![Op::create("/f"), Op::write("/f", 0, len, 1)];
    vec![
        w(
            "create",
            vec![Op::mkdir("/d")],
            vec![Op::create("/a"), Op::create("/d/b")],
        ),
        w(
            "mkdir",
            vec![Op::mkdir("/d")],
            vec![Op::mkdir("/a"), Op::mkdir("/d/b"), Op::mkdir("/d/b/c")],
        ),
        w(
            "mknod",
            vec![],
            vec![
                Op::mknod("/fifo", libc::S_IFIFO | 0o600, 0),
                Op::mknod("/chr", libc::S_IFCHR | 0o640, 0x0501),
                Op::mknod("/blk", libc::S_IFBLK | 0o640, 0x0802),
                Op::mknod("/sock", libc::S_IFSOCK | 0o700, 0),
                Op::mknod("/reg", libc::S_IFREG | 0o600, 0),
            ],
        ),
        w(
            "symlink",
            vec![Op::mkdir("/d")],
            vec![
                Op::symlink("/l", "d/target"),
                Op::symlink("/d/long", "x/".repeat(1500)),
                Op::symlink("/max", "y".repeat(4095)),
            ],
        ),
        w(
            "write_small",
            f(),
            vec![Op::write("/f", 0, 100, 2), Op::write("/f", 200, 1, 3)],
        ),
        w("write_large", f(), vec![Op::write("/f", 0, 300 * 1024, 4)]),
        w(
            "write_unaligned",
            f_with(10_000),
            vec![
                Op::write("/f", 1000, 9000, 5),
                Op::write("/f", 4095, 2, 6),
                Op::write("/f", 12_000, 5000, 7),
            ],
        ),
        w(
            "overwrite",
            f_with(3 * 4096),
            vec![
                Op::write("/f", 4096, 4096, 8),
                Op::write("/f", 100, 50, 9),
                Op::write("/f", 0, 3 * 4096, 10),
            ],
        ),
        w(
            "append",
            f_with(5000),
            vec![
                Op::write("/f", 5000, 3000, 11),
                Op::write("/f", 8000, 10, 12),
                Op::write("/f", 8010, 8192, 13),
            ],
        ),
        w(
            "truncate_down",
            f_with(4 * 4096 + 300),
            vec![
                Op::truncate("/f", 3 * 4096 + 5),
                Op::truncate("/f", 2 * 4096),
                Op::truncate("/f", 100),
                Op::truncate("/f", 0),
            ],
        ),
        w(
            "truncate_up",
            f_with(100),
            vec![
                Op::truncate("/f", 10_000),
                Op::write("/f", 10_000, 10, 14),
                Op::truncate("/f", 50_000),
            ],
        ),
        w(
            "fallocate",
            f_with(1000),
            vec![
                Op::fallocate("/f", 0, 0, 16_384),
                Op::fallocate("/f", FALLOC_FL_KEEP_SIZE, 16_384, 8192),
                Op::fallocate("/f", 0, 30_000, 100),
            ],
        ),
        w(
            "punch_hole",
            f_with(4 * 4096),
            vec![
                Op::fallocate("/f", FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 4096, 4096),
                Op::fallocate("/f", FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 100, 5000),
                Op::fallocate("/f", FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 3 * 4096 + 10, 20),
            ],
        ),
        w(
            "zero_range",
            f_with(4 * 4096),
            vec![
                Op::fallocate("/f", FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 100, 9000),
                Op::fallocate("/f", FALLOC_FL_ZERO_RANGE, 3 * 4096 + 10, 20_000),
            ],
        ),
        w(
            "unlink",
            vec![
                Op::create("/f"),
                Op::write("/f", 0, 9000, 15),
                Op::link("/f", "/g"),
                Op::create("/e"),
            ],
            vec![
                Op::Unlink("/f".into()),
                Op::Unlink("/g".into()),
                Op::Unlink("/e".into()),
            ],
        ),
        w(
            "rmdir",
            vec![Op::mkdir("/d"), Op::mkdir("/d/e")],
            vec![Op::Rmdir("/d/e".into()), Op::Rmdir("/d".into())],
        ),
        w(
            "rename_in_dir",
            vec![Op::create("/a"), Op::write("/a", 0, 100, 16), Op::mkdir("/d")],
            vec![Op::rename("/a", "/b", 0), Op::rename("/d", "/e", 0)],
        ),
        w(
            "rename_across_dirs",
            vec![
                Op::mkdir("/d1"),
                Op::mkdir("/d2"),
                Op::create("/d1/f"),
                Op::write("/d1/f", 0, 100, 17),
            ],
            vec![Op::rename("/d1/f", "/d2/f", 0), Op::rename("/d2/f", "/g", 0)],
        ),
        w(
            "rename_over_file",
            vec![
                Op::create("/a"),
                Op::write("/a", 0, 100, 18),
                Op::create("/b"),
                Op::write("/b", 0, 5000, 19),
            ],
            vec![Op::rename("/a", "/b", 0)],
        ),
        w(
            "rename_over_linked_file",
            vec![
                Op::mkdir("/d"),
                Op::create("/a"),
                Op::create("/b"),
                Op::write("/b", 0, 70, 20),
                Op::link("/b", "/d/b2"),
            ],
            vec![Op::rename("/a", "/b", 0), Op::rename("/d/b2", "/a", 0)],
        ),
        w(
            "rename_dir_across_dirs",
            vec![
                Op::mkdir("/d1"),
                Op::mkdir("/d2"),
                Op::mkdir("/d1/sub"),
                Op::create("/d1/sub/f"),
                Op::mkdir("/d1/sub/x"),
            ],
            vec![Op::rename("/d1/sub", "/d2/sub", 0), Op::rename("/d2/sub/x", "/x", 0)],
        ),
        w(
            "rename_dir_over_empty_dir",
            vec![
                Op::mkdir("/d1"),
                Op::mkdir("/d2"),
                Op::mkdir("/d1/sub"),
                Op::create("/d1/sub/f"),
                Op::mkdir("/d2/empty"),
                Op::mkdir("/e"),
            ],
            vec![Op::rename("/d1/sub", "/d2/empty", 0), Op::rename("/d2", "/e", 0)],
        ),
        w(
            "rename_exchange",
            vec![
                Op::mkdir("/d"),
                Op::create("/a"),
                Op::write("/a", 0, 10, 21),
                Op::create("/b"),
                Op::mkdir("/d/sub"),
            ],
            vec![
                Op::rename("/a", "/b", RENAME_EXCHANGE),
                Op::rename("/a", "/d/sub", RENAME_EXCHANGE),
            ],
        ),
        w(
            "rename_exchange_dirs",
            vec![
                Op::mkdir("/e1"),
                Op::mkdir("/e2"),
                Op::mkdir("/e1/x"),
                Op::mkdir("/e2/y"),
                Op::create("/e1/x/f"),
                Op::mkdir("/e2/y/z"),
            ],
            vec![
                Op::rename("/e1/x", "/e2/y", RENAME_EXCHANGE),
                Op::rename("/e1/x/z", "/e2/y/f", RENAME_EXCHANGE),
            ],
        ),
        w(
            // The old name becomes a whiteout (a new inode) in the rename's
            // own transaction: across directories over a file, and in place.
            "rename_whiteout",
            vec![
                Op::mkdir("/d"),
                Op::create("/a"),
                Op::write("/a", 0, 100, 27),
                Op::create("/d/b"),
                Op::create("/c"),
            ],
            vec![
                Op::rename("/a", "/d/b", RENAME_WHITEOUT),
                Op::rename("/c", "/c2", RENAME_WHITEOUT),
            ],
        ),
        w(
            "rename_noreplace",
            vec![Op::mkdir("/d"), Op::create("/a")],
            vec![Op::rename("/a", "/d/a", RENAME_NOREPLACE)],
        ),
        w(
            "link",
            vec![Op::mkdir("/d"), Op::create("/f"), Op::write("/f", 0, 10, 22)],
            vec![Op::link("/f", "/g"), Op::link("/f", "/d/h")],
        ),
        w(
            "setattr",
            vec![Op::create("/f"), Op::mkdir("/d")],
            vec![
                Op::chmod("/f", 0o600),
                Op::chown("/f", 7, 8),
                Op::utimens("/f", 1_000_000_000, 2_000_000_000),
                Op::chmod("/d", 0o700),
            ],
        ),
        w(
            // Inline values, a value in data pages, replacing one by the
            // other (the old pages freed after the commit) and removals.
            "xattr",
            vec![Op::create("/f"), Op::mkdir("/d"), Op::symlink("/l", "f")],
            vec![
                Op::setxattr("/f", "user.a", 10, 40),
                Op::setxattr("/f", "user.a", 300, 41),
                Op::setxattr("/f", "user.big", 9000, 42),
                Op::setxattr("/d", "trusted.t", 0, 0),
                Op::setxattr("/l", "security.s", 20, 43),
                Op::removexattr("/f", "user.a"),
                Op::setxattr("/f", "user.big", 100, 44),
                Op::setxattr("/d", "user.big", 60_000, 45),
                Op::removexattr("/d", "user.big"),
            ],
        ),
        w(
            // Snapshots (Fortis §3.1): each record is one tail commit of
            // the list's log, whose first append also sets its head; a
            // long name takes several slots; a deletion is a record too.
            "snapshot",
            vec![Op::create("/f"), Op::write("/f", 0, 5000, 1)],
            vec![
                Op::Snapshot("a".into()),
                Op::write("/f", 100, 200, 2),
                Op::Snapshot("b".repeat(200)),
                Op::DeleteSnapshot("a".into()),
                Op::create("/g"),
                Op::Snapshot("c".into()),
                Op::DeleteSnapshot("b".repeat(200)),
            ],
        ),
        w(
            // What snapshots keep (Fortis §3.2): overwritten and truncated
            // data, an unlinked file and a removed directory, an xattr
            // value in pages; deleting the snapshots hands the pages on or
            // frees them.
            "snapshot_keep",
            vec![
                Op::create("/f"),
                Op::write("/f", 0, 3 * 4096, 1),
                Op::mkdir("/d"),
                Op::create("/d/g"),
                Op::write("/d/g", 0, 5000, 2),
                Op::setxattr("/f", "user.big", 5000, 3),
            ],
            vec![
                Op::Snapshot("a".into()),
                Op::write("/f", 0, 4096, 4),
                Op::Unlink("/d/g".into()),
                Op::Rmdir("/d".into()),
                Op::Snapshot("b".into()),
                Op::truncate("/f", 100),
                Op::setxattr("/f", "user.big", 10, 5),
                Op::DeleteSnapshot("a".into()),
                Op::DeleteSnapshot("b".into()),
            ],
        ),
        w(
            // POSIX ACLs: the access ACL and the mode change together, a
            // chmod rewrites the ACL, new nodes inherit a default ACL.
            "acl",
            vec![Op::create("/f"), Op::mkdir("/d")],
            vec![
                set_acl(
                    "/f",
                    "system.posix_acl_access",
                    &[(1, 6), (2, 4), (4, 4), (0x10, 6), (0x20, 0)],
                ),
                Op::chmod("/f", 0o640),
                set_acl(
                    "/d",
                    "system.posix_acl_default",
                    &[(1, 7), (2, 5), (4, 5), (0x10, 7), (0x20, 0)],
                ),
                Op::create("/d/g"),
                Op::mkdir("/d/e"),
                set_acl("/f", "system.posix_acl_access", &[(1, 6), (4, 4), (0x20, 4)]),
            ],
        ),
        w(
            "unlink_open_file",
            vec![Op::create("/f"), Op::write("/f", 0, 6000, 23)],
            vec![Op::Open("/f".into()), Op::Unlink("/f".into()), Op::Release("/f".into())],
        ),
        w(
            // The preload shim's handover names an unlinked open file
            // again to carry it through a clean unmount (PRELOAD.md).
            "relink_open_file",
            vec![Op::create("/f"), Op::write("/f", 0, 6000, 25), Op::mkdir("/d")],
            vec![
                Op::Open("/f".into()),
                Op::Unlink("/f".into()),
                Op::Relink {
                    from: At::Handle(0),
                    to: "/d/kept".into(),
                },
                Op::Release(At::Handle(0)),
                Op::Unlink("/d/kept".into()),
            ],
        ),
        w(
            // An atomic mapping's msync (NOVA §4.5): the file shows every
            // store of it or none, at each crash point of the commit.
            "atomic_msync",
            vec![Op::create("/f"), Op::write("/f", 0, 5 * 4096 + 100, 26)],
            vec![
                Op::MappedWrite {
                    at: "/f".into(),
                    stores: vec![(10, 100, 27), (2 * 4096 - 50, 200, 28), (4 * 4096, 4096, 29)],
                },
                Op::MappedWrite {
                    at: "/f".into(),
                    stores: vec![(5 * 4096, 300, 30), (0, 3 * 4096, 31)],
                },
            ],
        ),
        w(
            // A removed directory someone still holds stays, empty and
            // with no links, until released (or a crash reclaims it).
            "rmdir_open_dir",
            vec![Op::mkdir("/d"), Op::mkdir("/d/e")],
            vec![
                Op::Open("/d/e".into()),
                Op::Rmdir("/d/e".into()),
                Op::Open("/d".into()),
                Op::Rmdir("/d".into()),
                Op::Release("/d/e".into()),
                Op::Release("/d".into()),
            ],
        ),
        w(
            "remount",
            vec![Op::create("/f")],
            vec![Op::write("/f", 0, 100, 24), Op::Remount, Op::create("/g"), Op::Unmount],
        ),
        w(
            // The replicas go stale, then a protected mount rewrites them
            // (crash points in both mounts and inside the rewrite).
            "unprotected_mount",
            vec![Op::create("/f"), Op::write("/f", 0, 6000, 30), Op::mkdir("/d")],
            vec![
                Op::Unmount,
                Op::MountUnprotected,
                Op::write("/f", 4096, 3000, 31),
                Op::create("/d/g"),
                Op::rename("/f", "/d/f", 0),
                Op::Unmount,
                Op::Mount,
                Op::write("/d/g", 0, 100, 32),
                Op::Unlink("/d/f".into()),
            ],
        ),
        w(
            "mkfs_over_an_old_image",
            vec![
                Op::mkdir("/old"),
                Op::create("/old/f"),
                Op::write("/old/f", 0, 5000, 26),
            ],
            vec![Op::Unmount, Op::Mkfs, Op::Mount, Op::create("/new")],
        ),
        w(
            "sequence_mixed",
            vec![],
            vec![
                Op::mkdir("/d"),
                Op::create("/d/f"),
                Op::write("/d/f", 0, 5000, 25),
                Op::link("/d/f", "/l"),
                Op::rename("/d/f", "/g", 0),
                Op::symlink("/d/s", "../g"),
                Op::truncate("/g", 1234),
                Op::Unlink("/l".into()),
                Op::mkdir("/d/e"),
                Op::rename("/d/e", "/e", 0),
                Op::Rmdir("/e".into()),
                Op::chmod("/g", 0o400),
                Op::Unmount,
            ],
        ),
    ]
}

/// Creates that fill the first inode-table chunk and claim a second one
/// (a 2 MiB chunk linked by one 8-byte pointer).
pub fn inode_table_growth() -> Workload {
    let per_chunk = novafs::probe::layout::INODES_PER_CHUNK as usize;
    let name = |i: usize| Op::create(format!("/t{}/{i}", i % 8));
    let mut setup: Vec<Op> = (0..8).map(|d| Op::mkdir(format!("/t{d}"))).collect();
    // The root and the 8 directories hold slots too; leave one free.
    let before = per_chunk - 1 - 8 - 1;
    setup.extend((0..before).map(name));
    let mut w = Workload::new("inode_table_growth", setup, (before..before + 3).map(name).collect());
    w.region_size = 16 << 20; // Room for a second 2 MiB chunk, its mirror and the logs.
    w
}
