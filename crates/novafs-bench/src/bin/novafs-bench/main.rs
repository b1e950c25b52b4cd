//! `novafs-bench`: novafs (through the library and through FUSE) beside
//! tmpfs, ext4 (data=ordered and data=journal), xfs and btrfs, on the
//! workloads of the NOVA paper's evaluation: the §5.2 microbenchmark,
//! append + fsync, random and sequential I/O, filebench-style personalities
//! (§5.3), recovery time (§5.5) and fio, in interleaved rounds, plus one
//! long run on a full file system (§5.4). Sets up and tears down its own
//! targets (root needed for all but the library), and writes medians, ranges
//! and ratios against ext4 data=journal as a markdown table to
//! `results/<timestamp>.md`, with PNG plots. A benchmark, not a test.

#![forbid(unsafe_code)]

mod plot;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};

use novafs_bench::fullfs;
use novafs_bench::personality::Personality;
use novafs_bench::report::{self, Samples};
use novafs_bench::target::{self, Target};
use novafs_bench::tools;
use novafs_bench::workload::{Params, PersonalityParams, RecoverySet, SetShape, Workload};

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
    /// Comma-separated targets (default: all but novafs-fuse-wb). Known:
    /// novafs-lib, novafs-posix, novafs-fuse, tmpfs, ext4-ordered,
    /// ext4-journal, xfs, btrfs; and novafs-fuse-wb (the mount with `-o
    /// writeback_cache`), only when named.
    #[arg(long, value_delimiter = ',')]
    targets: Option<Vec<String>>,
    /// Skip the random and sequential I/O workloads (d).
    #[arg(long)]
    no_io: bool,
    /// Skip the filebench personalities (c).
    #[arg(long)]
    no_personalities: bool,
    /// Only these personalities (comma-separated; default: all four).
    #[arg(long, value_delimiter = ',')]
    personalities: Option<Vec<String>>,
    /// Skip the NOVA §5.2 microbenchmark and the append + fsync loop.
    #[arg(long)]
    no_micro: bool,
    /// Skip the recovery-time workload (e).
    #[arg(long)]
    no_recovery: bool,
    /// Skip fio.
    #[arg(long)]
    no_fio: bool,
    /// Skip the full-file-system run (f).
    #[arg(long)]
    no_full: bool,
    /// Threads of the personalities and of the full-file-system run (the
    /// paper uses 50).
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Entries in each personality's file set (default 2,000; 200 with --quick).
    #[arg(long)]
    personality_files: Option<u64>,
    /// Seconds per personality run (default 2; 0.15 with --quick).
    #[arg(long)]
    personality_secs: Option<f64>,
    /// Scale of the recovery file sets: 1 = 8 × 16 MiB, 1,000 × 256 KiB and
    /// 20,000 × 4 KiB (default 1; 0.1 with --quick).
    #[arg(long)]
    recovery_scale: Option<f64>,
    /// Seconds of the full-file-system run at each utilisation (default
    /// 60; 10 with --quick).
    #[arg(long)]
    full_secs: Option<f64>,
    /// Seconds of each slice of the full-file-system run: the utilisations
    /// take turns (default 10; 5 with --quick).
    #[arg(long)]
    full_slice_secs: Option<f64>,
    /// Size of the full-file-system run's file system, MiB (default 256; 128 with --quick).
    #[arg(long)]
    full_size_mib: Option<u64>,
    /// Run the full-file-system experiment with filebench's fileserver
    /// (NOVA Table 3's workload: files made, appended to and deleted whole)
    /// instead of random single-page overwrites.
    #[arg(long)]
    full_fileserver: bool,
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

/// The heading of BENCHMARKS.md's part written by other commands, which
/// `--benchmarks-md` keeps.
const KEPT: &str = "## Measured by other commands";

/// The harness's new BENCHMARKS.md `new`, followed by what other commands
/// wrote in the `old` one from [`KEPT`] on.
fn with_kept(mut new: String, old: &str) -> String {
    if let Some(at) = old.find(KEPT) {
        new.push('\n');
        new.push_str(&old[at..]);
    }
    new
}

