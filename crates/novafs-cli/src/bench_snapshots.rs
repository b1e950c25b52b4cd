//! `novafs bench --snapshots`: what snapshots cost (NOVA-Fortis §3, §5):
//! the latency of taking one as the file system grows (the paper: about
//! constant), the four filebench personalities' throughput with a
//! snapshot every few seconds against none, rounds interleaved (Fig. 4:
//! −0.6% on average with one every 10 s), the DRAM the manifests take
//! against the space in use (the paper: 0.03–0.05%), and then the cost of
//! deleting those snapshots one by one and of reclaiming what they held
//! (§3.4: constant-time deletion, about 400 ns a page reclaimed). With DAX mmap (§3.3, Fig. 5): the latency
//! of a snapshot against the pages a mapping has write-faulted, which it
//! must write-protect (the paper: about 10 ns a page), and the cost of the
//! copy-on-write fault that follows (the paper: 2 µs).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use novafs::{Fs, Mapping, PAGE_SIZE};
use novafs_bench::backend::{Backend, Remount};
use novafs_bench::personality::{self, Counters, Personality, Until};
use novafs_bench::stats::summarize;
use novafs_bench::target::LibraryTarget;
use pm::{MapOptions, MmapRegion, Prefault, Region, WriteProtect};

use crate::image::explain;

/// What the snapshot benchmark runs.
pub struct Plan<'a> {
    pub image: &'a Path,
    pub size: u64,
    pub eadr: bool,
    pub rounds: usize,
    /// Seconds of each personality per round and side.
    pub secs: f64,
    /// Seconds between snapshots on the measured side.
    pub every: f64,
    /// Files in each personality's set.
    pub files: u64,
    /// The personalities run with and without snapshots.
    pub personalities: &'a [Personality],
}

/// A personality by its filebench name (`--personalities`).
pub(crate) fn parse_personality(name: &str) -> Result<Personality, String> {
    Personality::ALL.into_iter().find(|p| p.name() == name).ok_or_else(|| {
        let names: Vec<_> = Personality::ALL.iter().map(|p| p.name()).collect();
        format!("unknown personality {name:?} (one of {})", names.join(", "))
    })
}

/// A fresh region file of `size` bytes at `image`, prefaulted and without
/// write protection (`bench --snapshots` and `bench --mmap`).
pub(crate) fn region(image: &Path, size: u64, eadr: bool) -> Result<MmapRegion> {
    let opts = MapOptions {
        eadr,
        protect: WriteProtect::Off,
        // Measure the file system, not first-touch page faults.
        prefault: Prefault::Now,
        ..MapOptions::default()
    };
    let _ = std::fs::remove_file(image);
    MmapRegion::create(image, size, &opts).map_err(|e| explain(image, e))
}

/// A fresh library target on a region file at `image`.
fn target(plan: &Plan, image: &Path) -> Result<LibraryTarget> {
    let region: Arc<dyn Region> = Arc::new(region(image, plan.size, plan.eadr)?);
    LibraryTarget::on_region(region)
}

pub fn run(plan: &Plan) -> Result<()> {
    let second = plan.image.with_extension("snap.img");
    let result = (|| -> Result<()> {
        latency(plan)?;
        mmap_latency(plan)?;
        throughput(plan, &second)
    })();
    let _ = std::fs::remove_file(plan.image);
    let _ = std::fs::remove_file(&second);
    result
}

