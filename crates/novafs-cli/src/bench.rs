//! `novafs bench`: the library benchmark. Runs novafs-bench's NOVA §5.2
//! microbenchmark (create 10,000 files, sixteen 4 KiB appends each with
//! fsync, then delete) plus 4 KiB reads on its library target, on a real
//! mapped region with real flushes, and reports medians and ranges over
//! several rounds, the DRAM the indexes use per file and per data page, and
//! mount times after a clean unmount and after a crash.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use novafs::ROOT_INO;
use novafs_bench::memory;
use novafs_bench::stats::{summarize, Summary};
use novafs_bench::target::LibraryTarget;
use novafs_bench::workload::{micro, time_mounts, Backend, Micro, SetShape};
use pm::{MapOptions, MmapRegion, Protection, Region, WriteProtect};

use crate::image::{explain, parse_size};

#[derive(clap::Args)]
pub struct Args {
    /// Files per round.
    #[arg(long, default_value_t = 10_000)]
    files: u64,
    /// 4 KiB appends per file.
    #[arg(long, default_value_t = 16)]
    appends: u64,
    /// Rounds; medians and ranges are taken over them.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Scratch image (created, then removed).
    #[arg(long, default_value = "/dev/shm/novafs-bench.img")]
    image: PathBuf,
    /// Scratch image size.
    #[arg(long, value_parser = parse_size, default_value = "2G")]
    size: u64,
    /// Declare eADR (persistent caches): fences only, no cache-line flushes.
    #[arg(long)]
    eadr: bool,
    /// A short run (1,000 files, 3 rounds).
    #[arg(long)]
    quick: bool,
    /// Instead of the full run, compare the microbenchmark on an
    /// unprotected region with one under this write protection (pkey,
    /// mprotect), rounds interleaved.
    #[arg(long, value_name = "MODE")]
    protect: Option<WriteProtect>,
}

/// A table row: name, the phase it reads, the target.
type Row = (&'static str, fn(&Micro) -> f64, &'static str);

const ROWS: [Row; 4] = [
    ("create", |r| r.create, "≤ 2.0"),
    ("append 4 KiB + fsync", |r| r.append, "≤ 1.2"),
    ("read 4 KiB (sequential in each file)", |r| r.read, "≤ 0.6"),
    ("unlink (16 pages)", |r| r.unlink, "≤ 2.0"),
];

/// Median, min and max of one value over the rounds.
fn summary(v: &[f64]) -> Result<Summary> {
    summarize(v).context("no rounds ran")
}

