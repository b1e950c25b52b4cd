//! Unmodified programs under `novafs exec` (the preload shim, PRELOAD.md):
//! sqlite3, git, a shell pipeline, cp -a, tar, rsync, fio, postmark, and a
//! second process on the same image (writers killed mid-run: exec_killed.rs). Each
//! runs on a fresh image, is compared with the same run on tmpfs where
//! the output allows, is checked by the program's own checks, and ends
//! with `novafs fsck` finding the image clean and nothing left mounted.
//!
//! The programs that fork (a shell, git, rsync) hand the image over to a
//! daemon's mount, which needs FUSE; those that do not stay the image's
//! in-process owner. All are gated on FUSE and root, as the handover is.

mod fuse_common;

use std::ffi::OsStr;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::SystemTime;

use fuse_common::exec::{exec_on, quiet, Image, PYTHON};
use fuse_common::{
    compare_metadata, diff_trees, is_mount_point, make_tree, ok, require_fuse_root, shm_dir, Mount, Preserved, SplitMix,
};

/// A command line of strings and paths.
macro_rules! argv {
    ($($arg:expr),* $(,)?) => { [$(std::ffi::OsString::from(&$arg)),*] };
}

/// The same command without the shim (on tmpfs, or on a regular mount).
fn without_shim<S: AsRef<OsStr>>(args: &[S]) -> String {
    let mut c = Command::new(args[0].as_ref());
    c.args(&args[1..]).env("LC_ALL", "C");
    quiet(&mut c, "a program without the shim")
}

/// What cp -a and rsync -a keep, to the nanosecond.
const ALL: Preserved = Preserved {
    ns_times: true,
    hard_links: true,
    dir_times: true,
    special_times: true,
};

const SQL: &str = "
CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT, n INTEGER);
CREATE INDEX t_n ON t(n);
BEGIN;
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i < 2500)
  INSERT INTO t(v, n) SELECT printf('row %d %s', i, hex(zeroblob(i % 97))), i FROM c;
COMMIT;
BEGIN;
WITH RECURSIVE c(i) AS (SELECT 2501 UNION ALL SELECT i+1 FROM c WHERE i < 5000)
  INSERT INTO t(v, n) SELECT printf('row %d %s', i, hex(zeroblob(i % 97))), i FROM c;
COMMIT;
BEGIN; UPDATE t SET n = -n WHERE id % 2 = 0; ROLLBACK;
BEGIN; DELETE FROM t WHERE id % 3 = 0; UPDATE t SET n = n * 10, v = v || '!' WHERE id % 5 = 0; COMMIT;
SELECT count(*), sum(n), sum(length(v)) FROM t;
SELECT group_concat(id) FROM (SELECT id FROM t WHERE n BETWEEN 100 AND 160 ORDER BY n);
PRAGMA integrity_check;
";

const SQL_CHECK: &str = "PRAGMA integrity_check; SELECT count(*), sum(n), sum(length(v)) FROM t;";

#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn sqlite3_under_the_shim_matches_tmpfs_and_reopens_in_a_second_run() {
    require_fuse_root();
    let img = Image::new("128M");
    let tmp = shm_dir();
    // The oracle: 5000 rows less the multiples of 3; n = id, times 10 for
    // the multiples of 5.
    let n = |i: i64| if i % 5 == 0 { i * 10 } else { i };
    let kept = (1..=5000i64).filter(|i| i % 3 != 0);
    let sum: i64 = kept.clone().map(n).sum();
    let len: usize = kept
        .clone()
        .map(|i| format!("row {i} {}", "00".repeat((i % 97) as usize)).len() + usize::from(i % 5 == 0))
        .sum();
    let totals = format!("3334|{sum}|{len}");
    let mut by_n: Vec<(i64, i64)> = kept
        .map(|i| (n(i), i))
        .filter(|&(v, _)| (100..=160).contains(&v))
        .collect();
    by_n.sort();
    let ids = by_n.iter().map(|(_, i)| i.to_string()).collect::<Vec<_>>().join(",");
    for mode in ["DELETE", "WAL"] {
        let script = format!("PRAGMA journal_mode={mode};{SQL}");
        let db = format!("{mode}.db");
        let got = img.quiet(&argv!["sqlite3", img.at(&db), &script]);
        let want = without_shim(&argv!["sqlite3", tmp.path().join(&db), &script]);
        assert_eq!(got, want, "{mode}: the shim and tmpfs differ");
        assert_eq!(got, format!("{}\n{totals}\n{ids}\nok\n", mode.to_lowercase()), "{mode}");
    }
    // A second owner mounts the image again and finds both databases.
    for mode in ["DELETE", "WAL"] {
        let db = img.at(&format!("{mode}.db"));
        let got = img.quiet(&argv!["sqlite3", db, SQL_CHECK]);
        assert_eq!(got, format!("ok\n{totals}\n"), "{mode} reopened");
    }
    img.finish();
}

