//! (f) A full file system (NOVA §5.4, Table 3) in the shape of issue 28:
//! file systems held at fixed utilisations (50% and 95%) by a steady,
//! overwrite-heavy mix, on novafs through the library, sampled every second
//! for operations per second and the pages the fast and the thorough log
//! GC reclaimed (`Fs::gc_stats`).
//!
//! Two mixes ([`Mix`]). Overwrites, per operation: 60% a 4 KiB overwrite
//! at a random page of a random file, 20% a whole-file read, 10% a replace
//! (delete a random file and create one of the same size in a random
//! directory: as much is deleted as is created, so the utilisation holds),
//! 10% a stat. Fileserver, the workload of NOVA's Table 3: filebench's
//! fileserver flowops in its proportions, a replace (its create + write
//! whole file and its delete) 40%, a 16 KiB append 20%, a whole-file read
//! 20%, a stat 20%; new files are 120 KiB, so that with the appends they
//! average the 128 KiB the set starts with. Files are 128 KiB (fileserver's
//! mean) in directories of 20 (filebench's `meandirwidth`). Overwrites
//! make dead write entries in file logs and replaces dead dentries in
//! directory logs: the log GC's work. The levels run on file systems of
//! their own, in alternating slices, so the machine's noise falls on both
//! alike.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use novafs_rng::SplitMix;

use crate::backend::{parallel, read_whole, write_whole, Backend};
use crate::personality::{is_nospc, Counters};
use crate::target::LibraryTarget;

/// The GC counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GcSnap {
    pub fast_pages: u64,
    pub thorough_pages: u64,
    pub thorough_runs: u64,
}

impl GcSnap {
    pub fn now(t: &LibraryTarget) -> Result<GcSnap> {
        let s = t.gc_stats()?;
        Ok(GcSnap {
            fast_pages: s.fast_pages,
            thorough_pages: s.thorough_pages,
            thorough_runs: s.thorough_runs,
        })
    }

    fn since(self, base: GcSnap) -> GcSnap {
        GcSnap {
            fast_pages: self.fast_pages.saturating_sub(base.fast_pages),
            thorough_pages: self.thorough_pages.saturating_sub(base.thorough_pages),
            thorough_runs: self.thorough_runs.saturating_sub(base.thorough_runs),
        }
    }
}

/// One sample: the second that ended at `t` seconds into the run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub t: f64,
    /// Operations per second during the interval.
    pub ops_per_s: f64,
    /// Operations failed with ENOSPC per second during the interval.
    pub nospc_per_s: f64,
    /// GC work since the run started (cumulative).
    pub gc: GcSnap,
    /// Operations failed with ENOSPC since the run started (cumulative).
    pub nospc: u64,
    /// Space used, % of the data area.
    pub used_pct: f64,
}

/// The time series, built from cumulative counters read at each tick.
#[derive(Debug, Clone)]
pub struct Series {
    pub samples: Vec<Sample>,
    gc_base: GcSnap,
    last_t: f64,
    last_ops: u64,
    last_nospc: u64,
}

impl Series {
    /// A series whose GC counts are relative to `gc_base` (the counters are
    /// process-wide and the rounds before have moved them).
    pub fn new(gc_base: GcSnap) -> Series {
        Series {
            samples: Vec::new(),
            gc_base,
            last_t: 0.0,
            last_ops: 0,
            last_nospc: 0,
        }
    }

    /// Record the counters read `t` seconds into the run.
    pub fn record(&mut self, t: f64, ops: u64, gc: GcSnap, nospc: u64, used_pct: f64) {
        let dt = t - self.last_t;
        let rate = |now: u64, before: u64| {
            if dt > 0.0 {
                now.saturating_sub(before) as f64 / dt
            } else {
                0.0
            }
        };
        self.samples.push(Sample {
            t,
            ops_per_s: rate(ops, self.last_ops),
            nospc_per_s: rate(nospc, self.last_nospc),
            gc: gc.since(self.gc_base),
            nospc,
            used_pct,
        });
        self.last_t = t;
        self.last_ops = ops;
        self.last_nospc = nospc;
    }

