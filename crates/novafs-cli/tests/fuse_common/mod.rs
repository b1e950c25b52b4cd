//! Shared by the FUSE integration tests: make an image in /dev/shm, mount
//! it with the real `novafs` binary, run programs, unmount, fsck.
#![allow(dead_code)]

pub use novafs_rng::SplitMix;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tempfile::TempDir;

pub mod exec;
pub mod mount_helpers;

pub const NOVAFS: &str = env!("CARGO_BIN_EXE_novafs");

/// The first line of every FUSE test. It runs only where the build found
/// /dev/fuse or under CI (elsewhere it is ignored: see build.rs), so a
/// missing /dev/fuse fails it here rather than letting it pass unrun.
pub fn require_fuse() {
    let simulated_absent = std::env::var("NOVAFS_TEST_NO_FUSE").is_ok_and(|v| !matches!(v.as_str(), "" | "0"));
    let opened = fs::OpenOptions::new().read(true).write(true).open("/dev/fuse");
    match opened {
        Ok(_) if !simulated_absent => {}
        Ok(_) => panic!("this test needs FUSE: /dev/fuse is treated as absent (NOVAFS_TEST_NO_FUSE)"),
        Err(e) => panic!("this test needs FUSE: /dev/fuse: {e}"),
    }
}

/// [`require_fuse`], for the tests that also need root.
pub fn require_fuse_root() {
    require_fuse();
    assert!(nix::unistd::geteuid().is_root(), "this test needs root");
}

/// Runs a command, returning its output; panics if it cannot start.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    out
}

/// Runs a command and asserts it succeeded; returns stdout.
pub fn ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a program as user and group 65534 (nobody) with no other
/// groups, through setpriv; the test must run as root.
pub fn as_nobody(args: &[&str]) -> Output {
    run(Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(args))
}

pub fn novafs<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut c = Command::new(NOVAFS);
    c.args(args);
    c
}

/// A scratch directory in /dev/shm (tmpfs: the image's natural home).
pub fn shm_dir() -> TempDir {
    tempfile::Builder::new()
        .prefix("novafs-fuse-test")
        .tempdir_in("/dev/shm")
        .expect("tempdir in /dev/shm")
}

/// An image with a mount point beside it, mounted by the `novafs` binary;
/// unmounted (and, if that fails, detached) on drop.
pub struct Mount {
    pub dir: TempDir,
    pub image: PathBuf,
    pub mnt: PathBuf,
    pub pid: u32,
    pub mounted: bool,
}

impl Mount {
    /// A fresh image of `size` (e.g. "256M") mounted with `-o opts`.
    pub fn new(size: &str, opts: &[&str]) -> Mount {
        let dir = shm_dir();
        let image = dir.path().join("image");
        let mnt = dir.path().join("mnt");
        fs::create_dir(&mnt).expect("mkdir mnt");
        ok(novafs(["mkfs", "--size", size]).arg(&image));
        let mut m = Mount {
            dir,
            image,
            mnt,
            pid: 0,
            mounted: false,
        };
        m.mount(opts);
        m
    }

    /// `novafs ARGS` with the daemon's state and log kept in this test's
    /// directory.
    pub fn novafs(&self, args: &[&str]) -> Command {
        let mut c = novafs(args);
        c.env("NOVAFS_RUN_DIR", self.dir.path().join("run"));
        c
    }

