//! The workloads of the fine-grained journaling paper's evaluation (FGM
//! §IV-A), written against [`Backend`] and scaled to one machine: varmail
//! and fileserver (the filebench personalities of [`personality`]),
//! FileMicro_writefsync (4 KiB appends to one large file, an fsync every
//! 32 of them) and a PostMark shape (single-threaded transactions over a
//! pool of small files, write-only with 50%/50% creates and deletes). Each
//! run reports its operations, its wall time and what the metadata journal
//! wrote meanwhile, so that `novafs bench --fgm` can set the fine-grained
//! journal beside the block-granular one (FGM §IV-B).
//!
//! What an operation is follows each benchmark's own count: filebench's
//! flowops (opens and closes included) for varmail and fileserver, the
//! 4 KiB appends for FileMicro_writefsync (its fsyncs are part of them),
//! PostMark's transactions (a create or a delete, then an append).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use novafs::{BatchStats, JournalStats};
use novafs_rng::SplitMix;

use crate::backend::{write_whole, Backend};
use crate::personality::{self, Counters, Personality, Until};

/// The four workloads of FGM §IV-A.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    Varmail,
    Fileserver,
    WriteFsync,
    Postmark,
}

/// Appends between two fsyncs in FileMicro_writefsync (FGM §IV-A's
/// default).
pub const FSYNC_EVERY: u64 = 32;

/// FileMicro_writefsync's append size: the 4 KiB of the paper's
/// frequent-commit setting (FGM §IV-B 3).
pub const APPEND: usize = 4096;

/// PostMark's default file sizes, bytes (500 B to 9.77 KB).
pub const POSTMARK_SIZES: (u64, u64) = (512, 10 << 10);

impl Workload {
    pub const ALL: [Workload; 4] = [
        Workload::Varmail,
        Workload::Fileserver,
        Workload::WriteFsync,
        Workload::Postmark,
    ];

    pub fn name(&self) -> &'static str {
        match self {
            Workload::Varmail => "varmail",
            Workload::Fileserver => "fileserver",
            Workload::WriteFsync => "FileMicro_writefsync",
            Workload::Postmark => "postmark",
        }
    }

    /// What one operation of this workload is, for the report.
    pub fn op(&self) -> &'static str {
        match self {
            Workload::Varmail | Workload::Fileserver => "flowop",
            Workload::WriteFsync => "4 KiB append",
            Workload::Postmark => "transaction",
        }
    }
}

/// Size and duration of one run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// Seconds of timed work.
    pub secs: f64,
    /// Entries of the file set (varmail, fileserver) or the pool
    /// (postmark).
    pub files: u64,
    /// FileMicro_writefsync's file before the run (the paper's 1 GB,
    /// scaled); the file is started again from this size, untimed and
    /// unjournaled, whenever its appends reach four times it.
    pub big_file: u64,
}

/// What one run of a workload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    pub ops: u64,
    /// Timed wall time.
    pub elapsed: Duration,
    /// The journal's work during the timed operations; `None` where the
    /// target does not count it.
    pub journal: Option<JournalStats>,
    /// A batching relaxed mount's commits of its running transaction
    /// during the run (FileMicro_writefsync: its untimed restarts too,
    /// which batch nothing); `None` where the target does not count them.
    pub batch: Option<BatchStats>,
    /// CPU time the process's threads spent in the timed window (the
    /// attribute storm's; `None` here).
    pub cpu: Option<Duration>,
}

impl Run {
    pub fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Operations per second of CPU time, where it was measured: on a
    /// busy machine, less the share of the CPUs the run was given.
    pub fn ops_per_cpu_s(&self) -> Option<f64> {
        self.cpu.map(|c| self.ops as f64 / c.as_secs_f64().max(1e-9))
    }

    /// Journal bytes per operation.
    pub fn bytes_per_op(&self) -> Option<f64> {
        self.journal.map(|j| j.journal_bytes as f64 / self.ops.max(1) as f64)
    }

    /// Journal fences per operation.
    pub fn fences_per_op(&self) -> Option<f64> {
        self.journal.map(|j| j.fences as f64 / self.ops.max(1) as f64)
    }

    /// Journal transactions committed per 1,000 operations.
    pub fn commits_per_kop(&self) -> Option<f64> {
        self.journal.map(|j| 1e3 * j.txns as f64 / self.ops.max(1) as f64)
    }
}