/// A fixed identity and clock, so that both runs make the same commits,
/// and nothing of the machine's git configuration read.
fn git_env(cmd: &mut Command, home: &Path) {
    cmd.env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "novafs")
        .env("GIT_AUTHOR_EMAIL", "novafs@example.invalid")
        .env("GIT_COMMITTER_NAME", "novafs")
        .env("GIT_COMMITTER_EMAIL", "novafs@example.invalid")
        .env("GIT_AUTHOR_DATE", "2024-01-02T03:04:05Z")
        .env("GIT_COMMITTER_DATE", "2024-01-02T03:04:05Z");
}

/// $1: where the repository goes; $2: the tree to commit; $3: where to
/// clone it. git runs its own subcommands (gc: repack, prune...), and
/// every command here is a child of the shell.
const GIT_SCRIPT: &str = r#"set -e
mkdir "$1/repo"
cd "$1/repo"
git init -q -b main
cp -a "$2/." src
git add -A
git commit -q -m first
echo changed > src/a/text.txt
rm "src/file 0-3.bin"
echo new > new.txt
git add -A
git commit -q -m second
git gc -q
git fsck --full --strict
git log --oneline | wc -l
git rev-parse HEAD HEAD^{tree}
git ls-tree -r HEAD | wc -l
git status --porcelain
git clone -q "$1/repo" "$3"
"#;

#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn git_in_a_shell_under_the_shim_makes_the_same_commits_as_on_tmpfs() {
    require_fuse_root();
    let img = Image::new("256M");
    let (home, src, tmp) = (shm_dir(), shm_dir(), shm_dir());
    make_tree(src.path(), 3);
    fs::remove_file(src.path().join("a/fifo")).expect("rm fifo"); // git skips FIFOs
    let script = |at: &Path, clone: &Path| argv!["sh", "-c", GIT_SCRIPT, "sh", at, src.path(), clone];
    let mut c = img.exec(&script(&img.prefix, &tmp.path().join("clone")));
    git_env(&mut c, home.path());
    let got = quiet(&mut c, "git under the shim");
    let args = script(&tmp.path().join("t"), &tmp.path().join("tclone"));
    fs::create_dir(tmp.path().join("t")).expect("mkdir");
    let mut c = Command::new(&args[0]);
    c.args(&args[1..]);
    git_env(&mut c, home.path());
    let want = quiet(&mut c, "git on tmpfs");
    assert_eq!(got, want, "the shim and tmpfs made different commits");
    let lines: Vec<&str> = got.lines().collect();
    // Two commits; HEAD and its tree; the files; a clean status.
    assert_eq!((lines.len(), lines[0], lines[3]), (4, "2", "62"), "{got}");
    // Cloned out of the image: the work tree is the one committed.
    for clone in ["clone", "tclone"] {
        fs::remove_dir_all(tmp.path().join(clone).join(".git")).expect("rm .git");
    }
    diff_trees(&tmp.path().join("tclone"), &tmp.path().join("clone"));
    // A second run finds the repository whole (git in a shell: see the
    // next test for git as the owner).
    let mut c = img.exec(&argv![
        "sh",
        "-c",
        r#"git -C "$1" fsck --full --strict && git -C "$1" log --oneline | wc -l"#,
        "sh",
        img.at("repo")
    ]);
    git_env(&mut c, home.path());
    assert_eq!(quiet(&mut c, "git fsck in a second run"), "2\n");
    img.finish();
}

