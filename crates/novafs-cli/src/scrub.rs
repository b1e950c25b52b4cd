//! `novafs scrub MOUNTPOINT|IMAGE`: reads everything redundancy protects
//! (metadata replicas, data checksums and parity) and repairs what it can
//! (`novafs::Fs::scrub`): online through the daemon's control channel while
//! programs keep using the mount, or offline on an unmounted image. Exit 0
//! when nothing is left damaged, 1 when something is, 2 when it cannot run.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
use novafs::{Damaged, Fs, MountOptions, ScrubOptions, ScrubReport};

use crate::image::{explain_fs, open, parse_size};
use crate::{control, mount};

#[derive(clap::Args)]
pub struct Args {
    /// At most this much file data checked per second, e.g. 64M (default:
    /// no limit offline, 256M on a mounted file system).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    rate: Option<u64>,
    /// The mount point of a running novafs, or an unmounted image.
    target: PathBuf,
}

/// The online default: leaves the mount most of its bandwidth.
const ONLINE_RATE: u64 = 256 << 20;

pub fn run(args: &Args) -> ExitCode {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("scrubbing {bar:30} {pos}/{len} inodes")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let progress = |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    };
    let result = scrub(args, &progress);
    bar.finish_and_clear();
    match result {
        Ok(rep) => {
            print_report(&args.target.display().to_string(), &rep);
            if rep.damaged.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("novafs: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn scrub(args: &Args, progress: &dyn Fn(u64, u64)) -> Result<ScrubReport> {
    if let Some(socket) = mount::control_socket(&args.target)? {
        return control::request_scrub(&socket, args.rate.unwrap_or(ONLINE_RATE), progress);
    }
    let path = &args.target;
    let fs = Fs::open(open(path, true)?, MountOptions::default()).map_err(|e| explain_fs(path, e))?;
    let opts = ScrubOptions::default().rate(args.rate);
    let rep = fs
        .scrub(opts, &|done, total| {
            progress(done, total);
            true
        })
        .map_err(|e| explain_fs(path, e))?;
    fs.unmount().map_err(|e| explain_fs(path, e))?;
    Ok(rep)
}

fn print_report(target: &str, rep: &ScrubReport) {
    for d in &rep.damaged {
        println!("{target}: DAMAGED: {d}");
    }
    let state = match (rep.stopped, rep.damaged.len()) {
        (true, _) => "stopped before the end (unmounted?)".to_string(),
        (false, 0) => "nothing left damaged".to_string(),
        (false, n) => format!("{n} object(s) damaged beyond repair: {}", advice(&rep.damaged)),
    };
    println!(
        "{target}: scrubbed {} inodes and {} data pages; repaired {} metadata range(s) and {} data strip(s), rewrote {} replica page(s); {state}",
        rep.inodes, rep.pages, rep.metadata_repaired, rep.data_repaired, rep.replicas_rewritten
    );
}

/// What the user can do about `damaged`. A damaged byte range is not
/// removed by anything (fsck rightly keeps the file, whose rest reads):
/// it is rewritten from a copy. A lost inode's names go with fsck's repair.
fn advice(damaged: &[Damaged]) -> String {
    let mut say = Vec::new();
    if damaged.iter().any(|d| !d.ranges.is_empty()) {
        say.push(
            "restore the byte ranges listed from a snapshot or a backup (they read EIO until rewritten; the rest \
             of each file reads)",
        );
    }
    if damaged.iter().any(|d| d.lost) {
        say.push("restore lost files from a snapshot or a backup; `novafs fsck --repair` removes their names");
    }
    if say.is_empty() {
        say.push("restore what is listed from a snapshot or a backup");
    }
    say.join("; ")
}
