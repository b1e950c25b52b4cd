//! `novafs snapshot ...` (NOVA-Fortis §3): take, list, delete and mount
//! snapshots of a mounted file system (through its daemon's control
//! channel) or of an unmounted image, and roll an unmounted image back to
//! one of them.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, Context, Result};
use novafs::tune::Features;
use novafs::{Fs, MountOptions, Snapshot};

use crate::image::{explain_fs, open};
use crate::{control, mount, tune};

#[derive(clap::Subcommand)]
pub enum SnapshotCmd {
    /// Take snapshot NAME of TARGET (the mount point of a running novafs, or an unmounted image), in constant time
    Create { target: PathBuf, name: String },
    /// List TARGET's snapshots: name, epoch, creation time and the space each holds alone
    List { target: PathBuf },
    /// Delete snapshot NAME of TARGET; what no other snapshot needs is freed
    Delete { target: PathBuf, name: String },
    /// Mount snapshot NAME of TARGET read-only at MOUNTPOINT (beside the live mount when TARGET is mounted); `novafs umount MOUNTPOINT` unmounts it
    Mount {
        target: PathBuf,
        name: String,
        mountpoint: PathBuf,
    },
    /// Make snapshot NAME the live state of the unmounted IMAGE: the image is rebuilt from the snapshot (same inode numbers), checked, then swapped in; every snapshot goes
    Rollback { image: PathBuf, name: String },
}

pub fn run(cmd: &SnapshotCmd) -> Result<ExitCode> {
    match cmd {
        SnapshotCmd::Create { target, name } => {
            let epoch = match mount::control_socket(target)? {
                Some(socket) => control::snapshot_create(&socket, name.as_bytes())?,
                None => offline(target, |fs| Ok(fs.take_snapshot(name.as_bytes())?.epoch))?,
            };
            println!("novafs: snapshot {name} of {} taken (epoch {epoch})", target.display());
        }
        SnapshotCmd::List { target } => {
            let list = match mount::control_socket(target)? {
                Some(socket) => control::snapshot_list(&socket)?,
                None => offline_read(target, |fs| Ok(fs.snapshots()))?,
            };
            print_list(&list);
        }
        SnapshotCmd::Delete { target, name } => {
            let freed = match mount::control_socket(target)? {
                Some(socket) => {
                    control::snapshot_delete(&socket, name.as_bytes())?;
                    "the space it alone held is freed in the background"
                }
                None => {
                    offline(target, |fs| fs.delete_snapshot(name.as_bytes()).map(drop))?;
                    "the space it alone held is free"
                }
            };
            println!("novafs: snapshot {name} of {} deleted; {freed}", target.display());
        }
        SnapshotCmd::Mount {
            target,
            name,
            mountpoint,
        } => {
            if let Some(socket) = mount::control_socket(target)? {
                control::snapshot_mount(&socket, name.as_bytes(), mountpoint)?;
                println!(
                    "novafs: mounted snapshot {name} of {} on {} (read-only)",
                    target.display(),
                    mountpoint.display()
                );
                return Ok(ExitCode::SUCCESS);
            }
            // An unmounted image: a daemon of its own serves the snapshot.
            let exe = std::env::current_exe().context("cannot find the novafs executable")?;
            let status = Command::new(exe)
                .arg("mount")
                .arg("-o")
                .arg(format!("snapshot={name}"))
                .arg(target)
                .arg(mountpoint)
                .status()
                .context("cannot run novafs mount")?;
            return Ok(if status.success() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            });
        }
        SnapshotCmd::Rollback { image, name } => rollback(image, name)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `f` on the unmounted image `target`, mounted for it and cleanly
/// unmounted after.
fn offline<T>(target: &Path, f: impl FnOnce(&Fs) -> novafs::Result<T>) -> Result<T> {
    let fs = mount_image(target, false)?;
    let r = f(&fs).map_err(|e| explain(target, e));
    fs.unmount().map_err(|e| explain_fs(target, e))?;
    r
}

/// [`offline`], read-only.
fn offline_read<T>(target: &Path, f: impl FnOnce(&Fs) -> novafs::Result<T>) -> Result<T> {
    let fs = mount_image(target, true)?;
    f(&fs).map_err(|e| explain(target, e))
}

fn mount_image(target: &Path, read_only: bool) -> Result<Fs> {
    if target.is_dir() {
        bail!(
            "{} is neither a novafs mount point nor an image; give the mount point of a running novafs or an image file",
            target.display()
        );
    }
    let region = open(target, true)?;
    let opts = MountOptions::default().read_only(read_only);
    Fs::open(region, opts).map_err(|e| explain_fs(target, e))
}

fn explain(target: &Path, e: novafs::Error) -> anyhow::Error {
    match e {
        novafs::Error::NotFound | novafs::Error::Exists | novafs::Error::Busy(_) => {
            control::snapshot_error(e).context(target.display().to_string())
        }
        e => explain_fs(target, e),
    }
}

fn print_list(list: &[Snapshot]) {
    if list.is_empty() {
        println!("no snapshots");
        return;
    }
    println!("{:<24} {:>8}  {:<23}  {:>10}", "NAME", "EPOCH", "CREATED", "HOLDS");
    for s in list {
        println!(
            "{:<24} {:>8}  {:<23}  {:>10}",
            String::from_utf8_lossy(&s.name),
            s.epoch,
            novafs::time::utc(s.created_ns),
            crate::info::approx(s.held_pages * 4096)
        );
    }
}

/// Rebuilds the unmounted `image` from snapshot `name` beside itself,
/// checks it, and swaps it in (as `novafs tune` does).
fn rollback(image: &Path, name: &str) -> Result<()> {
    let from = open(image, true)?;
    if !std::fs::metadata(image).is_ok_and(|m| m.is_file()) {
        bail!(
            "{} is not an image file: rollback rebuilds beside the image and swaps it in",
            image.display()
        );
    }
    let features = Features::of(&*from).map_err(|e| explain_fs(image, e))?;
    let done = tune::replace(from, image, features, Some(name.as_bytes()))?;
    println!(
        "novafs: {} rolled back to snapshot {name} ({} inodes, {} names); it has no snapshots now",
        image.display(),
        done.inodes,
        done.names
    );
    Ok(())
}
