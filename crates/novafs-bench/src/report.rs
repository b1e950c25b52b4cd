//! The samples of a run and their markdown report.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::stats::{speedup, summarize, Summary};
use crate::target::BASELINE;
use crate::workload::{Params, Personality, RecoverySet, Workload};

/// Every measured value: per target and workload, one row per round with a
/// value per metric (`None` where the metric does not apply to the target,
/// as a crash to a kernel file system).
#[derive(Default)]
pub struct Samples {
    runs: HashMap<(String, String), Vec<Vec<Option<f64>>>>,
}

impl Samples {
    pub fn push(&mut self, target: &str, w: Workload, values: Vec<Option<f64>>) {
        self.runs
            .entry((target.to_string(), w.label()))
            .or_default()
            .push(values);
    }

    /// Metric `m` of workload `w` on `target`, over the rounds.
    fn column(&self, target: &str, w: Workload, m: usize) -> Vec<f64> {
        self.runs
            .get(&(target.to_string(), w.label()))
            .map(|rs| rs.iter().filter_map(|r| r.get(m).copied().flatten()).collect())
            .unwrap_or_default()
    }
}

pub struct Context<'a> {
    /// When the run started, as in the results file's name.
    pub stamp: &'a str,
    pub params: &'a Params,
    pub rounds: usize,
    pub size_mib: u64,
    pub workloads: &'a [Workload],
    pub targets: &'a [&'a str],
    pub skipped: &'a [String],
    pub failed: &'a [String],
    /// Workloads left out, with the reason (e.g. fio not installed).
    pub notes: &'a [String],
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

pub fn fmt_num(v: f64) -> String {
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
    let _ = writeln!(s, "# novafs-bench results ({})\n", c.stamp);
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
        "Workloads: NOVA §5.2 micro = {} files, create, {} × (4 KiB append + fsync) each, read back \
         4 KiB at a time, unlink; \
         append + fsync = {} appends to one file; random = {} × 4 KiB writes (no fsync) then reads per thread \
         in a {} MiB file; sequential = {} MiB per thread in 1 MiB writes + one fsync, then read back \
         (kernel file systems read from the page cache).\n",
        p.files, p.appends, p.append_ops, p.random_ops, p.file_mib, p.file_mib
    );
    let has = |f: fn(&Workload) -> bool| c.workloads.iter().any(f);
    if has(|w| matches!(w, Workload::Personality(_))) {
        let pp = &p.personality;
        let _ = writeln!(
            s,
            "Filebench personalities (c), implemented in the harness after filebench's workloads/*.f with \
             NOVA Table 2's sizes, scaled down: a file set of {} entries in one directory (80% pre-created, \
             100% for webserver), {} threads, {:.1} s per run; throughput counts every flowop (opens and \
             closes too, as filebench does), in thousands per second:\n",
            pp.files, pp.threads, pp.secs
        );
        for k in Personality::ALL {
            let sh = k.shape();
            let _ = writeln!(
                s,
                "- {}: files of {} KiB, reads of {} KiB, writes of {} KiB; per loop: {}",
                k.name(),
                sh.file_size / 1024,
                sh.read_io / 1024,
                sh.write_io / 1024,
                k.flowops()
            );
        }
        let _ = writeln!(s);
    }
    if has(|w| matches!(w, Workload::Recovery(_))) {
        let desc: Vec<String> = RecoverySet::ALL
            .iter()
            .map(|&r| {
                let sh = p.recovery_set(r);
                format!(
                    "{} = {} × {} KiB written in {} KiB writes",
                    Workload::Recovery(r).label(),
                    sh.files,
                    sh.file_size / 1024,
                    sh.io / 1024
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "Recovery (e), NOVA Tables 4 and 5 scaled down: {}. Each run creates the set, then times a mount \
             after a clean unmount, and for novafs one after a crash: novafs-lib drops the `Fs` without \
             unmounting, novafs-fuse SIGKILLs its daemon. The kernel file systems have no crash case here \
             (a kernel file system cannot be crashed from user space without taking the machine down); \
             their time is `mount(8)` after `umount` of the same set, and novafs-fuse's is `novafs mount`, \
             both whole commands including process start. tmpfs keeps nothing across an unmount and is \
             left out.\n",
            desc.join("; ")
        );
    }
    if has(|w| matches!(w, Workload::Fio)) {
        let _ = writeln!(
            s,
            "fio: `--ioengine=psync --bs=4k`, one job, a {} MiB file, {} ms per job: randwrite with \
             `--fsync=1`, then randread of the same file; IOPS from `--output-format=json`. Not on \
             novafs-lib, which has no path.\n",
            p.fio_file_mib, p.fio_ms
        );
    }
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
    if !c.skipped.is_empty() || !c.failed.is_empty() || !c.notes.is_empty() {
        let _ = writeln!(s);
        for n in c.notes {
            let _ = writeln!(s, "- {n}");
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{PersonalityParams, SetShape};

    #[test]
    fn a_metric_a_target_lacks_has_no_row_and_no_ratio() {
        let shape = SetShape {
            files: 1,
            file_size: 4096,
            io: 4096,
        };
        let params = Params {
            files: 1,
            appends: 1,
            append_ops: 1,
            file_mib: 1,
            random_ops: 1,
            personality: PersonalityParams {
                files: 2,
                threads: 1,
                secs: 0.1,
            },
            recovery: [shape; 3],
            fio_ms: 10,
            fio_file_mib: 1,
        };
        let w = Workload::Recovery(RecoverySet::Small);
        let mut samples = Samples::default();
        for (clean, crash) in [(0.1, 5.0), (0.3, 7.0), (0.2, 6.0)] {
            samples.push("novafs-lib", w, vec![Some(clean), Some(crash)]);
            samples.push(BASELINE, w, vec![Some(4.0), None]);
        }
        let ctx = Context {
            stamp: "20260101T000000Z",
            params: &params,
            rounds: 3,
            size_mib: 64,
            workloads: &[w],
            targets: &["novafs-lib", BASELINE],
            skipped: &[],
            failed: &[],
            notes: &[],
            samples: &samples,
            command: "novafs-bench".to_string(),
            interrupted: false,
        };
        let md = markdown(&ctx);
        assert!(md.contains("# novafs-bench results (20260101T000000Z)"));
        // Clean mounts: medians 0.2 against 4.0, 20 times better.
        assert!(
            md.contains("| recovery: many small files | mount after clean unmount (ms) | novafs-lib | 0.20 | 0.10–0.30 | 20.00× |"),
            "{md}"
        );
        // Crash: novafs only, no baseline to compare with.
        assert!(
            md.contains("| mount after crash (ms) | novafs-lib | 6.00 | 5.00–7.00 | – |"),
            "{md}"
        );
        assert!(!md.contains(&format!("mount after crash (ms) | {BASELINE}")), "{md}");
    }
}