fn main() -> Result<()> {
    let args = Args::parse();
    let run_started = std::time::Instant::now();
    let q = args.quick;
    let personality = PersonalityParams {
        files: args.personality_files.unwrap_or(if q { 200 } else { 2_000 }),
        threads: args.threads.max(1),
        secs: args.personality_secs.unwrap_or(if q { 0.15 } else { 2.0 }),
    };
    let scale = args.recovery_scale.unwrap_or(if q { 0.1 } else { 1.0 });
    let recovery = recovery_sets(scale);
    let (params, rounds, size_mib) = if q {
        let p = Params {
            files: 150,
            appends: 16,
            append_ops: 500,
            file_mib: 16,
            random_ops: 2_000,
            personality,
            recovery,
            fio_ms: 50,
            fio_file_mib: 4,
        };
        (p, args.rounds.unwrap_or(5), args.size_mib.unwrap_or(512))
    } else {
        let p = Params {
            files: 2_000,
            appends: 16,
            append_ops: 5_000,
            file_mib: 64,
            random_ops: 20_000,
            personality,
            recovery,
            fio_ms: 1_000,
            fio_file_mib: 64,
        };
        (p, args.rounds.unwrap_or(5), args.size_mib.unwrap_or(1024))
    };
    let full = fullfs::Plan {
        mix: if args.full_fileserver {
            fullfs::Mix::Fileserver
        } else {
            fullfs::Mix::Overwrites
        },
        levels: vec![50.0, 95.0],
        size_mib: args.full_size_mib.unwrap_or(if q { 128 } else { 256 }),
        threads: personality.threads,
        secs: args.full_secs.unwrap_or(if q { 10.0 } else { 60.0 }),
        slice_secs: args.full_slice_secs.unwrap_or(if q { 5.0 } else { 10.0 }),
    };
    let rounds = rounds.max(1);
    let mut notes: Vec<String> = Vec::new();
    let mut workloads = Vec::new();
    if !args.no_micro {
        workloads.extend([Workload::Micro, Workload::AppendFsync]);
    }
    if !args.no_io {
        for threads in [1, 2] {
            workloads.push(Workload::Random { threads });
            workloads.push(Workload::Sequential { threads });
        }
    }
    if !args.no_personalities {
        let chosen = |p: &Personality| {
            args.personalities
                .as_ref()
                .is_none_or(|names| names.iter().any(|n| n == p.name()))
        };
        if let Some(unknown) = args
            .personalities
            .iter()
            .flatten()
            .find(|n| !Personality::ALL.iter().any(|p| p.name() == n.as_str()))
        {
            bail!("unknown personality {unknown:?}: choose from fileserver, varmail, webserver, webproxy");
        }
        workloads.extend(Personality::ALL.into_iter().filter(chosen).map(Workload::Personality));
    }
    if !args.no_recovery {
        workloads.extend(RecoverySet::ALL.map(Workload::Recovery));
    }
    if !args.no_fio {
        match tools::ensure_tool("fio", "fio") {
            Ok(_) => workloads.push(Workload::Fio),
            Err(e) => {
                eprintln!("no fio runs: {e:#}");
                notes.push(format!("fio left out: {e:#}"));
            }
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
        bail!("no target could be set up");
    }

    // Round r runs every live target once, starting at target r (mod n), so
    // that no target always runs first or right after the same neighbour.
    let mut samples = Samples::default();
    let mut failed: Vec<String> = Vec::new();
    let supported = targets
        .iter()
        .map(|t| workloads.iter().filter(|&&w| t.supports(w)).count())
        .sum::<usize>();
    let steps = (rounds * supported) as u64;
    let bar = ProgressBar::new(steps);
    bar.set_style(
        ProgressStyle::with_template("[{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let n = targets.len();
    // Wall time per workload over all targets and rounds, to size the runs.
    let mut spent = vec![0.0f64; workloads.len()];
    'rounds: for r in 0..rounds {
        for i in 0..n {
            let t = &mut targets[(i + r) % n];
            for (k, w) in workloads.iter().enumerate() {
                if !t.supports(*w) {
                    continue;
                }
                if stop.load(Ordering::SeqCst) {
                    bar.suspend(|| eprintln!("interrupted: tearing down; the report covers the steps that finished"));
                    break 'rounds;
                }
                bar.set_message(format!("round {}/{rounds}: {} — {}", r + 1, t.name(), w.label()));
                if !failed.iter().any(|f| f == t.name()) {
                    let started = std::time::Instant::now();
                    let result = t.run(*w, &params, &format!("r{r}w{k}"));
                    spent[k] += started.elapsed().as_secs_f64();
                    match result {
                        Ok(out) => {
                            samples.push(t.name(), *w, out.values);
                            if let Some(b) = &out.requests {
                                samples.push_requests(t.name(), *w, b);
                            }
                        }
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
    let spent: Vec<String> = workloads
        .iter()
        .zip(&spent)
        .map(|(w, s)| format!("{} {s:.1} s", w.label()))
        .collect();
    eprintln!("time spent: {}", spent.join(", "));
    let order: Vec<&str> = targets
        .iter()
        .map(|t| t.name())
        .filter(|n| !failed.iter().any(|f| f == n))
        .collect();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    // One stamp names the results file, its plots and its title.
    let stamp = report::timestamp();
    let ctx = report::Context {
        stamp: &stamp,
        params: &params,
        rounds,
        size_mib,
        workloads: &workloads,
        targets: &order,
        skipped: &skipped,
        failed: &failed,
        notes: &notes,
        samples: &samples,
        command: command.clone(),
        interrupted: stop.load(Ordering::SeqCst),
    };
    let md = report::markdown(&ctx);
    let panels = report::panels(&ctx);
    // Tear down (unmount, detach, remove) before the full-file-system run
    // and writing results.
    drop(targets);
    let full = if args.no_full || stop.load(Ordering::SeqCst) || !names.iter().any(|n| n == "novafs-lib") {
        None
    } else {
        match full_fs(&args.scratch, &full, &stop) {
            Ok(r) => Some(r),
            Err(e) => {
                eprintln!("full file system run failed: {e:#}");
                None
            }
        }
    };
    let _ = std::fs::remove_dir(&args.scratch);
    std::fs::create_dir_all(&args.out).with_context(|| format!("create {}", args.out.display()))?;
    // The results file links its plots relative to itself, in `out`.
    let mut md = md;
    let png = args.out.join(format!("{stamp}.png"));
    match plot::bars(&png, &panels) {
        Ok(()) => {
            md.push_str(&format!("\n![medians, with min–max lines]({stamp}.png)\n"));
            eprintln!("plot written to {}", png.display());
        }
        Err(e) => eprintln!("no plot: {e:#}"),
    }
    if let Some(r) = &full {
        let gc_png = args.out.join(format!("{stamp}-gc.png"));
        let name = match plot::lines(&gc_png, &full_panels(r)) {
            Ok(()) => Some(format!("{stamp}-gc.png")),
            Err(e) => {
                eprintln!("no full-file-system plot: {e:#}");
                None
            }
        };
        md.push('\n');
        // A row a minute in long runs, every 10 s in short ones.
        let every = if r.plan.secs > 120.0 { 60.0 } else { 10.0 };
        md.push_str(&fullfs::markdown(r, name.as_deref(), every));
    }
    let _ = writeln!(
        md,
        "\nThe whole run took {:.0} s of wall time.",
        run_started.elapsed().as_secs_f64()
    );
    println!("{md}");
    let path = args.out.join(format!("{stamp}.md"));
    std::fs::write(&path, &md).with_context(|| format!("write {}", path.display()))?;
    eprintln!("results written to {}", path.display());
    if let Some(bm) = &args.benchmarks_md {
        let mut b = String::from(
            "# Benchmarks\n\nThe latest run of `novafs-bench` (crates/novafs-bench), written by the \
             harness itself. Reproduce, as root, from the repository root:\n\n\
             ```\ncargo build --release -p novafs-cli -p novafs-bench\n",
        );
        b.push_str(&format!("{command}\n```\n\n"));
        // Links relative to the repository root instead of to `out`.
        let dir = args.out.display().to_string();
        b.push_str(&md.replacen("# ", "## ", 1).replace("](", &format!("]({dir}/")));
        let old = std::fs::read_to_string(bm).unwrap_or_default();
        std::fs::write(bm, with_kept(b, &old)).with_context(|| format!("write {}", bm.display()))?;
        eprintln!("{} updated", bm.display());
    }
    Ok(())
}

/// The recovery file sets at `scale` (1 = 8 × 16 MiB, 1,000 × 256 KiB,
/// 20,000 × 4 KiB): counts scale, sizes do not.
fn recovery_sets(scale: f64) -> [SetShape; 3] {
    let n = |full: f64| ((full * scale).round() as u64).max(1);
    [
        SetShape {
            files: n(8.0),
            file_size: 16 << 20,
            io: 1 << 20,
        },
        SetShape {
            files: n(1_000.0),
            file_size: 256 << 10,
            io: 64 << 10,
        },
        SetShape {
            files: n(20_000.0),
            file_size: 4 << 10,
            io: 4 << 10,
        },
    ]
}

/// (f) on fresh novafs-lib targets of its own, one per utilisation.
fn full_fs(scratch: &std::path::Path, plan: &fullfs::Plan, stop: &AtomicBool) -> Result<fullfs::FullRun> {
    let make = |mib: u64| target::LibraryTarget::new(target::WorkDir::new(scratch.join(format!("full-{mib}")))?, mib);
    fullfs::run(plan, make, stop)
}

fn full_panels(r: &fullfs::FullRun) -> Vec<plot::LinePanel> {
    let lines = |f: fn(&fullfs::Sample) -> f64, what: &str| {
        r.levels
            .iter()
            .map(|l| {
                let pts = l.series.samples.iter().map(|x| (x.t, f(x))).collect::<Vec<_>>();
                (format!("{what} at {:.0}% full", l.level_pct), pts)
            })
            .collect::<Vec<_>>()
    };
    let mut gc = lines(|x| x.gc.fast_pages as f64, "fast GC");
    gc.extend(lines(|x| x.gc.thorough_pages as f64, "thorough GC"));
    vec![
        plot::LinePanel {
            title: "the mix on a full file system: throughput".to_string(),
            x_desc: "seconds",
            y_desc: "ops/s",
            lines: lines(|x| x.ops_per_s, "operations/s"),
        },
        plot::LinePanel {
            title: "pages reclaimed by log GC (cumulative)".to_string(),
            x_desc: "seconds",
            y_desc: "pages",
            lines: gc,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rewrite_keeps_what_other_commands_measured() {
        let old = "# Benchmarks\nold run\n\n## Measured by other commands\n\nmmap table\n";
        assert_eq!(
            with_kept("# Benchmarks\nnew run\n".into(), old),
            "# Benchmarks\nnew run\n\n## Measured by other commands\n\nmmap table\n"
        );
        assert_eq!(with_kept("new\n".into(), "no such part"), "new\n");
    }
}
