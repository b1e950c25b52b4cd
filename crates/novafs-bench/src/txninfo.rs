//! The TxnInfo size sweep of the fine-grained journaling paper (FGM §IV-C,
//! Fig. 13 and 14) on the one kind of operation novafs batches: an
//! *attribute storm*, chmods and utimens of random files of a set, an
//! fsync every K of them or none, on the library target.
//!
//! novafs's batching (`novafs::Batching`, README "Relaxed mode") is an
//! option of relaxed mode: a relaxed setattr that changes no size, on an
//! inode whose newest log entry is a setattr (so every one but the first
//! after another kind of change), rewrites that entry in place, and its
//! changed words join a running transaction, which commits when it holds
//! its limit of words (novafs's TxnInfo capacity), on a timer, at fsync.
//! A word changed again replaces its value, as FGM's running transaction
//! holds a modified inode once. Creates, unlinks, renames and appends
//! commit a journal transaction each in every mode, so FGM's own
//! workloads (`fgm`) give batching nothing to gather; overwrites in place
//! are not used here either (their mtime is to be written under an intent
//! instead of batched).
//!
//! One image, formatted as mkfs does by default (strict, metadata
//! replicas, data checksums, parity), holds the file set; each
//! configuration mounts it in turn (strict, relaxed, relaxed batching
//! with each limit), runs for the same time, and unmounts, the order
//! rotated every round. Every run does the same operations on the same
//! files for a round's seed. The journal counts are exact; the timed
//! window ends before the unmount that commits what is still running.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use novafs::{Batching, Consistency, FormatOptions, Fs, Ino, MountOptions, SetAttr, ROOT_INO};
use novafs_rng::SplitMix;
use pm::Region;

use crate::fgm::{batch_total, Run};
use crate::report::fmt_num;
use crate::stats::summarize;

/// FGM §IV-C's TxnInfo sizes, 256 B to 128 KiB, hold about 30 to 16,000
/// entries; novafs's limits in words, one 8-byte update each.
pub const WORDS: [usize; 7] = [4, 16, 64, 256, 1024, 4096, 16384];

/// Journal bytes a word takes in a transaction: a 16-byte record and the
/// word (FGM §III-B's per-entry cost); a transaction adds a 32-byte
/// TxnInfo.
const WORD_BYTES: usize = 24;
const TXNINFO_BYTES: usize = 32;

/// How one configuration mounts the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mount {
    Strict,
    Relaxed,
    /// Relaxed, batching at most this many words a transaction.
    Batch(usize),
}

impl Mount {
    /// Strict, relaxed, then relaxed batching with each of `words`.
    pub fn all(words: &[usize]) -> Vec<Mount> {
        let mut v = vec![Mount::Strict, Mount::Relaxed];
        v.extend(words.iter().map(|&w| Mount::Batch(w)));
        v
    }

    pub fn name(&self) -> &'static str {
        match self {
            Mount::Strict => "strict",
            Mount::Relaxed => "relaxed",
            Mount::Batch(_) => "relaxed+batch",
        }
    }

    fn options(&self, interval: Duration) -> MountOptions {
        let (mode, batch) = match *self {
            Mount::Strict => (Consistency::Strict, None),
            Mount::Relaxed => (Consistency::Relaxed, None),
            Mount::Batch(words) => (Consistency::Relaxed, Some(Batching { words, interval })),
        };
        MountOptions::default().consistency(Some(mode)).batch(batch)
    }
}

/// What the sweep runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub rounds: usize,
    /// Files in the set.
    pub files: u64,
    /// Seconds of each run.
    pub secs: f64,
    /// A run also stops after this many operations (the tests' exact
    /// counts).
    pub max_ops: u64,
    /// The batching limits, in words.
    pub words: Vec<usize>,
    /// The batching mounts' commit timer.
    pub interval: Duration,
    /// The fsync settings, each swept in full: an fsync every K
    /// operations, or none.
    pub fsync_every: Vec<Option<u64>>,
}

/// Every run of a sweep: per fsync setting, per mount, per round.
#[derive(Debug, Clone)]
pub struct Sweep {
    pub plan: Plan,
    pub mounts: Vec<Mount>,
    pub runs: Vec<Vec<Vec<Run>>>,
}

