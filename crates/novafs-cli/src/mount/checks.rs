//! What a mount checks before it touches the image.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::mountinfo::find_mount;
use super::sys;

/// The mount point must exist, be a directory and not be a mount point
/// already (Linux would happily stack a second mount on top).
pub(super) fn check_mountpoint(path: &Path) -> Result<PathBuf> {
    let p = path.display();
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            bail!("mount point {p} does not exist; create it with `mkdir -p {p}`")
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            bail!("{p} is a FUSE mount whose daemon has died; run `novafs umount {p}` first")
        }
        Err(e) => bail!("mount point {p}: {e}"),
    };
    if !meta.is_dir() {
        bail!("mount point {p} is not a directory; give an empty directory");
    }
    let canon = fs::canonicalize(path).with_context(|| format!("mount point {p}"))?;
    if let Some(m) = find_mount(&canon)? {
        bail!(
            "{} is already a mount point ({} from {}); unmount it first or choose another directory",
            canon.display(),
            m.fstype,
            m.source
        );
    }
    Ok(canon)
}

pub(super) fn check_fuse_available() -> Result<()> {
    if !Path::new("/dev/fuse").exists() {
        bail!("/dev/fuse is missing: load the fuse kernel module (`modprobe fuse`) or use a system with FUSE");
    }
    if sys::is_root() {
        return Ok(());
    }
    if !in_path("fusermount3") {
        bail!("mounting without root needs fusermount3: install the fuse3 package, or run as root");
    }
    // fuser opens /dev/fuse itself before it turns to fusermount3.
    if let Err(e) = OpenOptions::new().read(true).write(true).open("/dev/fuse") {
        bail!("/dev/fuse: {e}; mount as root, or let users open it (mode 0666, as the fuse3 package sets it)");
    }
    Ok(())
}

fn in_path(prog: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths)
            .any(|dir| fs::metadata(dir.join(prog)).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
    })
}
