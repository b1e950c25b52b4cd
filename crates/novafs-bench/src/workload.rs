//! The workloads, written once against [`Backend`] (the few file
//! operations they need) so that the library and every mounted file system
//! run the same code. Each returns one measured value per metric of
//! [`Workload::metrics`].

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use pm::latency::{Part, Spent};

use novafs_rng::SplitMix;

use crate::backend::{parallel, write_whole, Backend, Remount};
pub use crate::personality::{Personality, PersonalityParams};
use crate::requests::Breakdown;

/// One column of the results: what is measured, in which unit, and which way
/// is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metric {
    pub name: &'static str,
    pub unit: &'static str,
    pub lower_is_better: bool,
}

const fn cost(name: &'static str) -> Metric {
    Metric {
        name,
        unit: "µs/op",
        lower_is_better: true,
    }
}

const fn rate(name: &'static str, unit: &'static str) -> Metric {
    Metric {
        name,
        unit,
        lower_is_better: false,
    }
}

/// The workloads (a) to (e) and fio; (f), the full file system, is
/// one long run of its own (see `fullfs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// (a) NOVA §5.2: create files, append 4 KiB + fsync to each N times,
    /// read them back 4 KiB at a time, unlink.
    Micro,
    /// (b) one file, 4 KiB append + fsync per operation.
    AppendFsync,
    /// (d) 4 KiB random writes (no fsync) then random reads, one file per thread.
    Random { threads: usize },
    /// (d) 1 MiB sequential writes (fsync at the end, timed) then reads.
    Sequential { threads: usize },
    /// (c) a filebench personality on a pre-created file set, ops/s.
    Personality(Personality),
    /// (e) mount time of a file set after a clean unmount and after a crash.
    Recovery(RecoverySet),
    /// fio 4 KiB random writes with fsync=1, then random reads (psync).
    Fio,
}

/// The file sets of the recovery workload, in the shapes of NOVA Table 4
/// (scaled down by [`Params::recovery`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoverySet {
    /// Few large files in large writes (Table 4's videoserver).
    Large,
    /// Medium files in medium writes (fileserver).
    Medium,
    /// Many small files (mailserver).
    Small,
}

impl RecoverySet {
    pub const ALL: [RecoverySet; 3] = [RecoverySet::Large, RecoverySet::Medium, RecoverySet::Small];
}

/// Shape of one recovery file set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetShape {
    pub files: u64,
    pub file_size: u64,
    /// The write size that creates each file.
    pub io: usize,
}

impl Workload {
    pub fn label(&self) -> String {
        match self {
            Workload::Micro => "NOVA §5.2 micro".to_string(),
            Workload::AppendFsync => "append 4 KiB + fsync".to_string(),
            Workload::Random { threads } => format!("random 4 KiB, {threads} thread(s)"),
            Workload::Sequential { threads } => format!("sequential 1 MiB, {threads} thread(s)"),
            Workload::Personality(k) => format!("filebench {}", k.name()),
            Workload::Recovery(RecoverySet::Large) => "recovery: few large files".to_string(),
            Workload::Recovery(RecoverySet::Medium) => "recovery: medium files".to_string(),
            Workload::Recovery(RecoverySet::Small) => "recovery: many small files".to_string(),
            Workload::Fio => "fio 4 KiB psync".to_string(),
        }
    }

    pub fn metrics(&self) -> &'static [Metric] {
        const MICRO: [Metric; 4] = [
            cost("create"),
            cost("append 4 KiB + fsync"),
            cost("read 4 KiB"),
            cost("unlink"),
        ];
        const APPEND: [Metric; 1] = [cost("append 4 KiB + fsync")];
        const RANDOM: [Metric; 2] = [rate("random write", "kIOPS"), rate("random read", "kIOPS")];
        const SEQ: [Metric; 2] = [rate("write + fsync", "MiB/s"), rate("read", "MiB/s")];
        const PERSONALITY: [Metric; 1] = [rate("throughput", "kops/s")];
        const RECOVERY: [Metric; 2] = [
            Metric {
                name: "mount after clean unmount",
                unit: "ms",
                lower_is_better: true,
            },
            Metric {
                name: "mount after crash",
                unit: "ms",
                lower_is_better: true,
            },
        ];
        const FIO: [Metric; 2] = [rate("randwrite, fsync=1", "kIOPS"), rate("randread", "kIOPS")];
        match self {
            Workload::Micro => &MICRO,
            Workload::AppendFsync => &APPEND,
            Workload::Random { .. } => &RANDOM,
            Workload::Sequential { .. } => &SEQ,
            Workload::Personality(_) => &PERSONALITY,
            Workload::Recovery(_) => &RECOVERY,
            Workload::Fio => &FIO,
        }
    }
}

