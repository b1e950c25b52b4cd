//! `novafs bench`: the library benchmark. Reproduces NOVA §5.2's
//! microbenchmark (create 10,000 files, sixteen 4 KiB appends each with
//! fsync, then delete) plus 4 KiB reads, on a real mapped region with real
//! flushes, and reports medians and ranges over several rounds, and the DRAM
//! the indexes use per file and per data page.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use novafs::{FormatOptions, Fs, MountOptions, ROOT_INO};
use pm::{MapOptions, MmapRegion, Region};

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
}

/// Microseconds per operation of each phase in one round.
struct Round {
    create: f64,
    append: f64,
    read: f64,
    unlink: f64,
}

/// A table row: name, the phase it reads, the target.
type Row = (&'static str, fn(&Round) -> f64, &'static str);

fn per_op(t: Instant, n: u64) -> f64 {
    t.elapsed().as_secs_f64() * 1e6 / n as f64
}

fn round(fs: &Fs, files: u64, appends: u64) -> Result<Round> {
    let page = vec![0x5Au8; 4096];
    let names: Vec<Vec<u8>> = (0..files).map(|i| format!("f{i}").into_bytes()).collect();
    let t = Instant::now();
    let inos = names
        .iter()
        .map(|n| fs.create(ROOT_INO, n, 0o644, 0, 0).map(|a| a.ino))
        .collect::<novafs::Result<Vec<_>>>()?;
    let create = per_op(t, files);
    let t = Instant::now();
    for &ino in &inos {
        for k in 0..appends {
            fs.write(ino, k * 4096, &page)?;
            fs.fsync(ino)?;
        }
    }
    let append = per_op(t, files * appends);
    let mut buf = vec![0u8; 4096];
    // Each file is read through, page by page, as it was written.
    let t = Instant::now();
    for &ino in &inos {
        for k in 0..appends {
            fs.read(ino, k * 4096, &mut buf)?;
        }
    }
    let read = per_op(t, files * appends);
    let t = Instant::now();
    for n in &names {
        fs.unlink(ROOT_INO, n)?;
    }
    let unlink = per_op(t, files);
    Ok(Round {
        create,
        append,
        read,
        unlink,
    })
}

/// Anonymous resident memory of this process in bytes (the DRAM indexes;
/// the mapped region is file-backed and not counted).
fn rss_anon() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// DRAM per file (no data) and per data page, from RSS growth.
fn memory(fs: &Fs, files: u64) -> Result<(f64, f64)> {
    let dir = fs.mkdir(ROOT_INO, b"mem", 0o755, 0, 0)?;
    let before = rss_anon();
    let inos = (0..files)
        .map(|i| {
            fs.create(dir.ino, format!("m{i}").as_bytes(), 0o644, 0, 0)
                .map(|a| a.ino)
        })
        .collect::<novafs::Result<Vec<_>>>()?;
    let per_file = (rss_anon().saturating_sub(before)) as f64 / files as f64;
    let pages = 16_384u64;
    let page = vec![1u8; 4096];
    let before = rss_anon();
    for k in 0..pages {
        fs.write(inos[0], k * 4096, &page)?;
    }
    let per_page = (rss_anon().saturating_sub(before)) as f64 / pages as f64;
    fs.unlink(dir.ino, b"m0")?;
    for i in 1..files {
        fs.unlink(dir.ino, format!("m{i}").as_bytes())?;
    }
    fs.rmdir(ROOT_INO, b"mem")?;
    Ok((per_file, per_page))
}

/// NOVA §4.7 recovery: fills the file system with `files` files of 16
/// pages, then times mounts after clean unmounts and after crashes (the
/// `Fs` dropped without unmounting), alternating, `rounds` times each.
/// Returns median milliseconds (clean, crash) and the inodes a crash scan
/// visited. Leaves the image cleanly unmounted.
fn recovery_times(fs: Fs, region: &Arc<dyn Region>, files: u64, rounds: usize) -> Result<(f64, f64, u64)> {
    let dir = fs.mkdir(ROOT_INO, b"recovery", 0o755, 0, 0)?;
    let data = vec![0x3Cu8; 64 * 1024];
    for i in 0..files {
        let f = fs.create(dir.ino, format!("r{i}").as_bytes(), 0o644, 0, 0)?;
        fs.write(f.ino, 0, &data)?;
    }
    let (mut clean, mut crash, mut scanned) = (Vec::new(), Vec::new(), 0);
    let mut fs = fs;
    for _ in 0..rounds {
        fs.unmount().context("unmount")?;
        let t = Instant::now();
        fs = Fs::open(region.clone(), MountOptions::default()).context("mount after a clean unmount")?;
        clean.push(t.elapsed().as_secs_f64() * 1e3);
        drop(fs); // A crash: no unmount.
        let t = Instant::now();
        fs = Fs::open(region.clone(), MountOptions::default()).context("mount after a crash")?;
        crash.push(t.elapsed().as_secs_f64() * 1e3);
        scanned = fs.mount_report().scanned_inodes;
    }
    fs.unmount().context("unmount")?;
    Ok((stats(clean).0, stats(crash).0, scanned))
}

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

pub fn run(args: &Args) -> Result<()> {
    let (files, rounds) = if args.quick {
        (1_000, 3)
    } else {
        (args.files, args.rounds.max(1))
    };
    let opts = MapOptions {
        eadr: args.eadr,
        ..MapOptions::default()
    };
    let _ = std::fs::remove_file(&args.image);
    let region = MmapRegion::create(&args.image, args.size, &opts).map_err(|e| explain(&args.image, e))?;
    let flush = region.flush_kind();
    let kind = region.kind();
    let region: Arc<dyn Region> = Arc::new(region);
    let result = (|| -> Result<()> {
        Fs::format(region.clone(), &FormatOptions::default()).context("format")?;
        let fs = Fs::open(region.clone(), MountOptions::default()).context("mount")?;
        let bar = ProgressBar::new(rounds as u64 + 1);
        bar.set_style(
            ProgressStyle::with_template("{msg} {bar:30} {pos}/{len}").unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message("memory");
        let (per_file, per_page) = memory(&fs, files)?;
        bar.inc(1);
        bar.set_message("rounds");
        let mut all = Vec::new();
        for _ in 0..rounds {
            all.push(round(&fs, files, args.appends)?);
            bar.inc(1);
        }
        bar.finish_and_clear();
        let (clean_ms, crash_ms, scanned) = recovery_times(fs, &region, files, rounds)?;
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
        let rows: [Row; 4] = [
            ("create", |r| r.create, "≤ 2.0"),
            ("append 4 KiB + fsync", |r| r.append, "≤ 1.2"),
            ("read 4 KiB (sequential in each file)", |r| r.read, "≤ 0.6"),
            ("unlink (16 pages)", |r| r.unlink, "≤ 2.0"),
        ];
        for (name, f, target) in rows {
            let (med, lo, hi) = stats(all.iter().map(f).collect());
            println!("| {name} | {med:.3} | {lo:.3}–{hi:.3} | {target} |");
        }
        println!("\nDRAM: {per_file:.0} bytes per empty file, {per_page:.1} bytes per data page");
        println!(
            "mount with {files} files of 64 KiB (NOVA §4.7): {clean_ms:.3} ms after a clean unmount, \
             {crash_ms:.3} ms after a crash (journal replay + scan of {scanned} inodes); medians"
        );
        Ok(())
    })();
    let _ = std::fs::remove_file(&args.image);
    result
}
