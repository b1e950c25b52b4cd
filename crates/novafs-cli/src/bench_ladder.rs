//! `novafs bench --ladder`: NOVA-Fortis §5.3's cumulative protection
//! ladder on the library. Five configurations, each the one before plus
//! one feature (the paper's names, §5.2): the baseline (NOVA: no metadata
//! replicas, no data checksums or parity, no write protection, strict),
//! `MP` (metadata replicas), `MP+DP` (data checksums and parity),
//! `MP+DP+WP` (write windows: protection keys where `pkey_alloc` works,
//! else mprotect) and `relaxed` (the same format mounted relaxed, §4.6).
//! Unlike the paper's relaxed mode, which drops data protection, ours
//! keeps it: the rung adds only the mode.
//!
//! `--ladder` is Fig. 8: the §5.2 microbenchmark's per-operation medians
//! on every rung, each as a multiple of the baseline's, and whether full
//! protection (`MP+DP+WP`) stays within [`LIMIT`] (issue 28's target).
//! `--ladder --fio` is Fig. 9: 4 KiB random writes, then reads, on 1, 2
//! and 4 threads, one file each ([`workload::random`], fio's randwrite
//! and randread with one psync job per thread, run in-process). Not
//! `fio::run`: that drives the real fio, one job, through a FUSE mount,
//! and would time the FUSE round trip and the daemon's threads competing
//! for the CPUs rather than the protection; the paper's FIO has no such
//! layer. A flag of its own because the two figures are read apart and
//! take different sizes and times.
//!
//! Rounds are interleaved over all five rungs, the order rotated every
//! round ([`order`]) so each rung runs in each position equally often.

use anyhow::Result;
use indicatif::ProgressBar;
use novafs::{Consistency, FormatOptions, ROOT_INO};
use novafs_bench::stats::Summary;
use novafs_bench::workload::{micro, random, Micro};
use pm::{MapOptions, MmapRegion, WriteProtect};

use crate::bench::{summary, with_sides, Args, Config, Side, ROWS};
use crate::bench_nvmm::Slowed;

/// The most full protection may cost on any operation of Fig. 8, as a
/// multiple of the baseline (issue 28; the paper: +59% on average).
const LIMIT: f64 = 1.4;

/// The rung the target bounds: every protection on, strict.
pub(crate) const FULL: usize = 3;

/// Fig. 9's thread counts (the paper goes to 16; this machine has 2 CPUs).
const THREADS: [usize; 3] = [1, 2, 4];

/// What a rung adds to the one below it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Feature {
    /// Fortis §4.2: a replica of every inode and log page.
    MetaReplicas,
    /// Fortis §4.3: strip checksums and a parity strip per page.
    DataProtection,
    /// Fortis §4.5: the region writable only inside write windows.
    WriteProtection,
    /// Fortis §4.6: overwrites in place.
    Relaxed,
}

/// The rungs above the baseline, in order: name and what each adds.
const RUNGS: [(&str, Feature); 4] = [
    ("MP", Feature::MetaReplicas),
    ("MP+DP", Feature::DataProtection),
    ("MP+DP+WP", Feature::WriteProtection),
    ("relaxed", Feature::Relaxed),
];

/// `prev` plus `feature`, named `name`; write protection is `wp`.
fn with(prev: &Config, name: &'static str, feature: Feature, wp: WriteProtect) -> Config {
    let mut c = Config {
        name,
        protect: prev.protect,
        format: prev.format.clone(),
        mount: prev.mount,
    };
    match feature {
        Feature::MetaReplicas => c.format.meta_replicas = true,
        Feature::DataProtection => {
            c.format.data_csum = true;
            c.format.data_parity = true;
        }
        Feature::WriteProtection => c.protect = wp,
        Feature::Relaxed => c.format.consistency = Consistency::Relaxed,
    }
    c
}

/// The five configurations, the baseline first.
pub(crate) fn ladder(wp: WriteProtect) -> Vec<Config> {
    let unprotected = FormatOptions::default()
        .meta_replicas(false)
        .data_csum(false)
        .data_parity(false);
    let mut configs = vec![Config::formatted("baseline", unprotected)];
    for (name, feature) in RUNGS {
        let next = configs.last().map(|prev| with(prev, name, feature, wp));
        configs.extend(next);
    }
    configs
}

/// The write protection the ladder uses, and a line saying which and
/// why: protection keys where a mapping can take one (probed on a small
/// scratch image), else mprotect windows.
pub(crate) fn write_protection(args: &Args) -> (WriteProtect, String) {
    let probe = args.image.with_extension("pkey-probe.img");
    let opts = MapOptions {
        protect: WriteProtect::Pkey,
        ..MapOptions::default()
    };
    let mapped = MmapRegion::create(&probe, 2 << 20, &opts);
    let _ = std::fs::remove_file(&probe);
    match mapped {
        Ok(_) => (
            WriteProtect::Pkey,
            "write protection: memory protection keys".to_string(),
        ),
        Err(e) => (
            WriteProtect::Mprotect,
            format!("write protection: mprotect windows; no memory protection keys on this CPU or kernel ({e})"),
        ),
    }
}

