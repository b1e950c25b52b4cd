//! `novafs bench --recovery-scale`: recovery at the largest size this
//! machine holds (NOVA §4.7, §5.5). For the empty image and each of NOVA
//! Table 4's file sets (videoserver, fileserver, mailserver), scaled so the
//! data fills about three quarters of the image, and for each shard count
//! (one scan thread per shard): mkfs, create the set, then time mounts
//! after a clean unmount and after a crash, alternating. The crash mounts'
//! scan threads report what each read and how long it took
//! (`MountReport::shards`), so the scan's speed per thread is measured, not
//! the total divided by the threads.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use novafs::{FormatOptions, MountReport, ShardReport};
use novafs_bench::backend::{write_whole, Backend, Remount};
use novafs_bench::stats::{summarize, Summary};
use novafs_bench::target::LibraryTarget;
use novafs_bench::workload::SetShape;
use pm::Region;

use crate::bench_snapshots::region;
use crate::info::approx;
use crate::space::{allocated, available};

/// What the recovery benchmark runs.
pub struct Plan<'a> {
    pub image: &'a Path,
    /// The image's size, bytes.
    pub size: u64,
    pub eadr: bool,
    /// Mounts after a clean unmount, and as many after a crash, per set.
    pub rounds: usize,
    /// The shard counts to format with, each set once per count.
    pub shards: &'a [u32],
}

/// The share of the image the file data fills.
const FILL: f64 = 0.75;

/// Room the run leaves free beside its image: other jobs share /dev/shm.
const MARGIN: u64 = 1 << 30;

/// The targets: the crash scan reads at least this much file data
/// per thread, MB/s; a clean mount takes less than this, ms.
const SCAN_TARGET_MBS: f64 = 400.0;
const CLEAN_TARGET_MS: f64 = 1.0;

/// One file set: a name and its shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Set {
    name: &'static str,
    shape: SetShape,
}

/// The empty image, then NOVA Table 4's sets (file size, I/O size) with
/// as many files as fill [`FILL`] of an image of `size` bytes (the paper:
/// 400, 50,000 and 400,000 files, 50 GB each).
fn sets(size: u64) -> [Set; 4] {
    let set = |name, file_size: u64, io: usize| Set {
        name,
        shape: SetShape {
            files: (size as f64 * FILL / file_size as f64) as u64,
            file_size,
            io,
        },
    };
    [
        Set {
            name: "empty",
            shape: SetShape {
                files: 0,
                file_size: 0,
                io: 0,
            },
        },
        set("videoserver", 128 << 20, 1 << 20),
        set("fileserver", 1 << 20, 64 << 10),
        set("mailserver", 128 << 10, 16 << 10),
    ]
}

/// Refuses, in one line, an image that its file system has not room for
/// beside [`MARGIN`].
fn check_room(image: &Path, size: u64) -> Result<()> {
    let free = available(image)? + allocated(image);
    if size.saturating_add(MARGIN) > free {
        bail!(
            "cannot make a {} image at {}: its file system has {} free and the run leaves {} of it to others; \
             use --scale-size {}M or less",
            approx(size),
            image.display(),
            approx(free),
            approx(MARGIN),
            free.saturating_sub(MARGIN) >> 20
        );
    }
    Ok(())
}

/// What the mounts of one set on one shard count measured.
#[derive(Debug, Default)]
struct Measured {
    /// Wall times, ms, of the mounts after a clean unmount and after a crash.
    clean: Vec<f64>,
    crash: Vec<f64>,
    /// The crash mounts' reports.
    reports: Vec<MountReport>,
    /// Pages in use, in percent of the file system's, once the set is made.
    full: f64,
}

/// File data per second of thread time over `shards`, MB/s (10^6 bytes).
fn per_thread_mbs(shards: &[ShardReport]) -> f64 {
    let bytes: u64 = shards.iter().map(|s| s.file_bytes).sum();
    let secs: f64 = shards.iter().map(|s| s.elapsed.as_secs_f64()).sum();
    if secs > 0.0 {
        bytes as f64 / secs / 1e6
    } else {
        0.0
    }
}

/// One table row's numbers.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    set: &'static str,
    shards: u32,
    files: u64,
    full: f64,
    /// File data and live inodes the crash scan read (the last round's).
    data: u64,
    inodes: u64,
    clean: Summary,
    crash: Summary,
    /// The slowest scan thread of each crash mount, ms.
    slowest: Summary,
    /// Crash scan: file data over the mount's wall time, and per second
    /// of scan-thread time, MB/s (medians over the rounds).
    total_mbs: f64,
    thread_mbs: f64,
}

