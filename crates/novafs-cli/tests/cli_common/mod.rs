//! Shared by the command-line tests: run the `novafs` binary, make a
//! scratch directory in /dev/shm, run a small `novafs bench`.
#![allow(dead_code)]

use std::process::{Command, Output};

pub fn novafs(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_novafs")).args(args).output().unwrap()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).trim().to_string()
}

pub fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("novafs-cli-")
        .tempdir_in("/dev/shm")
        .unwrap()
}

pub fn path(dir: &tempfile::TempDir, name: &str) -> String {
    dir.path().join(name).to_str().unwrap().to_string()
}

/// `novafs bench` with `form` (none for the full run) on 20 files of 2
/// appends, `rounds` rounds, a 256 MiB scratch image `img` (room for the
/// DRAM measurement's 64 MiB file, and for both inode tables of every
/// shard on a machine with many CPUs): its output, once it succeeded.
pub fn small_bench(form: &[&str], rounds: &str, img: &str) -> String {
    let mut args = vec!["bench"];
    args.extend_from_slice(form);
    args.extend([
        "--files",
        "20",
        "--appends",
        "2",
        "--rounds",
        rounds,
        "--size",
        "256M",
        "--image",
        img,
    ]);
    let o = novafs(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Asserts the bench removed every scratch image it made in `dir`.
pub fn assert_nothing_left(dir: &tempfile::TempDir) {
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "the bench left {left:?}");
}
