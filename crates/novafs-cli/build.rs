//! Decides which FUSE integration tests run and which report themselves
//! ignored, so that none counts as passed without having run.
//!
//! libtest has no runtime skip on stable Rust, so the decision is made when
//! the tests are built: `cfg(novafs_fuse)` is set where /dev/fuse opens for
//! reading and writing (what the mount needs), and
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

include!("../../build-support/fuse_probe.rs");

fn main() {
    println!("cargo::rustc-check-cfg=cfg(novafs_fuse)");
    println!("cargo::rustc-check-cfg=cfg(novafs_fuse_root)");
    let FuseProbe { ci, fuse, root } = FuseProbe::run();
    if fuse || ci {
        println!("cargo::rustc-cfg=novafs_fuse");
    }
    if (fuse && root) || ci {
        println!("cargo::rustc-cfg=novafs_fuse_root");
    }
}