/// The order the rungs run in round `round`: rotated by one each round.
pub(crate) fn order(round: usize, n: usize) -> impl Iterator<Item = usize> {
    (0..n).map(move |k| (round + k) % n)
}

/// A table cell: the median with `prec` decimals, the range, and the
/// median as a multiple of `base`'s (omitted for the baseline itself).
fn cell(s: &Summary, base: Option<&Summary>, prec: usize) -> String {
    let ratio = base.map_or(String::new(), |b| format!(" ×{:.2}", s.median / b.median));
    format!("{:.prec$} ({:.prec$}–{:.prec$}){ratio}", s.median, s.min, s.max)
}

/// A table's head and rule: `first`, a column per rung, then `last` if any.
pub(crate) fn head(first: &str, names: &[&str], last: Option<&str>) -> String {
    let cols = names.len() + 1 + usize::from(last.is_some());
    let mut h = format!("| {first} |");
    for n in names.iter().copied().chain(last) {
        h += &format!(" {n} |");
    }
    format!("{h}\n|{}", "---|".repeat(cols))
}

/// Fig. 8's row for one operation: every rung's cell, then full
/// protection against the baseline and whether it is within [`LIMIT`].
fn latency_row(op: &str, s: &[Summary]) -> String {
    let mut row = format!("| {op} |");
    for (i, x) in s.iter().enumerate() {
        row += &format!(" {} |", cell(x, (i > 0).then(|| &s[0]), 3));
    }
    let ratio = s[FULL].median / s[0].median;
    let verdict = if ratio <= LIMIT { "met" } else { "**exceeded**" };
    row + &format!(" {ratio:.2}: {verdict} |")
}

/// Fig. 9's row for one thread count: every rung's throughput in MB/s.
fn throughput_row(threads: usize, s: &[Summary]) -> String {
    let mut row = format!("| {threads} |");
    for (i, x) in s.iter().enumerate() {
        row += &format!(" {} |", cell(x, (i > 0).then(|| &s[0]), 0));
    }
    row
}

/// 4 KiB operations per second, in thousands, as MB/s (10^6 bytes).
fn mb_per_s(kiops: f64) -> f64 {
    kiops * 4.096
}

pub fn run(args: &Args, files: u64, rounds: usize) -> Result<()> {
    let (wp, wp_line) = write_protection(args);
    let configs = ladder(wp);
    with_sides(args, &configs, |sides| {
        println!("{}", sides[0].media);
        println!("{wp_line}");
        for side in sides {
            println!(
                "{}: write protection {}, {}, {}",
                side.config.name,
                side.protection,
                crate::info::protection(&side.config.format),
                side.config.format.consistency
            );
        }
        if args.fio {
            fig9(args, rounds, sides)
        } else {
            fig8(args, files, rounds, sides)
        }
    })
}

