//! Real programs on a FUSE mount: cp, tar, git, sqlite3, rsync. Each test
//! mounts its own image, runs the program, checks the result against the
//! source (or the program's own checker), unmounts and runs fsck.

mod fuse_common;

use std::fs;
use std::process::Command;

use fuse_common::{compare_metadata, diff_trees, make_tree, ok, require_fuse, shm_dir, Mount, Preserved};

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn cp_a_of_a_tree_then_diff_r_finds_no_difference() {
    require_fuse();
    let src = shm_dir();
    make_tree(src.path(), 1);
    let m = Mount::new("256M", &[]);
    ok(Command::new("cp").arg("-a").arg(src.path()).arg(m.path("copy")));
    diff_trees(src.path(), &m.path("copy"));
    compare_metadata(
        src.path(),
        &m.path("copy"),
        Preserved {
            ns_times: true,
            hard_links: true,
            dir_times: true,
            special_times: true,
        },
    );
    // And back out again: what the mount returns is what went in.
    let back = shm_dir();
    ok(Command::new("cp")
        .arg("-a")
        .arg(m.path("copy"))
        .arg(back.path().join("copy")));
    diff_trees(src.path(), &back.path().join("copy"));
    m.finish();
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn tar_created_and_extracted_on_the_mount_round_trips() {
    require_fuse();
    let src = shm_dir();
    make_tree(src.path(), 2);
    let m = Mount::new("256M", &[]);
    let archive = m.path("tree.tar");
    ok(Command::new("tar")
        .arg("-C")
        .arg(src.path())
        .arg("-cf")
        .arg(&archive)
        .arg("."));
    fs::create_dir(m.path("x")).expect("mkdir");
    ok(Command::new("tar").arg("-C").arg(m.path("x")).arg("-xpf").arg(&archive));
    diff_trees(src.path(), &m.path("x"));
    let ustar = Preserved {
        ns_times: false,
        hard_links: true,
        dir_times: true,
        special_times: true,
    };
    compare_metadata(src.path(), &m.path("x"), ustar);
    // An archive made from the mount extracts to the same tree elsewhere.
    let out = shm_dir();
    ok(Command::new("tar")
        .arg("-C")
        .arg(m.path("x"))
        .arg("-cf")
        .arg(out.path().join("again.tar"))
        .arg("."));
    fs::create_dir(out.path().join("y")).expect("mkdir");
    ok(Command::new("tar")
        .arg("-C")
        .arg(out.path().join("y"))
        .arg("-xpf")
        .arg(out.path().join("again.tar")));
    diff_trees(src.path(), &out.path().join("y"));
    compare_metadata(src.path(), &out.path().join("y"), ustar);
    m.finish();
}

fn git(dir: &std::path::Path, home: &std::path::Path) -> Command {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "novafs")
        .env("GIT_AUTHOR_EMAIL", "novafs@example.invalid")
        .env("GIT_COMMITTER_NAME", "novafs")
        .env("GIT_COMMITTER_EMAIL", "novafs@example.invalid");
    c
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn git_init_add_commit_gc_clone_and_fsck_are_clean() {
    require_fuse();
    let home = shm_dir();
    let m = Mount::new("256M", &[]);
    let repo = m.path("repo");
    fs::create_dir(&repo).expect("mkdir");
    ok(git(&repo, home.path()).args(["init", "-q", "-b", "main"]));
    make_tree(&repo.join("src"), 3);
    fs::remove_file(repo.join("src/a/fifo")).expect("rm fifo"); // git skips FIFOs
    ok(git(&repo, home.path()).args(["add", "-A"]));
    ok(git(&repo, home.path()).args(["commit", "-q", "-m", "first"]));
    for i in 0..5 {
        fs::write(
            repo.join(format!("change{i}.txt")),
            format!("{i}\n").repeat(100 * i + 1),
        )
        .expect("write");
        fs::write(repo.join("src/a/text.txt"), format!("edit {i}\n")).expect("write");
        ok(git(&repo, home.path()).args(["add", "-A"]));
        ok(git(&repo, home.path()).args(["commit", "-q", "-m", &format!("change {i}")]));
    }
    ok(git(&repo, home.path()).args(["gc", "-q", "--aggressive"]));
    ok(git(&repo, home.path()).args(["fsck", "--full", "--strict"]));
    let count = ok(git(&repo, home.path()).args(["rev-list", "--count", "HEAD"]));
    assert_eq!(count.trim(), "6");
    assert_eq!(ok(git(&repo, home.path()).args(["status", "--porcelain"])), "");
    ok(git(m.mnt.as_path(), home.path()).args(["clone", "-q", "repo", "clone"]));
    ok(git(&m.path("clone"), home.path()).args(["fsck", "--full", "--strict"]));
    diff_trees(&repo.join("src"), &m.path("clone/src"));
    m.finish();
}

fn sqlite(db: &std::path::Path, sql: &str) -> String {
    ok(Command::new("sqlite3").arg(db).arg(sql))
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn sqlite3_transactions_survive_and_integrity_check_is_ok() {
    sqlite3_in_mode("mode=strict");
}

/// In relaxed mode SQLite's page rewrites go in place (Fortis §4.6).
#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn sqlite3_transactions_survive_and_integrity_check_is_ok_in_relaxed_mode() {
    sqlite3_in_mode("mode=relaxed");
}

fn sqlite3_in_mode(mode_option: &str) {
    require_fuse();
    let mut m = Mount::new("256M", &[mode_option]);
    for mode in ["DELETE", "WAL"] {
        let db = m.path(&format!("{mode}.db"));
        sqlite(&db, &format!("PRAGMA journal_mode={mode};"));
        sqlite(
            &db,
            "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT, n INTEGER);
             CREATE INDEX t_n ON t(n);
             BEGIN;
             WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i < 20000)
               INSERT INTO t(v, n) SELECT printf('row %d %s', i, hex(randomblob(40))), i FROM c;
             COMMIT;
             BEGIN; UPDATE t SET n = -n WHERE id % 2 = 0; ROLLBACK;
             BEGIN; DELETE FROM t WHERE id % 3 = 0; UPDATE t SET n = n * 10; COMMIT;",
        );
        let sum = sqlite(&db, "SELECT count(*), sum(n) FROM t;");
        // 20000 rows less the 6666 multiples of 3; n = 10 * id.
        let kept: i64 = (1..=20_000i64).filter(|i| i % 3 != 0).sum();
        assert_eq!(sum.trim(), format!("13334|{}", kept * 10));
        assert_eq!(sqlite(&db, "PRAGMA integrity_check;").trim(), "ok");
    }
    // Durable across a clean unmount and remount.
    m.umount();
    m.mount(&[mode_option]);
    for mode in ["DELETE", "WAL"] {
        let db = m.path(&format!("{mode}.db"));
        assert_eq!(sqlite(&db, "PRAGMA integrity_check;").trim(), "ok");
        assert!(sqlite(&db, "SELECT count(*) FROM t;").trim() == "13334");
    }
    m.finish();
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn rsync_into_and_out_of_the_mount_including_deltas() {
    require_fuse();
    let src = shm_dir();
    make_tree(src.path(), 4);
    let m = Mount::new("256M", &[]);
    let dst = m.path("r");
    let rsync = |from: &std::path::Path, to: &std::path::Path| {
        ok(Command::new("rsync")
            .args(["-aH", "--delete", "--no-whole-file"])
            .arg(format!("{}/", from.display()))
            .arg(to));
    };
    rsync(src.path(), &dst);
    diff_trees(src.path(), &dst);
    // rsync 3 (on tmpfs too) leaves the times of FIFOs and of directories
    // it links or deletes in unsynced, so those are not compared.
    let all = Preserved {
        ns_times: true,
        hard_links: true,
        dir_times: false,
        special_times: false,
    };
    compare_metadata(src.path(), &dst, all);
    // Change the source: edit in the middle of a big file, delete, add;
    // the second run sends deltas and renames its temporaries into place.
    let big = src.path().join("a/file 1-8.bin");
    let mut data = fs::read(&big).expect("read");
    data[1 << 20..(1 << 20) + 5000].fill(0xee);
    fs::write(&big, &data).expect("write");
    // rsync's quick check compares whole seconds: make the change visible
    // even when the first run was less than a second ago.
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
    fs::File::options()
        .write(true)
        .open(&big)
        .and_then(|f| f.set_modified(later))
        .expect("touch");
    fs::remove_dir_all(src.path().join("deep/1/2")).expect("rm");
    fs::write(src.path().join("new.txt"), "new\n").expect("write");
    rsync(src.path(), &dst);
    diff_trees(src.path(), &dst);
    compare_metadata(src.path(), &dst, all);
    let out = shm_dir();
    rsync(&dst, out.path());
    diff_trees(src.path(), out.path());
    m.finish();
}