    /// Operations per second over the whole run.
    pub fn mean_ops_per_s(&self) -> f64 {
        if self.last_t > 0.0 {
            self.last_ops as f64 / self.last_t
        } else {
            0.0
        }
    }
}

/// Size of every file (fileserver's mean).
pub const FILE_SIZE: u64 = 128 << 10;
/// Files per directory (filebench's `meandirwidth`).
pub const DIR_WIDTH: usize = 20;
const PAGE: u64 = 4096;

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub mix: Mix,
    /// Utilisations to hold, % of the data area.
    pub levels: Vec<f64>,
    pub size_mib: u64,
    pub threads: usize,
    /// Seconds of the mix on each level.
    pub secs: f64,
    /// Seconds of one slice: the levels take turns.
    pub slice_secs: f64,
}

/// What the threads do to the file set (the module docs give the
/// proportions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mix {
    /// Random single-page overwrites: file log entries die one at a time.
    Overwrites,
    /// Filebench's fileserver, as NOVA's Table 3 ran it: files made,
    /// appended to and deleted whole.
    Fileserver,
}

impl Mix {
    pub fn name(self) -> &'static str {
        match self {
            Mix::Overwrites => "overwrites",
            Mix::Fileserver => "fileserver",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Mix::Overwrites => {
                "60% a 4 KiB overwrite at a random page of a random file, 20% a whole-file read, 10% a \
                 replace (create a file of the same size in a random directory, then delete the old one), \
                 10% a stat"
            }
            Mix::Fileserver => {
                "filebench's fileserver as NOVA's Table 3 ran it: 40% a replace (create a 120 KiB file in a \
                 random directory and write it whole, then delete a random one), 20% a 16 KiB append to a \
                 random file, 20% a whole-file read, 20% a stat"
            }
        }
    }
}

/// Size of a file the fileserver mix creates: with its appends (half a
/// file's lifetime on average gets one) the set keeps its mean size.
const FILESERVER_NEW: u64 = FILE_SIZE - FILESERVER_APPEND / 2;
const FILESERVER_APPEND: u64 = 16 << 10;

/// One level's run.
#[derive(Debug, Clone)]
pub struct LevelRun {
    pub level_pct: f64,
    pub size_mib: u64,
    pub files: usize,
    pub dirs: usize,
    /// Space used when the mix started.
    pub start_used_pct: f64,
    /// `t` is seconds of this level's own run time.
    pub series: Series,
}

/// The whole experiment.
#[derive(Debug, Clone)]
pub struct FullRun {
    pub plan: Plan,
    pub levels: Vec<LevelRun>,
}

fn used_pct(t: &LibraryTarget) -> Result<f64> {
    let s = t.statfs()?;
    Ok(if s.blocks == 0 {
        0.0
    } else {
        100.0 * (s.blocks - s.blocks_free) as f64 / s.blocks as f64
    })
}

/// A file of the set: where it is and its name (a replace renames the
/// slot, so a name is never reused while an older inode may linger).
struct Slot {
    dir: usize,
    name: String,
}

/// The files the mix works on, each behind its own lock, in `dirs`.
pub struct FileTable<B: Backend> {
    dirs: Vec<B::Dir>,
    slots: Vec<Mutex<Slot>>,
    next_name: AtomicU64,
}

impl<B: Backend> FileTable<B> {
    pub fn files(&self) -> usize {
        self.slots.len()
    }

    pub fn dirs(&self) -> usize {
        self.dirs.len()
    }

