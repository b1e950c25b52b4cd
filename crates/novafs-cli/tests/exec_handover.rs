//! What a program keeps when the image it owns under the preload shim is
//! handed over to a daemon at its first fork (PRELOAD.md "Processes"):
//! descriptors that share an open file description go on sharing it, a
//! file unlinked while open lives on, and the handover's mount is reached
//! by the program's processes whatever identity they take, and by nobody
//! else.

mod fuse_common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use fuse_common::{novafs, ok, preload_shim, require_fuse_root, shm_dir};

/// Not PATH's `python3`: a pyenv shim there is a shell script, which would
/// fork before Python starts (Python must own the image).
const PYTHON: &str = "/usr/bin/python3";

/// Runs `script` in Python under `novafs exec` on a fresh image served at
/// `<dir>/at` (passed as `sys.argv[1]`); returns what it printed, after
/// checking that the image is clean and the handover left nothing behind.
fn python_under_the_shim(script: &str) -> String {
    let dir = shm_dir();
    let image = dir.path().join("image");
    ok(novafs(["mkfs", "--size", "64M"]).arg(&image));
    fs::set_permissions(&image, fs::Permissions::from_mode(0o600)).expect("chmod");
    let prefix = dir.path().join("at");
    let run_dir = dir.path().join("run");
    let out = ok(novafs(["exec", "--image"])
        .arg(&image)
        .arg("--at")
        .arg(&prefix)
        .args([Path::new("--"), Path::new(PYTHON), Path::new("-c"), Path::new(script)])
        .arg(&prefix)
        .env("NOVAFS_PRELOAD", preload_shim())
        .env("NOVAFS_RUN_DIR", &run_dir)
        .env_remove("LD_PRELOAD"));
    assert!(
        !prefix.exists(),
        "the program wrote to the kernel's {}",
        prefix.display()
    );
    let left: Vec<PathBuf> = fs::read_dir(&run_dir)
        .expect("run dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("exec-")))
        .collect();
    assert!(left.is_empty(), "the handover left {left:?} behind");
    let report = ok(novafs(["fsck"]).arg(&image));
    assert!(report.trim_end().ends_with(", cleanly unmounted: clean"), "{report}");
    out
}

/// A log open on two descriptors (as `2>&1` leaves it) and written through
/// both, before and after the handover: every write lands after the one
/// before, on either descriptor.
#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn descriptors_sharing_an_offset_share_it_after_the_handover() {
    require_fuse_root();
    let script = r#"
import os, subprocess, sys
log = os.path.join(sys.argv[1], "log")
a = os.open(log, os.O_WRONLY | os.O_CREAT, 0o644)
b = os.dup(a)
c = os.open(log, os.O_RDONLY)
os.write(a, b"1")
os.write(b, b"2")
subprocess.run(["true"], check=True)  # the handover
os.write(b, b"3")
os.write(a, b"4")
os.write(b, b"5")
print(os.read(c, 100).decode(), os.lseek(a, 0, os.SEEK_CUR), os.lseek(c, 0, os.SEEK_CUR))
os.close(a); os.close(b); os.close(c)
print(open(log).read())
# The prefix itself is still a directory, not the link the way in is.
print(os.path.islink(sys.argv[1]), os.path.isdir(sys.argv[1]), os.readlink(log) if os.path.islink(log) else "-")
"#;
    // `c`, a description of its own, kept its offset (0) apart from theirs.
    assert_eq!(python_under_the_shim(script), "12345 5 5\n12345\nFalse True -\n");
}

/// A file the program unlinked but holds open lives on through the
/// handover (it is named for the while, then the name goes), as it would
/// on a kernel file system.
#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn a_file_unlinked_while_open_lives_through_the_handover() {
    require_fuse_root();
    let script = r#"
import os, subprocess, sys
at = sys.argv[1]
t = os.path.join(at, "tmp")
fd = os.open(t, os.O_RDWR | os.O_CREAT, 0o600)
os.write(fd, b"abc" * 3000)
os.unlink(t)
subprocess.run(["true"], check=True)  # the handover
os.write(fd, b"def")
os.lseek(fd, 8997, os.SEEK_SET)
print(os.read(fd, 100), os.fstat(fd).st_nlink, os.fstat(fd).st_size, sorted(os.listdir(at)))
os.close(fd)
"#;
    assert_eq!(python_under_the_shim(script), "b'abcdef' 0 9003 []\n");
}

/// After the handover a child that became another user (a server dropping
/// privileges) reaches the files under the prefix, with each file's own
/// permissions checked for it; the handover's mount point itself, by its
/// path, is closed to that user as to any other.
#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn a_child_that_changes_identity_reaches_the_files_and_no_more() {
    require_fuse_root();
    if Command::new("setpriv").arg("--version").output().is_err() {
        panic!("setpriv is missing: install util-linux (.ci/run does)");
    }
    let script = r#"
import os, subprocess, sys
at = sys.argv[1]
os.mkdir(os.path.join(at, "open"))
os.chmod(os.path.join(at, "open"), 0o777)
os.mkdir(os.path.join(at, "closed"), 0o700)
nobody = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
def run(*cmd):
    r = subprocess.run(nobody + list(cmd), capture_output=True, text=True)
    return r.returncode, r.stderr.strip().split(": ")[-1]
print(run("touch", os.path.join(at, "open", "f")))
print(run("touch", os.path.join(at, "closed", "f")))
print(run("sh", "-c", 'ls "$NOVAFS_MOUNT"'))
st = os.stat(os.path.join(at, "open", "f"))
print(st.st_uid, st.st_gid, sorted(os.listdir(os.path.join(at, "closed"))))
"#;
    assert_eq!(
        python_under_the_shim(script),
        "(0, '')\n(1, 'Permission denied')\n(2, 'Permission denied')\n65534 65534 []\n"
    );
}
