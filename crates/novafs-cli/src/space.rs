//! Room for the file a command is about to write, checked before it
//! writes anything: an emulated region is a file whose every page is
//! allocated up front (pm preallocates it), so a file system without the
//! room fails midway and would leave a useless, possibly huge, file behind.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::{bail, Result};
use nix::sys::statvfs::statvfs;

use crate::info::approx;

/// Bytes this process may still allocate on the file system of `path`'s
/// directory (root may use the blocks kept for it).
pub fn available(path: &Path) -> Result<u64> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let st = match statvfs(dir) {
        Ok(st) => st,
        Err(nix::errno::Errno::ENOENT) => bail!("directory {} does not exist; create it first", dir.display()),
        Err(e) => bail!("cannot read the free space of {}: {e}", dir.display()),
    };
    let blocks = if nix::unistd::geteuid().is_root() {
        st.blocks_free()
    } else {
        st.blocks_available()
    };
    // Both are u32 on some 32-bit targets.
    Ok((blocks as u64).saturating_mul(st.fragment_size() as u64))
}

/// Bytes `path` already has allocated (0 if it does not exist), which
/// rewriting it in place does not need again.
pub fn allocated(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.blocks() * 512)
}

/// Refuses, in one line, an image of `size` bytes at `path` that its file
/// system has no room for, saying how much there is and what fits.
pub fn check_image_fits(path: &Path, size: u64) -> Result<()> {
    let free = available(path)? + allocated(path);
    if size <= free {
        return Ok(());
    }
    let fit = if free >= 1 << 30 {
        format!("use --size {}G or less, or", free >> 30)
    } else if free >= 1 << 20 {
        format!("use --size {}M or less, or", free >> 20)
    } else {
        "free some space there, or".to_string()
    };
    bail!(
        "cannot make a {} image {}: its file system has {} free; {fit} put the image on a larger file system",
        approx(size),
        path.display(),
        approx(free)
    )
}
