//! `novafs bench`: the library benchmark. Runs novafs-bench's NOVA §5.2
//! microbenchmark (create 10,000 files, sixteen 4 KiB appends each with
//! fsync, then delete) plus 4 KiB reads on its library target, on a real
//! mapped region with real flushes, and reports medians and ranges over
//! several rounds, the DRAM the indexes use per file and per data page, and
//! mount times after a clean unmount and after a crash, and what the
//! metadata journal writes per operation. `--protect MODE`,
//! `--compare-replicas`, `--compare-data-protection`, `--compare-journal`
//! and `--compare-modes` instead compare two library configurations side
//! by side; `--txninfo-sweep` runs FGM §IV-C's sweep (`bench_txninfo`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use novafs::PAGE_SIZE;
use novafs::{Batching, Consistency, FormatOptions, MountOptions, StatFs, ROOT_INO};
use novafs_bench::backend::Backend;
use novafs_bench::memory;
use novafs_bench::stats::{summarize, Summary};
use novafs_bench::target::LibraryTarget;
use novafs_bench::txninfo::WORDS;
use novafs_bench::workload::{micro, time_mounts, Micro, PhaseJournal, SetShape};
use pm::{MapOptions, MmapRegion, Nvmm, Prefault, Protection, Region, WriteProtect};

use crate::bench_nvmm::Slowed;
use crate::image::{explain, parse_size};
use crate::info::bytes;
use crate::{bench_aged, bench_fgm, bench_mmap, bench_recovery, bench_snapshots, bench_txninfo};

