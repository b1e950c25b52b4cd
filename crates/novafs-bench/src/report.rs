//! The samples of a run and their markdown report.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::requests::{Breakdown, Row};
use crate::stats::{speedup, summarize, Summary};
use crate::target::BASELINE;
use crate::workload::{Params, Personality, RecoverySet, Workload};

/// Every measured value: per target and workload, one row per round with a
/// value per metric (`None` where the metric does not apply to the target,
/// as a crash to a kernel file system).
#[derive(Default)]
pub struct Samples {
    runs: HashMap<(String, String), Vec<Vec<Option<f64>>>>,
    /// Per target and workload, the requests its daemon served, summed
    /// over the rounds.
    requests: HashMap<(String, String), Breakdown>,
}

impl Samples {
    pub fn push(&mut self, target: &str, w: Workload, values: Vec<Option<f64>>) {
        self.runs
            .entry((target.to_string(), w.label()))
            .or_default()
            .push(values);
    }

    /// Add one round's request breakdown of `w` on `target`.
    pub fn push_requests(&mut self, target: &str, w: Workload, b: &Breakdown) {
        self.requests.entry((target.to_string(), w.label())).or_default().add(b);
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
    requests_section(c, &mut s);
    s
}

/// The requests each FUSE daemon served per personality; nothing when no
/// target reported any.
fn requests_section(c: &Context, s: &mut String) {
    let mut tables = String::new();
    for &t in c.targets {
        let mut rows = String::new();
        for &w in c.workloads {
            let (Workload::Personality(k), Some(b)) = (w, c.samples.requests.get(&(t.to_string(), w.label()))) else {
                continue;
            };
            // Per transport: their waits differ in kind (a /dev/fuse
            // worker idles between the kernel's asynchronous forgets).
            let all = format!("all ({} flowops)", b.flowops);
            for transport in b.requests.transports() {
                for (opcode, r) in b.requests.rows(transport) {
                    request_row(&mut rows, k.name(), transport, opcode, r, b.flowops);
                }
                let total = b.requests.total(transport);
                request_row(&mut rows, k.name(), transport, &all, total, b.flowops);
            }
        }
        if !rows.is_empty() {
            let _ = writeln!(tables, "{t}:\n");
            let _ = writeln!(
                tables,
                "| personality | transport | opcode | requests per 100 flowops | wait (µs) | handle (µs) | reply (µs) |"
            );
            let _ = writeln!(tables, "|---|---|---|---:|---:|---:|---:|");
            let _ = writeln!(tables, "{rows}");
        }
    }
    if tables.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n## Requests through the mount per personality\n\n\
         The FUSE requests the daemon served during the timed loops of each personality run \
         (`novafs stats` before and after; mounted with `-o stats`), summed over the rounds, with \
         the mean time per request in three spans: wait is the time a worker waited for the request \
         (the kernel's forward trip plus idle time; over io_uring it also holds sending the previous \
         reply), handle the time inside novafs, reply the time sending the reply. The kernel sends \
         forgets on /dev/fuse even when the rest goes over io_uring; a worker there idles between \
         them, hence their long waits.\n"
    );
    s.push_str(&tables);
}

/// One line of the request table; times `–` where the daemon took none.
fn request_row(s: &mut String, personality: &str, transport: &str, opcode: &str, r: Row, flowops: u64) {
    let per_100 = r.count as f64 * 100.0 / flowops.max(1) as f64;
    let [wait, handle, reply] = r.mean().map_or_else(
        || ["–".to_string(), "–".to_string(), "–".to_string()],
        |m| [fmt_num(m.wait_us), fmt_num(m.handle_us), fmt_num(m.reply_us)],
    );
    let _ = writeln!(
        s,
        "| {personality} | {transport} | {opcode} | {} | {wait} | {handle} | {reply} |",
        fmt_num(per_100)
    );
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
    use crate::requests::Requests;
    use crate::workload::{PersonalityParams, SetShape};

    fn params() -> Params {
        let shape = SetShape {
            files: 1,
            file_size: 4096,
            io: 4096,
        };
        Params {
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
        }
    }

    fn context<'a>(
        params: &'a Params,
        workloads: &'a [Workload],
        targets: &'a [&'a str],
        samples: &'a Samples,
    ) -> Context<'a> {
        Context {
            stamp: "20260101T000000Z",
            params,
            rounds: 3,
            size_mib: 64,
            workloads,
            targets,
            skipped: &[],
            failed: &[],
            notes: &[],
            samples,
            command: "novafs-bench".to_string(),
            interrupted: false,
        }
    }

    #[test]
    fn a_metric_a_target_lacks_has_no_row_and_no_ratio() {
        let params = params();
        let w = Workload::Recovery(RecoverySet::Small);
        let mut samples = Samples::default();
        for (clean, crash) in [(0.1, 5.0), (0.3, 7.0), (0.2, 6.0)] {
            samples.push("novafs-lib", w, vec![Some(clean), Some(crash)]);
            samples.push(BASELINE, w, vec![Some(4.0), None]);
        }
        let md = markdown(&context(&params, &[w], &["novafs-lib", BASELINE], &samples));
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
        // No daemon reported requests: no section for them.
        assert!(!md.contains("Requests through the mount"), "{md}");
    }

    /// A breakdown of `flowops` with `novafs stats` tables of (title, rows).
    fn breakdown(flowops: u64, tables: &[(&str, &str)]) -> Breakdown {
        let table = tables
            .iter()
            .map(|(title, rows)| format!("{title}\nopcode count wait_us handle_us reply_us\n{rows}"))
            .collect::<Vec<_>>()
            .join("\n");
        Breakdown {
            flowops,
            requests: Requests::parse(&table).expect("a sample table"),
        }
    }

    #[test]
    fn the_requests_of_each_personality_are_summed_over_the_rounds_per_100_flowops() {
        let params = params();
        let (varmail, webserver) = (
            Workload::Personality(Personality::Varmail),
            Workload::Personality(Personality::Webserver),
        );
        let mut samples = Samples::default();
        for w in [varmail, webserver] {
            samples.push("novafs-fuse", w, vec![Some(1.0)]);
            samples.push(BASELINE, w, vec![Some(2.0)]);
        }
        // Two varmail rounds of 100 flowops each; the mount timed them.
        // The second also went over io_uring.
        let uring = "FUSE over io_uring (a reply is committed by the call that waits for the next request)";
        samples.push_requests(
            "novafs-fuse",
            varmail,
            &breakdown(
                100,
                &[("/dev/fuse", "LOOKUP 50 10.00 2.00 1.00\nWRITE 20 20.00 4.00 0.00\n")],
            ),
        );
        samples.push_requests(
            "novafs-fuse",
            varmail,
            &breakdown(
                100,
                &[
                    ("/dev/fuse", "LOOKUP 30 30.00 6.00 3.00\n"),
                    (uring, "GETATTR 120 1.00 0.50 0.00\n"),
                ],
            ),
        );
        // One webserver round on a mount that did not time requests.
        samples.push_requests(
            "novafs-fuse",
            webserver,
            &breakdown(40, &[("/dev/fuse", "READ 10 - - -\n")]),
        );
        let md = markdown(&context(
            &params,
            &[varmail, webserver],
            &["novafs-fuse", BASELINE],
            &samples,
        ));
        let section = md
            .split_once("## Requests through the mount per personality")
            .map(|(_, after)| after)
            .unwrap_or_else(|| panic!("no request section in {md}"));
        let lines: Vec<&str> = section.lines().filter(|l| l.starts_with("| ")).collect();
        assert_eq!(
            lines,
            [
                "| personality | transport | opcode | requests per 100 flowops | wait (µs) | handle (µs) | reply (µs) |",
                // The transport with the most requests first.
                "| varmail | FUSE over io_uring | GETATTR | 60.0 | 1.00 | 0.50 | 0.00 |",
                "| varmail | FUSE over io_uring | all (200 flowops) | 60.0 | 1.00 | 0.50 | 0.00 |",
                // 80 lookups in 200 flowops; wait (50 × 10 + 30 × 30) / 80.
                "| varmail | /dev/fuse | LOOKUP | 40.0 | 17.5 | 3.50 | 1.75 |",
                "| varmail | /dev/fuse | WRITE | 10.0 | 20.0 | 4.00 | 0.00 |",
                "| varmail | /dev/fuse | all (200 flowops) | 50.0 | 18.0 | 3.60 | 1.40 |",
                "| webserver | /dev/fuse | READ | 25.0 | – | – | – |",
                "| webserver | /dev/fuse | all (40 flowops) | 25.0 | – | – | – |",
            ],
            "{md}"
        );
        assert!(section.contains("novafs-fuse:"), "{md}");
        assert!(!section.contains(&format!("{BASELINE}:")), "{md}");
    }
}