/// Sizes of the workloads.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    /// (a) files per run.
    pub files: u64,
    /// (a) 4 KiB appends per file.
    pub appends: u64,
    /// (b) appends per run.
    pub append_ops: u64,
    /// (d) file size per thread, MiB.
    pub file_mib: u64,
    /// (d) random operations per thread, each of writes and reads.
    pub random_ops: u64,
    /// (c) the personalities' size, threads and duration.
    pub personality: PersonalityParams,
    /// (e) the three recovery file sets, in [`RecoverySet::ALL`] order.
    pub recovery: [SetShape; 3],
    /// fio: run time of each job, ms, and the file size, MiB.
    pub fio_ms: u64,
    pub fio_file_mib: u64,
}

impl Params {
    pub fn recovery_set(&self, s: RecoverySet) -> SetShape {
        match s {
            RecoverySet::Large => self.recovery[0],
            RecoverySet::Medium => self.recovery[1],
            RecoverySet::Small => self.recovery[2],
        }
    }
}

const PAGE: usize = 4096;
const MIB: usize = 1 << 20;

fn us_per_op(spent: Duration, n: u64) -> f64 {
    spent.as_secs_f64() * 1e6 / n.max(1) as f64
}

/// What one run of a workload measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// One value per metric of [`Workload::metrics`]; `None` for a metric
    /// that does not apply to the target.
    pub values: Vec<Option<f64>>,
    /// The requests the target's daemon served during the timed part (the
    /// personalities, on a target a daemon serves).
    pub requests: Option<Breakdown>,
}

impl Outcome {
    /// Values alone, no request breakdown.
    pub fn values(values: Vec<Option<f64>>) -> Outcome {
        Outcome { values, requests: None }
    }
}

/// Run `w` once in a fresh directory `tag` under the target's root, which it
/// removes again. Recovery and fio need more than a [`Backend`]: see
/// [`recovery`] and `fio::run`.
pub fn run<B: Backend>(b: &B, w: Workload, p: &Params, tag: &str) -> Result<Outcome> {
    let dir = b.mkdir(tag)?;
    let mut requests = None;
    let values = match w {
        Workload::Micro => {
            let m = micro(b, &dir, p.files, p.appends)?;
            vec![m.create, m.append, m.read, m.unlink]
        }
        Workload::AppendFsync => vec![append_fsync(b, &dir, p.append_ops)?],
        Workload::Random { threads } => random(b, &dir, p.file_mib, [p.random_ops; 2], threads)?.to_vec(),
        Workload::Sequential { threads } => sequential(b, &dir, p, threads)?,
        Workload::Personality(k) => {
            let m = crate::personality::measure(b, &dir, k, &p.personality)?;
            requests = m.requests;
            vec![m.ops_per_s / 1e3]
        }
        Workload::Recovery(_) | Workload::Fio => bail!("{} is not a plain backend workload", w.label()),
    };
    b.rmdir(tag)?;
    Ok(Outcome {
        values: values.into_iter().map(Some).collect(),
        requests,
    })
}

/// (e) Create file set `s` in a fresh directory `tag`, time a mount after a
/// clean unmount and one after a crash, then remove the set. Values in ms;
/// `None` where the target cannot crash.
pub fn recovery<B: Remount>(b: &mut B, s: RecoverySet, p: &Params, tag: &str) -> Result<Vec<Option<f64>>> {
    let dir = b.mkdir(tag)?;
    let (names, times) = time_mounts(b, &dir, p.recovery_set(s), 1)?;
    for n in &names {
        b.unlink(&dir, n)?;
    }
    b.rmdir(tag)?;
    Ok(vec![
        times.clean.first().copied(),
        times.crash.first().copied().flatten(),
    ])
}

/// Wall times of mounts, ms, one per round.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MountTimes {
    pub clean: Vec<f64>,
    /// `None` where the target cannot crash.
    pub crash: Vec<Option<f64>>,
}

/// NOVA §4.7 recovery: create file set `shape` in `dir`, then time
/// `rounds` mounts after a clean unmount and after a crash, alternating.
/// Returns the names of the set, which stays.
pub fn time_mounts<B: Remount>(
    b: &mut B,
    dir: &B::Dir,
    shape: SetShape,
    rounds: usize,
) -> Result<(Vec<String>, MountTimes)> {
    let names: Vec<String> = (0..shape.files).map(|i| format!("m{i}")).collect();
    let buf = vec![0x6Du8; shape.io.max(1)];
    for n in &names {
        let f = b.create(dir, n)?;
        write_whole(b, &f, shape.file_size, &buf)?;
    }
    let mut times = MountTimes::default();
    for _ in 0..rounds {
        times.clean.push(b.remount_clean()?);
        times.crash.push(b.remount_crash()?);
    }
    Ok((names, times))
}