#[derive(clap::Args)]
pub struct Args {
    /// Files per round.
    #[arg(long, default_value_t = 10_000)]
    files: u64,
    /// 4 KiB appends per file.
    #[arg(long, default_value_t = 16)]
    pub(crate) appends: u64,
    /// Rounds; medians and ranges are taken over them.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Scratch image (created, then removed).
    #[arg(long, default_value = "/dev/shm/novafs-bench.img")]
    pub(crate) image: PathBuf,
    /// Scratch image size.
    #[arg(long, value_parser = parse_size, default_value = "2G")]
    size: u64,
    /// Declare eADR (persistent caches): fences only, no cache-line flushes.
    #[arg(long)]
    eadr: bool,
    /// Emulate a slower NVMM's writes (pm's nvmm module, NOVA Table 1):
    /// dram (none), stt (200 ns persist barrier), pcm (500 ns barrier,
    /// 1/8 of DRAM's write bandwidth) or NS:DIVISOR. Reads stay at DRAM
    /// speed.
    #[arg(long, value_name = "MODEL", default_value = "dram", conflicts_with_all = ["snapshots", "mmap"])]
    nvmm: Nvmm,
    /// A short run (1,000 files, 3 rounds).
    #[arg(long)]
    pub(crate) quick: bool,
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
    /// Instead of the full run, compare the microbenchmark with the
    /// fine-grained journal against block-granular journaling (JBD2's
    /// whole 4 KiB blocks between descriptor and commit blocks; a
    /// benchmark-only mode), rounds interleaved: latency, journal bytes
    /// and fences per operation (FGM §IV).
    #[arg(long, conflicts_with_all = ["protect", "compare_replicas", "compare_data_protection", "snapshots", "mmap"])]
    compare_journal: bool,
    /// Instead of the full run, compare the fine-grained journal against
    /// block-granular journaling on FGM's workloads (§IV-A: varmail,
    /// fileserver, FileMicro_writefsync, PostMark), rounds interleaved:
    /// throughput, journal bytes and fences per operation.
    #[arg(long, conflicts_with_all = ["protect", "compare_replicas", "compare_data_protection", "compare_journal", "snapshots", "mmap"])]
    fgm: bool,
    /// Instead of the full run, compare the microbenchmark on a strict
    /// mount with one on a relaxed mount (NOVA-Fortis §4.6: overwrites in
    /// place), both on mkfs's default format, rounds interleaved: latency,
    /// journal bytes and fences per operation. With --fgm, FGM's workloads
    /// in the two modes instead of the fine-grained and block-granular
    /// journals.
    #[arg(long, conflicts_with_all = ["protect", "compare_replicas", "compare_data_protection", "compare_journal", "snapshots", "mmap"])]
    compare_modes: bool,
    /// With --compare-journal or --fgm (not --compare-modes): both sides
    /// formatted relaxed, so the journals also carry relaxed mode's
    /// in-place metadata changes (NOVA-Fortis §4.6), as FGM's ext4 does.
    #[arg(long, conflicts_with = "compare_modes")]
    relaxed: bool,
    /// With --compare-modes: the relaxed mount batches its in-place
    /// metadata changes (`-o batch`, FGM §III-C1).
    #[arg(long, requires = "compare_modes")]
    batch: bool,
    /// With --compare-modes: both sides formatted without metadata
    /// replicas, data checksums or parity (the paper's comparison:
    /// NOVA-Fortis §5.1 measures relaxed mode without data protection
    /// against NOVA without it).
    #[arg(long, requires = "compare_modes")]
    unprotected: bool,
    /// With --batch: the running transaction's limit in words (`-o
    /// batch=WORDS`; default 1024).
    #[arg(long, requires = "batch")]
    batch_words: Option<usize>,
    /// Instead of the full run, FGM §IV-C's TxnInfo size sweep: chmods and
    /// utimens of random files (an attribute storm) on a strict mount, a
    /// relaxed one and relaxed ones batching at each of --words, with an
    /// fsync every 32 operations and without: throughput, journal bytes,
    /// fences and commits per operation, and what triggered the commits.
    #[arg(long, conflicts_with_all = ["protect", "compare_replicas", "compare_data_protection", "compare_journal", "compare_modes", "fgm", "snapshots", "mmap"])]
    txninfo_sweep: bool,
    /// With --txninfo-sweep: seconds of each run.
    #[arg(long, default_value_t = 2.0)]
    storm_secs: f64,
    /// With --txninfo-sweep: files the storm changes.
    #[arg(long, default_value_t = 2_000)]
    storm_files: u64,
    /// With --txninfo-sweep: the batching limits, in words (FGM's 256 B to
    /// 128 KiB TxnInfo holds about 30 to 16,000 entries).
    #[arg(long, value_delimiter = ',', default_values_t = WORDS)]
    words: Vec<usize>,
    /// With --txninfo-sweep: the batching mounts' commit timer, ms (the
    /// mount's default is 5 s; a tenth of a run lets each run see the
    /// timer).
    #[arg(long, default_value_t = 200)]
    commit_ms: u64,
    /// With --fgm: seconds of each workload per round and side.
    #[arg(long, default_value_t = 3.0)]
    fgm_secs: f64,
    /// With --fgm: files of varmail's and fileserver's file sets and of
    /// PostMark's pool.
    #[arg(long, default_value_t = 2_000)]
    fgm_files: u64,
    /// Instead of the full run, measure snapshots (NOVA-Fortis §3): the
    /// latency of taking one as the file system grows, each filebench
    /// personality's throughput with one every --snapshot-every seconds
    /// against none (rounds interleaved; Fig. 4), the manifests' DRAM, and
    /// the cost of deleting the snapshots and reclaiming their pages.
    #[arg(long, conflicts_with_all = ["protect", "compare_replicas", "compare_data_protection"])]
    snapshots: bool,
    /// Instead of the full run, measure the library's two kinds of mmap
    /// (issue 26), rounds interleaved: atomic (NOVA §4.5) against DAX
    /// (NOVA-Fortis §3.3) msync latency with 1, 16 and 256 dirty pages,
    /// mapped store and load throughput against write and read calls, and
    /// each kind's fault latency.
    #[arg(long, conflicts_with_all = ["protect", "compare_replicas", "compare_data_protection", "snapshots"])]
    mmap: bool,
    /// Instead of the full run, NOVA-Fortis Fig. 8's cumulative ladder
    /// (`bench_ladder`): no protection, then metadata replicas, data
    /// checksums and parity, write protection (pkey where the CPU has
    /// protection keys, else mprotect) and relaxed mode, each adding one
    /// feature to the one before, rounds interleaved over all five.
    #[arg(long, conflicts_with_all = ["protect", "compare_replicas", "compare_data_protection", "compare_journal", "fgm", "compare_modes", "txninfo_sweep", "snapshots", "mmap"])]
    ladder: bool,
    /// Instead of the full run, the latency breakdown (NOVA Fig. 6c,
    /// NOVA-Fortis Fig. 10; `bench_breakdown`): the microbenchmark on
    /// every rung of --ladder with each operation's time cut into the parts
    /// of novafs's work (allocation, log, journal, replicas, data copy,
    /// data protection, write windows, index, freeing, GC), and what the
    /// accounting costs.
    #[arg(long, conflicts_with_all = ["protect", "compare_replicas", "compare_data_protection", "compare_journal", "fgm", "compare_modes", "txninfo_sweep", "snapshots", "mmap", "ladder"])]
    breakdown: bool,
    /// With --ladder: NOVA-Fortis Fig. 9 instead, 4 KiB random writes and
    /// reads on 1, 2 and 4 threads (one file each) on every rung.
    #[arg(long, requires = "ladder")]
    pub(crate) fio: bool,
    /// Instead of the full run, NOVA-Fortis on an aged image (issue 28):
    /// ages an image of --size as §4.4 did (filebench personalities, half
    /// of each one's files removed after each run, until 99% full) once
    /// without metadata replicas, once with two-way replicas and once with
    /// the dead zone, then prints the storage breakdown (Fig. 12) and the
    /// metadata bytes at risk per scribble size (Fig. 7).
    #[arg(long, conflicts_with_all = ["protect", "compare_replicas", "compare_data_protection", "compare_journal", "compare_modes", "fgm", "txninfo_sweep", "snapshots", "mmap"])]
    aged: bool,
    /// With --aged or --breakdown: write the figures there as SVG.
    #[arg(long, value_name = "DIR")]
    plot_dir: Option<PathBuf>,
    /// With --snapshots: seconds between snapshots.
    #[arg(long, default_value_t = 10.0)]
    snapshot_every: f64,
    /// With --snapshots: seconds of each personality per round and side.
    #[arg(long, default_value_t = 30.0)]
    fileserver_secs: f64,
    /// With --snapshots: the filebench personalities run with and without
    /// snapshots, comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = bench_snapshots::parse_personality,
          default_value = "fileserver,varmail,webserver,webproxy", requires = "snapshots")]
    personalities: Vec<novafs_bench::personality::Personality>,
    /// Instead of the full run, recovery at scale (NOVA §4.7, Tables 4
    /// and 5): the empty image and the videoserver, fileserver and
    /// mailserver sets filling 3/4 of a large image, mounted after a clean
    /// unmount and after a crash, --rounds times each, on each of
    /// --scale-shards; the crash scan's speed per thread.
    #[arg(long, conflicts_with_all = ["protect", "compare_replicas", "compare_data_protection", "compare_journal", "fgm", "compare_modes", "txninfo_sweep", "snapshots", "mmap"])]
    recovery_scale: bool,
    /// With --recovery-scale: the image's size (default 16G, with --quick 1G).
    #[arg(long, value_parser = parse_size, requires = "recovery_scale")]
    scale_size: Option<u64>,
    /// With --recovery-scale: the shard counts to format with (one scan
    /// thread each).
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2, 4])]
    scale_shards: Vec<u32>,
    /// Run NOVA-Fortis Fig. 11's applications (SQLite, Redis) on the novafs
    /// mount, under the preload shim and on ext4 (`bench_apps`; root).
    #[arg(long, conflicts_with_all = ["protect", "compare_replicas", "compare_data_protection", "compare_journal", "fgm", "compare_modes", "txninfo_sweep", "snapshots", "mmap", "ladder", "recovery_scale"])]
    apps: bool,
    /// With --apps: NOVA-Fortis Fig. 11's protection settings instead, the
    /// applications under the shim on images formatted as the ladder's
    /// baseline, MP, MP+DP and relaxed rungs, each against the baseline
    /// (the shim has no write windows).
    #[arg(long, requires = "apps")]
    protection_settings: bool,
}