/// git as the image's in-process owner: it maps its pack and index files,
/// then forks for its subcommands (fsck for the commit-graph check).
#[test]
fn git_as_the_owner_forks_after_mapping_its_packs() {
    require_fuse_root();
    let img = Image::new("64M");
    let home = shm_dir();
    let setup = r#"set -e
mkdir "$1"
cd "$1"
git init -q -b main
echo one > one
git add one
git commit -q -m one
git gc -q
"#;
    let repo = img.at("repo");
    let mut c = img.exec(&argv!["sh", "-c", setup, "sh", repo]);
    git_env(&mut c, home.path());
    quiet(&mut c, "a repository made in a shell");
    let mut c = img.exec(&argv!["git", "-C", repo, "fsck", "--full", "--strict"]);
    git_env(&mut c, home.path());
    quiet(&mut c, "git fsck as the owner");
    img.finish();
}

/// $1: the directory to work in; $2: the input. First, before any fork
/// (the subshell is the first), a descriptor the shell opened in-process,
/// which the handover moves to the mount at its offset and the child
/// shares (descriptor 7: see the next test for 3); then a pipeline of
/// children reading and writing the image; a working directory in the
/// image.
const PIPELINE: &str = r#"set -e
exec 7>"$1/f"
echo a >&7
(echo b >&7)
echo c >&7
exec 7>&-
cat "$1/f"
cat "$2" > "$1/big"
cat "$1/big" | sort | uniq -c | sort -rn > "$1/out"
wc -l < "$1/out"
head -n 3 "$1/out"
cksum < "$1/out"
mkdir -p "$1/dir/sub"
cd "$1/dir/sub"
pwd
cd ..
pwd
/bin/pwd
ls
"#;

#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn a_shell_pipeline_under_the_shim_prints_what_it_prints_on_tmpfs() {
    require_fuse_root();
    let img = Image::new("64M");
    let tmp = shm_dir();
    let words = ["nova", "log", "inode", "page", "radix", "snapshot", "fortis", "replica"];
    let mut rng = SplitMix::new(7);
    let mut big = String::new();
    for _ in 0..60_000 {
        let w = words[rng.below(8) as usize];
        big.push_str(&format!("{w}{}\n", rng.below(50)));
    }
    let input = tmp.path().join("input");
    fs::write(&input, &big).expect("write");
    let shell = |at: &Path| argv!["sh", "-c", PIPELINE, "sh", at, input];
    let got = img.quiet(&shell(&img.prefix));
    let t = tmp.path().join("t");
    fs::create_dir(&t).expect("mkdir");
    let want = without_shim(&shell(&t));
    let px = img.prefix.display().to_string();
    // pwd names the prefix, never the handover's mount.
    assert!(
        got.contains(&format!("\n{px}/dir/sub\n{px}/dir\n{px}/dir\nsub\n")),
        "{got}"
    );
    assert_eq!(
        got.replace(&px, "@"),
        want.replace(&t.display().to_string(), "@"),
        "the shim and tmpfs differ"
    );
    // Written by the forked subshell between the parent's two writes.
    let distinct: std::collections::BTreeSet<&str> = big.lines().collect();
    assert!(got.starts_with(&format!("a\nb\nc\n{}\n", distinct.len())), "{got}");
    // The image holds what the pipeline wrote, read by a second owner.
    assert_eq!(
        img.quiet(&argv!["cat", img.at("out")]),
        fs::read_to_string(t.join("out")).expect("read")
    );
    assert_eq!(img.quiet(&argv!["cat", img.at("f")]), "a\nb\nc\n");
    img.finish();
}

/// `exec 3>FILE` in a shell that owns the image: dash saves the open
/// descriptor 3 (the library's own descriptor of the image, the first one
/// free when the shim started) and closes it, and at the handover the
/// clients' lock lands on 3 and is overwritten by the shell's file. The
/// shell then holds no lock: once its last child is gone, the daemon
/// unmounts under it, and its next open in the prefix is ENOENT.
#[test]
fn a_shell_that_redirects_descriptor_3_keeps_its_handover_mount() {
    require_fuse_root();
    let img = Image::new("64M");
    let script = r#"set -e
exec 3>"$1/f"
echo a >&3
(echo b >&3)
exec 3>&-
cat "$1/f"
sleep 2
cat "$1/f"
"#;
    assert_eq!(img.quiet(&argv!["sh", "-c", script, "sh", img.prefix]), "a\nb\na\nb\n");
    img.finish();
}

/// A source tree: `make_tree`'s without its FIFO, which the in-process
/// owner cannot make (see the test of special files below).
fn source_tree(seed: u64) -> tempfile::TempDir {
    let src = shm_dir();
    make_tree(src.path(), seed);
    fs::remove_file(src.path().join("a/fifo")).expect("rm fifo");
    src
}