/// Snapshot latency with 1,000 to 100,000 files of one page: a snapshot
/// records one list entry and advances the epoch, whatever the size.
fn latency(plan: &Plan) -> Result<()> {
    let mut lib = target(plan, plan.image)?;
    let fs = lib.fs()?;
    let dir = lib.mkdir("files")?;
    let page = vec![0x5Au8; PAGE_SIZE as usize];
    println!("snapshot creation latency (library; 30 snapshots at each size)\n");
    println!("| files | median µs | min–max µs |");
    println!("|---|---|---|");
    let mut made = 0u64;
    for files in [1_000u64, 10_000, 100_000] {
        while made < files {
            let f = lib.create(&dir, &format!("f{made}"))?;
            lib.write_at(&f, 0, &page)?;
            made += 1;
        }
        let mut us = Vec::new();
        for i in 0..30 {
            let t = Instant::now();
            fs.take_snapshot(format!("n{files}-{i}").as_bytes())?;
            us.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let s = summarize(&us).context("no samples")?;
        println!("| {files} | {:.2} | {:.2}–{:.2} |", s.median, s.min, s.max);
    }
    mount_cost(plan, &mut lib, &page)
}

/// Snapshot latency against the pages a DAX mapping has made writable
/// (Fig. 5), and the faults around it: the first store to a page (its
/// unprotect entry committed) and the copy-on-write after a snapshot.
fn mmap_latency(plan: &Plan) -> Result<()> {
    let lib = target(plan, plan.image)?;
    let fs = lib.fs()?;
    let page = PAGE_SIZE as usize;
    const PAGES: usize = 8192;
    let ino = fs.create(novafs::ROOT_INO, b"mapped", 0o644, 0, 0)?.ino;
    fs.write(ino, 0, &vec![0x33u8; PAGES * page])?;
    let m = fs.mmap(ino, 0, PAGES, true)?;
    println!("\nsnapshot creation with a DAX-mapped file (library; 5 rounds at each size)\n");
    println!(
        "| write-faulted pages | snapshot median µs | ns a page | first-store fault µs | copy-on-write fault µs |"
    );
    println!("|---|---|---|---|---|");
    let mut n_snap = 0;
    for n in [0usize, 100, 1000, 8000] {
        let (mut snap, mut first, mut cow) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..5 {
            let f = dax_faults(fs, &m, &out_of_order(n), &format!("m{n_snap}"))?;
            first.push(f.first);
            snap.push(f.snapshot);
            cow.push(f.cow);
            n_snap += 1;
        }
        fs.wait_reclaimed();
        let s = summarize(&snap).context("no samples")?;
        let per_page = if n == 0 { 0.0 } else { s.median * 1e3 / n as f64 };
        let f = summarize(&first).context("no samples")?;
        let c = summarize(&cow).context("no samples")?;
        if n == 0 {
            println!("| 0 | {:.2} | – | – | – |", s.median);
        } else {
            println!(
                "| {n} | {:.2} | {per_page:.0} | {:.2} | {:.2} |",
                s.median, f.median, c.median
            );
        }
    }
    drop(m);
    drop(lib);
    Ok(())
}

/// One round of the DAX fault measurement over pages of the writable DAX
/// mapping `m`, stored to in a given order (`bench --snapshots` and
/// `bench --mmap`).
pub(crate) struct DaxFaults {
    /// µs a page: the first store after a sync (its unprotect entry
    /// committed, the page made writable).
    pub(crate) first: f64,
    /// µs the snapshot took, write-protecting those pages.
    pub(crate) snapshot: f64,
    /// µs a page: the store after the snapshot, copied on write (§3.3).
    pub(crate) cow: f64,
    /// Faults a page of the first stores and of the copies on write: 1
    /// when each store faults, less when one fault brings in a run
    /// (write-ahead).
    pub(crate) faults: (f64, f64),
}

/// Syncs `m`, stores to each of pages `order` in that order, takes
/// snapshot `name`, stores to them again and deletes the snapshot (the
/// caller waits for its pages to be reclaimed when it likes:
/// [`Fs::wait_reclaimed`]).
pub(crate) fn dax_faults(fs: &Fs, m: &Mapping, order: &[usize], name: &str) -> Result<DaxFaults> {
    m.sync()?; // every page protected and clean: the next store faults
    let per_page = |faults: u64| faults as f64 / order.len().max(1) as f64;
    let before = m.faults();
    let first = store_pages(m, order, 1)?;
    let first_faults = per_page(m.faults() - before);
    let t = Instant::now();
    fs.take_snapshot(name.as_bytes())?;
    let snapshot = t.elapsed().as_secs_f64() * 1e6;
    let before = m.faults();
    let cow = store_pages(m, order, 2)?;
    let cow_faults = per_page(m.faults() - before);
    fs.delete_snapshot(name.as_bytes())?;
    Ok(DaxFaults {
        first,
        snapshot,
        cow,
        faults: (first_faults, cow_faults),
    })
}

/// Pages `0..n` in page order.
pub(crate) fn in_order(n: usize) -> Vec<usize> {
    (0..n).collect()
}

/// Pages `0..n` each once, no two in a row neighbours (a stride of 7, for
/// `n` no multiple of 7): every store faults alone.
pub(crate) fn out_of_order(n: usize) -> Vec<usize> {
    (0..n).map(|i| i * 7 % n).collect()
}

/// Stores `byte` to the first byte of each of pages `order` of `m`, in
/// that order; µs a page.
pub(crate) fn store_pages(m: &Mapping, order: &[usize], byte: u8) -> Result<f64> {
    let t = Instant::now();
    for &p in order {
        m.store(p * PAGE_SIZE as usize, &[byte])?;
    }
    Ok(t.elapsed().as_secs_f64() * 1e6 / order.len().max(1) as f64)
}

/// Mount time with snapshots whose manifests hold something: after a
/// clean unmount (allocators and manifests saved, Fortis §3.2) against
/// after a crash (the scan rebuilds them), rounds interleaved.
fn mount_cost(plan: &Plan, lib: &mut LibraryTarget, page: &[u8]) -> Result<()> {
    let fs = lib.fs()?;
    let dir = fs.lookup(novafs::ROOT_INO, b"files")?.ino;
    // Overwrite every tenth file: each old page goes to a manifest.
    for i in (0..100_000u64).step_by(10) {
        let f = fs.lookup(dir, format!("f{i}").as_bytes())?.ino;
        fs.write(f, 0, page)?;
    }
    let (items, _) = fs.manifest_memory();
    let snapshots = fs.snapshots().len();
    let (mut clean, mut crash) = (Vec::new(), Vec::new());
    for _ in 0..plan.rounds.max(3) {
        clean.push(lib.remount_clean()?);
        crash.push(lib.remount_crash()?.context("no crash mount")?);
    }
    let (c, s) = (
        summarize(&clean).context("no samples")?,
        summarize(&crash).context("no samples")?,
    );
    println!("\nmount time with {snapshots} snapshots and {items} manifest items (100,000 files)\n");
    println!("| mount | median ms | min–max ms |");
    println!("|---|---|---|");
    println!(
        "| after clean unmount (saved manifests) | {:.1} | {:.1}–{:.1} |",
        c.median, c.min, c.max
    );
    println!("| after a crash (scan) | {:.1} | {:.1}–{:.1} |", s.median, s.min, s.max);
    println!("\nratio scan / saved: {:.1}×", s.median / c.median);
    Ok(())
}

/// Which snapshot goes first when a run's snapshots are deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    OldestFirst,
    NewestFirst,
}

