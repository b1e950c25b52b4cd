//! `novafs bench`: the library benchmark. Runs novafs-bench's NOVA §5.2
//! microbenchmark (create 10,000 files, sixteen 4 KiB appends each with
//! fsync, then delete) plus 4 KiB reads on its library target, on a real
//! mapped region with real flushes, and reports medians and ranges over
//! several rounds, the DRAM the indexes use per file and per data page, and
//! mount times after a clean unmount and after a crash. `--protect MODE`
//! and `--compare-replicas` instead compare two library configurations
//! side by side.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use novafs::PAGE_SIZE;
use novafs::{FormatOptions, StatFs, ROOT_INO};
use novafs_bench::backend::Backend;
use novafs_bench::memory;
use novafs_bench::stats::{summarize, Summary};
use novafs_bench::target::LibraryTarget;
use novafs_bench::workload::{micro, time_mounts, Micro, PhaseJournal, SetShape};
use pm::{MapOptions, MmapRegion, Prefault, Protection, Region, WriteProtect};

use crate::image::{explain, parse_size};
use crate::info::bytes;
use crate::{bench_mmap, bench_snapshots};

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
    #[arg(long, value_name = "MODE", conflicts_with_all = ["compare_replicas", "compare_data_protection"])]
    protect: Option<WriteProtect>,
    /// Instead of the full run, compare the microbenchmark on a file system
    /// formatted without metadata replicas with one formatted with them,
    /// rounds interleaved, and what the replicas take in storage.
    #[arg(long, conflicts_with = "compare_data_protection")]
    compare_replicas: bool,
    /// Instead of the full run, compare a file system formatted with no
    /// protection at all with one fully protected (metadata replicas, data
    /// checksums and parity: mkfs's default), rounds interleaved, and what
    /// the protection takes in storage.
    #[arg(long)]
    compare_data_protection: bool,
    /// Instead of the full run, measure snapshots (NOVA-Fortis §3): the
    /// latency of taking one as the file system grows, fileserver
    /// throughput with one every --snapshot-every seconds against none
    /// (rounds interleaved), and the manifests' DRAM.
    #[arg(long, conflicts_with_all = ["protect", "compare_replicas", "compare_data_protection"])]
    snapshots: bool,
    /// Instead of the full run, measure the library's two kinds of mmap
    /// (issue 26), rounds interleaved: atomic (NOVA §4.5) against DAX
    /// (NOVA-Fortis §3.3) msync latency with 1, 16 and 256 dirty pages,
    /// mapped store and load throughput against write and read calls, and
    /// each kind's fault latency.
    #[arg(long, conflicts_with_all = ["protect", "compare_replicas", "compare_data_protection", "snapshots"])]
    mmap: bool,
    /// With --snapshots: seconds between snapshots.
    #[arg(long, default_value_t = 10.0)]
    snapshot_every: f64,
    /// With --snapshots: seconds of fileserver per round and side.
    #[arg(long, default_value_t = 30.0)]
    fileserver_secs: f64,
}

/// A table row: name, the phase it reads, the target.
type Row = (&'static str, fn(&Micro) -> f64, &'static str);

const ROWS: [Row; 6] = [
    ("create", |r| r.create, "≤ 2.0"),
    ("append 4 KiB + fsync", |r| r.append, "≤ 1.2"),
    ("read 4 KiB (sequential in each file)", |r| r.read, "≤ 0.6"),
    ("overwrite 4 KiB + fsync", |r| r.overwrite, "—"),
    ("overwrite 512 B + fsync", |r| r.overwrite_512, "—"),
    ("unlink (16 pages)", |r| r.unlink, "≤ 2.0"),
];

/// Median, min and max of one value over the rounds.
fn summary(v: &[f64]) -> Result<Summary> {
    summarize(v).context("no rounds ran")
}

/// Medians over `runs` of row `row`'s journal bytes and fences per
/// operation ([`ROWS`] follows `Micro`'s phases); `None` if not counted.
fn journal_medians(runs: &[Micro], row: usize) -> Result<Option<(f64, f64)>> {
    let Some(phases) = runs
        .iter()
        .map(|m| m.journal.map(|j| j[row]))
        .collect::<Option<Vec<_>>>()
    else {
        return Ok(None);
    };
    let bytes = summary(&phases.iter().map(PhaseJournal::bytes_per_op).collect::<Vec<_>>())?;
    let fences = summary(&phases.iter().map(PhaseJournal::fences_per_op).collect::<Vec<_>>())?;
    Ok(Some((bytes.median, fences.median)))
}