fn median(v: &[f64]) -> Result<Summary> {
    summarize(v).context("no rounds ran")
}

impl Row {
    fn of(set: &Set, shards: u32, m: &Measured) -> Result<Row> {
        let last = m.reports.last().context("no crash mount ran")?;
        let data: u64 = last.shards.iter().map(|s| s.file_bytes).sum();
        let slowest: Vec<f64> = m
            .reports
            .iter()
            .map(|r| {
                r.shards
                    .iter()
                    .map(|s| s.elapsed.as_secs_f64() * 1e3)
                    .fold(0.0, f64::max)
            })
            .collect();
        let total: Vec<f64> = m.crash.iter().map(|ms| data as f64 / (ms / 1e3) / 1e6).collect();
        let thread: Vec<f64> = m.reports.iter().map(|r| per_thread_mbs(&r.shards)).collect();
        Ok(Row {
            set: set.name,
            shards,
            files: set.shape.files,
            full: m.full,
            data,
            inodes: last.scanned_inodes,
            clean: median(&m.clean)?,
            crash: median(&m.crash)?,
            slowest: median(&slowest)?,
            total_mbs: median(&total)?.median,
            thread_mbs: median(&thread)?.median,
        })
    }

    const HEAD: &'static str = "| set | shards | files | used | file data | inodes scanned | clean mount ms | \
                                crash mount ms | slowest scan thread ms | crash MB/s | MB/s per thread |";
    const RULE: &'static str = "|---|---|---|---|---|---|---|---|---|---|---|";

    fn line(&self) -> String {
        let range =
            |s: &Summary, digits: usize| format!("{:.digits$} ({:.digits$}–{:.digits$})", s.median, s.min, s.max);
        // An empty set has no file data: no speed to speak of.
        let mbs = |v: f64| {
            if self.data == 0 {
                "—".to_string()
            } else {
                format!("{v:.0}")
            }
        };
        format!(
            "| {} | {} | {} | {:.0}% | {} | {} | {} | {} | {} | {} | {} |",
            self.set,
            self.shards,
            self.files,
            self.full,
            approx(self.data),
            self.inodes,
            range(&self.clean, 3),
            range(&self.crash, 1),
            range(&self.slowest, 1),
            mbs(self.total_mbs),
            mbs(self.thread_mbs)
        )
    }
}

/// Whether each target is met, in words: the crash scan's slowest
/// per-thread speed over the sets with data, and the slowest clean mount's
/// median at any size.
fn verdict(rows: &[Row]) -> String {
    let met = |ok: bool| if ok { "met" } else { "missed" };
    let scan = rows
        .iter()
        .filter(|r| r.data > 0)
        .map(|r| r.thread_mbs)
        .fold(f64::INFINITY, f64::min);
    let clean = rows.iter().map(|r| r.clean.median).fold(0.0, f64::max);
    let scan = if scan.is_finite() {
        format!("{} (lowest {scan:.0} MB/s)", met(scan >= SCAN_TARGET_MBS))
    } else {
        "not measured (no set has data)".to_string()
    };
    format!(
        "targets: crash scan ≥ {SCAN_TARGET_MBS:.0} MB/s of file data per thread: {scan}; clean mount < \
         {CLEAN_TARGET_MS} ms at any size: {} (highest median {clean:.3} ms)",
        met(clean < CLEAN_TARGET_MS)
    )
}