/// One run of (a), in µs per operation of each phase.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Micro {
    pub create: f64,
    /// A 4 KiB append and its fsync.
    pub append: f64,
    /// A 4 KiB read, each file read through as it was written.
    pub read: f64,
    /// Every page overwritten whole, then 512 bytes inside each, with an
    /// fsync each time (Fortis §5's overwrite latencies).
    pub overwrite: f64,
    pub overwrite_512: f64,
    pub unlink: f64,
    /// The journal's work in each phase, in the order of the fields above,
    /// on a target that counts it (the library).
    pub journal: Option<[PhaseJournal; 6]>,
    /// Where each phase's time went inside novafs (`pm::latency`), in the
    /// same order: all zero unless the breakdown is on and the target runs
    /// novafs on the calling thread (the library).
    pub parts: [PhaseParts; 6],
}

/// The latency breakdown of one phase of [`micro`] (NOVA Fig. 6c,
/// NOVA-Fortis Fig. 10): the time its timed operations spent in each part
/// of novafs's work, and how many they were.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PhaseParts {
    pub spent: Spent,
    pub ops: u64,
}

impl PhaseParts {
    /// Nanoseconds per operation spent in `part`.
    pub fn ns_per_op(&self, part: Part) -> f64 {
        self.spent.ns(part) / self.ops.max(1) as f64
    }
}

/// What novafs's journal did in one phase of [`micro`] (FGM §IV-B's
/// journal writes), and how many operations the phase timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhaseJournal {
    pub stats: novafs::JournalStats,
    pub ops: u64,
}

impl PhaseJournal {
    /// Bytes written to the journal per operation.
    pub fn bytes_per_op(&self) -> f64 {
        self.stats.journal_bytes as f64 / self.ops.max(1) as f64
    }

    /// The journal's store fences per operation.
    pub fn fences_per_op(&self) -> f64 {
        self.stats.fences as f64 / self.ops.max(1) as f64
    }
}

/// (a) NOVA §5.2's microbenchmark in `dir`: create `files` files, append
/// 4 KiB + fsync to each `appends` times, read each back 4 KiB at a time,
/// delete them. The append and read phases open every file again (a
/// mounted file system cannot hold thousands open) but time only the
/// appends and reads, so every target is measured on the operations the
/// rows name, and the library on what it does without an open.
pub fn micro<B: Backend>(b: &B, dir: &B::Dir, files: u64, appends: u64) -> Result<Micro> {
    let page = vec![0x5Au8; PAGE];
    let names: Vec<String> = (0..files).map(|i| format!("f{i}")).collect();
    let pages = files * appends;
    // Each phase's journal work, untimed opens included (they write none).
    let mut last = b.journal_stats();
    let mut journal = Vec::with_capacity(6);
    let mut parts = Vec::with_capacity(6);
    let mut phase_done = |timed: Timed, ops: u64| {
        let now = b.journal_stats();
        journal.push(now.zip(last).map(|(now, last)| PhaseJournal {
            stats: now.since(&last),
            ops,
        }));
        last = now;
        parts.push(PhaseParts {
            spent: timed.parts,
            ops,
        });
        us_per_op(timed.wall, ops)
    };
    let mut t = Timed::default();
    t.run(|| names.iter().try_for_each(|n| b.create(dir, n).map(drop)))?;
    let create = phase_done(t, files);
    let mut t = Timed::default();
    for n in &names {
        let f = b.open(dir, n)?;
        t.run(|| {
            (0..appends).try_for_each(|k| {
                b.write_at(&f, k * PAGE as u64, &page)?;
                b.fsync(&f)
            })
        })?;
    }
    let append = phase_done(t, pages);
    let mut buf = vec![0u8; PAGE];
    let mut t = Timed::default();
    for n in &names {
        let f = b.open(dir, n)?;
        t.run(|| (0..appends).try_for_each(|k| b.read_at(&f, k * PAGE as u64, &mut buf).map(drop)))?;
    }
    let read = phase_done(t, pages);
    let overwrite = phase_done(rewrite(b, dir, &names, appends, 0, &page)?, pages);
    let overwrite_512 = phase_done(rewrite(b, dir, &names, appends, 1024, &page[..512])?, pages);
    let mut t = Timed::default();
    t.run(|| names.iter().try_for_each(|n| b.unlink(dir, n)))?;
    let unlink = phase_done(t, files);
    let journal = journal.into_iter().collect::<Option<Vec<_>>>();
    Ok(Micro {
        create,
        append,
        read,
        overwrite,
        overwrite_512,
        unlink,
        journal: journal.and_then(|v| v.try_into().ok()),
        parts: parts.try_into().unwrap_or_default(),
    })
}