pub fn run(args: &Args) -> Result<()> {
    let (files, rounds) = if args.quick {
        (1_000, 3)
    } else {
        (args.files, args.rounds.max(1))
    };
    if let Some(mode) = args.protect {
        return compare(args, files, rounds, &protection(mode));
    }
    if args.compare_replicas {
        return compare(args, files, rounds, &replicas());
    }
    if args.compare_data_protection {
        return compare(args, files, rounds, &data_protection());
    }
    if args.snapshots {
        return bench_snapshots::run(&bench_snapshots::Plan {
            image: &args.image,
            size: args.size,
            eadr: args.eadr,
            rounds,
            secs: if args.quick { 5.0 } else { args.fileserver_secs },
            every: if args.quick { 1.0 } else { args.snapshot_every },
            files: if args.quick { 500 } else { 2_000 },
        });
    }
    if args.mmap {
        return bench_mmap::run(&bench_mmap::Plan {
            image: &args.image,
            size: args.size,
            eadr: args.eadr,
            rounds,
        });
    }
    let opts = MapOptions {
        eadr: args.eadr,
        protect: WriteProtect::Off,
        // Measure the file system, not first-touch page faults.
        prefault: Prefault::Now,
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
        println!("| operation | median µs/op | min–max µs/op | journal B/op | journal fences/op | target |");
        println!("|---|---|---|---|---|---|");
        for (row, (name, f, target)) in ROWS.into_iter().enumerate() {
            let s = summary(&all.iter().map(f).collect::<Vec<_>>())?;
            let (bytes, fences) = journal_medians(&all, row)?.context("the library counts its journal")?;
            println!(
                "| {name} | {:.3} | {:.3}–{:.3} | {bytes:.1} | {fences:.2} | {target} |",
                s.median, s.min, s.max
            );
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

/// One library configuration of a comparison: how its region is mapped
/// and its file system formatted.
struct Config {
    /// Its column in the table.
    name: &'static str,
    protect: WriteProtect,
    format: FormatOptions,
}

/// Two configurations side by side, the second measured against the first.
struct Comparison {
    configs: [Config; 2],
    /// Per row of [`ROWS`], the most the second may take as a multiple of
    /// the first (the targets).
    targets: [Option<f64>; 6],
    /// Also measure what the second takes in storage beyond the first,
    /// against the paper's figure in percent.
    storage: Option<f64>,
}

/// `--protect MODE`: an unprotected region against one under `mode`.
fn protection(mode: WriteProtect) -> Comparison {
    let config = |name, protect| Config {
        name,
        protect,
        format: FormatOptions::default(),
    };
    Comparison {
        configs: [config("unprotected", WriteProtect::Off), config("protected", mode)],
        targets: [None; 6],
        storage: None,
    }
}

/// `--compare-replicas`: a file system without metadata replicas against
/// one with them (the default). The targets: create at most 40%
/// and a 4 KiB append at most 25% slower.
fn replicas() -> Comparison {
    let config = |name, meta_replicas| Config {
        name,
        protect: WriteProtect::Off,
        format: FormatOptions::default().meta_replicas(meta_replicas),
    };
    Comparison {
        configs: [config("without replicas", false), config("with replicas", true)],
        targets: [Some(1.40), Some(1.25), None, None, None, None],
        // NOVA-Fortis's storage overhead of metadata replicas.
        storage: Some(2.1),
    }
}

/// `--compare-data-protection`: no protection at all against metadata
/// replicas plus data checksums and parity (the default). The targets
/// the protection was built to (what users of NOVA-Fortis pay, Fortis
/// §5.2): a 4 KiB append at most 1.4x, a 4 KiB read at most 1.4x.
fn data_protection() -> Comparison {
    let config = |name, on| Config {
        name,
        protect: WriteProtect::Off,
        format: FormatOptions::default().meta_replicas(on).data_csum(on).data_parity(on),
    };
    Comparison {
        configs: [config("unprotected", false), config("fully protected", true)],
        targets: [None, Some(1.40), Some(1.40), None, None, None],
        // NOVA-Fortis's total storage overhead of its protection (§5.5).
        storage: Some(14.8),
    }
}

/// One configuration, mapped and formatted.
struct Side<'a> {
    config: &'a Config,
    protection: Protection,
    lib: LibraryTarget,
    /// Right after mkfs.
    fresh: StatFs,
    /// The region's kind and flush, in words.
    media: String,
}

/// The microbenchmark on both configurations of `cmp`, side by side:
/// rounds interleaved, the order swapped every round; each on its own
/// scratch image, removed afterwards.
fn compare(args: &Args, files: u64, rounds: usize, cmp: &Comparison) -> Result<()> {
    let images = [args.image.clone(), args.image.with_extension("2.img")];
    let result = measure(args, files, rounds, cmp, &images);
    for image in &images {
        let _ = std::fs::remove_file(image);
    }
    result
}

fn measure(args: &Args, files: u64, rounds: usize, cmp: &Comparison, images: &[PathBuf; 2]) -> Result<()> {
    let mut sides = Vec::new();
    for (config, image) in cmp.configs.iter().zip(images) {
        sides.push(open_side(args, config, image)?);
    }
    let bar = ProgressBar::new(rounds as u64);
    let mut runs: [Vec<Micro>; 2] = Default::default();
    for round in 0..rounds {
        for which in [round % 2, 1 - round % 2] {
            runs[which].push(micro(&sides[which].lib, &ROOT_INO, files, args.appends)?);
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let [a, b] = [&sides[0], &sides[1]];
    println!(
        "{} against {}: {files} files x {} appends of 4 KiB, {rounds} rounds interleaved",
        b.config.name, a.config.name, args.appends
    );
    println!("{}", a.media);
    for side in &sides {
        println!("{}: {}", side.config.name, describe(side));
    }
    let with_targets = cmp.targets.iter().any(Option::is_some);
    let (target_head, target_rule) = if with_targets { (" target |", "---|") } else { ("", "") };
    println!(
        "\n| operation | {} median µs/op | {} median µs/op | ratio |{target_head}",
        a.config.name, b.config.name
    );
    println!("|---|---|---|---|{target_rule}");
    for ((name, f, _), target) in ROWS.into_iter().zip(cmp.targets) {
        let [x, y] = [&runs[0], &runs[1]].map(|v| summary(&v.iter().map(f).collect::<Vec<_>>()));
        let (x, y) = (x?.median, y?.median);
        let ratio = y / x;
        let target = match target {
            _ if !with_targets => String::new(),
            Some(max) => format!(" ≤ {max:.2}: {} |", if ratio <= max { "met" } else { "missed" }),
            None => " — |".to_string(),
        };
        println!("| {name} | {x:.3} | {y:.3} | {ratio:.2} |{target}");
    }
    if let Some(paper) = cmp.storage {
        storage(&sides, files, args.appends, paper)?;
    }
    Ok(())
}

/// Maps `image` and formats it as `config` says.
fn open_side<'a>(args: &Args, config: &'a Config, image: &Path) -> Result<Side<'a>> {
    let _ = std::fs::remove_file(image);
    let opts = MapOptions {
        eadr: args.eadr,
        protect: config.protect,
        prefault: Prefault::Now,
        ..MapOptions::default()
    };
    let region = MmapRegion::create(image, args.size, &opts).map_err(|e| explain(image, e))?;
    let protection = region.protection();
    if config.protect != WriteProtect::Off && protection == Protection::Off {
        bail!(
            "write protection {:?} is not available on this machine (try --protect mprotect)",
            config.protect
        );
    }
    let media = format!(
        "region: {}; flush: {}{}",
        region.kind(),
        region.flush_kind(),
        if args.eadr { " (eADR: fences only)" } else { "" }
    );
    let lib = LibraryTarget::on_region_with(Arc::new(region), config.format.clone())?;
    let fresh = lib.statfs()?;
    Ok(Side {
        config,
        protection,
        lib,
        fresh,
        media,
    })
}

/// A configuration in words: its write protection, metadata replicas and
/// data protection.
fn describe(side: &Side) -> String {
    format!(
        "write protection {}, {}",
        side.protection,
        crate::info::protection(&side.config.format)
    )
}

/// Pages in use.
fn used(s: &StatFs) -> u64 {
    s.blocks - s.blocks_free
}

/// What the second side takes in storage beyond the first: `statfs` used
/// pages after the microbenchmark's create and append phases (which it
/// undoes, so they are repeated here, untimed), and right after mkfs.
fn storage(sides: &[Side], files: u64, appends: u64, paper: f64) -> Result<()> {
    let mut full = Vec::new();
    for side in sides {
        fill(&side.lib, files, appends)?;
        full.push(side.lib.statfs()?);
    }
    let [a, b] = [&sides[0], &sides[1]].map(|s| s.config.name);
    let pct = |x: u64, y: u64| 100.0 * (y as f64 - x as f64) / x as f64;
    let (ua, ub) = (used(&full[0]), used(&full[1]));
    println!(
        "\nstorage after creating {files} files x {appends} appends of 4 KiB: {ua} pages used {a}, \
         {ub} {b}: {:+.1}% (the paper: {paper}%)",
        pct(ua, ub)
    );
    let [fa, fb] = [&sides[0].fresh, &sides[1].fresh];
    let fixed = fa.blocks_free.saturating_sub(fb.blocks_free);
    println!(
        "right after mkfs: {} of {} pages free {a}, {} of {} {b}: {fixed} pages ({}) fewer",
        fa.blocks_free,
        fa.blocks,
        fb.blocks_free,
        fb.blocks,
        bytes(fixed * PAGE_SIZE)
    );
    let (ga, gb) = (ua - used(fa), ub - used(fb));
    println!("growth since mkfs: {ga} pages {a}, {gb} {b}: {:+.1}%", pct(ga, gb));
    Ok(())
}

/// `files` files of `appends` 4 KiB appends each, fsynced, in a new
/// directory: the microbenchmark's create and append phases, untimed.
fn fill(lib: &LibraryTarget, files: u64, appends: u64) -> Result<()> {
    let dir = lib.mkdir("storage")?;
    let page = vec![0x5Au8; PAGE_SIZE as usize];
    for i in 0..files {
        let f = lib.create(&dir, &format!("f{i}"))?;
        for k in 0..appends {
            lib.write_at(&f, k * PAGE_SIZE, &page)?;
            lib.fsync(&f)?;
        }
    }
    Ok(())
}