pub fn run(plan: &Plan) -> Result<()> {
    check_room(plan.image, plan.size)?;
    let mut rows = Vec::new();
    for set in sets(plan.size) {
        for &shards in plan.shards {
            let m = measure(plan, &set, shards);
            let _ = std::fs::remove_file(plan.image);
            rows.push(Row::of(&set, shards, &m?)?);
        }
    }
    println!(
        "recovery at scale (NOVA §4.7, Tables 4 and 5): a {} image, sets filling {:.0}% of it, \
         {} mounts after a clean unmount and {} after a crash each, alternating; {} CPUs",
        approx(plan.size),
        FILL * 100.0,
        plan.rounds,
        plan.rounds,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!("MB/s per thread: file data over the scan threads' summed wall time; medians (min–max)\n");
    println!("{}", Row::HEAD);
    println!("{}", Row::RULE);
    for r in &rows {
        println!("{}", r.line());
    }
    println!("\n{}", verdict(&rows));
    Ok(())
}

/// mkfs with `shards` shards, create `set`, then time the mounts.
fn measure(plan: &Plan, set: &Set, shards: u32) -> Result<Measured> {
    let region: Arc<dyn Region> = Arc::new(region(plan.image, plan.size, plan.eadr)?);
    let mut lib = LibraryTarget::on_region_with(region, FormatOptions::default().shards(Some(shards)))?;
    create(&lib, set, shards)?;
    let st = lib.statfs()?;
    let mut m = Measured {
        full: 100.0 * (st.blocks - st.blocks_free) as f64 / st.blocks as f64,
        ..Measured::default()
    };
    for _ in 0..plan.rounds {
        m.clean.push(lib.remount_clean()?);
        m.crash.push(lib.remount_crash()?.context("the library crashes")?);
        m.reports.push(lib.fs()?.mount_report().clone());
    }
    Ok(m)
}

/// Creates `set` in a directory of its own, in writes of its I/O size,
/// with a progress bar over its bytes.
fn create(lib: &LibraryTarget, set: &Set, shards: u32) -> Result<()> {
    let SetShape { files, file_size, io } = set.shape;
    let dir = lib.mkdir("set")?;
    let bar = ProgressBar::new(files * file_size);
    bar.set_style(
        ProgressStyle::with_template("{msg} {bar:30} {bytes}/{total_bytes} {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(format!("{}, {shards} shard(s)", set.name));
    let buf = vec![0x6Du8; io.max(1)];
    for i in 0..files {
        let f = lib.create(&dir, &format!("m{i}"))?;
        write_whole(lib, &f, file_size, &buf)?;
        bar.inc(file_size);
    }
    bar.finish_and_clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn sets_fill_three_quarters_of_the_image() {
        let s = sets(16 << 30);
        assert_eq!(s.map(|s| s.name), ["empty", "videoserver", "fileserver", "mailserver"]);
        assert_eq!(s.map(|s| s.shape.files), [0, 96, 12_288, 98_304]);
        assert_eq!(s.map(|s| s.shape.io), [0, 1 << 20, 64 << 10, 16 << 10]);
        for set in &s[1..] {
            assert_eq!(set.shape.files * set.shape.file_size, 12 << 30);
        }
        // A size that is no multiple: whole files, under the share.
        let s = sets(1000 << 20);
        assert_eq!(s.map(|s| s.shape.files), [0, 5, 750, 6_000]);
    }

    #[test]
    fn per_thread_speed_is_data_over_summed_thread_time() {
        let shard = |mb: u64, ms: u64| ShardReport {
            inodes: 1,
            file_bytes: mb * 1_000_000,
            elapsed: Duration::from_millis(ms),
        };
        // 300 MB in 0.5 s of thread time (two threads): 600 MB/s a thread.
        assert_eq!(per_thread_mbs(&[shard(100, 200), shard(200, 300)]), 600.0);
        assert_eq!(per_thread_mbs(&[]), 0.0);
    }

    fn row(set: &'static str, data: u64, clean: f64, thread_mbs: f64) -> Row {
        let s = |x: f64| Summary {
            median: x,
            min: x * 0.5,
            max: x * 2.0,
        };
        Row {
            set,
            shards: 2,
            files: 96,
            full: 77.4,
            data,
            inodes: 98,
            clean: s(clean),
            crash: s(40.0),
            slowest: s(30.0),
            total_mbs: 1234.4,
            thread_mbs,
        }
    }

    #[test]
    fn a_row_has_every_column_and_an_empty_set_no_speed() {
        let line = row("videoserver", 12 << 30, 0.25, 567.8).line();
        assert_eq!(
            line,
            "| videoserver | 2 | 96 | 77% | 12.0 GiB | 98 | 0.250 (0.125–0.500) | 40.0 (20.0–80.0) | \
             30.0 (15.0–60.0) | 1234 | 568 |"
        );
        assert_eq!(line.matches(" | ").count() + 1, Row::HEAD.matches(" | ").count() + 1);
        assert_eq!(Row::RULE.matches("---").count(), line.matches(" | ").count() + 1);
        assert!(row("empty", 0, 0.25, 0.0).line().ends_with("| — | — |"));
    }

    #[test]
    fn the_verdict_takes_the_worst_set_against_each_target() {
        let rows = [
            row("empty", 0, 0.9, 0.0),
            row("a", 1, 0.2, 900.0),
            row("b", 1, 0.3, 450.0),
        ];
        assert_eq!(
            verdict(&rows),
            "targets: crash scan ≥ 400 MB/s of file data per thread: met (lowest 450 MB/s); clean mount < 1 ms \
             at any size: met (highest median 0.900 ms)"
        );
        let rows = [row("a", 1, 1.5, 399.0)];
        assert!(verdict(&rows).contains("missed (lowest 399 MB/s)"));
        assert!(verdict(&rows).contains("missed (highest median 1.500 ms)"));
        assert!(verdict(&[row("empty", 0, 0.1, 0.0)]).contains("not measured"));
    }
}
