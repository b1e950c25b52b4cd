//! Decides which of the crate's mount tests run and which report
//! themselves ignored, so that none counts as passed without having run
//! (libtest has no runtime skip on stable Rust).
//!
//! `cfg(novafs_fuse_root)`: /dev/fuse opens and the build runs as root, or
//! under CI (`CI` set), where a machine without FUSE must fail those tests
//! (they check again at run time) rather than skip them.
//! `cfg(novafs_fuse_uring)`: besides, the kernel has FUSE over io_uring and
//! its `enable_uring` switch opens for writing. Its absence is not a failure
//! even under CI: the io_uring test then reports itself ignored.
//! `NOVAFS_TEST_NO_FUSE=1` treats /dev/fuse as absent, as novafs-cli's
//! build script does.

use std::fs::OpenOptions;

include!("../../build-support/fuse_probe.rs");

const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

fn main() {
    println!("cargo::rustc-check-cfg=cfg(novafs_fuse_root)");
    println!("cargo::rustc-check-cfg=cfg(novafs_fuse_uring)");
    let FuseProbe { ci, fuse, root } = FuseProbe::run();
    if (fuse && root) || ci {
        println!("cargo::rustc-cfg=novafs_fuse_root");
    }
    // Opening for writing writes nothing: the switch keeps its value.
    if fuse && root && OpenOptions::new().write(true).open(ENABLE_URING).is_ok() {
        println!("cargo::rustc-cfg=novafs_fuse_uring");
    }
}
