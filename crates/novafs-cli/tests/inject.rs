//! `novafs inject` from the command line: each target damages what it says
//! (one line naming the structure and the region offsets), fsck's exit code
//! tells whether the damage is detected, `--poison` writes the sidecar bad-
//! block list that mapped images honour, and bad requests get one line and
//! exit 2.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use novafs::{Fs, MountOptions, ROOT_INO};
use pm::{BadBlocks, MapOptions, MmapRegion, Region};

fn novafs(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_novafs")).args(args).output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).trim().to_string()
}

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("novafs-inject-")
        .tempdir_in("/dev/shm")
        .unwrap()
}

fn mount(img: &str) -> Fs {
    let region = MmapRegion::open(Path::new(img), &MapOptions::default()).unwrap();
    Fs::open(Arc::new(region), MountOptions::default()).unwrap()
}

/// A 32 MiB image with a file "f" of two pages ('F' then 'G'). Returns
/// the image path and the file's inode number.
fn populated(dir: &tempfile::TempDir) -> (String, u64) {
    let img = dir.path().join("base.img").to_str().unwrap().to_string();
    let o = novafs(&["mkfs", "--size", "32M", "--shards", "2", &img]);
    assert!(o.status.success(), "{}", stderr(&o));
    let fs = mount(&img);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    let mut data = vec![b'F'; 4096];
    data.resize(8192, b'G');
    fs.write(f, 0, &data).unwrap();
    fs.unmount().unwrap();
    (img, f)
}

fn copy_of(dir: &tempfile::TempDir, base: &str, name: &str) -> String {
    let img = dir.path().join(name).to_str().unwrap().to_string();
    std::fs::copy(base, &img).unwrap();
    img
}

fn fsck_code(img: &str) -> Option<i32> {
    novafs(&["fsck", img]).status.code()
}

#[test]
fn each_target_prints_what_it_changed_and_fsck_judges_it() {
    let dir = scratch();
    let (base, f) = populated(&dir);
    assert_eq!(fsck_code(&base), Some(0));
    let ino = f.to_string();
    // (arguments, what the line names, fsck's exit codes allowed afterwards)
    let cases: &[(&[&str], &str, &[i32])] = &[
        // The replica repairs it: a note, not a problem.
        (&["--target", "superblock"], "superblock (primary) at 0x0", &[0]),
        (
            &["--target", "inode", "--ino", &ino],
            &format!("inode {f} record at"),
            &[1],
        ),
        (
            &["--target", "log-entry", "--ino", &ino, "--bytes", "64"],
            &format!("inode {f} log entry ("),
            &[1],
        ),
        // Seed 1 picks the inode-table heads of the fixed area.
        (
            &["--target", "fixed-area", "--bytes", "16"],
            "fixed area: inode-table heads",
            &[1],
        ),
        // Mostly stale ring bytes: detected or harmless, never a crash.
        (&["--target", "journal", "--seed", "3"], "journal ", &[0, 1]),
        // No data checksums yet: fsck cannot see damaged file data.
        (
            &["--target", "data-page", "--ino", &ino],
            &format!("inode {f} data page (file page "),
            &[0],
        ),
    ];
    for (i, (args, names, code)) in cases.iter().enumerate() {
        let img = copy_of(&dir, &base, &format!("case{i}.img"));
        let mut all = vec!["inject", img.as_str()];
        all.extend_from_slice(args);
        let o = novafs(&all);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        let out = stdout(&o);
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(out.starts_with(&format!("{img}: changed ")), "{out}");
        assert!(
            out.contains(names) && out.contains("region offsets 0x"),
            "{args:?}: {out}"
        );
        assert_ne!(std::fs::read(&img).unwrap(), std::fs::read(&base).unwrap(), "{args:?}");
        let got = fsck_code(&img);
        assert!(
            code.iter().any(|&c| got == Some(c)),
            "{args:?}: fsck exit {got:?}; {out}"
        );
    }
}