impl Order {
    /// Rounds alternate the order, so both are measured on like runs.
    fn for_round(round: usize) -> Order {
        if round.is_multiple_of(2) {
            Order::OldestFirst
        } else {
            Order::NewestFirst
        }
    }

    fn name(self) -> &'static str {
        match self {
            Order::OldestFirst => "oldest first",
            Order::NewestFirst => "newest first",
        }
    }
}

/// The manifests at the end of a run, before any deletion.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Memory {
    snapshots: u64,
    items: u64,
    bytes: u64,
    /// Bytes in use in the file system.
    used: u64,
}

impl Memory {
    /// The manifests' DRAM as a percentage of the space in use (Table 1).
    fn pct_of_used(&self) -> f64 {
        self.bytes as f64 * 100.0 / self.used.max(1) as f64
    }
}

/// Deleting a run's snapshots one by one, each followed by waiting for
/// the reclaimer: the paper's constant-time deletion, and the background
/// reclamation (about 400 ns a page).
#[derive(Debug, Clone, Default, PartialEq)]
struct Deletions {
    runs: usize,
    /// µs each `delete_snapshot` call took.
    delete_us: Vec<f64>,
    /// Free pages gained after each deletion's reclamation (a deletion
    /// also writes a record, so a small one can be negative).
    freed: Vec<i64>,
    /// Pages the deleted snapshots alone held when deleted.
    held: u64,
    /// Seconds waited for the reclaimer, over all deletions.
    reclaim_secs: f64,
}

impl Deletions {
    fn merge(&mut self, other: Deletions) {
        self.runs += other.runs;
        self.delete_us.extend(other.delete_us);
        self.freed.extend(other.freed);
        self.held += other.held;
        self.reclaim_secs += other.reclaim_secs;
    }

    /// A report row after the workload and order columns: runs,
    /// deletions, delete median and max µs, pages freed per run, held per
    /// run, reclaim ms per run, ns a page reclaimed.
    fn row(&self) -> String {
        let runs = self.runs.max(1) as f64;
        let freed: i64 = self.freed.iter().sum();
        let (median, max) = match summarize(&self.delete_us) {
            Some(s) => (format!("{:.1}", s.median), format!("{:.1}", s.max)),
            None => ("–".into(), "–".into()),
        };
        let per_page = if freed > 0 {
            format!("{:.0}", self.reclaim_secs * 1e9 / freed as f64)
        } else {
            "–".into()
        };
        format!(
            "{} | {} | {median} | {max} | {:.0} | {:.0} | {:.2} | {per_page}",
            self.runs,
            self.delete_us.len(),
            freed as f64 / runs,
            self.held as f64 / runs,
            self.reclaim_secs * 1e3 / runs,
        )
    }
}