pub fn run(args: &Args) -> Result<()> {
    let (files, rounds) = if args.quick {
        (1_000, 3)
    } else {
        (args.files, args.rounds.max(1))
    };
    if let Some(mode) = args.protect {
        return compare_protection(args, mode, files, rounds);
    }
    let opts = MapOptions {
        eadr: args.eadr,
        protect: WriteProtect::Off,
        ..MapOptions::default()
    };
    let _ = std::fs::remove_file(&args.image);
    let region = MmapRegion::create(&args.image, args.size, &opts).map_err(|e| explain(&args.image, e))?;
    let flush = region.flush_kind();
    let kind = region.kind();
    let region: Arc<dyn Region> = Arc::new(region);
    let result = (|| -> Result<()> {
        let mut lib = LibraryTarget::on_region(region)?;
        let bar = ProgressBar::new(rounds as u64 + 1);
        bar.set_style(
            ProgressStyle::with_template("{msg} {bar:30} {pos}/{len}").unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message("memory");
        let dram = memory::measure(&lib, files)?;
        bar.inc(1);
        bar.set_message("rounds");
        let mut all = Vec::new();
        for _ in 0..rounds {
            // In the root directory, as this command has always measured.
            all.push(micro(&lib, &ROOT_INO, files, args.appends)?);
            bar.inc(1);
        }
        bar.finish_and_clear();
        // NOVA §4.7 recovery: files of 16 pages, each written at once.
        let dir = lib.mkdir("recovery")?;
        let shape = SetShape {
            files,
            file_size: 64 << 10,
            io: 64 << 10,
        };
        let (_, mounts) = time_mounts(&mut lib, &dir, shape, rounds)?;
        let scanned = lib.fs()?.mount_report().scanned_inodes;
        let crashes: Vec<f64> = mounts.crash.iter().flatten().copied().collect();
        let (clean_ms, crash_ms) = (summary(&mounts.clean)?.median, summary(&crashes)?.median);
        drop(lib); // A clean unmount.
        println!(
            "novafs library benchmark: {files} files x {} appends of 4 KiB, {rounds} rounds",
            args.appends
        );
        println!(
            "region: {kind}; flush: {flush}{}\n",
            if args.eadr { " (eADR: fences only)" } else { "" }
        );
        println!("| operation | median µs/op | min–max µs/op | target |");
        println!("|---|---|---|---|");
        for (name, f, target) in ROWS {
            let s = summary(&all.iter().map(f).collect::<Vec<_>>())?;
            println!("| {name} | {:.3} | {:.3}–{:.3} | {target} |", s.median, s.min, s.max);
        }
        println!(
            "\nDRAM: {:.0} bytes per empty file, {:.1} bytes per data page",
            dram.per_file, dram.per_page
        );
        println!(
            "mount with {files} files of 64 KiB (NOVA §4.7): {clean_ms:.3} ms after a clean unmount, \
             {crash_ms:.3} ms after a crash (journal replay + scan of {scanned} inodes); medians"
        );
        Ok(())
    })();
    let _ = std::fs::remove_file(&args.image);
    result
}

/// The microbenchmark on an unprotected region and on one under `mode`,
/// side by side: rounds interleaved, the order swapped every round.
fn compare_protection(args: &Args, mode: WriteProtect, files: u64, rounds: usize) -> Result<()> {
    let protected_image = args.image.with_extension("protected.img");
    let libs = [(WriteProtect::Off, &args.image), (mode, &protected_image)].map(|(protect, image)| {
        let _ = std::fs::remove_file(image);
        let opts = MapOptions {
            eadr: args.eadr,
            protect,
            ..MapOptions::default()
        };
        let region = MmapRegion::create(image, args.size, &opts).map_err(|e| explain(image, e))?;
        let protection = region.protection();
        Ok::<_, anyhow::Error>((protection, LibraryTarget::on_region(Arc::new(region))?))
    });
    let result = (|| -> Result<()> {
        let [plain, guarded] = libs;
        let (_, plain) = plain?;
        let (protection, guarded) = guarded?;
        if protection == Protection::Off {
            anyhow::bail!("write protection {mode:?} is not available on this machine (try --protect mprotect)");
        }
        let bar = ProgressBar::new(rounds as u64);
        let mut runs: [Vec<Micro>; 2] = Default::default();
        for round in 0..rounds {
            for which in [round % 2, 1 - round % 2] {
                let lib = if which == 0 { &plain } else { &guarded };
                runs[which].push(micro(lib, &ROOT_INO, files, args.appends)?);
            }
            bar.inc(1);
        }
        bar.finish_and_clear();
        println!(
            "write protection ({protection}) against none: {files} files x {} appends of 4 KiB, {rounds} rounds interleaved\n",
            args.appends
        );
        println!("| operation | unprotected median µs/op | protected median µs/op | ratio |");
        println!("|---|---|---|---|");
        for (name, f, _) in ROWS {
            let [a, b] = [&runs[0], &runs[1]].map(|v| summary(&v.iter().map(f).collect::<Vec<_>>()));
            let (a, b) = (a?.median, b?.median);
            println!("| {name} | {a:.3} | {b:.3} | {:.2} |", b / a);
        }
        Ok(())
    })();
    for image in [&args.image, &protected_image] {
        let _ = std::fs::remove_file(image);
    }
    result
}