    /// Mounts (again); records the daemon's pid.
    pub fn mount(&mut self, opts: &[&str]) {
        let mut c = self.novafs(&["mount"]);
        for o in opts {
            c.arg("-o").arg(o);
        }
        let out = ok(c.arg(&self.image).arg(&self.mnt));
        self.pid = daemon_pid(&out);
        self.mounted = true;
        // CI's second pass runs these tests over FUSE over io_uring: every
        // mount must then really use it (the message names the transport).
        // Checked once the mount is recorded, so that a failure unmounts.
        // A test of the writeback cache must not pass without it.
        if opts.iter().any(|o| o.split(',').any(|o| o == "writeback_cache")) {
            assert!(
                out.contains("; writeback cache: "),
                "the kernel did not take the writeback cache: {out}"
            );
        }
        if let Ok(want) = std::env::var("NOVAFS_TEST_TRANSPORT") {
            assert!(
                out.contains(&format!("({want};")),
                "the mount did not use {want}: {out}"
            );
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// `novafs umount`, which returns once the image is marked clean.
    pub fn umount(&mut self) {
        ok(self.novafs(&["umount"]).arg(&self.mnt));
        self.mounted = false;
        assert!(!is_mount_point(&self.mnt), "still mounted after umount");
    }

    /// `novafs fsck` must find the image clean (exit 0).
    pub fn fsck(&self) -> String {
        ok(novafs(["fsck"]).arg(&self.image))
    }

    /// Unmount, then fsck: the end of every test.
    pub fn finish(mut self) {
        self.umount();
        let report = self.fsck();
        assert!(report.contains("cleanly unmounted"), "{report}");
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.mounted {
            let _ = run(self.novafs(&["umount"]).arg(&self.mnt));
            if is_mount_point(&self.mnt) {
                let _ = run(Command::new("umount").arg("-l").arg(&self.mnt));
            }
        }
    }
}

/// The daemon pid from `novafs mount`'s "(daemon pid N, log ...)" line.
pub fn daemon_pid(mount_stdout: &str) -> u32 {
    mount_stdout
        .split("daemon pid ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("no daemon pid in {mount_stdout:?}"))
}

/// True when `path` is exactly a mount point (per /proc/self/mountinfo).
pub fn is_mount_point(path: &Path) -> bool {
    let want = path.to_string_lossy().replace(' ', "\\040");
    fs::read_to_string("/proc/self/mountinfo")
        .expect("mountinfo")
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(want.as_str()))
}

pub fn process_alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        let state = s.rsplit(')').next().and_then(|r| r.split_whitespace().next());
        !matches!(state, Some("Z") | Some("X"))
    })
}

pub fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `n` bytes from `rng`'s stream.
pub fn random_bytes(rng: &mut SplitMix, n: usize) -> Vec<u8> {
    let mut v = vec![0; n];
    rng.fill(&mut v);
    v
}

/// A varied tree: nested directories, empty, small, page-straddling and
/// multi-MiB files, odd permissions, old timestamps, symlinks (also
/// dangling), hard links, a FIFO, and names with spaces and UTF-8.
pub fn make_tree(root: &Path, seed: u64) {
    let mut rng = SplitMix::new(seed);
    let dirs = ["", "a", "a/b", "a/b/c", "empty dir", "ünïcødé", "deep/1/2/3/4/5"];
    for d in dirs {
        fs::create_dir_all(root.join(d)).expect("mkdir");
    }
    let sizes = [0usize, 1, 100, 4095, 4096, 4097, 65_536, 200_003, 3 << 20];
    for (i, d) in dirs.iter().enumerate() {
        for (j, &size) in sizes.iter().enumerate().skip(i % 3) {
            let p = root.join(d).join(format!("file {i}-{j}.bin"));
            fs::write(&p, random_bytes(&mut rng, size)).expect("write");
            let mode = [0o644, 0o600, 0o755, 0o444][(i + j) % 4];
            fs::set_permissions(&p, fs::Permissions::from_mode(mode)).expect("chmod");
        }
    }
    fs::write(root.join("a/text.txt"), "hello novafs\n".repeat(1000)).expect("write");
    std::os::unix::fs::symlink("text.txt", root.join("a/link")).expect("symlink");
    std::os::unix::fs::symlink("../missing/target", root.join("a/dangling")).expect("symlink");
    std::os::unix::fs::symlink("a/b/c", root.join("dirlink")).expect("symlink");
    fs::hard_link(root.join("a/text.txt"), root.join("a/b/hardlink.txt")).expect("link");
    ok(Command::new("mkfifo").arg(root.join("a/fifo")));
    let old = filetime(root.join("a/b/c"), "200001021234.56");
    assert!(old);
    fs::set_permissions(root.join("a/b"), fs::Permissions::from_mode(0o750)).expect("chmod");
}

/// Sets a path's mtime with touch(1) (format [[CC]YY]MMDDhhmm[.ss]).
fn filetime(p: PathBuf, stamp: &str) -> bool {
    run(Command::new("touch").arg("-h").arg("-t").arg(stamp).arg(p))
        .status
        .success()
}

