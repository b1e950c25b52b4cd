//! `novafs tune`: turns a protection feature of an unmounted image on or
//! off, or changes its default consistency mode (`--mode`: one superblock
//! word, rewritten in place). For a feature the image is rebuilt into a file beside it (`novafs::tune`: same
//! inode numbers, names, contents and times), the copy is checked and made
//! durable, and only then renamed over the original: a failure or a crash
//! at any point leaves the original image as it was.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use novafs::tune::{rebuild, set_consistency, Features};
use novafs::Consistency;
use pm::{MapOptions, MmapRegion, Prefault, Region};

use crate::image::{explain, explain_fs, open, parse_size};
use crate::info::{approx, bytes};
use crate::space;

/// A feature `tune` turns on or off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Feature {
    /// Replicas of the superblock, inodes, log pages and inode tables
    /// (Fortis §4.2), primaries and replicas a dead zone apart (§4.4).
    MetaProtection,
    /// Two CRC32C copies of every 512-byte strip of file data (§4.3).
    DataChecksums,
    /// A RAID-4 parity strip for every data page (§4.3).
    Parity,
}

#[derive(clap::Args)]
#[command(group = clap::ArgGroup::new("change").required(true))]
pub struct Args {
    /// Turn this feature on.
    #[arg(long, value_enum, value_name = "FEATURE", group = "change")]
    enable: Option<Feature>,
    /// Turn this feature off.
    #[arg(long, value_enum, value_name = "FEATURE", group = "change")]
    disable: Option<Feature>,
    /// Make MODE (strict or relaxed) the consistency mode mounts take
    /// unless `-o mode=` says otherwise.
    #[arg(long, value_name = "MODE", group = "change")]
    mode: Option<Consistency>,
    /// With --enable meta-protection: the dead zone between a metadata
    /// page and its replica, a multiple of 4 KiB (default: 1M).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, conflicts_with_all = ["disable", "mode"])]
    dead_zone: Option<u64>,
    /// An unmounted image file.
    image: PathBuf,
}

pub fn run(args: &Args) -> Result<()> {
    let path = args.image.as_path();
    // The exclusive lock keeps mounts and fsck away while the copy is made.
    let from = open(path, true)?;
    if let Some(mode) = args.mode {
        return set_mode(&*from, path, mode);
    }
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        bail!(
            "{} is not an image file: tune rebuilds beside the image and swaps it in; copy the device to a file, tune that, and copy it back",
            path.display()
        );
    }
    let now = Features::of(&*from).map_err(|e| explain_fs(path, e))?;
    let (feature, on) = match (args.enable, args.disable) {
        (Some(f), _) => (f, true),
        (_, Some(f)) => (f, false),
        (None, None) => bail!("say --enable FEATURE, --disable FEATURE or --mode MODE"),
    };
    let mut wanted = now;
    match feature {
        Feature::MetaProtection => {
            wanted.meta_replicas = on;
            wanted.dead_zone = match (on, args.dead_zone) {
                (false, _) => 0,
                (true, Some(d)) => d,
                (true, None) if now.meta_replicas => now.dead_zone,
                (true, None) => novafs::DEFAULT_DEAD_ZONE,
            };
        }
        Feature::DataChecksums => wanted.data_csum = on,
        Feature::Parity => wanted.data_parity = on,
    }
    if args.dead_zone.is_some() && feature != Feature::MetaProtection {
        bail!("--dead-zone goes with --enable meta-protection");
    }
    if now == wanted {
        println!(
            "novafs: {} already has {}; nothing to do",
            path.display(),
            describe(now)
        );
        return Ok(());
    }
    let done = replace(from, path, wanted, None)?;
    println!(
        "novafs: {} now has {} ({} inodes, {} names, {} of file data copied)",
        path.display(),
        describe(wanted),
        done.inodes,
        done.names,
        bytes_approx(done.bytes)
    );
    Ok(())
}

/// Records `mode` as the default consistency mode of the image at `path`
/// (mapped and locked as `from`): in place, no rebuild.
fn set_mode(from: &dyn Region, path: &Path, mode: Consistency) -> Result<()> {
    let was = set_consistency(from, mode).map_err(|e| match e {
        novafs::Error::Invalid(why) => anyhow!("{}: {why}", path.display()),
        e => explain_fs(path, e),
    })?;
    if was == mode {
        println!(
            "novafs: {} already mounts {mode} by default; nothing to do",
            path.display()
        );
    } else {
        println!("novafs: {} now mounts {mode} by default (was {was})", path.display());
    }
    Ok(())
}