/// A table row: name, the phase it reads, the target.
pub(crate) type Row = (&'static str, fn(&Micro) -> f64, &'static str);

pub(crate) const ROWS: [Row; 6] = [
    ("create", |r| r.create, "≤ 2.0"),
    ("append 4 KiB + fsync", |r| r.append, "≤ 1.2"),
    ("read 4 KiB (sequential in each file)", |r| r.read, "≤ 0.6"),
    ("overwrite 4 KiB + fsync", |r| r.overwrite, "—"),
    ("overwrite 512 B + fsync", |r| r.overwrite_512, "—"),
    ("unlink (16 pages)", |r| r.unlink, "≤ 2.0"),
];

/// Median, min and max of one value over the rounds.
pub(crate) fn summary(v: &[f64]) -> Result<Summary> {
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
    if args.apps {
        return crate::bench_apps::run(rounds, args.protection_settings);
    }
    if args.relaxed && !(args.compare_journal || args.fgm) {
        bail!("--relaxed goes with --compare-journal or --fgm, which compare the journals");
    }
    if args.plot_dir.is_some() && !(args.aged || args.breakdown) {
        bail!("--plot-dir goes with --aged or --breakdown, which draw figures");
    }
    if args.ladder {
        return crate::bench_ladder::run(args, files, rounds);
    }
    if args.breakdown {
        return crate::bench_breakdown::run(args, files, rounds, args.plot_dir.as_deref());
    }
    if args.compare_replicas {
        return compare(args, files, rounds, &replicas());
    }
    if args.compare_data_protection {
        return compare(args, files, rounds, &data_protection());
    }
    if args.compare_journal {
        return compare(args, files, rounds, &journaling(journal_mode(args)));
    }
    if args.txninfo_sweep {
        return bench_txninfo::run(&bench_txninfo::Plan {
            image: &args.image,
            size: args.size,
            eadr: args.eadr,
            rounds,
            files: if args.quick { 200 } else { args.storm_files },
            secs: if args.quick { 0.5 } else { args.storm_secs },
            words: args.words.clone(),
            interval: Duration::from_millis(args.commit_ms),
        });
    }
    if args.fgm {
        let plan = bench_fgm::Plan {
            rounds,
            secs: if args.quick { 1.0 } else { args.fgm_secs },
            files: args.fgm_files,
            // The paper's 1 GB file, scaled: room for both its fourfold
            // growth and the other workloads' files.
            big_file: (args.size / 16).min(64 << 20),
        };
        let cmp = if args.compare_modes {
            modes(batching(args), args.unprotected)
        } else {
            journaling(journal_mode(args))
        };
        return with_sides(args, &cmp.configs, |sides| {
            let [a, b] = [&sides[0], &sides[1]];
            let mut about = vec![a.media.clone()];
            about.extend(
                sides
                    .iter()
                    .map(|s| format!("{}: {}", s.config.name, describe(s, cmp.table))),
            );
            let saved = cmp.table == Table::Journals;
            bench_fgm::run([(a.config.name, &a.lib), (b.config.name, &b.lib)], &about, &plan, saved)
        });
    }
    if args.compare_modes {
        return compare(args, files, rounds, &modes(batching(args), args.unprotected));
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
            personalities: &args.personalities,
        });
    }
    if args.recovery_scale {
        return bench_recovery::run(&bench_recovery::Plan {
            image: &args.image,
            size: args.scale_size.unwrap_or(if args.quick { 1 << 30 } else { 16 << 30 }),
            eadr: args.eadr,
            rounds,
            shards: &args.scale_shards,
        });
    }
    if args.aged {
        return bench_aged::run(&bench_aged::Plan {
            image: &args.image,
            size: args.size,
            eadr: args.eadr,
            quick: args.quick,
            plots: args.plot_dir.as_deref(),
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
        nvmm: args.nvmm,
        protect: WriteProtect::Off,
        // Measure the file system, not first-touch page faults.
        prefault: Prefault::Now,
        ..MapOptions::default()
    };
    let _ = std::fs::remove_file(&args.image);
    let region = MmapRegion::create(&args.image, args.size, &opts).map_err(|e| explain(&args.image, e))?;
    let media = media(&region, args.eadr);
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
        let mut slowed = Slowed::default();
        for _ in 0..rounds {
            // In the root directory, as this command has always measured.
            all.push(slowed.time(|| micro(&lib, &ROOT_INO, files, args.appends))?);
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
        println!("{media}\n");
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
        slowed.print("the microbenchmark", rounds);
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
pub(crate) struct Config {
    /// Its column in the table.
    pub(crate) name: &'static str,
    pub(crate) protect: WriteProtect,
    pub(crate) format: FormatOptions,
    /// How it is mounted: the block-granular journal (benchmark only),
    /// batching.
    pub(crate) mount: MountOptions,
}

impl Config {
    /// Formatted with `format`, on an unprotected region, mounted with
    /// the fine-grained journal.
    pub(crate) fn formatted(name: &'static str, format: FormatOptions) -> Config {
        Config {
            name,
            protect: WriteProtect::Off,
            format,
            mount: MountOptions::default(),
        }
    }
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
    table: Table,
}

/// What a comparison sets side by side, and so which table it prints and
/// what it says of each side.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Table {
    /// Latency medians, their ratio and the targets.
    Latency,
    /// Two journal formats (FGM §IV-B): latency medians and ranges, their
    /// ratio, each side's journal bytes and fences per operation, and the
    /// bytes the first side's journal saves.
    Journals,
    /// Two consistency modes (NOVA-Fortis §4.6): the same without the
    /// bytes saved (both sides journal the same way), with the targets.
    Modes,
}

/// `--protect MODE`: an unprotected region against one under `mode`.
fn protection(mode: WriteProtect) -> Comparison {
    let config = |name, protect| Config {
        protect,
        ..Config::formatted(name, FormatOptions::default())
    };
    Comparison {
        configs: [config("unprotected", WriteProtect::Off), config("protected", mode)],
        targets: [None; 6],
        storage: None,
        table: Table::Latency,
    }
}

/// `--compare-replicas`: a file system without metadata replicas against
/// one with them (the default). The targets: create at most 40%
/// and a 4 KiB append at most 25% slower.
fn replicas() -> Comparison {
    let config = |name, on| Config::formatted(name, FormatOptions::default().meta_replicas(on));
    Comparison {
        configs: [config("without replicas", false), config("with replicas", true)],
        targets: [Some(1.40), Some(1.25), None, None, None, None],
        // NOVA-Fortis's storage overhead of metadata replicas.
        storage: Some(2.1),
        table: Table::Latency,
    }
}

/// `--compare-data-protection`: no protection at all against metadata
/// replicas plus data checksums and parity (the default). The targets
/// the protection was built to (what users of NOVA-Fortis pay, Fortis
/// §5.2): a 4 KiB append at most 1.4x, a 4 KiB read at most 1.4x.
fn data_protection() -> Comparison {
    let config = |name, on| {
        Config::formatted(
            name,
            FormatOptions::default().meta_replicas(on).data_csum(on).data_parity(on),
        )
    };
    Comparison {
        configs: [config("unprotected", false), config("fully protected", true)],
        targets: [None, Some(1.40), Some(1.40), None, None, None],
        // NOVA-Fortis's total storage overhead of its protection (§5.5).
        storage: Some(14.8),
        table: Table::Latency,
    }
}

/// `--compare-journal`: the fine-grained journal (FGM §III) against
/// block-granular journaling of the same transactions (JBD2's format,
/// FGM Figure 4), both on mkfs's default format.
fn journaling(mode: Consistency) -> Comparison {
    let config = |name, block_journal| Config {
        mount: MountOptions::default().bench_block_journal(block_journal),
        ..Config::formatted(name, FormatOptions::default().consistency(mode))
    };
    Comparison {
        configs: [config("fine-grained", false), config("block-granular", true)],
        targets: [None; 6],
        storage: None,
        table: Table::Journals,
    }
}

/// `--compare-modes`: a strict mount against a relaxed one (NOVA-Fortis
/// §4.6), both on mkfs's default format (metadata replicas, data
/// checksums and parity: relaxed mode here patches them in place, where
/// the paper's relaxed mode drops data protection). The target: a
/// 512-byte overwrite at least 3x faster relaxed (the paper: 3.8x, §5.1).
/// With `batch` the relaxed mount batches its in-place words (FGM
/// §III-C1, `-o batch`); `unprotected` formats both sides without any
/// protection, as the paper compares.
fn modes(batch: Option<Batching>, unprotected: bool) -> Comparison {
    let format = FormatOptions::default()
        .meta_replicas(!unprotected)
        .data_csum(!unprotected)
        .data_parity(!unprotected);
    let config = |name, mode| Config::formatted(name, format.clone().consistency(mode));
    let relaxed = match batch {
        None => config("relaxed", Consistency::Relaxed),
        Some(b) => Config {
            mount: MountOptions::default().batch(Some(b)),
            ..config("relaxed+batch", Consistency::Relaxed)
        },
    };
    Comparison {
        configs: [config("strict", Consistency::Strict), relaxed],
        targets: [None, None, None, None, Some(1.0 / 3.0), None],
        storage: None,
        table: Table::Modes,
    }
}

/// The mode both journals' sides are formatted in: `--relaxed`, where
/// in-place metadata changes are journaled too (FGM's own setting), or
/// strict.
fn journal_mode(args: &Args) -> Consistency {
    match args.relaxed {
        true => Consistency::Relaxed,
        false => Consistency::Strict,
    }
}

/// `--batch [--batch-words N]`: how the relaxed side batches, if it does.
fn batching(args: &Args) -> Option<Batching> {
    let d = Batching::default();
    args.batch.then(|| Batching {
        words: args.batch_words.unwrap_or(d.words),
        ..d
    })
}

/// One configuration, mapped and formatted.
pub(crate) struct Side<'a> {
    pub(crate) config: &'a Config,
    pub(crate) protection: Protection,
    pub(crate) lib: LibraryTarget,
    /// Right after mkfs.
    fresh: StatFs,
    /// The mode the mount took (`Fs::consistency`).
    consistency: Consistency,
    /// The region's kind and flush, in words.
    pub(crate) media: String,
}

/// The microbenchmark on both configurations of `cmp`, side by side:
/// rounds interleaved, the order swapped every round.
fn compare(args: &Args, files: u64, rounds: usize, cmp: &Comparison) -> Result<()> {
    with_sides(args, &cmp.configs, |sides| measure(args, files, rounds, cmp, sides))
}

/// `body` on `configs`, each mapped and formatted on its own scratch
/// image (`--image`, then `NAME.2.img`, `NAME.3.img`, ...), removed
/// afterwards.
pub(crate) fn with_sides(args: &Args, configs: &[Config], body: impl FnOnce(&[Side]) -> Result<()>) -> Result<()> {
    let images: Vec<PathBuf> = (0..configs.len())
        .map(|i| match i {
            0 => args.image.clone(),
            _ => args.image.with_extension(format!("{}.img", i + 1)),
        })
        .collect();
    let result = (|| {
        let mut sides = Vec::new();
        for (config, image) in configs.iter().zip(&images) {
            sides.push(open_side(args, config, image)?);
        }
        body(&sides)
    })();
    for image in &images {
        let _ = std::fs::remove_file(image);
    }
    result
}

fn measure(args: &Args, files: u64, rounds: usize, cmp: &Comparison, sides: &[Side]) -> Result<()> {
    let bar = ProgressBar::new(rounds as u64);
    let mut runs: [Vec<Micro>; 2] = Default::default();
    let mut slowed: [Slowed; 2] = Default::default();
    for round in 0..rounds {
        for which in [round % 2, 1 - round % 2] {
            let run = slowed[which].time(|| micro(&sides[which].lib, &ROOT_INO, files, args.appends))?;
            runs[which].push(run);
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
    for side in sides {
        println!("{}: {}", side.config.name, describe(side, cmp.table));
    }
    for (side, slowed) in sides.iter().zip(&slowed) {
        slowed.print(side.config.name, rounds);
    }
    if cmp.table != Table::Latency {
        return journal_table(cmp, sides, &runs);
    }
    let with_targets = cmp.targets.iter().any(Option::is_some);
    let (target_head, target_rule) = target_columns(with_targets);
    println!(
        "\n| operation | {} median µs/op | {} median µs/op | ratio |{target_head}",
        a.config.name, b.config.name
    );
    println!("|---|---|---|---|{target_rule}");
    for ((name, f, _), target) in ROWS.into_iter().zip(cmp.targets) {
        let [x, y] = [&runs[0], &runs[1]].map(|v| summary(&v.iter().map(f).collect::<Vec<_>>()));
        let (x, y) = (x?.median, y?.median);
        let ratio = y / x;
        let target = target_cell(with_targets, target, ratio);
        println!("| {name} | {x:.3} | {y:.3} | {ratio:.2} |{target}");
    }
    if let Some(paper) = cmp.storage {
        storage(sides, files, args.appends, paper)?;
    }
    Ok(())
}

/// The target column's head and rule; none when no row has a target.
fn target_columns(with_targets: bool) -> (&'static str, &'static str) {
    if with_targets {
        (" target |", "---|")
    } else {
        ("", "")
    }
}

/// A row's target cell: the most its ratio may be, and whether it is met.
fn target_cell(with_targets: bool, target: Option<f64>, ratio: f64) -> String {
    match target {
        _ if !with_targets => String::new(),
        Some(max) => format!(" ≤ {max:.2}: {} |", if ratio <= max { "met" } else { "missed" }),
        None => " — |".to_string(),
    }
}

/// Maps `image` and formats it as `config` says.
fn open_side<'a>(args: &Args, config: &'a Config, image: &Path) -> Result<Side<'a>> {
    let _ = std::fs::remove_file(image);
    let opts = MapOptions {
        eadr: args.eadr,
        nvmm: args.nvmm,
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
    let media = media(&region, args.eadr);
    let lib = LibraryTarget::on_region_mounted(Arc::new(region), config.format.clone(), config.mount)?;
    let fresh = lib.statfs()?;
    let consistency = lib.fs()?.consistency();
    if consistency != config.format.consistency {
        bail!("formatted {}, the mount is {}", config.format.consistency, consistency);
    }
    Ok(Side {
        config,
        protection,
        lib,
        fresh,
        consistency,
        media,
    })
}

/// The region's kind and flush in words, and the NVMM speed emulated if
/// it is.
pub(crate) fn media(region: &MmapRegion, eadr: bool) -> String {
    let nvmm = region.nvmm();
    format!(
        "region: {}; flush: {}{}{}",
        region.kind(),
        region.flush_kind(),
        if eadr { " (eADR: fences only)" } else { "" },
        if nvmm.is_emulated() {
            format!("; NVMM: {}", nvmm.explain())
        } else {
            String::new()
        }
    )
}

/// A configuration in words: its write protection, metadata replicas and
/// data protection, and what `table` compares: what its journal writes,
/// or its consistency mode.
fn describe(side: &Side, table: Table) -> String {
    let what = match (table, side.config.mount.bench_block_journal, side.consistency) {
        (Table::Latency, ..) => "",
        (Table::Journals, false, Consistency::Strict) => "; journal: the modified metadata and a TxnInfo (FGM §III-B)",
        (Table::Journals, true, Consistency::Strict) => {
            "; journal: a descriptor, each 4 KiB block updated, a commit block (JBD2)"
        }
        (Table::Journals, false, Consistency::Relaxed) => {
            "; consistency relaxed; journal: the modified metadata and a TxnInfo (FGM §III-B)"
        }
        (Table::Journals, true, Consistency::Relaxed) => {
            "; consistency relaxed; journal: a descriptor, each 4 KiB block updated, a commit block (JBD2)"
        }
        (Table::Modes, _, Consistency::Strict) => "; consistency strict: overwrites copy-on-write (NOVA §4.4)",
        (Table::Modes, _, Consistency::Relaxed) if side.config.mount.batch.is_some() => {
            "; consistency relaxed, batching: overwrites in place under a journal intent that carries \
             the new mtime, checksums and parity patched; in-place setattrs in a running transaction \
             (FGM §III-C1)"
        }
        (Table::Modes, _, Consistency::Relaxed) => {
            "; consistency relaxed: overwrites in place under a journal intent that carries the new \
             mtime, checksums and parity patched (NOVA-Fortis §4.6)"
        }
    };
    let batch = match side.config.mount.batch {
        Some(b) if table == Table::Modes => {
            format!(" (at most {} words, every {} s)", b.words, b.interval.as_secs_f64())
        }
        _ => String::new(),
    };
    format!(
        "write protection {}, {}{what}{batch}",
        side.protection,
        crate::info::protection(&side.config.format)
    )
}

/// `--compare-journal`'s and `--compare-modes`' table: per operation,
/// both sides' latency (median and range over the rounds) and its ratio,
/// journal bytes and fences (medians); comparing journals, the bytes the
/// first saves, then the saving over every operation; comparing modes,
/// the targets, then how much faster relaxed overwrites.
fn journal_table(cmp: &Comparison, sides: &[Side], runs: &[Vec<Micro>; 2]) -> Result<()> {
    let [a, b] = [&sides[0], &sides[1]].map(|s| s.config.name);
    let saves = cmp.table == Table::Journals;
    let (saved_head, saved_rule) = if saves { (" bytes saved |", "---|") } else { ("", "") };
    let with_targets = cmp.targets.iter().any(Option::is_some);
    let (target_head, target_rule) = target_columns(with_targets);
    println!(
        "\n| operation | {a} µs/op | {a} min–max | {b} µs/op | {b} min–max | {b} ÷ {a} | {a} journal B/op | \
         {b} journal B/op |{saved_head} {a} fences/op | {b} fences/op |{target_head}"
    );
    println!("|---|---|---|---|---|---|---|---|{saved_rule}---|---|{target_rule}");
    let mut ratios = Vec::new();
    for (row, ((name, f, _), target)) in ROWS.into_iter().zip(cmp.targets).enumerate() {
        let [x, y] = [&runs[0], &runs[1]].map(|v| summary(&v.iter().map(f).collect::<Vec<_>>()));
        let (x, y) = (x?, y?);
        let [jx, jy] = [&runs[0], &runs[1]].map(|v| journal_medians(v, row));
        let ((bx, fx), (by, fy)) = (
            jx?.context("the library counts its journal")?,
            jy?.context("the library counts its journal")?,
        );
        let ratio = y.median / x.median;
        let saved = if saves {
            format!(" {} |", saved(bx, by))
        } else {
            String::new()
        };
        println!(
            "| {name} | {:.3} | {:.3}–{:.3} | {:.3} | {:.3}–{:.3} | {ratio:.2} | {bx:.1} | {by:.1} |{saved} \
             {fx:.2} | {fy:.2} |{}",
            x.median,
            x.min,
            x.max,
            y.median,
            y.min,
            y.max,
            target_cell(with_targets, target, ratio)
        );
        ratios.push(ratio);
    }
    if saves {
        let total = |v: &[Micro]| -> u64 {
            v.iter()
                .flat_map(|m| m.journal.into_iter().flatten())
                .map(|p| p.stats.journal_bytes)
                .sum()
        };
        let (ta, tb) = (total(&runs[0]), total(&runs[1]));
        println!(
            "\njournal bytes over every round and operation: {ta} {a}, {tb} {b}: {} fewer (the paper: 90–99%)",
            saved(ta as f64, tb as f64)
        );
    } else {
        // ROWS[3] and ROWS[4]: the overwrites, the rows relaxed mode changes.
        println!(
            "\n{a} ÷ {b} of the medians (> 1: {b} is faster): overwrite 4 KiB + fsync {:.2}x, overwrite 512 B + \
             fsync {:.2}x (the issue's target for 512 B: at least 3x; the paper: 3.8x, NOVA-Fortis §5.1, relaxed \
             mode without data protection against NOVA without it)",
            1.0 / ratios[3],
            1.0 / ratios[4]
        );
    }
    Ok(())
}

/// How much less `fine` is than `block`, in percent; "—" when `block`
/// journals nothing.
pub(crate) fn saved(fine: f64, block: f64) -> String {
    if block > 0.0 {
        format!("{:.1}%", 100.0 * (1.0 - fine / block))
    } else {
        "—".to_string()
    }
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
