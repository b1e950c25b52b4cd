//! Decides which FUSE integration tests run and which report themselves
//! ignored, so that none counts as passed without having run.
//!
//! libtest has no runtime skip on stable Rust, so the decision is made when
//! the tests are built: `cfg(novafs_fuse)` is set where /dev/fuse opens for
//! reading and writing (what the mount needs: fuser opens it itself), and
//! `cfg(novafs_fuse_root)` where, besides, the build runs as root (the
//! tests acting as other users, mounting overlayfs, installing mount(8)'s
//! helpers). Tests without their cfg are `#[ignore = "needs ..."]`.
//!
//! Under CI (the environment variable `CI` set, as `.ci/run` does) both
//! are always set: a machine that lacks FUSE then fails those tests (their
//! first line checks again at run time) instead of skipping them.
//!
//! `NOVAFS_TEST_NO_FUSE=1` makes the build (and the run-time check) treat
//! /dev/fuse as absent, to see both behaviours on a machine that has it:
//! `NOVAFS_TEST_NO_FUSE=1 cargo test` lists the FUSE tests as ignored,
//! `CI=1 NOVAFS_TEST_NO_FUSE=1 cargo test` fails them.

use std::fs::OpenOptions;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(novafs_fuse)");
    println!("cargo::rustc-check-cfg=cfg(novafs_fuse_root)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=CI");
    println!("cargo::rerun-if-env-changed=NOVAFS_TEST_NO_FUSE");

    let ci = std::env::var("CI").is_ok_and(|v| !matches!(v.as_str(), "" | "0" | "false"));
    let simulated_absent = std::env::var("NOVAFS_TEST_NO_FUSE").is_ok_and(|v| !matches!(v.as_str(), "" | "0"));
    let fuse = !simulated_absent && OpenOptions::new().read(true).write(true).open("/dev/fuse").is_ok();
    if fuse {
        // Only while it exists: a watched path that is missing would rerun
        // this script (and rebuild the crate) on every build.
        println!("cargo::rerun-if-changed=/dev/fuse");
    }
    if fuse || ci {
        println!("cargo::rustc-cfg=novafs_fuse");
    }
    if (fuse && effective_uid() == Some(0)) || ci {
        println!("cargo::rustc-cfg=novafs_fuse_root");
    }
}

/// The build's effective user id, from /proc (no libc in a build script).
fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let uids = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    uids.split_whitespace().nth(1)?.parse().ok()
}
