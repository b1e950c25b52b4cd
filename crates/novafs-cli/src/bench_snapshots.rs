//! `novafs bench --snapshots`: what snapshots cost (NOVA-Fortis §3, §5):
//! the latency of taking one as the file system grows (the paper: about
//! constant), filebench-style fileserver throughput with a snapshot every
//! few seconds against none, rounds interleaved (the paper: −0.6% with one
//! every 10 s), and the DRAM the manifests take against the space in use
//! (the paper: 0.03–0.05%). With DAX mmap (§3.3, Fig. 5): the latency
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
    /// Seconds of fileserver per round and side.
    pub secs: f64,
    /// Seconds between snapshots on the measured side.
    pub every: f64,
    /// Files in the fileserver set.
    pub files: u64,
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

/// Fileserver with a snapshot every `plan.every` seconds against none,
/// rounds interleaved; then the manifests' DRAM against the space in use.
fn throughput(plan: &Plan, second: &Path) -> Result<()> {
    let bar = ProgressBar::new(2 * plan.rounds as u64);
    bar.set_style(
        ProgressStyle::with_template("fileserver {bar:30} {pos}/{len}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let (mut plain, mut snapped) = (Vec::new(), Vec::new());
    let mut memory = (0, 0, 0, 0);
    for _ in 0..plan.rounds {
        plain.push(fileserver(plan, plan.image, None)?.0);
        bar.inc(1);
        let (ops, m) = fileserver(plan, second, Some(plan.every))?;
        snapped.push(ops);
        memory = m;
        bar.inc(1);
    }
    bar.finish_and_clear();
    let (a, b) = (
        summarize(&plain).context("no rounds")?,
        summarize(&snapped).context("no rounds")?,
    );
    println!(
        "\nfileserver ({} files, 1 thread, {:.0} s per round, {} rounds interleaved; library)\n",
        plan.files, plan.secs, plan.rounds
    );
    println!("| configuration | median ops/s | min–max ops/s |");
    println!("|---|---|---|");
    println!("| no snapshots | {:.0} | {:.0}–{:.0} |", a.median, a.min, a.max);
    println!(
        "| a snapshot every {:.0} s | {:.0} | {:.0}–{:.0} |",
        plan.every, b.median, b.min, b.max
    );
    println!(
        "\nthroughput with snapshots: {:+.1}% (paper: −0.6% with one every 10 s)",
        (b.median / a.median - 1.0) * 100.0
    );
    let (snapshots, items, bytes, used) = memory;
    println!(
        "manifests after the last round: {snapshots} snapshots, {items} items in {bytes} bytes of DRAM, \
         {:.4}% of the {} MiB in use (paper: 0.03–0.05%)",
        bytes as f64 * 100.0 / used.max(1) as f64,
        used >> 20
    );
    Ok(())
}

/// One fileserver run on a fresh image; with `every`, a thread takes a
/// snapshot at that period. Returns ops/s and (snapshots, manifest items,
/// manifest bytes, bytes in use).
fn fileserver(plan: &Plan, image: &Path, every: Option<f64>) -> Result<(f64, (u64, u64, u64, u64))> {
    let lib = target(plan, image)?;
    let dir = lib.mkdir("fileserver")?;
    let k = Personality::Fileserver;
    let set = personality::prepare(&lib, &dir, k, plan.files)?;
    let counters = Counters::default();
    let halt = AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_secs_f64(plan.secs);
    let fs = lib.fs()?;
    let secs = thread::scope(|s| -> Result<f64> {
        let snapper = every.map(|period| {
            s.spawn(move || -> Result<()> {
                let mut next = Instant::now() + Duration::from_secs_f64(period);
                let mut i = 0;
                while Instant::now() < deadline {
                    thread::sleep(Duration::from_millis(20));
                    if Instant::now() >= next {
                        fs.take_snapshot(format!("every-{i}").as_bytes())?;
                        i += 1;
                        next += Duration::from_secs_f64(period);
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
    let ops = counters.ops.load(Ordering::Relaxed) as f64 / secs.max(1e-9);
    let st = fs.statfs();
    let used = (st.blocks - st.blocks_free) * PAGE_SIZE;
    let (items, bytes) = fs.manifest_memory();
    let nospc = counters.nospc.load(Ordering::Relaxed);
    if nospc > 0 {
        anyhow::bail!("{nospc} operations failed with ENOSPC: use a larger --size");
    }
    Ok((ops, (fs.snapshots().len() as u64, items, bytes, used)))
}