/// Runs `plan` on `region`, which it formats; calls `tick` after each run.
pub fn sweep(region: Arc<dyn Region>, plan: &Plan, mut tick: impl FnMut()) -> Result<Sweep> {
    Fs::format(region.clone(), &FormatOptions::default()).context("format")?;
    let files = {
        let fs = Fs::open(region.clone(), Mount::Strict.options(plan.interval)).context("mount")?;
        let files = prepare(&fs, plan.files)?;
        fs.unmount()?;
        files
    };
    let mounts = Mount::all(&plan.words);
    let mut runs = vec![vec![Vec::new(); mounts.len()]; plan.fsync_every.len()];
    for round in 0..plan.rounds {
        for (per, &every) in runs.iter_mut().zip(&plan.fsync_every) {
            for i in (0..mounts.len()).map(|i| (i + round) % mounts.len()) {
                let m = mounts[i];
                let fs = Fs::open(region.clone(), m.options(plan.interval))
                    .with_context(|| format!("mount {}", m.name()))?;
                let run = storm(&fs, &files, plan, every, round as u64)
                    .with_context(|| format!("the storm on {}", m.name()))?;
                fs.unmount()?;
                per[i].push(run);
                tick();
            }
        }
    }
    Ok(Sweep {
        plan: plan.clone(),
        mounts,
        runs,
    })
}

/// `n` empty files in a directory of their own, each chmod-ed once so
/// that its newest log entry is a setattr (relaxed mode changes the next
/// one in place).
fn prepare(fs: &Fs, n: u64) -> Result<Vec<Ino>> {
    let dir = fs.mkdir(ROOT_INO, b"storm", 0o755, 0, 0)?.ino;
    (0..n)
        .map(|i| {
            let f = fs.create(dir, format!("f{i}").as_bytes(), 0o644, 0, 0)?.ino;
            fs.setattr(f, &SetAttr::default().mode(Some(0o640)))?;
            Ok(f)
        })
        .collect()
}

/// One run: until `plan.secs` pass or `plan.max_ops` operations are done,
/// a random file of `files` gets a chmod (its mode's other-read bit
/// flipped) or, as often, a utimens (access and modification times, both
/// new); with `every`, the file last changed is fsynced after every
/// `every` operations. The same `seed`, the same operations.
fn storm(fs: &Fs, files: &[Ino], plan: &Plan, every: Option<u64>, seed: u64) -> Result<Run> {
    let mut perms = files
        .iter()
        .map(|&f| Ok(fs.getattr(f)?.perm))
        .collect::<Result<Vec<u32>>>()?;
    let mut rng = SplitMix::derive(seed, 27);
    let base = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos() as i64;
    let (journal, batch, cpu) = (fs.journal_stats(), fs.batch_stats(), cpu_time());
    let t = Instant::now();
    let deadline = t + Duration::from_secs_f64(plan.secs);
    let mut ops = 0u64;
    // A few operations between clock readings.
    'run: while Instant::now() < deadline {
        for _ in 0..64 {
            if ops >= plan.max_ops {
                break 'run;
            }
            let i = rng.below(files.len() as u64) as usize;
            let set = if rng.chance(1, 2) {
                perms[i] ^= 0o004;
                SetAttr::default().mode(Some(perms[i]))
            } else {
                let now = base + ops as i64;
                SetAttr::default().atime(Some(now)).mtime(Some(now))
            };
            fs.setattr(files[i], &set)?;
            ops += 1;
            if every.is_some_and(|k| ops.is_multiple_of(k)) {
                fs.fsync(files[i])?;
            }
        }
    }
    let elapsed = t.elapsed();
    Ok(Run {
        ops,
        elapsed,
        journal: Some(fs.journal_stats().since(&journal)),
        batch: Some(fs.batch_stats().since(&batch)),
        cpu: cpu_time().zip(cpu).map(|(now, then)| now.saturating_sub(then)),
    })
}

