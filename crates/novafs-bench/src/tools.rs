//! Running the programs a benchmark needs (mkfs tools, losetup, fio),
//! installing them where it may. Below `target` and `fio`, which both use it.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// Run a command, failing with its stderr if it does not succeed.
pub fn sh(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("run {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The full path of `tool` on $PATH (or the sbin directories), if any.
pub fn find_tool(tool: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"])
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.is_file());
    found
}

/// `tool`, installing Debian package `package` with apt-get first if it is
/// missing and we are root (once with the package lists as they are, once
/// after `apt-get update`).
pub fn ensure_tool(tool: &str, package: &str) -> Result<PathBuf> {
    if let Some(p) = find_tool(tool) {
        return Ok(p);
    }
    if !is_root() {
        bail!("{tool} is not installed (install {package}, or run as root to have it installed)");
    }
    if find_tool("apt-get").is_none() {
        bail!("{tool} is not installed and there is no apt-get to install {package}");
    }
    let install = || {
        sh(Command::new("apt-get")
            .args(["install", "-y", "-qq", package])
            .env("DEBIAN_FRONTEND", "noninteractive"))
    };
    if install().is_err() {
        sh(Command::new("apt-get").args(["update", "-qq"]))
            .with_context(|| format!("apt-get update (to install {package})"))?;
        install().with_context(|| format!("apt-get install {package}"))?;
    }
    find_tool(tool).with_context(|| format!("{package} installed, but {tool} is still not found"))
}

/// Whether this process runs as root (effective uid 0).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}
