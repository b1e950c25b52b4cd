//! `novafs mkfs`: create an image file (or use a devdax device) and lay out
//! an empty file system on it.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use indicatif::ProgressBar;
use novafs::DEFAULT_DEAD_ZONE;
use novafs::{Consistency, FormatOptions, Fs};
use pm::{MapOptions, MemRegion, MmapRegion, Prefault, Region, RegionKind};

use crate::image::{explain, explain_fs, parse_size};
use crate::space;

const DEFAULT_SIZE: u64 = 1 << 30;
// `--dead-zone`'s default, as its help shows it.
const _: () = assert!(DEFAULT_DEAD_ZONE == 1 << 20);

#[derive(clap::Args)]
pub struct Args {
    /// Size of a new image file, e.g. 1G, 512M, 64MiB (default: the existing size, else 1 GiB).
    #[arg(long, value_parser = parse_size)]
    size: Option<u64>,
    /// Overwrite an image that already holds data.
    #[arg(long)]
    force: bool,
    /// Number of shards (per-CPU structures); default: this machine's CPUs.
    #[arg(long)]
    shards: Option<u32>,
    /// Format without metadata replicas (by default every inode and log
    /// page has a mirror copy, Fortis §4.2).
    #[arg(long)]
    no_meta_replicas: bool,
    /// Least distance between a metadata page and its replica, a multiple
    /// of 4 KiB (Fortis §4.4's dead zone).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "1M",
          conflicts_with = "no_meta_replicas")]
    dead_zone: u64,
    /// Format without checksums of file data (by default every 512-byte
    /// strip has two CRC32C copies, Fortis §4.3).
    #[arg(long)]
    no_data_checksums: bool,
    /// Format without parity of file data (by default every data page has
    /// a RAID-4 parity strip that rebuilds one bad strip, Fortis §4.3).
    #[arg(long)]
    no_parity: bool,
    /// The consistency mode mounts take unless `-o mode=` says otherwise:
    /// strict (every write atomic) or relaxed (NOVA-Fortis §4.6: file
    /// data overwritten in place, metadata still atomic).
    #[arg(long, value_name = "MODE", default_value = "strict")]
    mode: Consistency,
    image: PathBuf,
}

pub fn run(args: &Args) -> Result<()> {
    let path = args.image.as_path();
    let existing = std::fs::metadata(path).ok();
    if let Some(meta) = &existing {
        if meta.is_dir() {
            bail!("{} is a directory; give a file or devdax device path", path.display());
        }
        if !args.force && meta.len() > 0 {
            bail!(
                "{} already exists and is not empty; add --force to overwrite it",
                path.display()
            );
        }
    }
    let size = args
        .size
        .or_else(|| existing.as_ref().map(|m| m.len()).filter(|&l| l > 0))
        .unwrap_or(DEFAULT_SIZE);
    let shards = args.shards.unwrap_or_else(novafs::default_shards);
    let format = FormatOptions::default()
        .shards(shards)
        .uid(owner_uid())
        .gid(owner_gid())
        .meta_replicas(!args.no_meta_replicas)
        .dead_zone(args.dead_zone)
        .data_csum(!args.no_data_checksums)
        .data_parity(!args.no_parity)
        .consistency(args.mode);
    // Refused before the image is created or resized.
    if let Some(min) = minimum_size(&format).filter(|&min| size < min) {
        return Err(too_small(size, min, &format));
    }
    // A devdax device is all there is already; a file needs the room.
    if !existing.as_ref().is_some_and(|m| m.file_type().is_char_device()) {
        space::check_image_fits(path, size)?;
    }
    let kind = format_image(path, size, &format).inspect_err(|_| undo(path, existing.as_ref()))?;
    let replicas = crate::info::protection(&format);
    let mode = match args.mode {
        Consistency::Strict => String::new(),
        mode => format!(", {mode} mode"),
    };
    println!(
        "novafs: formatted {} ({} MiB, {shards} shards, {replicas}{mode}, {kind})",
        path.display(),
        size >> 20
    );
    Ok(())
}

/// Creates (or resizes) the image file and formats it.
fn format_image(path: &Path, size: u64, format: &FormatOptions) -> Result<RegionKind> {
    let spinner =
        ProgressBar::new_spinner().with_message(format!("formatting {} ({} MiB)", path.display(), size >> 20));
    spinner.enable_steady_tick(Duration::from_millis(100));
    let opts = MapOptions {
        prefault: Prefault::OnFirstUse,
        ..MapOptions::default()
    };
    let region = MmapRegion::create(path, size, &opts).map_err(|e| explain(path, e))?;
    let kind = region.kind();
    let region: Arc<dyn Region> = Arc::new(region);
    Fs::format(region, format).map_err(|e| match e {
        novafs::Error::TooSmall { size, min } => too_small(size, min, format),
        e => explain_fs(path, e),
    })?;
    spinner.finish_and_clear();
    Ok(kind)
}

/// After a failed format: removes the file if mkfs created it, and gives
/// a file that was there before its old length back (what mkfs wrote
/// into it is not undone: --force or an empty file let it write there).
fn undo(path: &Path, before: Option<&std::fs::Metadata>) {
    let done = match before {
        None => std::fs::remove_file(path),
        Some(m) if m.is_file() && std::fs::metadata(path).is_ok_and(|now| now.len() > m.len()) => {
            std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .and_then(|f| f.set_len(m.len()))
        }
        Some(_) => Ok(()),
    };
    if let Err(e) = done {
        tracing::warn!("cannot undo what the failed mkfs did to {}: {e}", path.display());
    }
}

/// The smallest image `format` accepts with `opts`, as the library
/// computes it: formatting an empty heap region, which it refuses before
/// writing anything. (`novafs::minimum_size` knows only the default
/// options.)
fn minimum_size(opts: &FormatOptions) -> Option<u64> {
    match Fs::format(Arc::new(MemRegion::new(0)), opts) {
        Err(novafs::Error::TooSmall { min, .. }) => Some(min),
        _ => None,
    }
}

/// Too small: what the image needs, and what would fit instead.
fn too_small(size: u64, min: u64, opts: &FormatOptions) -> anyhow::Error {
    let shards = opts.shards.unwrap_or(1);
    let layout = if opts.meta_replicas {
        format!(
            " with metadata replicas (dead zone {})",
            crate::info::bytes(opts.dead_zone)
        )
    } else {
        String::new()
    };
    let without = opts.clone().meta_replicas(false);
    let instead = match minimum_size(&without) {
        Some(m) if opts.meta_replicas && size >= m => ", or add --no-meta-replicas",
        _ => "",
    };
    anyhow!(
        "{size} bytes is too small for {shards} shard(s){layout}: use --size {}M or more{instead}",
        min.div_ceil(1 << 20)
    )
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