/// The journal's work between two readings.
fn since(now: Option<JournalStats>, earlier: Option<JournalStats>) -> Option<JournalStats> {
    now.zip(earlier).map(|(n, e)| n.since(&e))
}

/// The batch commits between two readings.
fn batch_since(now: Option<BatchStats>, earlier: Option<BatchStats>) -> Option<BatchStats> {
    now.zip(earlier).map(|(n, e)| n.since(&e))
}

/// Adds `b` to `a`, field by field.
fn add(a: Option<JournalStats>, b: Option<JournalStats>) -> Option<JournalStats> {
    a.zip(b).map(|(a, b)| JournalStats {
        journal_bytes: a.journal_bytes + b.journal_bytes,
        applied_bytes: a.applied_bytes + b.applied_bytes,
        checkpoint_bytes: a.checkpoint_bytes + b.checkpoint_bytes,
        flushes: a.flushes + b.flushes,
        fences: a.fences + b.fences,
        txns: a.txns + b.txns,
        words: a.words + b.words,
    })
}

/// The batch commits of `runs` summed (the capacity is the largest);
/// `None` if none counts them.
pub fn batch_total(runs: &[Run]) -> Option<BatchStats> {
    runs.iter().filter_map(|r| r.batch).reduce(|a, b| a.plus(&b))
}

/// One run of `w` in `dir` (which it leaves empty): set up untimed, run
/// for `p.secs`, clean up untimed.
pub fn run<B: Backend>(b: &B, dir: &B::Dir, w: Workload, p: &Params) -> Result<Run> {
    match w {
        Workload::Varmail => filebench(b, dir, Personality::Varmail, p),
        Workload::Fileserver => filebench(b, dir, Personality::Fileserver, p),
        Workload::WriteFsync => write_fsync(b, dir, p),
        Workload::Postmark => postmark(b, dir, p),
    }
}

/// A filebench personality on one thread (PostMark is single-threaded,
/// and so the four workloads compare alike).
fn filebench<B: Backend>(b: &B, dir: &B::Dir, k: Personality, p: &Params) -> Result<Run> {
    let set = personality::prepare(b, dir, k, p.files)?;
    let counters = Counters::default();
    let (before, batch) = (b.journal_stats(), b.batch_stats());
    let deadline = Instant::now() + Duration::from_secs_f64(p.secs);
    let t = Instant::now();
    personality::run(
        b,
        dir,
        k,
        &set,
        1,
        Until::Deadline(deadline),
        &AtomicBool::new(false),
        &counters,
    )?;
    let elapsed = t.elapsed();
    let journal = since(b.journal_stats(), before);
    let batch = batch_since(b.batch_stats(), batch);
    personality::cleanup(b, dir, &set)?;
    let nospc = counters.nospc.load(Ordering::Relaxed);
    if nospc > 0 {
        bail!("{}: {nospc} operations failed with ENOSPC", k.name());
    }
    Ok(Run {
        ops: counters.ops.load(Ordering::Relaxed),
        elapsed,
        journal,
        batch,
        cpu: None,
    })
}

/// FileMicro_writefsync: 4 KiB appends to one file of `p.big_file` bytes,
/// an fsync every [`FSYNC_EVERY`]. Starting the file again (when it has
/// grown fourfold) is left out of both the time and the journal.
fn write_fsync<B: Backend>(b: &B, dir: &B::Dir, p: &Params) -> Result<Run> {
    let buf = vec![0x57u8; APPEND];
    let start = p.big_file.max(APPEND as u64);
    let fill = |b: &B| -> Result<B::File> {
        let f = b.create(dir, "big")?;
        write_whole(b, &f, start, &vec![0x42u8; 1 << 20])?;
        b.fsync(&f)?;
        Ok(f)
    };
    let mut f = fill(b)?;
    let batch = b.batch_stats();
    let mut end = start;
    let (mut ops, mut elapsed, mut journal) =
        (0u64, Duration::ZERO, b.journal_stats().map(|_| JournalStats::default()));
    let deadline = Instant::now() + Duration::from_secs_f64(p.secs);
    while Instant::now() < deadline {
        if end >= 4 * start {
            drop(f);
            b.unlink(dir, "big")?;
            f = fill(b)?;
            end = start;
        }
        let before = b.journal_stats();
        let t = Instant::now();
        // Up to the next restart, a batch of fsync periods at a time.
        for _ in 0..64 {
            if end >= 4 * start {
                break;
            }
            for _ in 0..FSYNC_EVERY {
                b.write_at(&f, end, &buf)?;
                end += APPEND as u64;
                ops += 1;
            }
            b.fsync(&f)?;
        }
        elapsed += t.elapsed();
        journal = add(journal, since(b.journal_stats(), before));
    }
    let batch = batch_since(b.batch_stats(), batch);
    drop(f);
    b.unlink(dir, "big")?;
    Ok(Run {
        ops,
        elapsed,
        journal,
        batch,
        cpu: None,
    })
}

