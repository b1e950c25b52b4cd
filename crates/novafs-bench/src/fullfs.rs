//! (f) A full file system (NOVA §5.4, Table 3): the fileserver personality
//! on novafs through the library, on a file system pre-filled to 95% used,
//! sampled every second for operations per second and the pages the fast
//! and the thorough log GC reclaimed (`Fs::gc_stats`).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use novafs::Ino;

use crate::backend::{write_whole, Backend};
use crate::personality::{self, is_nospc, Counters, FileSet, Personality, Until};
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

/// What the run did besides the series.
#[derive(Debug, Clone)]
pub struct FullRun {
    pub size_mib: u64,
    pub threads: usize,
    pub secs: f64,
    /// Files written before the run and the space used then.
    pub prefilled: usize,
    pub slots: usize,
    pub start_used_pct: f64,
    pub series: Series,
}

fn used_pct(t: &LibraryTarget) -> Result<f64> {
    let s = t.statfs()?;
    Ok(if s.blocks == 0 {
        0.0
    } else {
        100.0 * (s.blocks - s.blocks_free) as f64 / s.blocks as f64
    })
}

/// Fill directory `dir` with fileserver-sized files until `target_pct` of
/// the space is used (or ENOSPC); returns the file set, 80% of whose
/// entries exist (filebench's prealloc), so creates have room to pick.
pub fn prefill(t: &LibraryTarget, dir: &Ino, target_pct: f64, bar: &ProgressBar) -> Result<FileSet> {
    let shape = Personality::Fileserver.shape();
    let buf = vec![0x46u8; shape.write_io];
    let mut n = 0usize;
    loop {
        let used = used_pct(t)?;
        bar.set_message(format!("full file system: pre-filling, {used:.1}% used"));
        if used >= target_pct {
            break;
        }
        let name = format!("f{n}");
        let r = t
            .create(dir, &name)
            .and_then(|f| write_whole(t, &f, shape.file_size, &buf));
        match r {
            Ok(()) => n += 1,
            Err(e) if is_nospc(&e) => {
                // A file may have been created before the space ran out.
                if t.stat(dir, &name).is_ok() {
                    n += 1;
                }
                break;
            }
            Err(e) => return Err(e.context("pre-fill")),
        }
    }
    let slots = (n * 100).div_ceil(shape.prealloc_pct as usize).max(n + 1);
    Ok(FileSet::with_existing((0..slots).map(|i| i < n).collect()))
}

