//! Snapshots through the command line and FUSE (NOVA-Fortis §3): taken
//! while a tree changes, each snapshot mounted read-only beside the live
//! mount equals a copy made when it was taken (names, contents, modes,
//! sizes, nanosecond mtimes, symlinks, hard links); a mounted snapshot
//! cannot be deleted; an unmounted image's snapshots are listed, mounted
//! and rolled back to.

mod fuse_common;

use std::fs;
use std::path::Path;
use std::process::Command;

use fuse_common::{
    compare_metadata, diff_trees, make_tree, ok, require_fuse, require_fuse_root, run, shm_dir, Mount, Preserved,
};

const SAME: Preserved = Preserved {
    ns_times: true,
    hard_links: true,
    dir_times: true,
    special_times: true,
};

/// `cp -a` of `tree` into a fresh tmpfs directory: the reference.
fn copy_of(tree: &Path) -> tempfile::TempDir {
    let d = shm_dir();
    ok(Command::new("cp").arg("-a").arg(tree).arg(d.path().join("t")));
    d
}

fn same_tree(want: &Path, got: &Path) {
    diff_trees(want, got);
    compare_metadata(want, got, SAME);
}

fn change(root: &Path, round: u8) {
    let t = root.join("t");
    fs::write(t.join("a/text.txt"), format!("rewritten {round}\n")).expect("overwrite");
    let (gone, moved) = [("a/b/c", "deep"), ("ünïcødé", "moved1")][usize::from(round) - 1];
    fs::remove_dir_all(t.join(gone)).expect("rm -r");
    fs::rename(t.join(moved), t.join(format!("moved{round}"))).expect("rename");
    fs::write(t.join(format!("new{round}")), vec![round; 70_000]).expect("create");
    let f = fs::OpenOptions::new()
        .write(true)
        .open(t.join("file 0-8.bin"))
        .expect("open");
    f.set_len(5000).expect("truncate");
    drop(f);
    ok(Command::new("chmod").arg("600").arg(t.join("a/text.txt")));
}

#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn snapshots_mount_beside_the_live_tree_and_roll_back() {
    require_fuse_root();
    let mut m = Mount::new("256M", &[]);
    let live = m.mnt.clone();
    make_tree(&live.join("t"), 1);
    let ref1 = copy_of(&live.join("t"));
    ok(m.novafs(&["snapshot", "create"]).arg(&live).arg("s1"));
    change(&live, 1);
    let ref2 = copy_of(&live.join("t"));
    ok(m.novafs(&["snapshot", "create"]).arg(&live).arg("s2"));
    change(&live, 2);
    let now = copy_of(&live.join("t"));

    let list = ok(m.novafs(&["snapshot", "list"]).arg(&live));
    let names: Vec<&str> = list
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(names, ["s1", "s2"], "{list}");
    assert!(list.contains("MiB"), "the rewritten and removed files are held: {list}");

    let mounts = shm_dir();
    for (name, want) in [("s1", &ref1), ("s2", &ref2)] {
        let at = mounts.path().join(name);
        fs::create_dir(&at).expect("mkdir");
        ok(m.novafs(&["snapshot", "mount"]).arg(&live).arg(name).arg(&at));
        same_tree(&want.path().join("t"), &at.join("t"));
        let err = fs::write(at.join("t/x"), "x").expect_err("read-only");
        assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    }
    same_tree(&now.path().join("t"), &live.join("t"));
    let busy = run(m.novafs(&["snapshot", "delete"]).arg(&live).arg("s1"));
    assert!(!busy.status.success());
    assert!(String::from_utf8_lossy(&busy.stderr).contains("in use"));
    ok(m.novafs(&["umount"]).arg(mounts.path().join("s1")));
    ok(m.novafs(&["snapshot", "delete"]).arg(&live).arg("s1"));
    // Unmounting the live mount ends the snapshot mounts it serves.
    m.umount();
    assert!(!fuse_common::is_mount_point(&mounts.path().join("s2")));

    let list = ok(m.novafs(&["snapshot", "list"]).arg(&m.image));
    assert!(list.contains("s2") && !list.contains("s1"), "{list}");
    let off = mounts.path().join("offline");
    fs::create_dir(&off).expect("mkdir");
    ok(m.novafs(&["snapshot", "mount"]).arg(&m.image).arg("s2").arg(&off));
    same_tree(&ref2.path().join("t"), &off.join("t"));
    ok(m.novafs(&["umount"]).arg(&off));
    let out = ok(m.novafs(&["snapshot", "rollback"]).arg(&m.image).arg("s2"));
    assert!(out.contains("rolled back"), "{out}");
    m.mount(&[]);
    same_tree(&ref2.path().join("t"), &live.join("t"));
    assert!(ok(m.novafs(&["snapshot", "list"]).arg(&live)).contains("no snapshots"));
    m.finish();
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn bad_snapshot_requests_say_what_is_wrong() {
    require_fuse();
    let m = Mount::new("32M", &[]);
    let fails = |args: &[&str], path: &Path, want: &str| {
        let out = run(m.novafs(args).arg(path).args(["missing"]));
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    };
    fails(&["snapshot", "delete"], &m.mnt, "no such snapshot");
    ok(m.novafs(&["snapshot", "create"]).arg(&m.mnt).arg("dup"));
    let out = run(m.novafs(&["snapshot", "create"]).arg(&m.mnt).arg("dup"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already"));
    let out = run(m.novafs(&["snapshot", "create"]).arg(&m.mnt).arg("a/b"));
    assert!(!out.status.success());
    fails(&["snapshot", "rollback"], &m.image, "in use by another novafs process");
    m.finish();
}
