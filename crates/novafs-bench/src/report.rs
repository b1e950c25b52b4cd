//! The samples of a run and their markdown report.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::stats::{speedup, summarize, Summary};
use crate::target::BASELINE;
use crate::workload::{Params, Workload};

/// Every measured value: per target and workload, one row per round with a
/// value per metric.
#[derive(Default)]
pub struct Samples {
    runs: HashMap<(String, String), Vec<Vec<f64>>>,
}

impl Samples {
    pub fn push(&mut self, target: &str, w: Workload, values: Vec<f64>) {
        self.runs
            .entry((target.to_string(), w.label()))
            .or_default()
            .push(values);
    }

    /// Metric `m` of workload `w` on `target`, over the rounds.
    fn column(&self, target: &str, w: Workload, m: usize) -> Vec<f64> {
        self.runs
            .get(&(target.to_string(), w.label()))
            .map(|rs| rs.iter().filter_map(|r| r.get(m).copied()).collect())
            .unwrap_or_default()
    }
}

pub struct Context<'a> {
    pub params: &'a Params,
    pub rounds: usize,
    pub size_mib: u64,
    pub workloads: &'a [Workload],
    pub targets: &'a [&'a str],
    pub skipped: &'a [String],
    pub failed: &'a [String],
    pub samples: &'a Samples,
    pub command: String,
    /// Ctrl-C cut the run short: fewer rounds than announced.
    pub interrupted: bool,
}

/// One metric across the targets, for the plot.
pub struct Panel {
    pub title: String,
    pub unit: &'static str,
    pub bars: Vec<(String, Summary)>,
}

pub fn panels(c: &Context) -> Vec<Panel> {
    let mut out = Vec::new();
    for &w in c.workloads {
        for (m, metric) in w.metrics().iter().enumerate() {
            let bars: Vec<(String, Summary)> = c
                .targets
                .iter()
                .filter_map(|&t| summarize(&c.samples.column(t, w, m)).map(|s| (t.to_string(), s)))
                .collect();
            if bars.is_empty() {
                continue;
            }
            let better = if metric.lower_is_better { "lower" } else { "higher" };
            out.push(Panel {
                title: format!("{}: {} ({better} is better)", w.label(), metric.name),
                unit: metric.unit,
                bars,
            });
        }
    }
    out
}

fn fmt_num(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

pub fn markdown(c: &Context) -> String {
    let p = c.params;
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mut s = String::new();
    let _ = writeln!(s, "# novafs-bench results ({})\n", timestamp());
    let _ = writeln!(s, "Command: `{}`\n", c.command);
    if c.interrupted {
        let _ = writeln!(
            s,
            "**Interrupted**: fewer than the {} rounds below ran; some cells have fewer samples.\n",
            c.rounds
        );
    }
    let _ = writeln!(
        s,
        "Kernel {}; {cpus} CPUs; {} interleaved rounds; each file system {} MiB, on /dev/shm \
         (kernel file systems on loop devices backed by files there).\n",
        kernel.trim(),
        c.rounds,
        c.size_mib
    );
    let _ = writeln!(
        s,
        "Workloads: NOVA §5.2 micro = {} files, create, {} × (4 KiB append + fsync) each, unlink; \
         append + fsync = {} appends to one file; random = {} × 4 KiB writes (no fsync) then reads per thread \
         in a {} MiB file; sequential = {} MiB per thread in 1 MiB writes + one fsync, then read back \
         (kernel file systems read from the page cache).\n",
        p.files, p.appends, p.append_ops, p.random_ops, p.file_mib, p.file_mib
    );
    let _ = writeln!(
        s,
        "Median and min–max over the rounds; the last column is how many times better than \
         ext4 data=journal (> 1: better).\n"
    );
    let _ = writeln!(s, "| workload | metric | target | median | min–max | vs {BASELINE} |");
    let _ = writeln!(s, "|---|---|---|---:|---:|---:|");
    for &w in c.workloads {
        for (m, metric) in w.metrics().iter().enumerate() {
            let base = summarize(&c.samples.column(BASELINE, w, m));
            for &t in c.targets {
                let Some(sum) = summarize(&c.samples.column(t, w, m)) else {
                    continue;
                };
                let ratio = base
                    .and_then(|b| speedup(sum.median, b.median, metric.lower_is_better))
                    .map_or_else(|| "–".to_string(), |r| format!("{r:.2}×"));
                let _ = writeln!(
                    s,
                    "| {} | {} ({}) | {t} | {} | {}–{} | {ratio} |",
                    w.label(),
                    metric.name,
                    metric.unit,
                    fmt_num(sum.median),
                    fmt_num(sum.min),
                    fmt_num(sum.max)
                );
            }
        }
    }
    if !c.skipped.is_empty() || !c.failed.is_empty() {
        let _ = writeln!(s);
        for k in c.skipped {
            let _ = writeln!(s, "- skipped {k}");
        }
        for f in c.failed {
            let _ = writeln!(s, "- {f} failed during the run; its partial samples are left out");
        }
    }
    s
}

/// UTC now as `YYYYMMDDTHHMMSSZ`.
pub fn timestamp() -> String {
    let c = novafs::time::civil(novafs::time::now_ns().div_euclid(1_000_000_000));
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    )
}
