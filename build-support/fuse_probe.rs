// What a test build can count on for FUSE, shared by the build scripts of
// novafs-fuse and novafs-cli (each `include!`s this file): libtest has no
// runtime skip on stable Rust, so the tests that need FUSE are chosen when
// they are built.

/// What the build machine offers.
struct FuseProbe {
    /// Under CI (`CI` set): FUSE tests must run, and fail where FUSE is
    /// missing, rather than report themselves ignored.
    ci: bool,
    /// /dev/fuse opens for reading and writing, and `NOVAFS_TEST_NO_FUSE`
    /// does not ask to treat it as absent.
    fuse: bool,
    /// The build runs as root.
    root: bool,
}

impl FuseProbe {
    /// Looks, and tells cargo what to watch for the answer to change.
    fn run() -> FuseProbe {
        println!("cargo::rerun-if-changed=build.rs");
        println!("cargo::rerun-if-changed=../../build-support/fuse_probe.rs");
        println!("cargo::rerun-if-env-changed=CI");
        println!("cargo::rerun-if-env-changed=NOVAFS_TEST_NO_FUSE");
        let ci = std::env::var("CI").is_ok_and(|v| !matches!(v.as_str(), "" | "0" | "false"));
        let simulated_absent = std::env::var("NOVAFS_TEST_NO_FUSE").is_ok_and(|v| !matches!(v.as_str(), "" | "0"));
        let fuse = !simulated_absent && std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse").is_ok();
        if fuse {
            // Only while it exists: a watched path that is missing would
            // rerun the script (and rebuild the crate) on every build.
            println!("cargo::rerun-if-changed=/dev/fuse");
        }
        FuseProbe {
            ci,
            fuse,
            root: effective_uid() == Some(0),
        }
    }
}

/// The build's effective user id, from /proc (no libc in a build script).
fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let uids = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    uids.split_whitespace().nth(1)?.parse().ok()
}