/// `diff -r --no-dereference`: contents, symlink targets, tree shape (diff
/// calls any two FIFOs different, so those are left to `compare_metadata`).
pub fn diff_trees(a: &Path, b: &Path) {
    ok(Command::new("diff")
        .arg("-r")
        .arg("--no-dereference")
        .arg("--exclude=fifo")
        .arg(a)
        .arg(b));
}

/// What a copy is expected to have preserved.
#[derive(Clone, Copy)]
pub struct Preserved {
    /// mtimes to the nanosecond (else to the second, as ustar keeps them).
    pub ns_times: bool,
    /// Files that were hard links of each other still are.
    pub hard_links: bool,
    /// Directory mtimes match too.
    pub dir_times: bool,
    /// FIFO mtimes match too.
    pub special_times: bool,
}

/// Compares what `cp -a`, `tar` and `rsync -a` preserve: names, type and
/// permissions, sizes, mtimes of files and directories, symlink targets,
/// and (if asked) link counts.
pub fn compare_metadata(a: &Path, b: &Path, want: Preserved) {
    let mut left = Vec::new();
    let mut right = Vec::new();
    walk(a, a, &mut left);
    walk(b, b, &mut right);
    assert_eq!(
        left.iter().map(|e| &e.0).collect::<Vec<_>>(),
        right.iter().map(|e| &e.0).collect::<Vec<_>>(),
        "trees differ in names"
    );
    for ((name, ma, la), (_, mb, lb)) in left.iter().zip(&right) {
        assert_eq!(ma.mode(), mb.mode(), "{name}: mode");
        assert_eq!(la, lb, "{name}: symlink target");
        if ma.file_type().is_symlink() {
            continue;
        }
        if ma.is_file() {
            assert_eq!(ma.len(), mb.len(), "{name}: size");
            if want.hard_links {
                assert_eq!(ma.nlink(), mb.nlink(), "{name}: link count");
            }
        }
        if (ma.is_dir() && !want.dir_times) || (ma.file_type().is_fifo() && !want.special_times) {
            continue;
        }
        assert_eq!(ma.mtime(), mb.mtime(), "{name}: mtime seconds");
        if want.ns_times {
            assert_eq!(ma.mtime_nsec(), mb.mtime_nsec(), "{name}: mtime ns");
        }
    }
}

type Entry = (String, fs::Metadata, Option<PathBuf>);

fn walk(root: &Path, dir: &Path, out: &mut Vec<Entry>) {
    let mut names: Vec<_> = fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").path())
        .collect();
    names.sort();
    for p in names {
        let meta = fs::symlink_metadata(&p).expect("lstat");
        let rel = p.strip_prefix(root).expect("prefix").display().to_string();
        let target = meta
            .file_type()
            .is_symlink()
            .then(|| fs::read_link(&p).expect("readlink"));
        let is_dir = meta.is_dir();
        out.push((rel, meta, target));
        if is_dir {
            walk(root, &p, out);
        }
    }
}

/// A call that takes longer than this is a hang.
pub const CALL_LIMIT: Duration = Duration::from_secs(60);

/// Runs `cmd` to its end within `CALL_LIMIT`, else kills it and panics.
pub fn bounded(cmd: &mut Command, what: &str) -> std::process::Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    let pid = child.id();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let end = Instant::now() + CALL_LIMIT;
            while !done.load(Ordering::Acquire) {
                if Instant::now() > end {
                    sigkill(pid);
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let out = child.wait_with_output().expect("wait");
        done.store(true, Ordering::Release);
        assert!(
            out.status.code().is_some(),
            "{what} hung for {CALL_LIMIT:?} and was killed"
        );
        out
    })
}

/// SIGKILL to `pid` (a hung program or daemon).
pub fn sigkill(pid: u32) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::SIGKILL);
}

include!("../../../../build-support/cdylib.rs");

/// libnovafs_preload.so, built with this test's profile.
pub fn preload_shim() -> &'static Path {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let so = cdylib_dir("novafs-preload").join("libnovafs_preload.so");
        assert!(so.is_file(), "no {}", so.display());
        so
    })
}