/// The CPU time this process's threads have run so far (the storm's, the
/// commit timer's, the reclaimer's), from the scheduler's per-thread
/// statistics; `None` where /proc does not show them.
fn cpu_time() -> Option<Duration> {
    let mut ns = 0u64;
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        // A thread that ended meanwhile counts no more.
        if let Ok(s) = std::fs::read_to_string(task.path().join("schedstat")) {
            ns += s.split_whitespace().next()?.parse::<u64>().ok()?;
        }
    }
    (ns > 0).then(|| Duration::from_nanos(ns))
}

/// The median of `f` over `runs`, with its min and max.
fn med(runs: &[Run], f: fn(&Run) -> Option<f64>) -> Result<crate::stats::Summary> {
    let xs = runs.iter().map(f).collect::<Option<Vec<_>>>();
    summarize(&xs.context("the library counts its journal")?).context("no rounds ran")
}

/// The sweep's tables in markdown, one per fsync setting: per mount,
/// throughput per second of wall time and of CPU time (median, min–max),
/// journal bytes, fences and commits per
/// operation (medians), and which share of the batch commits a full
/// transaction, the timer and fsync triggered (over every round; "other":
/// log pages freed, snapshots, unmounts).
pub fn markdown(s: &Sweep) -> Result<String> {
    let mut out = String::new();
    for (per, every) in s.runs.iter().zip(&s.plan.fsync_every) {
        let fsync = every.map_or("no fsync".to_string(), |k| format!("fsync every {k} operations"));
        out += &format!("\n{fsync}:\n\n");
        out += "| mount | TxnInfo words | bytes when full | ops/s | ops/s min–max | ops/CPU-s | ops/CPU-s min–max \
                | journal B/op | fences/op | commits / 1,000 ops | full | timer | fsync | other |\n";
        out += "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
        for (m, runs) in s.mounts.iter().zip(per) {
            out += &row(m, runs)?;
        }
    }
    Ok(out)
}

/// One mount's row of [`markdown`].
fn row(m: &Mount, runs: &[Run]) -> Result<String> {
    let ops = med(runs, |r| Some(r.ops_per_s()))?;
    let per_cpu = match med(runs, Run::ops_per_cpu_s) {
        Ok(c) => [c.median, c.min, c.max].map(|x| format!("{x:.0}")),
        Err(_) => ["—".to_string(), "—".into(), "—".into()],
    };
    let bytes = med(runs, Run::bytes_per_op)?.median;
    let fences = med(runs, Run::fences_per_op)?.median;
    let commits = med(runs, Run::commits_per_kop)?.median;
    let (words, full_bytes, shares) = match *m {
        Mount::Batch(asked) => {
            let total = batch_total(runs).unwrap_or_default();
            let cap = match total.capacity {
                0 => asked,
                c => c,
            };
            let words = match cap {
                c if c == asked => format!("{asked}"),
                c => format!("{asked} (ring: {c})"),
            };
            let share = |n: u64| match total.commits() {
                0 => "—".to_string(),
                all => format!("{:.0}%", 100.0 * n as f64 / all as f64),
            };
            let other = total.other();
            let shares = [total.full, total.timer, total.fsync, other].map(share).join(" | ");
            (words, bytes_of(cap), shares)
        }
        _ => ("—".into(), "—".into(), ["—"; 4].join(" | ")),
    };
    // A timer's few commits in millions of operations still show.
    let commits = match commits {
        c if c > 0.0 && c < 0.01 => format!("{c:.4}"),
        c => fmt_num(c),
    };
    Ok(format!(
        "| {} | {words} | {full_bytes} | {:.0} | {:.0}–{:.0} | {} | {}–{} | {bytes:.1} | {fences:.2} | {commits} \
         | {shares} |\n",
        m.name(),
        ops.median,
        ops.min,
        ops.max,
        per_cpu[0],
        per_cpu[1],
        per_cpu[2]
    ))
}

/// A full transaction's journal bytes, as FGM sizes its TxnInfo.
fn bytes_of(words: usize) -> String {
    let b = TXNINFO_BYTES + WORD_BYTES * words;
    match b {
        b if b < 1 << 10 => format!("{b} B"),
        b => format!("{:.1} KiB", b as f64 / 1024.0),
    }
}

#[cfg(test)]
mod tests {
    use novafs::BatchStats;