/// What happens to special files today (the shim's mknodat): the
/// in-process owner refuses them (EOPNOTSUPP), while a client, after the
/// handover, makes them through the daemon's mount.
#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn special_files_are_refused_in_process_and_made_by_a_client() {
    require_fuse_root();
    let img = Image::new("64M");
    let (f, g) = (img.at("f"), img.at("g"));
    let py = format!(
        "import os\ntry:\n    os.mkfifo({f:?})\nexcept OSError as e:\n    print(os.strerror(e.errno))\n",
        f = f.display().to_string()
    );
    assert_eq!(img.quiet(&[PYTHON, "-c", &py]), "Operation not supported\n");
    img.quiet(&argv!["sh", "-c", "mkfifo \"$1\"", "sh", g]);
    assert_eq!(img.quiet(&argv!["ls", img.prefix]), "g\n");
    assert_eq!(img.quiet(&argv!["stat", "-c", "%F", g]), "fifo\n");
    img.finish();
}

#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn cp_a_into_and_out_of_the_shim_round_trips_a_tree() {
    require_fuse_root();
    let mut img = Image::new("256M");
    let (src, out) = (source_tree(11), shm_dir());
    // One process, no fork: the in-process owner writes the copy.
    img.quiet(&argv!["cp", "-a", src.path(), img.at("copy")]);
    img.quiet(&argv!["cp", "-a", img.at("copy"), out.path().join("copy")]);
    diff_trees(src.path(), &out.path().join("copy"));
    compare_metadata(src.path(), &out.path().join("copy"), ALL);
    // The image itself, through a mount, not through the shim.
    img.through_mount(|mnt| {
        diff_trees(src.path(), &mnt.join("copy"));
        compare_metadata(src.path(), &mnt.join("copy"), ALL);
    });
    img.finish();
}

#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn tar_in_and_out_of_the_shim_alone_and_in_a_pipe_round_trips_a_tree() {
    require_fuse_root();
    let mut img = Image::new("256M");
    let (src, out) = (source_tree(12), shm_dir());
    let s = src.path().as_os_str();
    let tar = |args: &[std::ffi::OsString]| {
        img.quiet(&[&argv!["tar"][..], args].concat());
    };
    let (arch, x, p) = (img.at("tree.tar"), img.at("x"), img.at("p"));
    tar(&argv!["-C", s, "-cf", arch, "."]);
    img.quiet(&argv!["mkdir", x, p]);
    tar(&argv!["-C", x, "-xpf", arch]);
    // tar | tar: two children of a shell, the reader extracting into the
    // image through the handover's mount.
    img.quiet(&argv![
        "sh",
        "-c",
        r#"tar -C "$1" -cf - . | tar -C "$2" -xpf -"#,
        "sh",
        s,
        p
    ]);
    // Out again: an archive of the extracted tree, extracted on tmpfs.
    let again = out.path().join("again.tar");
    tar(&argv!["-C", x, "-cf", again, "."]);
    let y = out.path().join("y");
    fs::create_dir(&y).expect("mkdir");
    ok(Command::new("tar").arg("-C").arg(&y).arg("-xpf").arg(&again));
    let ustar = Preserved { ns_times: false, ..ALL };
    diff_trees(src.path(), &y);
    compare_metadata(src.path(), &y, ustar);
    // The archive in the image is byte for byte the one tar makes on tmpfs.
    let reference = out.path().join("reference.tar");
    ok(Command::new("tar")
        .arg("-C")
        .arg(src.path())
        .arg("-cf")
        .arg(&reference)
        .arg("."));
    img.through_mount(|mnt| {
        assert!(
            fs::read(mnt.join("tree.tar")).expect("read") == fs::read(&reference).expect("read"),
            "the archives differ"
        );
        for dir in ["x", "p"] {
            diff_trees(src.path(), &mnt.join(dir));
            compare_metadata(src.path(), &mnt.join(dir), ustar);
        }
    });
    img.finish();
}