    fn lock(&self, i: usize) -> MutexGuard<'_, Slot> {
        self.slots[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    fn fresh_name(&self) -> String {
        format!("g{}", self.next_name.fetch_add(1, Ordering::Relaxed))
    }
}

/// Creates `name` in `dir` and writes it whole, 64 KiB at a time. ENOSPC
/// leaves no partial file behind: it is removed again.
fn create_whole<B: Backend>(b: &B, dir: &B::Dir, name: &str, size: u64, buf: &[u8]) -> Result<()> {
    let f = b.create(dir, name)?;
    write_whole(b, &f, size, buf).inspect_err(|_| {
        drop(f);
        let _ = b.unlink(dir, name);
    })
}

/// How far `prefill` goes.
#[derive(Debug, Clone, Copy)]
pub enum Fill {
    /// Until this % of the space is used.
    Used(f64),
    /// This many files.
    Files(usize),
}

/// Fills `b` with [`FILE_SIZE`] files in directories of [`DIR_WIDTH`] named
/// `prefix`0, `prefix`1, … as far as `fill` says (or ENOSPC).
pub fn prefill<B: Backend>(
    b: &B,
    prefix: &str,
    fill: Fill,
    used: impl Fn() -> Result<f64>,
    bar: &ProgressBar,
) -> Result<FileTable<B>> {
    let buf = vec![0x46u8; 64 << 10];
    let mut dirs = Vec::new();
    let mut slots = Vec::new();
    loop {
        let now = used()?;
        bar.set_message(format!("full file system: pre-filling, {now:.1}% used"));
        let full = match fill {
            Fill::Used(pct) => now >= pct,
            Fill::Files(n) => slots.len() >= n,
        };
        if full {
            break;
        }
        if slots.len() % DIR_WIDTH == 0 {
            dirs.push(b.mkdir(&format!("{prefix}{}", dirs.len()))?);
        }
        let slot = Slot {
            dir: dirs.len() - 1,
            name: format!("f{}", slots.len()),
        };
        match create_whole(b, &dirs[slot.dir], &slot.name, FILE_SIZE, &buf) {
            Ok(()) => slots.push(Mutex::new(slot)),
            Err(e) if is_nospc(&e) => break,
            Err(e) => return Err(e.context("pre-fill")),
        }
    }
    Ok(FileTable {
        dirs,
        slots,
        next_name: AtomicU64::new(0),
    })
}

/// Removes the files and the directories `prefill` made.
pub fn cleanup<B: Backend>(b: &B, prefix: &str, set: &FileTable<B>) -> Result<()> {
    for i in 0..set.files() {
        let s = set.lock(i);
        b.unlink(&set.dirs[s.dir], &s.name)?;
    }
    for d in 0..set.dirs() {
        b.rmdir(&format!("{prefix}{d}"))?;
    }
    Ok(())
}

/// One operation of the mix on `set`, chosen by `rng`; ENOSPC counts as a
/// failed operation, not an error.
fn one_op<B: Backend>(
    b: &B,
    set: &FileTable<B>,
    mix: Mix,
    rng: &mut SplitMix,
    buf: &mut [u8],
    counters: &Counters,
) -> Result<()> {
    enum Op {
        Overwrite,
        Append,
        Read,
        Replace(u64),
        Stat,
    }
    let i = rng.below(set.files() as u64) as usize;
    let mut slot = set.lock(i);
    let dir = &set.dirs[slot.dir];
    let op = match (mix, rng.below(100)) {
        (Mix::Overwrites, 0..60) => Op::Overwrite,
        (Mix::Overwrites, 60..80) | (Mix::Fileserver, 60..80) => Op::Read,
        (Mix::Overwrites, 80..90) => Op::Replace(FILE_SIZE),
        (Mix::Fileserver, 0..40) => Op::Replace(FILESERVER_NEW),
        (Mix::Fileserver, 40..60) => Op::Append,
        _ => Op::Stat,
    };
    let r = match op {
        Op::Overwrite => {
            let page = rng.below(FILE_SIZE / PAGE);
            b.open(dir, &slot.name)
                .and_then(|f| b.write_at(&f, page * PAGE, &buf[..PAGE as usize]))
        }
        Op::Append => b.open(dir, &slot.name).and_then(|f| {
            let end = b.len(&f)?;
            b.write_at(&f, end, &buf[..FILESERVER_APPEND as usize])
        }),
        Op::Read => b.open(dir, &slot.name).and_then(|f| read_whole(b, &f, buf).map(drop)),
        // A new file elsewhere, then the old one goes, so as much is
        // deleted as is created. Out of space, the old one stays.
        Op::Replace(size) => {
            let to = rng.below(set.dirs() as u64) as usize;
            let name = set.fresh_name();
            create_whole(b, &set.dirs[to], &name, size, buf).and_then(|()| {
                b.unlink(dir, &slot.name)?;
                *slot = Slot { dir: to, name };
                Ok(())
            })
        }
        Op::Stat => b.stat(dir, &slot.name).map(drop),
    };
    match r {
        Ok(()) => counters.ops.fetch_add(1, Ordering::Relaxed),
        Err(e) if is_nospc(&e) => counters.nospc.fetch_add(1, Ordering::Relaxed),
        Err(e) => return Err(e),
    };
    Ok(())
}

/// Runs the mix on `set` with `threads` threads until `halt`.
pub fn mix<B: Backend>(
    b: &B,
    set: &FileTable<B>,
    mix: Mix,
    threads: usize,
    seed: u64,
    halt: &AtomicBool,
    counters: &Counters,
) -> Result<()> {
    parallel(threads, |t| {
        let mut rng = SplitMix::derive(seed, t as u64);
        let mut buf = vec![0x5au8; FILE_SIZE as usize];
        while !halt.load(Ordering::Relaxed) {
            one_op(b, set, mix, &mut rng, &mut buf, counters)?;
        }
        Ok(())
    })
    .map(drop)
}

/// One level while the experiment runs.
struct Level {
    level_pct: f64,
    target: LibraryTarget,
    set: FileTable<LibraryTarget>,
    start_used_pct: f64,
    counters: Counters,
    series: Series,
    /// Seconds of the mix run so far.
    ran: f64,
}

impl Level {
    /// Runs the mix for `secs` more, sampling every second.
    fn slice(&mut self, secs: f64, plan: &Plan, seed: u64, stop: &AtomicBool, bar: &ProgressBar) -> Result<()> {
        let halt = AtomicBool::new(false);
        let (target, set, counters) = (&self.target, &self.set, &self.counters);
        let start = Instant::now();
        let (ran, series) = (self.ran, &mut self.series);
        std::thread::scope(|s| -> Result<()> {
            let worker = s.spawn(|| mix(target, set, plan.mix, plan.threads, seed, &halt, counters));
            let mut tick = 1u64;
            loop {
                let next = start + Duration::from_secs(tick);
                if let Some(wait) = next.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                let t = start.elapsed().as_secs_f64().min(secs);
                series.record(
                    ran + t,
                    counters.ops.load(Ordering::Relaxed),
                    GcSnap::now(target)?,
                    counters.nospc.load(Ordering::Relaxed),
                    used_pct(target)?,
                );
                bar.inc(1);
                if t >= secs || worker.is_finished() || stop.load(Ordering::SeqCst) {
                    halt.store(true, Ordering::SeqCst);
                    break;
                }
                tick += 1;
            }
            worker
                .join()
                .map_err(|_| anyhow::anyhow!("full file system run panicked"))?
                .context("the mix on the full file system")
        })?;
        self.ran += secs.min(start.elapsed().as_secs_f64());
        Ok(())
    }
}

/// Size of the file system of `level_pct` in `plan`: the fullest level's
/// is `plan.size_mib`, and every level holds the same files, so the
/// working set (and the caches' share of it) is the same at each level
/// and only the free space differs.
pub fn level_size_mib(plan: &Plan, level_pct: f64) -> u64 {
    let top = plan.levels.iter().copied().fold(level_pct, f64::max);
    (plan.size_mib as f64 * top / level_pct).ceil() as u64
}

/// The whole experiment: each level on a fresh target `make(size_mib)`
/// returns, pre-filled (the fullest level first, to its utilisation; the
/// others with as many files), then the levels' slices in turn until each
/// has run `secs`.
pub fn run(plan: &Plan, mut make: impl FnMut(u64) -> Result<LibraryTarget>, stop: &AtomicBool) -> Result<FullRun> {
    let ticks = (plan.secs.ceil() as u64).max(1) * plan.levels.len() as u64;
    let bar = ProgressBar::new(ticks);
    bar.set_style(
        ProgressStyle::with_template("[{elapsed_precise}] {bar:30} {pos}/{len} s {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut order: Vec<usize> = (0..plan.levels.len()).collect();
    order.sort_by(|&a, &b| plan.levels[b].total_cmp(&plan.levels[a]));
    let mut filled: Vec<Option<Level>> = (0..plan.levels.len()).map(|_| None).collect();
    let mut files = None;
    for k in order {
        let level_pct = plan.levels[k];
        let target = make(level_size_mib(plan, level_pct))?;
        let fill = files.map_or(Fill::Used(level_pct), Fill::Files);
        let set = prefill(&target, "d", fill, || used_pct(&target), &bar)?;
        files = Some(set.files());
        filled[k] = Some(Level {
            level_pct,
            start_used_pct: used_pct(&target)?,
            series: Series::new(GcSnap::now(&target)?),
            target,
            set,
            counters: Counters::default(),
            ran: 0.0,
        });
    }
    let mut levels: Vec<Level> = filled.into_iter().flatten().collect();
    let slice = plan.slice_secs.max(1.0);
    let mut round = 0u64;
    'run: while levels.iter().any(|l| l.ran + 0.5 < plan.secs) {
        for l in &mut levels {
            if stop.load(Ordering::SeqCst) {
                break 'run;
            }
            let secs = slice.min(plan.secs - l.ran);
            if secs < 0.5 {
                continue;
            }
            bar.set_message(format!("full file system: the mix at {:.0}% full", l.level_pct));
            l.slice(secs, plan, round, stop, &bar)?;
        }
        round += 1;
    }
    bar.finish_and_clear();
    let mut out = Vec::new();
    for l in levels {
        cleanup(&l.target, "d", &l.set)?;
        out.push(LevelRun {
            level_pct: l.level_pct,
            size_mib: level_size_mib(plan, l.level_pct),
            files: l.set.files(),
            dirs: l.set.dirs(),
            start_used_pct: l.start_used_pct,
            series: l.series,
        });
    }
    Ok(FullRun {
        plan: plan.clone(),
        levels: out,
    })
}

/// Fast GC's share of the pages reclaimed, %.
fn fast_share(g: GcSnap) -> f64 {
    let all = g.fast_pages + g.thorough_pages;
    if all == 0 {
        0.0
    } else {
        100.0 * g.fast_pages as f64 / all as f64
    }
}

/// The report section: what ran, a summary per level, the ratio the issue
/// asks for, and a table every `every` seconds.
pub fn markdown(r: &FullRun, png: Option<&str>, every: f64) -> String {
    let mut s = String::new();
    let p = &r.plan;
    let levels: Vec<String> = p.levels.iter().map(|l| format!("{l:.0}%")).collect();
    let _ = writeln!(
        s,
        "## (f) Full file system: GC at {} utilisation (NOVA Table 3)\n\n\
         novafs-lib only. Each level has a fresh file system of its own, pre-filled with the same number \
         of files of {} KiB in directories of {} (the fullest level's is {} MiB, filled to its level; the \
         others are larger, so the working set is the same and only the free space differs), then {} \
         threads run the mix for {:.0} s, the levels taking turns in slices of {:.0} s. The mix ({}): {}. \
         ENOSPC is a failed operation, counted, not an error. GC pages are cumulative since the mix \
         started; `t` is the level's own run time.\n",
        levels.join(" and "),
        FILE_SIZE >> 10,
        DIR_WIDTH,
        p.size_mib,
        p.threads,
        p.secs,
        p.slice_secs,
        p.mix.name(),
        p.mix.describe()
    );
    let _ = writeln!(
        s,
        "| level | size MiB | files | start used % | end used % | ops/s (mean) | per-second median | min–max | \
         fast GC pages | thorough GC pages | thorough runs | fast share | ENOSPC ops |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|");
    for l in &r.levels {
        let sm = &l.series.samples;
        let Some(last) = sm.last() else { continue };
        let mut ops: Vec<f64> = sm.iter().map(|x| x.ops_per_s).collect();
        ops.sort_by(f64::total_cmp);
        let _ = writeln!(
            s,
            "| {:.0}% | {} | {} | {:.1} | {:.1} | {:.0} | {:.0} | {:.0}–{:.0} | {} | {} | {} | {:.1}% | {} |",
            l.level_pct,
            l.size_mib,
            l.files,
            l.start_used_pct,
            last.used_pct,
            l.series.mean_ops_per_s(),
            ops[ops.len() / 2],
            ops[0],
            ops[ops.len() - 1],
            last.gc.fast_pages,
            last.gc.thorough_pages,
            last.gc.thorough_runs,
            fast_share(last.gc),
            last.nospc
        );
    }
    if let [low, .., high] = &r.levels[..] {
        let ratio = high.series.mean_ops_per_s() / low.series.mean_ops_per_s().max(f64::MIN_POSITIVE);
        let _ = writeln!(
            s,
            "\nOps/s at {:.0}% full are {:.2}× those at {:.0}% (target: at least 0.90×).\n",
            high.level_pct, ratio, low.level_pct
        );
    }
    if let Some(png) = png {
        let _ = writeln!(s, "![full file system: ops/s and GC pages over time]({png})\n");
    }
    let mut head = String::from("| t (s) |");
    let mut rule = String::from("|---:|");
    for l in &r.levels {
        let _ = write!(
            head,
            " ops/s {0:.0}% | fast {0:.0}% | thorough {0:.0}% | ENOSPC {0:.0}% |",
            l.level_pct
        );
        rule.push_str("---:|---:|---:|---:|");
    }
    let _ = writeln!(s, "{head}\n{rule}");
    let rows = r.levels.iter().map(|l| l.series.samples.len()).max().unwrap_or(0);
    let mut next = every;
    for i in 0..rows {
        let Some(t) = r
            .levels
            .iter()
            .filter_map(|l| l.series.samples.get(i))
            .map(|x| x.t)
            .reduce(f64::max)
        else {
            continue;
        };
        if t + 1e-9 < next && i + 1 != rows {
            continue;
        }
        next = t + every;
        let _ = write!(s, "| {t:.0} |");
        for l in &r.levels {
            match l.series.samples.get(i) {
                Some(x) => {
                    let _ = write!(
                        s,
                        " {:.0} | {} | {} | {} |",
                        x.ops_per_s, x.gc.fast_pages, x.gc.thorough_pages, x.nospc
                    );
                }
                None => s.push_str(" | | | |"),
            }
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_turns_cumulative_counters_into_rates_and_offsets() {
        let base = GcSnap {
            fast_pages: 10,
            thorough_pages: 5,
            thorough_runs: 1,
        };
        let mut s = Series::new(base);
        s.record(
            1.0,
            1000,
            GcSnap {
                fast_pages: 12,
                thorough_pages: 5,
                thorough_runs: 1,
            },
            0,
            95.0,
        );
        s.record(
            2.5,
            1600,
            GcSnap {
                fast_pages: 20,
                thorough_pages: 9,
                thorough_runs: 2,
            },
            3,
            96.0,
        );
        assert_eq!(s.samples.len(), 2);
        assert_eq!(s.samples[0].ops_per_s, 1000.0);
        assert_eq!(s.samples[1].ops_per_s, 400.0);
        assert_eq!(
            s.samples[1].gc,
            GcSnap {
                fast_pages: 10,
                thorough_pages: 4,
                thorough_runs: 1
            }
        );
        assert_eq!(s.samples[1].nospc, 3);
        assert_eq!(s.samples[1].nospc_per_s, 2.0);
        assert_eq!(s.mean_ops_per_s(), 640.0);
        let level = |level_pct: f64, series: Series| LevelRun {
            level_pct,
            size_mib: 64,
            files: 10,
            dirs: 1,
            start_used_pct: level_pct,
            series,
        };
        let mut low = Series::new(GcSnap::default());
        low.record(1.0, 1000, GcSnap::default(), 0, 50.0);
        low.record(2.5, 1600, GcSnap::default(), 0, 50.0);
        let plan = Plan {
            mix: Mix::Overwrites,
            levels: vec![50.0, 95.0],
            size_mib: 64,
            threads: 2,
            secs: 2.5,
            slice_secs: 1.0,
        };
        let run = FullRun {
            plan,
            levels: vec![level(50.0, low), level(95.0, s)],
        };
        let md = markdown(&run, Some("x.png"), 1.0);
        assert!(md.contains("| 2 | 400 | 0 | 0 | 0 | 400 | 10 | 4 | 3 |"), "{md}");
        assert!(md.contains("| 95% | 64 | 10 | 95.0 | 96.0 | 640 |"), "{md}");
        assert_eq!(level_size_mib(&run.plan, 50.0), 122);
        assert_eq!(level_size_mib(&run.plan, 95.0), 64);
        assert!(md.contains("71.4% | 3 |"), "fast share 10 of 14: {md}");
        assert!(md.contains("are 1.00× those at 50%"), "{md}");
    }

    #[test]
    fn prefill_reaches_the_level_and_the_overwrites_hold_it() {
        prefill_then(Mix::Overwrites);
    }

    #[test]
    fn prefill_reaches_the_level_and_the_fileserver_mix_holds_it() {
        prefill_then(Mix::Fileserver);
    }

    /// Fills to 90%, runs 3000 operations of `mix`: the file count holds,
    /// the space within 3 points, and every file has a size the mix gives.
    fn prefill_then(mix: Mix) {
        let region = std::sync::Arc::new(pm::MemRegion::new(48 << 20));
        let t = LibraryTarget::on_region(region).expect("format");
        let empty = used_pct(&t).expect("statfs");
        let set = prefill(&t, "d", Fill::Used(90.0), || used_pct(&t), &ProgressBar::hidden()).expect("prefill");
        let used = used_pct(&t).expect("statfs");
        assert!(used >= 90.0, "used {used}");
        assert!(set.files() > DIR_WIDTH, "{}", set.files());
        assert_eq!(set.dirs(), set.files().div_ceil(DIR_WIDTH));
        let inodes_before = t.statfs().map(|s| s.files - s.files_free).expect("statfs");
        let counters = Counters::default();
        let mut rng = SplitMix::new(7);
        let mut buf = vec![0u8; FILE_SIZE as usize];
        for _ in 0..3000 {
            one_op(&t, &set, mix, &mut rng, &mut buf, &counters).expect("op");
        }
        assert_eq!(
            counters.ops.load(Ordering::Relaxed) + counters.nospc.load(Ordering::Relaxed),
            3000
        );
        // As much deleted as created: the files and the space hold.
        let after = used_pct(&t).expect("statfs");
        assert!((after - used).abs() < 3.0, "used {used} then {after}");
        let inodes = |t: &LibraryTarget| t.statfs().map(|s| s.files - s.files_free).expect("statfs");
        assert_eq!(inodes(&t), inodes_before);
        let mut appended = 0;
        for i in 0..set.files() {
            let slot = set.lock(i);
            let size = t.stat(&set.dirs[slot.dir], &slot.name).expect("stat");
            match mix {
                Mix::Overwrites => assert_eq!(size, FILE_SIZE),
                Mix::Fileserver => {
                    let made = if slot.name.starts_with('g') {
                        FILESERVER_NEW
                    } else {
                        FILE_SIZE
                    };
                    assert_eq!((size - made) % FILESERVER_APPEND, 0, "{size}");
                    appended += (size - made) / FILESERVER_APPEND;
                }
            }
        }
        if mix == Mix::Fileserver {
            assert!(appended > 0, "no file was appended to");
        }
        cleanup(&t, "d", &set).expect("cleanup");
        let left = used_pct(&t).expect("statfs");
        assert!(left < empty + 1.0, "used {empty} before, {left} after");
    }
}