/// The microbenchmark on every rung, rounds interleaved.
fn fig8(args: &Args, files: u64, rounds: usize, sides: &[Side]) -> Result<()> {
    let n = sides.len();
    let bar = ProgressBar::new(rounds as u64);
    let mut runs: Vec<Vec<Micro>> = vec![Vec::new(); n];
    let mut slowed: Vec<Slowed> = sides.iter().map(|_| Slowed::default()).collect();
    for round in 0..rounds {
        for which in order(round, n) {
            let run = slowed[which].time(|| micro(&sides[which].lib, &ROOT_INO, files, args.appends))?;
            runs[which].push(run);
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    for (side, slowed) in sides.iter().zip(&slowed) {
        slowed.print(side.config.name, rounds);
    }
    println!(
        "\nNOVA-Fortis Fig. 8: {files} files x {} appends of 4 KiB, {rounds} rounds interleaved; \
         µs/op, median (min–max) ×median's multiple of the baseline's",
        args.appends
    );
    let names: Vec<&str> = sides.iter().map(|s| s.config.name).collect();
    let last = format!("{} ÷ baseline ≤ {LIMIT}", names[FULL]);
    println!("\n{}", head("operation", &names, Some(&last)));
    for (op, f, _) in ROWS {
        let s = runs
            .iter()
            .map(|v| summary(&v.iter().map(f).collect::<Vec<_>>()))
            .collect::<Result<Vec<_>>>()?;
        println!("{}", latency_row(op, &s));
    }
    Ok(())
}

/// Random 4 KiB writes and reads on every rung and thread count, rounds
/// interleaved.
fn fig9(args: &Args, rounds: usize, sides: &[Side]) -> Result<()> {
    // Per thread: its file's MiB, and the writes and the reads (ten
    // times as many: a read takes a tenth of a write's time or less).
    let (file_mib, ops) = if args.quick {
        (8, [2_000, 20_000])
    } else {
        (32, [20_000, 200_000])
    };
    let n = sides.len();
    let bar = ProgressBar::new((rounds * THREADS.len()) as u64);
    // Per thread count, per rung, the rounds' [write, read] kIOPS.
    let mut runs: Vec<Vec<Vec<[f64; 2]>>> = vec![vec![Vec::new(); n]; THREADS.len()];
    for round in 0..rounds {
        for (t, &threads) in THREADS.iter().enumerate() {
            for which in order(round, n) {
                runs[t][which].push(random(&sides[which].lib, &ROOT_INO, file_mib, ops, threads)?);
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "\nNOVA-Fortis Fig. 9: per thread a {file_mib} MiB file, {} 4 KiB writes at random pages, then \
         {} reads; {rounds} rounds interleaved; {cpus} CPUs here. MB/s (10^6 bytes), all threads \
         together, median (min–max) ×median's multiple of the baseline's",
        ops[0], ops[1]
    );
    let names: Vec<&str> = sides.iter().map(|s| s.config.name).collect();
    for (dir, what) in ["random write 4 KiB", "random read 4 KiB"].into_iter().enumerate() {
        println!("\n{}", head(&format!("{what}: threads"), &names, None));
        for (t, &threads) in THREADS.iter().enumerate() {
            let s = runs[t]
                .iter()
                .map(|v| summary(&v.iter().map(|r| mb_per_s(r[dir])).collect::<Vec<_>>()))
                .collect::<Result<Vec<_>>>()?;
            println!("{}", throughput_row(threads, &s));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which features `c` has: replicas, data protection, write
    /// protection, relaxed; checksums and parity come together.
    fn features(c: &Config) -> [bool; 4] {
        assert_eq!(
            c.format.data_csum, c.format.data_parity,
            "{}: checksums without parity",
            c.name
        );
        [
            c.format.meta_replicas,
            c.format.data_csum,
            c.protect != WriteProtect::Off,
            c.format.consistency == Consistency::Relaxed,
        ]
    }

    #[test]
    fn each_rung_adds_exactly_one_feature_to_the_one_below() {
        for wp in [WriteProtect::Pkey, WriteProtect::Mprotect] {
            let configs = ladder(wp);
            assert_eq!(configs.len(), 5);
            assert_eq!(features(&configs[0]), [false; 4], "the baseline has nothing");
            for (i, pair) in configs.windows(2).enumerate() {
                let [lo, hi] = [&pair[0], &pair[1]].map(features);
                let added: Vec<usize> = (0..4).filter(|&k| lo[k] != hi[k]).collect();
                assert_eq!(added, vec![i], "{} over {}", pair[1].name, pair[0].name);
                assert!(hi[i], "{} turns its feature on", pair[1].name);
            }
            assert_eq!(configs[FULL].protect, wp);
            assert_eq!(
                features(&configs[FULL]),
                [true, true, true, false],
                "full protection is strict"
            );
            // Nothing else changes: the mount and the replicas' dead zone.
            let d = FormatOptions::default();
            assert!(configs.iter().all(|c| c.format.dead_zone == d.dead_zone));
            assert!(configs
                .iter()
                .all(|c| c.mount.batch.is_none() && !c.mount.bench_block_journal));
        }
    }

    #[test]
    fn the_order_rotates_so_each_rung_runs_in_each_place() {
        let orders: Vec<Vec<usize>> = (0..5).map(|r| order(r, 5).collect()).collect();
        assert_eq!(orders[0], [0, 1, 2, 3, 4]);
        assert_eq!(orders[1], [1, 2, 3, 4, 0]);
        for place in 0..5 {
            let mut at_place: Vec<usize> = orders.iter().map(|o| o[place]).collect();
            at_place.sort_unstable();
            assert_eq!(at_place, [0, 1, 2, 3, 4]);
        }
    }

    fn s(median: f64, min: f64, max: f64) -> Summary {
        Summary { median, min, max }
    }

    #[test]
    fn a_latency_row_gives_each_rung_against_the_baseline_and_the_verdict() {
        let base = s(2.0, 1.5, 3.0);
        let row = |full: f64| {
            latency_row(
                "create",
                &[
                    base,
                    s(2.5, 2.0, 4.0),
                    s(2.6, 2.1, 2.7),
                    s(full, full, full),
                    s(1.0, 1.0, 1.0),
                ],
            )
        };
        assert_eq!(
            row(2.8),
            "| create | 2.000 (1.500–3.000) | 2.500 (2.000–4.000) ×1.25 | 2.600 (2.100–2.700) ×1.30 | \
             2.800 (2.800–2.800) ×1.40 | 1.000 (1.000–1.000) ×0.50 | 1.40: met |"
        );
        assert!(row(2.81).ends_with(" 1.41: **exceeded** |"), "{}", row(2.81));
    }

    #[test]
    fn a_throughput_row_and_the_heads() {
        let r = throughput_row(2, &[s(1000.0, 900.0, 1100.4), s(500.0, 499.6, 600.0)]);
        assert_eq!(r, "| 2 | 1000 (900–1100) | 500 (500–600) ×0.50 |");
        assert_eq!(head("threads", &["a", "b"], None), "| threads | a | b |\n|---|---|---|");
        assert_eq!(head("op", &["a"], Some("c")), "| op | a | c |\n|---|---|---|");
        assert!(
            (mb_per_s(250.0) - 1024.0).abs() < 1e-9,
            "250k 4 KiB IOPS are 1,024 MB/s"
        );
    }
}