#[test]
fn rsync_into_and_out_of_the_shim_including_deltas() {
    require_fuse_root();
    let mut img = Image::new("256M");
    let (src, out) = (source_tree(13), shm_dir());
    let dst = img.at("r");
    let rsync = |from: &Path, to: &Path| {
        img.quiet(&argv![
            "rsync",
            "-aH",
            "--delete",
            "--no-whole-file",
            &format!("{}/", from.display()),
            to
        ]);
    };
    rsync(src.path(), &dst);
    // Edit the middle of a big file, delete, add; the second run sends
    // deltas into temporaries it renames into place. rsync's quick check
    // compares whole seconds: the edit is dated later.
    let big = src.path().join("a/file 1-8.bin");
    let mut data = fs::read(&big).expect("read");
    data[1 << 20..(1 << 20) + 5000].fill(0xee);
    fs::write(&big, &data).expect("write");
    fs::File::options()
        .write(true)
        .open(&big)
        .and_then(|f| f.set_modified(SystemTime::now() + std::time::Duration::from_secs(5)))
        .expect("touch");
    fs::remove_dir_all(src.path().join("deep/1/2")).expect("rm");
    fs::write(src.path().join("new.txt"), "new\n").expect("write");
    rsync(src.path(), &dst);
    rsync(&dst, out.path());
    // rsync 3 (on tmpfs too) leaves the times of FIFOs and of directories
    // it links or deletes in unsynced: not compared.
    let rsynced = Preserved {
        dir_times: false,
        special_times: false,
        ..ALL
    };
    diff_trees(src.path(), out.path());
    compare_metadata(src.path(), out.path(), rsynced);
    img.through_mount(|mnt| {
        diff_trees(src.path(), &mnt.join("r"));
        compare_metadata(src.path(), &mnt.join("r"), rsynced);
    });
    img.finish();
}

/// fio's 4 KiB random writes, each followed by fsync, then read back and
/// checked against their crc32c: as threads of the owner (in-process), and
/// as a forked job (through the handover's mount); then checked again by
/// fio reading through a regular mount.
#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn fio_psync_random_writes_with_fsync_verify() {
    require_fuse_root();
    let mut img = Image::new("64M");
    let tmp = shm_dir();
    let fio = |file: &Path, how: &str| -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = [
            "fio",
            "--name=randwrite",
            "--ioengine=psync",
            "--rw=randwrite",
            "--bs=4k",
            "--size=4M",
            "--fsync=1",
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
            "--randrepeat=1",
            // No state file left in the working directory.
            "--verify_state_save=0",
        ]
        .map(Into::into)
        .to_vec();
        args.push(format!("--filename={}", file.display()).into());
        if how == "thread" {
            args.push("--thread".into());
        }
        args
    };
    let issued = |out: &str| -> String {
        assert!(out.contains(" err= 0:"), "{out}");
        out.lines()
            .find(|l| l.trim_start().starts_with("issued rwts:"))
            .unwrap_or_else(|| panic!("no issued line in {out}"))
            .trim()
            .to_string()
    };
    for how in ["thread", "process"] {
        let file = format!("{how}.dat");
        let got = issued(&img.quiet(&fio(&img.at(&file), how)));
        let want = issued(&without_shim(&fio(&tmp.path().join(&file), how)));
        // Every block written once and read back once.
        assert!(got.starts_with("issued rwts: total=1024,1024,0,"), "{how}: {got}");
        assert_eq!(got, want, "{how}");
        let size = img.quiet(&argv!["stat", "-c", "%s", img.at(&file)]);
        assert_eq!(size, "4194304\n", "{how}");
    }
    // Read through a mount, the blocks still carry what fio wrote.
    img.through_mount(|mnt| {
        for how in ["thread", "process"] {
            let mut again = fio(&mnt.join(format!("{how}.dat")), how);
            again.push("--verify_only".into());
            issued(&without_shim(&again));
        }
    });
    img.finish();
}

/// postmark's report without its rates and times (which vary).
fn postmark_counts(report: &str) -> String {
    let after = report
        .split("\nFiles:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no Files: section in {report}"));
    after
        .lines()
        .map(|l| l.split(" (").next().unwrap_or(l).trim_end())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn postmark_under_the_shim_matches_tmpfs() {
    require_fuse_root();
    let img = Image::new("128M");
    let tmp = shm_dir();
    let config = |at: &Path, name: &str| -> PathBuf {
        let path = tmp.path().join(name);
        let text = format!(
            "set location {}\nset number 500\nset subdirectories 5\nset transactions 2000\nset seed 42\nrun\nquit\n",
            at.display()
        );
        fs::write(&path, text).expect("write the configuration");
        path
    };
    let pm = img.at("pm");
    img.quiet(&argv!["mkdir", pm]);
    let got = img.quiet(&argv!["postmark", config(&pm, "image.pm")]);
    let t = tmp.path().join("t");
    fs::create_dir(&t).expect("mkdir");
    let want = without_shim(&argv!["postmark", config(&t, "tmpfs.pm")]);
    assert!(got.contains("Performing transactions..........Done"), "{got}");
    assert_eq!(postmark_counts(&got), postmark_counts(&want));
    // postmark removes everything it made: the root and pm are left.
    let report = img.finish();
    assert!(report.contains(": 2 inodes (2 directories, 0 files)"), "{report}");
}