/// The wall time and the latency breakdown (`pm::latency`, this thread's)
/// of the windows [`Timed::run`] timed.
#[derive(Default)]
struct Timed {
    wall: Duration,
    parts: Spent,
}

impl Timed {
    fn run<T>(&mut self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let (t, before) = (Instant::now(), Spent::thread());
        let out = f();
        self.wall += t.elapsed();
        self.parts = self.parts.plus(&Spent::thread().since(&before));
        out
    }
}

/// Writes `data` at `at` inside each of the first `pages` pages of every
/// file, each followed by an fsync; only the writes and fsyncs are timed.
fn rewrite<B: Backend>(b: &B, dir: &B::Dir, names: &[String], pages: u64, at: u64, data: &[u8]) -> Result<Timed> {
    let mut t = Timed::default();
    for n in names {
        let f = b.open(dir, n)?;
        t.run(|| {
            (0..pages).try_for_each(|k| {
                b.write_at(&f, k * PAGE as u64 + at, data)?;
                b.fsync(&f)
            })
        })?;
    }
    Ok(t)
}

fn append_fsync<B: Backend>(b: &B, dir: &B::Dir, ops: u64) -> Result<f64> {
    let page = vec![0xA5u8; PAGE];
    let f = b.create(dir, "log")?;
    let t = Instant::now();
    for k in 0..ops {
        b.write_at(&f, k * PAGE as u64, &page)?;
        b.fsync(&f)?;
    }
    let us = us_per_op(t.elapsed(), ops);
    drop(f);
    b.unlink(dir, "log")?;
    Ok(us)
}

/// Write each thread's file sequentially and fsync it (untimed setup).
fn fill<B: Backend>(b: &B, dir: &B::Dir, name: &str, mib: u64) -> Result<B::File> {
    let chunk = vec![0x3Cu8; MIB];
    let f = b.create(dir, name)?;
    for i in 0..mib {
        b.write_at(&f, i * MIB as u64, &chunk)?;
    }
    b.fsync(&f)?;
    Ok(f)
}

/// (d) On `threads` threads at once, each with its own file of
/// `file_mib` MiB (written first, untimed): `ops[0]` 4 KiB writes at
/// random pages, then `ops[1]` reads; kIOPS of the writes and of the
/// reads, all threads together (fio's randwrite and randread with one job
/// a thread).
pub fn random<B: Backend>(b: &B, dir: &B::Dir, file_mib: u64, ops: [u64; 2], threads: usize) -> Result<[f64; 2]> {
    let names: Vec<String> = (0..threads).map(|i| format!("r{i}")).collect();
    let files = names
        .iter()
        .map(|n| fill(b, dir, n, file_mib))
        .collect::<Result<Vec<_>>>()?;
    let pages = file_mib * (MIB / PAGE) as u64;
    let total = ops.map(|n| (n * threads as u64) as f64);
    let write = parallel(threads, |i| {
        let page = vec![0x77u8; PAGE];
        let mut rng = SplitMix::derive(1, i as u64);
        for _ in 0..ops[0] {
            b.write_at(&files[i], rng.below(pages) * PAGE as u64, &page)?;
        }
        Ok(())
    })?;
    let read = parallel(threads, |i| {
        let mut page = vec![0u8; PAGE];
        let mut rng = SplitMix::derive(2, i as u64);
        for _ in 0..ops[1] {
            b.read_at(&files[i], rng.below(pages) * PAGE as u64, &mut page)?;
        }
        Ok(())
    })?;
    drop(files);
    for n in &names {
        b.unlink(dir, n)?;
    }
    Ok([total[0] / write / 1e3, total[1] / read / 1e3])
}

fn sequential<B: Backend>(b: &B, dir: &B::Dir, p: &Params, threads: usize) -> Result<Vec<f64>> {
    let names: Vec<String> = (0..threads).map(|i| format!("s{i}")).collect();
    let files = names.iter().map(|n| b.create(dir, n)).collect::<Result<Vec<_>>>()?;
    let total = (p.file_mib * threads as u64) as f64;
    let write = parallel(threads, |i| {
        let chunk = vec![0x42u8; MIB];
        for k in 0..p.file_mib {
            b.write_at(&files[i], k * MIB as u64, &chunk)?;
        }
        b.fsync(&files[i])
    })?;
    let read = parallel(threads, |i| {
        let mut chunk = vec![0u8; MIB];
        for k in 0..p.file_mib {
            b.read_at(&files[i], k * MIB as u64, &mut chunk)?;
        }
        Ok(())
    })?;
    drop(files);
    for n in &names {
        b.unlink(dir, n)?;
    }
    Ok(vec![total / write, total / read])
}