/// The whole experiment on a fresh `lib` target.
pub fn run(lib: &mut LibraryTarget, size_mib: u64, threads: usize, secs: f64, stop: &AtomicBool) -> Result<FullRun> {
    let bar = ProgressBar::new((secs.ceil() as u64).max(1));
    bar.set_style(
        ProgressStyle::with_template("[{elapsed_precise}] {bar:30} {pos}/{len} s {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let lib = &*lib;
    let dir = lib.mkdir("full")?;
    let set = prefill(lib, &dir, 95.0, &bar)?;
    let prefilled = set.existing();
    let start_used_pct = used_pct(lib)?;
    let counters = Counters::default();
    let halt = AtomicBool::new(false);
    let mut series = Series::new(GcSnap::now(lib)?);
    bar.set_message("full file system: fileserver");
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    std::thread::scope(|s| -> Result<()> {
        let worker = s.spawn(|| {
            personality::run(
                lib,
                &dir,
                Personality::Fileserver,
                &set,
                threads,
                Until::Deadline(deadline),
                &halt,
                &counters,
            )
        });
        let mut tick = 1u64;
        loop {
            let next = start + Duration::from_secs(tick);
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            }
            let t = start.elapsed().as_secs_f64().min(secs);
            series.record(
                t,
                counters.ops.load(Ordering::Relaxed),
                GcSnap::now(lib)?,
                counters.nospc.load(Ordering::Relaxed),
                used_pct(lib)?,
            );
            bar.set_position(tick);
            if t >= secs || worker.is_finished() || stop.load(Ordering::SeqCst) {
                halt.store(true, Ordering::SeqCst);
                break;
            }
            tick += 1;
        }
        worker
            .join()
            .map_err(|_| anyhow::anyhow!("full file system run panicked"))?
            .context("fileserver on the full file system")?;
        Ok(())
    })?;
    bar.finish_and_clear();
    let slots = set.entries();
    personality::cleanup(lib, &dir, &set)?;
    lib.rmdir("full")?;
    Ok(FullRun {
        size_mib,
        threads,
        secs,
        prefilled,
        slots,
        start_used_pct,
        series,
    })
}

/// The report section: what ran, a summary and the per-second table.
pub fn markdown(r: &FullRun, png: Option<&str>) -> String {
    let mut s = String::new();
    let sm = &r.series.samples;
    let last = sm.last().copied();
    let _ = writeln!(
        s,
        "## (f) Full file system: fileserver at 95% utilisation (NOVA Table 3)\n\n\
         novafs-lib only, a fresh {} MiB file system pre-filled with {} files of 128 KiB ({:.1}% used), \
         then the fileserver personality ({} threads, {} file set entries) for {:.0} s, sampled every \
         second. ENOSPC is a failed operation, counted, not an error. GC pages are cumulative since \
         the start of the run.\n",
        r.size_mib, r.prefilled, r.start_used_pct, r.threads, r.slots, r.secs
    );
    if let Some(l) = last {
        let ops: Vec<f64> = sm.iter().map(|x| x.ops_per_s).collect();
        let min = ops.iter().copied().fold(f64::INFINITY, f64::min);
        let max = ops.iter().copied().fold(0.0f64, f64::max);
        let first = ops.first().copied().unwrap_or(0.0);
        if l.t + 0.5 < r.secs {
            let _ = writeln!(s, "**Stopped early** (Ctrl-C) after {:.0} s.\n", l.t);
        }
        let _ = writeln!(
            s,
            "Over {:.0} s: {:.0} ops/s on average (per-second {:.0}–{:.0}; first second {:.0}, last {:.0}); \
             GC reclaimed {} pages fast and {} thorough ({} thorough runs); {} operations failed with ENOSPC; \
             {:.1}% used at the end.\n",
            l.t,
            r.series.mean_ops_per_s(),
            min,
            max,
            first,
            l.ops_per_s,
            l.gc.fast_pages,
            l.gc.thorough_pages,
            l.gc.thorough_runs,
            l.nospc,
            l.used_pct
        );
    }
    if let Some(png) = png {
        let _ = writeln!(s, "![full file system: ops/s and GC pages over time]({png})\n");
    }
    let _ = writeln!(
        s,
        "| t (s) | ops/s | fast GC pages | thorough GC pages | thorough runs | ENOSPC ops | used % |"
    );
    let _ = writeln!(s, "|---:|---:|---:|---:|---:|---:|---:|");
    for x in sm {
        let _ = writeln!(
            s,
            "| {:.0} | {:.0} | {} | {} | {} | {} | {:.1} |",
            x.t, x.ops_per_s, x.gc.fast_pages, x.gc.thorough_pages, x.gc.thorough_runs, x.nospc, x.used_pct
        );
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
        let md = markdown(
            &FullRun {
                size_mib: 64,
                threads: 2,
                secs: 2.5,
                prefilled: 10,
                slots: 13,
                start_used_pct: 95.0,
                series: s,
            },
            Some("x.png"),
        );
        assert!(md.contains("| 2 | 400 | 10 | 4 | 1 | 3 | 96.0 |"), "{md}");
    }

    #[test]
    fn prefill_reaches_the_target_utilisation() {
        let region = std::sync::Arc::new(pm::MemRegion::new(48 << 20));
        let t = LibraryTarget::on_region(region).expect("format");
        let dir = t.mkdir("full").expect("mkdir");
        let set = prefill(&t, &dir, 90.0, &ProgressBar::hidden()).expect("prefill");
        let used = used_pct(&t).expect("statfs");
        assert!(used >= 90.0, "used {used}");
        assert!(set.existing() > 10);
        assert!(set.entries() > set.existing(), "room for creates");
    }
}