#[test]
fn both_superblock_copies_damaged_make_fsck_fail() {
    let dir = scratch();
    let (base, _) = populated(&dir);
    let img = copy_of(&dir, &base, "both.img");
    let o = novafs(&["inject", &img, "--target", "superblock", "--which", "both"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.lines().next().unwrap().contains("superblock (primary)"), "{out}");
    assert!(out.lines().nth(1).unwrap().contains("superblock (replica)"), "{out}");
    assert_ne!(fsck_code(&img), Some(0));
    let o = novafs(&["info", &img]);
    assert!(!o.status.success());
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
}

#[test]
fn the_same_seed_damages_the_same_bytes() {
    let dir = scratch();
    let (base, f) = populated(&dir);
    let ino = f.to_string();
    let mut images = Vec::new();
    for (i, seed) in ["7", "7", "8"].iter().enumerate() {
        let img = copy_of(&dir, &base, &format!("s{i}.img"));
        let o = novafs(&["inject", &img, "--target", "log-page", "--ino", &ino, "--seed", seed]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        images.push(std::fs::read(&img).unwrap());
    }
    assert_eq!(images[0], images[1]);
    assert_ne!(images[0], images[2]);
}

#[test]
fn poison_of_a_data_page_writes_the_sidecar_and_reads_fail_until_it_is_removed() {
    let dir = scratch();
    let (img, f) = populated(&dir);
    let before = std::fs::read(&img).unwrap();
    let ino = f.to_string();
    let o = novafs(&["inject", &img, "--target", "data-page", "--ino", &ino, "--poison"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let sidecar = BadBlocks::sidecar(Path::new(&img));
    assert!(out.contains("poisoned") && out.contains(".badblocks"), "{out}");
    assert_eq!(std::fs::read(&img).unwrap(), before, "poison changes no byte");
    let list = std::fs::read_to_string(&sidecar).unwrap();
    assert_eq!(list.lines().count(), 1, "{list}");
    // Every mapping of the image honours it: the poisoned page reads as EIO.
    let fs = mount(&img);
    let mut buf = vec![0u8; 8192];
    assert_eq!(fs.read(f, 0, &mut buf).unwrap_err().errno(), libc::EIO);
    fs.unmount().unwrap();
    assert_eq!(fsck_code(&img), Some(0), "fsck reads no file data");
    std::fs::remove_file(&sidecar).unwrap();
    let fs = mount(&img);
    assert_eq!(fs.read(f, 0, &mut buf).unwrap(), 8192);
    assert_eq!(&buf[..4096], &[b'F'; 4096]);
    fs.unmount().unwrap();
}

#[test]
fn poisoned_metadata_makes_fsck_say_how_to_clear_it() {
    let dir = scratch();
    let (img, _) = populated(&dir);
    let o = novafs(&["inject", &img, "--target", "superblock", "--which", "both", "--poison"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().count(), 2);
    let o = novafs(&["fsck", &img]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("rm ") && stderr(&o).contains(".badblocks"),
        "{}",
        stderr(&o)
    );
    std::fs::remove_file(BadBlocks::sidecar(Path::new(&img))).unwrap();
    assert_eq!(fsck_code(&img), Some(0));
}

#[test]
fn bad_requests_get_one_line_and_exit_2() {
    let dir = scratch();
    let (img, f) = populated(&dir);
    let before = std::fs::read(&img).unwrap();
    let ino = f.to_string();
    let missing = dir.path().join("missing.img").to_str().unwrap().to_string();
    let cases: &[(&[&str], &str)] = &[
        (
            &["inject", &img, "--target", "inode", "--which", "replica"],
            "no replica of inode records",
        ),
        (
            &["inject", &img, "--target", "log-page", "--which", "both", "--ino", &ino],
            "no replica of log pages",
        ),
        (
            &["inject", &img, "--target", "log-entry", "--ino", "12345"],
            "inode 12345 is not in use",
        ),
        (
            &["inject", &img, "--target", "data-page"],
            "inode 1: the inode maps no data pages",
        ),
        (
            &["inject", &img, "--target", "journal", "--ino", "2"],
            "--ino applies to",
        ),
        (
            &["inject", &img, "--target", "inode", "--ino", "0"],
            "inode numbers start at 1",
        ),
        (&["inject", &missing, "--target", "inode"], "does not exist"),
    ];
    for (args, says) in cases {
        let o = novafs(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
        assert!(stdout(&o).is_empty());
    }
    assert_eq!(std::fs::read(&img).unwrap(), before, "image untouched");
    // clap refuses what it can see is wrong.
    assert_eq!(novafs(&["inject", &img, "--target", "bitmap"]).status.code(), Some(2));
    assert_eq!(
        novafs(&["inject", &img, "--target", "inode", "--bytes", "0"])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn a_mounted_image_is_refused() {
    let dir = scratch();
    let (img, _) = populated(&dir);
    let before = std::fs::read(&img).unwrap();
    let held = MmapRegion::open(Path::new(&img), &MapOptions::default()).unwrap();
    let o = novafs(&["inject", &img, "--target", "superblock"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("in use"), "{}", stderr(&o));
    assert_eq!(stderr(&o).lines().count(), 1);
    assert!(held.len() > 0);
    drop(held);
    assert_eq!(std::fs::read(&img).unwrap(), before, "image untouched");
}