/// Rebuilds the image at `path` (mapped and locked as `from`) into
/// `IMAGE.tune-tmp` beside it, from `snapshot` if given, and renames the
/// durable copy over it. A copy left by a run that was killed is removed
/// first: holding the image's lock, no other run can be writing it. A
/// failed run removes its own.
pub fn replace(
    from: Arc<dyn Region>,
    path: &Path,
    wanted: Features,
    snapshot: Option<&[u8]>,
) -> Result<novafs::tune::Rebuilt> {
    let tmp = temp_path(path);
    if std::fs::symlink_metadata(&tmp).is_ok() {
        std::fs::remove_file(&tmp)
            .with_context(|| format!("cannot remove {}, left by an interrupted run", tmp.display()))?;
        eprintln!(
            "novafs: removed {}, left by an interrupted tune or rollback",
            tmp.display()
        );
    }
    let free = space::available(&tmp)?;
    if from.len() > free {
        bail!(
            "cannot rebuild {}: the copy made beside it needs {} and its file system has {} free; free some space there",
            path.display(),
            approx(from.len()),
            approx(free)
        );
    }
    build(from, &tmp, path, wanted, snapshot)
        .and_then(|done| {
            std::fs::rename(&tmp, path)
                .with_context(|| format!("replacing {} with {}", path.display(), tmp.display()))?;
            sync_dir(path)?;
            Ok(done)
        })
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
}

/// Rebuilds into `tmp` (from `snapshot` of the image, if given), then
/// makes it durable. The original stays mapped (and locked) until the
/// copy is on disk.
fn build(
    from: Arc<dyn Region>,
    tmp: &Path,
    path: &Path,
    wanted: Features,
    snapshot: Option<&[u8]>,
) -> Result<novafs::tune::Rebuilt> {
    let opts = MapOptions {
        prefault: Prefault::OnFirstUse,
        ..MapOptions::default()
    };
    let to: Arc<dyn Region> = Arc::new(MmapRegion::create(tmp, from.len(), &opts).map_err(|e| explain(tmp, e))?);
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("rebuilding {bar:30} {pos}/{len} inodes")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let done = rebuild(from, to.clone(), wanted, snapshot, &|n, total| {
        bar.set_length(total);
        bar.set_position(n);
    })
    .map_err(|e| match e {
        novafs::Error::Invalid(why) => anyhow!("{}: {why}", path.display()),
        novafs::Error::TooSmall { min, .. } => anyhow!(
            "{} is too small for {}: that needs at least {} MiB; make a larger image and copy the files over",
            path.display(),
            describe(wanted),
            min.div_ceil(1 << 20)
        ),
        novafs::Error::NoSpace => anyhow!(
            "{}: the tree does not fit with {} (replicas take room); free some space first",
            path.display(),
            describe(wanted)
        ),
        e => explain_fs(path, e),
    })?;
    bar.finish_and_clear();
    to.persist(0, to.len())?;
    drop(to);
    File::open(tmp)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("syncing {}", tmp.display()))?;
    Ok(done)
}

/// `IMAGE.tune-tmp` in the image's own directory, so the rename is atomic.
fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tune-tmp");
    path.with_file_name(name)
}

/// Makes the rename durable.
fn sync_dir(path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing directory {}", dir.display()))
}

/// The features, as `tune` names them.
fn describe(f: Features) -> String {
    let meta = if f.meta_replicas {
        format!("meta-protection (dead zone {})", bytes(f.dead_zone))
    } else {
        "no meta-protection".to_string()
    };
    let csum = if f.data_csum {
        "data-checksums"
    } else {
        "no data-checksums"
    };
    let parity = if f.data_parity { "parity" } else { "no parity" };
    format!("{meta}, {csum}, {parity}")
}

/// Bytes in MiB with one decimal, or bytes below 1 MiB.
fn bytes_approx(n: u64) -> String {
    if n < 1 << 20 {
        format!("{n} bytes")
    } else {
        format!("{:.1} MiB", n as f64 / f64::from(1 << 20))
    }
}