/// One run of a personality.
struct Run {
    ops: f64,
    memory: Memory,
    deleted: Deletions,
}

/// Percentage change from `base` to `with`.
fn change_pct(base: f64, with: f64) -> f64 {
    (with / base - 1.0) * 100.0
}

/// NOVA-Fortis Fig. 4: each personality with a snapshot every
/// `plan.every` seconds against none, rounds interleaved; after each run
/// with snapshots they are deleted one by one ([`Order::for_round`]).
fn throughput(plan: &Plan, second: &Path) -> Result<()> {
    let bar = ProgressBar::new((2 * plan.rounds * plan.personalities.len()) as u64);
    bar.set_style(
        ProgressStyle::with_template("{msg:10} {bar:30} {pos}/{len}").unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let (mut impact, mut deletions, mut changes) = (Vec::new(), Vec::new(), Vec::new());
    for &k in plan.personalities {
        bar.set_message(k.name());
        let (mut plain, mut snapped, mut taken) = (Vec::new(), Vec::new(), Vec::new());
        let mut memory = Memory::default();
        let mut by_order = [Deletions::default(), Deletions::default()];
        for round in 0..plan.rounds {
            plain.push(workload(plan, k, plan.image, None)?.ops);
            bar.inc(1);
            let r = workload(plan, k, second, Some(Order::for_round(round)))?;
            snapped.push(r.ops);
            taken.push(r.memory.snapshots as f64);
            memory = r.memory;
            by_order[round % 2].merge(r.deleted);
            bar.inc(1);
        }
        let (a, b) = (
            summarize(&plain).context("no rounds")?,
            summarize(&snapped).context("no rounds")?,
        );
        let taken = summarize(&taken).context("no rounds")?.median;
        let change = change_pct(a.median, b.median);
        changes.push(change);
        impact.push(format!(
            "| {} | {:.0} ({:.0}–{:.0}) | {:.0} ({:.0}–{:.0}) | {change:+.1}% | {taken:.0} | {:.4}% |",
            k.name(),
            a.median,
            a.min,
            a.max,
            b.median,
            b.min,
            b.max,
            memory.pct_of_used()
        ));
        for (order, d) in [Order::OldestFirst, Order::NewestFirst].into_iter().zip(by_order) {
            if d.runs > 0 {
                deletions.push(format!("| {} | {} | {} |", k.name(), order.name(), d.row()));
            }
        }
    }
    bar.finish_and_clear();
    println!(
        "\nfilebench personalities with a snapshot every {:.0} s against none ({} files, 1 thread, \
         {:.0} s per round and side, {} rounds interleaved; library)\n",
        plan.every, plan.files, plan.secs, plan.rounds
    );
    println!(
        "| workload | no snapshots: median ops/s (min–max) | with snapshots: median ops/s (min–max) \
         | change | snapshots a run | manifests' DRAM / space in use |"
    );
    println!("|---|---|---|---|---|---|");
    impact.iter().for_each(|r| println!("{r}"));
    println!(
        "\nmean change {:+.1}% (paper, Fig. 4: −0.6% on average over its filebench workloads, \
         a snapshot every 10 s; manifests 0.027–0.05% of the space in use)",
        changes.iter().sum::<f64>() / changes.len().max(1) as f64
    );
    println!(
        "\ndeleting each run's snapshots one by one, waiting for the reclaimer after each \
         (even rounds oldest first, odd rounds newest first; per run: pages and ms)\n"
    );
    println!(
        "| workload | order | runs | deletions | delete median µs | delete max µs | pages freed | \
         pages held | reclaim ms | reclaim ns a page |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    deletions.iter().for_each(|r| println!("{r}"));
    println!("\npaper (§3.4): deletion takes constant time; the reclaimer about 400 ns a 4 KB page");
    Ok(())
}

/// One run of personality `k` on a fresh image. With `snap`, a thread
/// takes a snapshot every `plan.every` seconds, and after the run the
/// snapshots are deleted in that order.
fn workload(plan: &Plan, k: Personality, image: &Path, snap: Option<Order>) -> Result<Run> {
    let lib = target(plan, image)?;
    let dir = lib.mkdir(k.name())?;
    let set = personality::prepare(&lib, &dir, k, plan.files)?;
    let counters = Counters::default();
    let halt = AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_secs_f64(plan.secs);
    let fs = lib.fs()?;
    let secs = thread::scope(|s| -> Result<f64> {
        let snapper = snap.map(|_| {
            s.spawn(move || -> Result<()> {
                let period = Duration::from_secs_f64(plan.every);
                let mut next = Instant::now() + period;
                let mut i = 0;
                while Instant::now() < deadline {
                    thread::sleep(Duration::from_millis(20));
                    if Instant::now() >= next {
                        fs.take_snapshot(format!("every-{i}").as_bytes())?;
                        i += 1;
                        next += period;
                    }
                }
                Ok(())
            })
        });
        let secs = personality::run(&lib, &dir, k, &set, 1, Until::Deadline(deadline), &halt, &counters)?;
        if let Some(h) = snapper {
            h.join()
                .map_err(|_| anyhow::anyhow!("the snapshot thread panicked"))??;
        }
        Ok(secs)
    })?;
    let nospc = counters.nospc.load(Ordering::Relaxed);
    if nospc > 0 {
        anyhow::bail!("{nospc} operations failed with ENOSPC: use a larger --size");
    }
    let ops = counters.ops.load(Ordering::Relaxed) as f64 / secs.max(1e-9);
    let st = fs.statfs();
    let (items, bytes) = fs.manifest_memory();
    let memory = Memory {
        snapshots: fs.snapshots().len() as u64,
        items,
        bytes,
        used: (st.blocks - st.blocks_free) * PAGE_SIZE,
    };
    let deleted = match snap {
        Some(order) => delete_all(fs, order)?,
        None => Deletions::default(),
    };
    Ok(Run { ops, memory, deleted })
}

/// Deletes every snapshot of the idle `fs` in `order`, timing each
/// deletion and then the reclaimer's work it queued.
fn delete_all(fs: &Fs, order: Order) -> Result<Deletions> {
    let mut names: Vec<Vec<u8>> = fs.snapshots().into_iter().map(|s| s.name).collect();
    if order == Order::NewestFirst {
        names.reverse();
    }
    let mut d = Deletions {
        runs: 1,
        ..Deletions::default()
    };
    for name in names {
        // Only the list counts what a snapshot holds (the deletion's
        // answer does not), and it changes as manifests merge.
        d.held += fs
            .snapshots()
            .into_iter()
            .find(|s| s.name == name)
            .map_or(0, |s| s.held_pages);
        let free = fs.statfs().blocks_free as i64;
        let t = Instant::now();
        fs.delete_snapshot(&name)?;
        d.delete_us.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        fs.wait_reclaimed();
        d.reclaim_secs += t.elapsed().as_secs_f64();
        d.freed.push(fs.statfs().blocks_free as i64 - free);
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn personalities_parse_by_name() {
        assert_eq!(parse_personality("varmail"), Ok(Personality::Varmail));
        let e = parse_personality("mailserver").unwrap_err();
        assert!(e.contains("fileserver, varmail, webserver, webproxy"), "{e}");
    }

    #[test]
    fn rounds_alternate_the_deletion_order() {
        let orders: Vec<_> = (0..4).map(Order::for_round).collect();
        assert_eq!(
            orders,
            [
                Order::OldestFirst,
                Order::NewestFirst,
                Order::OldestFirst,
                Order::NewestFirst
            ]
        );
    }

    #[test]
    fn change_is_a_signed_percentage() {
        assert!((change_pct(200.0, 199.0) + 0.5).abs() < 1e-9);
        assert!((change_pct(100.0, 110.0) - 10.0).abs() < 1e-9);
    }

    #[test]
    fn manifest_share_of_the_space_in_use() {
        let m = Memory {
            bytes: 300,
            used: 1_000_000,
            ..Memory::default()
        };
        assert!((m.pct_of_used() - 0.03).abs() < 1e-12);
        assert_eq!(Memory::default().pct_of_used(), 0.0);
    }

    #[test]
    fn deletion_rows_are_per_run_with_the_reclaim_rate() {
        let mut d = Deletions::default();
        d.merge(Deletions {
            runs: 1,
            delete_us: vec![2.0, 4.0, 30.0],
            freed: vec![1000, -1, 1],
            held: 900,
            reclaim_secs: 0.0004,
        });
        d.merge(Deletions {
            runs: 1,
            delete_us: vec![3.0],
            freed: vec![1000],
            held: 1100,
            reclaim_secs: 0.0004,
        });
        // 2,000 pages freed in 0.8 ms: 400 ns a page.
        assert_eq!(d.row(), "2 | 4 | 3.5 | 30.0 | 1000 | 1000 | 0.40 | 400");
    }

    #[test]
    fn a_row_without_deletions_has_no_rates() {
        let d = Deletions {
            runs: 1,
            ..Deletions::default()
        };
        assert_eq!(d.row(), "1 | 0 | – | – | 0 | 0 | 0.00 | –");
    }
}
