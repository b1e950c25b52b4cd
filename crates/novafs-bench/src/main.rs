//! `novafs-bench`: novafs (through the library and through FUSE) beside
//! tmpfs, ext4 (data=ordered and data=journal), xfs and btrfs, on the
//! workloads of the NOVA paper's evaluation. Sets up and tears down its own
//! targets (root needed for all but the library), runs interleaved rounds,
//! and writes medians, ranges and ratios against ext4 data=journal as a
//! markdown table to `results/<timestamp>.md`. A benchmark, not a test.

#![forbid(unsafe_code)]

mod plot;
mod report;
mod stats;
mod target;
mod workload;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};

use crate::report::Samples;
use crate::target::Target;
use crate::workload::{Params, Workload};

#[derive(Parser)]
#[command(
    name = "novafs-bench",
    about = "novafs beside kernel file systems: the NOVA paper's experiments"
)]
struct Args {
    /// A short run: fewer files and smaller workloads (well under 2 minutes).
    #[arg(long)]
    quick: bool,
    /// Interleaved rounds; medians and ranges are taken over them.
    #[arg(long)]
    rounds: Option<usize>,
    /// Comma-separated targets (default: all). Known: novafs-lib,
    /// novafs-fuse, tmpfs, ext4-ordered, ext4-journal, xfs, btrfs.
    #[arg(long, value_delimiter = ',')]
    targets: Option<Vec<String>>,
    /// Skip the random and sequential I/O workloads (d).
    #[arg(long)]
    no_io: bool,
    /// Size of each target's file system, MiB.
    #[arg(long)]
    size_mib: Option<u64>,
    /// Where the scratch images and mount points go (a tmpfs).
    #[arg(long, default_value = "/dev/shm/novafs-bench")]
    scratch: PathBuf,
    /// Where the markdown results and the PNG plot go.
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// Also write this file (e.g. BENCHMARKS.md) with the table, the plot
    /// and the command.
    #[arg(long)]
    benchmarks_md: Option<PathBuf>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let (params, rounds, size_mib) = if args.quick {
        let p = Params {
            files: 300,
            appends: 16,
            append_ops: 1_000,
            file_mib: 16,
            random_ops: 4_000,
        };
        (p, args.rounds.unwrap_or(5), args.size_mib.unwrap_or(512))
    } else {
        let p = Params {
            files: 2_000,
            appends: 16,
            append_ops: 5_000,
            file_mib: 64,
            random_ops: 20_000,
        };
        (p, args.rounds.unwrap_or(5), args.size_mib.unwrap_or(1024))
    };
    let rounds = rounds.max(1);
    let mut workloads = vec![Workload::Micro, Workload::AppendFsync];
    if !args.no_io {
        for threads in [1, 2] {
            workloads.push(Workload::Random { threads });
            workloads.push(Workload::Sequential { threads });
        }
    }
    let names: Vec<String> = match &args.targets {
        Some(t) => t
            .iter()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
        None => target::ALL.iter().map(|s| s.to_string()).collect(),
    };
    let novafs_bin = std::env::current_exe()
        .context("locate this binary")?
        .with_file_name("novafs");

    // Ctrl-C stops after the current step, so the targets are still torn
    // down by their guards rather than left mounted.
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst)).context("install the Ctrl-C handler")?;
    }

    // Setup: a target that cannot be set up is skipped, with the reason.
    std::fs::create_dir_all(&args.scratch).with_context(|| format!("create {}", args.scratch.display()))?;
    let spinner = ProgressBar::new_spinner();
    let mut targets: Vec<Box<dyn Target>> = Vec::new();
    let mut skipped = Vec::new();
    for name in &names {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        spinner.set_message(format!("setting up {name}"));
        match target::setup(name, &args.scratch, size_mib, &novafs_bin) {
            Ok(t) => targets.push(t),
            Err(e) => {
                spinner.suspend(|| eprintln!("skipping {name}: {e:#}"));
                skipped.push(format!("{name}: {e:#}"));
            }
        }
    }
    spinner.finish_and_clear();
    if targets.is_empty() {
        anyhow::bail!("no target could be set up");
    }

    // Round r runs every live target once, starting at target r (mod n), so
    // that no target always runs first or right after the same neighbour.
    let mut samples = Samples::default();
    let mut failed: Vec<String> = Vec::new();
    let steps = (rounds * targets.len() * workloads.len()) as u64;
    let bar = ProgressBar::new(steps);
    bar.set_style(
        ProgressStyle::with_template("[{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let n = targets.len();
    'rounds: for r in 0..rounds {
        for i in 0..n {
            let t = &targets[(i + r) % n];
            for (k, w) in workloads.iter().enumerate() {
                if stop.load(Ordering::SeqCst) {
                    bar.suspend(|| eprintln!("interrupted: tearing down; the report covers the steps that finished"));
                    break 'rounds;
                }
                bar.set_message(format!("round {}/{rounds}: {} — {}", r + 1, t.name(), w.label()));
                if !failed.iter().any(|f| f == t.name()) {
                    match t.run(*w, &params, &format!("r{r}w{k}")) {
                        Ok(values) => samples.push(t.name(), *w, values),
                        Err(e) => {
                            bar.suspend(|| eprintln!("{} failed on {}: {e:#}; dropping it", t.name(), w.label()));
                            failed.push(t.name().to_string());
                        }
                    }
                }
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    let order: Vec<&str> = targets
        .iter()
        .map(|t| t.name())
        .filter(|n| !failed.iter().any(|f| f == n))
        .collect();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let ctx = report::Context {
        params: &params,
        rounds,
        size_mib,
        workloads: &workloads,
        targets: &order,
        skipped: &skipped,
        failed: &failed,
        samples: &samples,
        command: command.clone(),
        interrupted: stop.load(Ordering::SeqCst),
    };
    let md = report::markdown(&ctx);
    let panels = report::panels(&ctx);
    // Tear down (unmount, detach, remove) before writing results.
    drop(targets);
    let _ = std::fs::remove_dir(&args.scratch);
    println!("{md}");
    std::fs::create_dir_all(&args.out).with_context(|| format!("create {}", args.out.display()))?;
    let stamp = report::timestamp();
    let png = args.out.join(format!("{stamp}.png"));
    let plotted = match plot::bars(&png, &panels) {
        Ok(()) => true,
        Err(e) => {
            eprintln!("no plot: {e:#}");
            false
        }
    };
    let path = args.out.join(format!("{stamp}.md"));
    let mut file_md = md.clone();
    if plotted {
        file_md.push_str(&format!("\n![medians, with min–max lines]({stamp}.png)\n"));
    }
    std::fs::write(&path, &file_md).with_context(|| format!("write {}", path.display()))?;
    eprintln!("results written to {}", path.display());
    if plotted {
        eprintln!("plot written to {}", png.display());
    }
    if let Some(bm) = &args.benchmarks_md {
        let mut b = String::from(
            "# Benchmarks\n\nThe latest run of `novafs-bench` (crates/novafs-bench), written by the \
             harness itself. Reproduce, as root, from the repository root:\n\n\
             ```\ncargo build --release -p novafs-cli -p novafs-bench\n",
        );
        b.push_str(&format!("{command}\n```\n\n"));
        b.push_str(&md.replacen("# ", "## ", 1));
        if plotted {
            b.push_str(&format!("\n![medians, with min–max lines]({})\n", png.display()));
        }
        std::fs::write(bm, b).with_context(|| format!("write {}", bm.display()))?;
        eprintln!("{} updated", bm.display());
    }
    Ok(())
}