#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn a_second_process_is_refused_while_another_owns_the_image() {
    require_fuse_root();
    let img = Image::new("64M");
    let held = img.at("held");
    // The owner: writes, says so, and waits for its stdin to close.
    let holder = format!(
        "import sys\nf = open({held:?}, 'w')\nf.write('first\\n')\nf.flush()\nprint('ready', flush=True)\nsys.stdin.read()\nf.write('after\\n')\nf.close()\nprint(open({held:?}).read(), end='')\n",
        held = held.display().to_string()
    );
    let mut owner = img
        .exec(&[PYTHON, "-c", &holder])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the owner");
    let mut said = BufReader::new(owner.stdout.take().expect("stdout"));
    let mut line = String::new();
    said.read_line(&mut line).expect("read");
    assert_eq!(line, "ready\n");
    // A second program on the same image and prefix is stopped before its
    // main (exit 125), writing nothing.
    let mut second = img
        .exec(&argv!["sh", "-c", "echo x > \"$1\"", "sh", held])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the second");
    let mut refusal = String::new();
    BufReader::new(second.stderr.take().expect("stderr"))
        .read_line(&mut refusal)
        .expect("read");
    let image = img.m.image.display();
    assert_eq!(
        refusal,
        format!("novafs preload: {image} is in use by another process and this one is not its client (start programs on it with novafs exec, which goes through its mount): Device or resource busy (os error 16)\n")
    );
    // Let the owner go (novafs exec waits for the image to be let go).
    let mut stdin = owner.stdin.take().expect("stdin");
    stdin.write_all(b"done\n").expect("write");
    drop(stdin);
    let status = second.wait().expect("wait");
    let mut printed = String::new();
    second
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut printed)
        .expect("read");
    assert_eq!((status.code(), printed.as_str()), (Some(125), ""));
    let mut rest = String::new();
    said.read_to_string(&mut rest).expect("read");
    assert!(owner.wait().expect("wait").success());
    assert_eq!(rest, "first\nafter\n");
    assert_eq!(img.quiet(&argv!["cat", held]), "first\nafter\n");
    img.finish();
}

#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn exec_on_an_image_a_daemon_serves_is_a_client_of_its_mount() {
    require_fuse_root();
    let m = Mount::new("64M", &[]);
    fs::set_permissions(&m.image, fs::Permissions::from_mode(0o600)).expect("chmod");
    fs::write(m.path("from-mount"), "m\n").expect("write");
    let prefix = m.dir.path().join("at");
    let run_dir = m.dir.path().join("exec-run");
    let script = r#"set -e
echo "$NOVAFS_MOUNT"
cat "$1/from-mount"
echo s > "$1/from-shell"
ls "$1"
"#;
    let got = quiet(
        &mut exec_on(&run_dir, &m.image, &prefix, &argv!["sh", "-c", script, "sh", prefix]),
        "a shell on a mounted image",
    );
    assert_eq!(got, format!("{}\nm\nfrom-mount\nfrom-shell\n", m.mnt.display()));
    // One process that never forks is a client too: no second owner.
    let py = format!(
        "open({:?}, 'w').write('p\\n')",
        prefix.join("from-python").display().to_string()
    );
    quiet(
        &mut exec_on(&run_dir, &m.image, &prefix, &[PYTHON, "-c", &py]),
        "python on a mounted image",
    );
    assert_eq!(fs::read_to_string(m.path("from-shell")).expect("read"), "s\n");
    assert_eq!(fs::read_to_string(m.path("from-python")).expect("read"), "p\n");
    // novafs exec makes the directory; a daemon of a client's own would
    // have its mount there.
    let started = fs::read_dir(&run_dir).map_or(0, |d| d.count());
    assert_eq!(started, 0, "a client started a daemon of its own");
    assert!(!prefix.exists(), "written outside the image");
    assert!(is_mount_point(&m.mnt));
    m.finish();
}
