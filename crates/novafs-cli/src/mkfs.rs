//! `novafs mkfs`: create an image file (or use a devdax device) and lay out
//! an empty file system on it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use indicatif::ProgressBar;
use novafs::{FormatOptions, Fs};
use pm::{MapOptions, MmapRegion, Region};

use crate::image::{explain, explain_fs};

const DEFAULT_SIZE: u64 = 1 << 30;

pub fn run(path: &Path, size: Option<u64>, force: bool, shards: Option<u32>) -> Result<()> {
    let existing = std::fs::metadata(path).ok();
    if let Some(meta) = &existing {
        if meta.is_dir() {
            bail!("{} is a directory; give a file or devdax device path", path.display());
        }
        if !force && meta.len() > 0 {
            bail!(
                "{} already exists and is not empty; add --force to overwrite it",
                path.display()
            );
        }
    }
    let size = size
        .or_else(|| existing.as_ref().map(|m| m.len()).filter(|&l| l > 0))
        .unwrap_or(DEFAULT_SIZE);
    let shards = shards.unwrap_or_else(novafs::default_shards);
    let min = novafs::minimum_size(shards);
    if size < min {
        bail!(
            "{} bytes is too small for {shards} shard(s): use --size {}M or more",
            size,
            min >> 20
        );
    }
    let spinner =
        ProgressBar::new_spinner().with_message(format!("formatting {} ({} MiB)", path.display(), size >> 20));
    spinner.enable_steady_tick(Duration::from_millis(100));
    let opts = MapOptions {
        populate: false,
        ..MapOptions::default()
    };
    let region = MmapRegion::create(path, size, &opts).map_err(|e| explain(path, e))?;
    let kind = region.kind();
    let region: Arc<dyn Region> = Arc::new(region);
    Fs::format(
        region,
        &FormatOptions {
            shards: Some(shards),
            uid: owner_uid(),
            gid: owner_gid(),
        },
    )
    .map_err(|e| explain_fs(path, e))?;
    spinner.finish_and_clear();
    println!(
        "novafs: formatted {} ({} MiB, {shards} shards, {kind})",
        path.display(),
        size >> 20
    );
    Ok(())
}

/// The root directory belongs to whoever ran mkfs.
fn owner_uid() -> u32 {
    std::env::var("SUDO_UID")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(current_uid)
}

fn owner_gid() -> u32 {
    std::env::var("SUDO_GID")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(current_gid)
}

fn current_uid() -> u32 {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap_or(0)
}

fn current_gid() -> u32 {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::gid(&m))
        .unwrap_or(0)
}