/// PostMark, write-only as FGM §IV-A runs it: a pool of `p.files` files
/// of [`POSTMARK_SIZES`], then transactions of a create or a delete
/// (50%/50%) and an append (512 B to 4 KiB, PostMark's read/append half
/// all appends) to a random existing file. Files are written whole at
/// create, in PostMark's 512 B blocks.
fn postmark<B: Backend>(b: &B, dir: &B::Dir, p: &Params) -> Result<Run> {
    let mut rng = SplitMix::derive(27, 4);
    let buf = vec![0x50u8; POSTMARK_SIZES.1 as usize];
    let (lo, hi) = POSTMARK_SIZES;
    let size = |rng: &mut SplitMix| lo + rng.below(hi - lo + 1);
    let mut live: Vec<u64> = Vec::new();
    let mut next = 0u64;
    let mut create = |rng: &mut SplitMix, live: &mut Vec<u64>| -> Result<()> {
        let f = b.create(dir, &format!("p{next}"))?;
        write_whole(b, &f, size(rng), &buf[..512])?;
        live.push(next);
        next += 1;
        Ok(())
    };
    for _ in 0..p.files.max(2) {
        create(&mut rng, &mut live)?;
    }
    let (before, batch) = (b.journal_stats(), b.batch_stats());
    let (mut ops, t) = (0u64, Instant::now());
    let deadline = t + Duration::from_secs_f64(p.secs);
    // A few transactions between clock readings.
    while Instant::now() < deadline {
        for _ in 0..16 {
            if rng.chance(1, 2) || live.len() < 2 {
                create(&mut rng, &mut live)?;
            } else {
                let i = rng.below(live.len() as u64) as usize;
                b.unlink(dir, &format!("p{}", live.swap_remove(i)))?;
            }
            let n = live[rng.below(live.len() as u64) as usize];
            let f = b.open(dir, &format!("p{n}"))?;
            let end = b.len(&f)?;
            let len = 512 + rng.below(4096 - 512 + 1) as usize;
            b.write_at(&f, end, &buf[..len])?;
            ops += 1;
        }
    }
    let elapsed = t.elapsed();
    let journal = since(b.journal_stats(), before);
    let batch = batch_since(b.batch_stats(), batch);
    for n in live {
        b.unlink(dir, &format!("p{n}"))?;
    }
    Ok(Run {
        ops,
        elapsed,
        journal,
        batch,
        cpu: None,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::target::LibraryTarget;

    #[test]
    fn every_workload_runs_counts_its_ops_and_leaves_its_directory_empty() {
        let t = LibraryTarget::on_region(Arc::new(pm::MemRegion::new(128 << 20))).expect("format a heap region");
        let p = Params {
            secs: 0.05,
            files: 20,
            big_file: 64 << 10,
        };
        for w in Workload::ALL {
            let dir = t.mkdir(w.name()).expect("mkdir");
            let r = run(&t, &dir, w, &p).expect("run");
            assert!(r.ops > 0, "{}", w.name());
            let j = r.journal.expect("the library counts its journal");
            match w {
                // Appends commit through the inode log's tail (NOVA §3.3),
                // not the journal; the restarts are left out.
                Workload::WriteFsync => {
                    assert_eq!(r.ops % FSYNC_EVERY, 0);
                    assert_eq!(j.journal_bytes, 0, "{j:?}");
                }
                // Creates and deletes journal the directory and inode.
                _ => assert!(j.journal_bytes > 0 && j.txns > 0, "{}: {j:?}", w.name()),
            }
            t.rmdir(w.name()).expect("the run leaves its directory empty");
        }
    }
}
