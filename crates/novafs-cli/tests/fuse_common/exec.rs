//! Programs under `novafs exec` (the preload shim, PRELOAD.md) on a fresh
//! image: the image, the command line, and the checks every test ends with.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{bounded, novafs, ok, preload_shim, run, shm_dir, Mount};

/// Not PATH's `python3`: a pyenv shim there is a shell script, which would
/// fork before Python starts (a writer killed under the shim must be the
/// image's owner).
pub const PYTHON: &str = "/usr/bin/python3";

/// `novafs exec --image IMAGE --at PREFIX -- ARGS` with the shim built
/// here, the handover's mounts under `run_dir`, and none of the shim's
/// variables inherited from the test's own environment.
pub fn exec_on<S: AsRef<OsStr>>(run_dir: &Path, image: &Path, prefix: &Path, args: &[S]) -> Command {
    let mut c = novafs(["exec", "--image"]);
    c.arg(image)
        .arg("--at")
        .arg(prefix)
        .arg("--")
        .args(args)
        .env("NOVAFS_PRELOAD", preload_shim())
        .env("NOVAFS_RUN_DIR", run_dir)
        .env("LC_ALL", "C");
    for var in [
        "LD_PRELOAD",
        "NOVAFS_IMAGE",
        "NOVAFS_PREFIX",
        "NOVAFS_MOUNT",
        "NOVAFS_CLIENTS",
        "NOVAFS_BIN",
    ] {
        c.env_remove(var);
    }
    c
}

/// A fresh image (mode 0600: the shim refuses a shared-writable one),
/// never mounted unless a test looks at it through a mount, and the
/// prefix its files appear under (which does not exist: in this test's
/// directory, so that a shim that serves nothing writes nowhere else).
pub struct Image {
    pub m: Mount,
    pub prefix: PathBuf,
}

impl Image {
    pub fn new(size: &str) -> Image {
        let dir = shm_dir();
        let image = dir.path().join("image");
        let mnt = dir.path().join("mnt");
        fs::create_dir(&mnt).expect("mkdir mnt");
        ok(novafs(["mkfs", "--size", size]).arg(&image));
        fs::set_permissions(&image, fs::Permissions::from_mode(0o600)).expect("chmod");
        let prefix = dir.path().join("at");
        Image {
            m: Mount {
                dir,
                image,
                mnt,
                pid: 0,
                mounted: false,
            },
            prefix,
        }
    }

    pub fn run_dir(&self) -> PathBuf {
        self.m.dir.path().join("run")
    }

    pub fn exec<S: AsRef<OsStr>>(&self, args: &[S]) -> Command {
        exec_on(&self.run_dir(), &self.m.image, &self.prefix, args)
    }

    /// A path under the prefix, as a program under the shim names it.
    pub fn at(&self, rel: &str) -> PathBuf {
        self.prefix.join(rel)
    }

    /// Runs ARGS under the shim; it must succeed with nothing on stderr.
    pub fn quiet<S: AsRef<OsStr>>(&self, args: &[S]) -> String {
        quiet(&mut self.exec(args), "a program under novafs exec")
    }

    /// Looks at the image through a regular mount, then unmounts.
    pub fn through_mount(&mut self, look: impl FnOnce(&Path)) {
        self.m.mount(&[]);
        look(&self.m.mnt);
        self.m.umount();
    }

    /// The end of every test: nothing was written to the real prefix; fsck
    /// finds the image clean and cleanly unmounted; no handover left a
    /// mount or its directory behind.
    pub fn finish(self) -> String {
        // Nothing reached the real directory at the prefix.
        assert!(
            !self.prefix.exists(),
            "{} was made outside the image",
            self.prefix.display()
        );
        let report = self.m.fsck();
        assert!(report.trim_end().ends_with(", cleanly unmounted: clean"), "{report}");
        assert!(!report.contains("note:"), "{report}");
        assert_eq!(mounts_under(self.m.dir.path()), Vec::<String>::new());
        // (A regular mount's log may stay there; a handover's place may not.)
        let left: Vec<_> = fs::read_dir(self.run_dir())
            .into_iter()
            .flatten()
            .map(|e| e.expect("entry").file_name())
            .filter(|n| n.to_string_lossy().starts_with("exec-"))
            .collect();
        assert!(left.is_empty(), "the handover left {left:?} in its run directory");
        report
    }
}

impl Drop for Image {
    /// A failed test's handover mounts are detached before its directory
    /// (with the image) is removed.
    fn drop(&mut self) {
        for m in mounts_under(self.m.dir.path()) {
            let _ = run(Command::new("umount").arg("-l").arg(m));
        }
    }
}

/// Mount points at or below `dir`, per /proc/self/mountinfo.
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let dir = dir.to_string_lossy().replace(' ', "\\040");
    fs::read_to_string("/proc/self/mountinfo")
        .expect("mountinfo")
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|p| p.starts_with(&dir))
        .map(str::to_string)
        .collect()
}

/// Runs `cmd` (bounded in time); it must succeed with an empty stderr.
pub fn quiet(cmd: &mut Command, what: &str) -> String {
    let out = bounded(cmd, what);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.is_empty(),
        "{cmd:?} ({}):\nstdout: {}\nstderr: {}",
        out.status,
        head(&String::from_utf8_lossy(&out.stdout)),
        head(&err)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// The start of a program's output, for a failure message.
fn head(text: &str) -> &str {
    let end = text.char_indices().nth(2000).map_or(text.len(), |(i, _)| i);
    &text[..end]
}