    use super::*;

    /// A tiny sweep, stopped by its operation count: 8 files, whose
    /// running transaction holds at most 40 words (five per file: the
    /// setattr entry's checksum, mode, atime, mtime and ctime words).
    #[test]
    fn a_tiny_sweep_prints_its_tables_and_commits_as_counted() {
        const OPS: u64 = 96;
        let plan = Plan {
            rounds: 2,
            files: 8,
            secs: 600.0,
            max_ops: OPS,
            words: vec![1, 64],
            interval: Duration::from_secs(3600),
            fsync_every: vec![Some(4), None],
        };
        let mut ticks = 0;
        let s = sweep(Arc::new(pm::MemRegion::new(64 << 20)), &plan, || ticks += 1).expect("sweep");
        assert_eq!(ticks, 2 * 2 * 4);
        assert_eq!(
            s.mounts,
            [Mount::Strict, Mount::Relaxed, Mount::Batch(1), Mount::Batch(64)]
        );
        for (per, every) in s.runs.iter().zip(&plan.fsync_every) {
            for (m, runs) in s.mounts.iter().zip(per) {
                assert_eq!(runs.len(), 2);
                for r in runs {
                    assert_eq!(r.ops, OPS);
                    let (j, b) = (r.journal.expect("counted"), r.batch.expect("counted"));
                    let fsyncs = every.map_or(0, |k| OPS / k);
                    let want = match m {
                        // Appended to the log: no journal, no batch.
                        Mount::Strict => BatchStats::default(),
                        // In place, one transaction each.
                        Mount::Relaxed => BatchStats::default(),
                        // Every operation fills a one-word transaction.
                        Mount::Batch(1) => BatchStats {
                            capacity: 1,
                            full: OPS,
                            ..BatchStats::default()
                        },
                        // Never full; each fsync commits.
                        _ => BatchStats {
                            capacity: 64,
                            fsync: fsyncs,
                            ..BatchStats::default()
                        },
                    };
                    assert_eq!(b, want, "{m:?}, fsync {every:?}");
                    let txns = match m {
                        Mount::Strict => 0,
                        Mount::Relaxed => OPS,
                        _ => b.commits(),
                    };
                    assert_eq!(j.txns, txns, "{m:?}, fsync {every:?}: {j:?}");
                }
            }
        }
        let md = markdown(&s).expect("tables");
        let lines: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
        assert_eq!(lines.len(), 2 * (2 + 4), "{md}");
        for l in &lines {
            assert_eq!(l.matches('|').count(), 15, "{l}");
        }
        assert!(
            md.contains("\nfsync every 4 operations:\n") && md.contains("\nno fsync:\n"),
            "{md}"
        );
        fn cells(l: &str) -> Vec<&str> {
            l.split('|').map(str::trim).collect()
        }
        // The first table: one-word transactions, all full; 64 words, all
        // at fsync, 250 commits per 1,000 operations.
        let one = cells(lines[4]);
        assert_eq!(one[1..4], ["relaxed+batch", "1", "56 B"]);
        assert_eq!((one[10], one[11], one[12], one[13]), ("1000", "100%", "0%", "0%"));
        assert!(one[6].parse::<f64>().is_ok_and(|x| x > 0.0), "ops/CPU-s: {md}");
        let many = cells(lines[5]);
        assert_eq!((many[10], many[11], many[13]), ("250", "0%", "100%"));
        // Without fsync the 64-word transaction never commits in the run.
        let none = cells(lines[11]);
        assert_eq!((none[10], none[11]), ("0.00", "—"));
    }

    #[test]
    fn a_limit_beyond_the_ring_shows_what_it_holds() {
        let plan = Plan {
            rounds: 1,
            files: 2,
            secs: 600.0,
            max_ops: 4,
            words: vec![1 << 20],
            interval: Duration::from_secs(3600),
            fsync_every: vec![None],
        };
        let s = sweep(Arc::new(pm::MemRegion::new(64 << 20)), &plan, || {}).expect("sweep");
        let md = markdown(&s).expect("tables");
        assert!(md.contains("| 1048576 (ring: 2729) | 64.0 KiB |"), "{md}");
    }
}
