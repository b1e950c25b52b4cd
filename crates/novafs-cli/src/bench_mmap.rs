//! `novafs bench --mmap`: what the library's two kinds of mmap cost
//! (issue 26). An atomic mapping (NOVA §4.5) stores to DRAM replicas and
//! commits every page stored to at msync, in one copy-on-write commit; a
//! DAX mapping (NOVA-Fortis §3.3, §3.4) stores to the file's own
//! persistent memory, and its msync reseals checksums and parity. Measured:
//! msync latency with 1, 16 and 256 dirty pages against write(2) of the
//! same pages; store and load throughput through each kind against write
//! and read calls; and each kind's faults: DAX first store and
//! copy-on-write after a snapshot (shared with `bench --snapshots`), atomic
//! replica load and write-protect. Rounds interleaved, the kinds' order
//! reversed every other round; one markdown table.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use novafs::{Fs, Ino, Mapping, PAGE_SIZE, ROOT_INO};
use novafs_bench::stats::summarize;
use novafs_bench::target::LibraryTarget;
use pm::Region;

use crate::bench_snapshots::{dax_faults, in_order, out_of_order, region, store_pages};

const PS: usize = PAGE_SIZE as usize;
const MIB: usize = 1 << 20;
/// Pages of the msync files (1 MiB).
const SMALL_PAGES: usize = 256;
/// Bytes of the throughput files.
const BIG: usize = 16 * MIB;
/// Pages each fault measurement touches a round.
const FAULT_PAGES: usize = 1024;
/// Dirty pages an msync commits, and how many msyncs a round times at
/// each count (the round's value is their median).
const DIRTY: [(usize, usize); 3] = [(1, 50), (16, 20), (256, 5)];

/// What the mmap benchmark runs on.
pub struct Plan<'a> {
    pub image: &'a Path,
    pub size: u64,
    pub eadr: bool,
    pub rounds: usize,
}

pub fn run(plan: &Plan) -> Result<()> {
    let result = measure(plan);
    let _ = std::fs::remove_file(plan.image);
    result
}

fn measure(plan: &Plan) -> Result<()> {
    let region = region(plan.image, plan.size, plan.eadr)?;
    let media = format!(
        "region: {}; flush: {}{}",
        region.kind(),
        region.flush_kind(),
        if plan.eadr { " (eADR: fences only)" } else { "" }
    );
    let region: Arc<dyn Region> = Arc::new(region);
    let lib = LibraryTarget::on_region(region)?;
    let fs = lib.fs()?;
    let bar = ProgressBar::new(plan.rounds as u64 + 1);
    bar.set_style(
        ProgressStyle::with_template("mmap {msg} {bar:30} {pos}/{len}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message("setup");
    let bench = Bench::new(fs).context("setting up the mmap benchmark's files and mappings")?;
    bar.inc(1);
    bar.set_message("rounds");
    let mut table = Table::default();
    for round in 0..plan.rounds {
        bench.msync(round, &mut table).context("msync latency")?;
        bench.stores(round, &mut table).context("store throughput")?;
        bench.loads(round, &mut table).context("load throughput")?;
        bench.faults(round, &mut table).context("fault latency")?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    drop(bench); // unmapped: the atomic mappings commit nothing more (all synced)
    println!(
        "novafs mmap benchmark (library): {} rounds interleaved, the kinds' order reversed every other round",
        plan.rounds
    );
    println!("{media}; mkfs's default format (metadata replicas, data checksums and parity)");
    println!(
        "median and min–max over the rounds; an msync value is its round's median of {} msyncs (1, 16, 256 \
         dirty pages), a fault value the mean over {FAULT_PAGES} pages\n",
        DIRTY.map(|(_, reps)| reps.to_string()).join(", ")
    );
    table.print()?;
    println!(
        "\nmsync: one byte stored to each of n pages spread over a {SMALL_PAGES}-page file (untimed), then \
         msync timed; write: n separate 4 KiB writes of those pages, each durable when it returns."
    );
    println!(
        "store/load 16 MiB: in 1 MiB copies (Mapping::store/load) or calls. \"pages mapped\": every page was \
         faulted in before the round; \"first touch\": a mapping made afresh (untimed), each page's first load \
         a fault. A store after an msync faults (DAX: unprotect entry committed, caveat DAXor; atomic: \
         the kernel records it where it tracks writes, Linux 6.7, else a write-protect fault), then a second \
         pass stores with no fault. DAX stores in page order fault once a run of \
         pages (write-ahead: runs of 1, 2, 4, 8, then 16); out of order (a stride of 7 pages), once a page."
    );
    Ok(())
}

/// One value a round of each (measure, kind).
#[derive(Default)]
struct Table {
    rows: Vec<Row>,
}

struct Row {
    measure: String,
    kind: String,
    unit: &'static str,
    values: Vec<f64>,
}

impl Table {
    fn add(&mut self, measure: &str, kind: &str, unit: &'static str, value: f64) {
        match self.rows.iter_mut().find(|r| r.measure == measure && r.kind == kind) {
            Some(r) => r.values.push(value),
            None => self.rows.push(Row {
                measure: measure.to_string(),
                kind: kind.to_string(),
                unit,
                values: vec![value],
            }),
        }
    }

    fn print(&self) -> Result<()> {
        println!("| measure | kind | median | min–max | unit |");
        println!("|---|---|---|---|---|");
        // Grouped by measure, in the order first recorded.
        let mut measures: Vec<&str> = Vec::new();
        for r in &self.rows {
            if !measures.contains(&r.measure.as_str()) {
                measures.push(&r.measure);
            }
        }
        let rows = measures
            .iter()
            .flat_map(|&m| self.rows.iter().filter(move |r| r.measure == m));
        for r in rows {
            let s = summarize(&r.values).context("no rounds ran")?;
            println!(
                "| {} | {} | {:.2} | {:.2}–{:.2} | {} |",
                r.measure, r.kind, s.median, s.min, s.max, r.unit
            );
        }
        Ok(())
    }
}

/// `kinds` in order on even rounds, reversed on odd ones.
fn order<T: Copy>(round: usize, kinds: &[T]) -> Vec<T> {
    let mut v = kinds.to_vec();
    if round % 2 == 1 {
        v.reverse();
    }
    v
}

fn median(v: &[f64]) -> Result<f64> {
    Ok(summarize(v).context("no samples")?.median)
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// GiB/s for `BIG` bytes in `d`.
fn gibs(d: Duration) -> f64 {
    BIG as f64 / d.as_secs_f64().max(1e-9) / f64::from(1u32 << 30)
}

/// The files and the mappings the rounds measure, each mapping faulted in
/// and synced once before the first round.
struct Bench<'fs> {
    fs: &'fs Fs,
    /// msync: a 256-page file for each kind.
    msync_atomic: Mapping<'fs>,
    msync_dax: Mapping<'fs>,
    msync_write: Ino,
    /// Store throughput: a 16 MiB file for each kind.
    store_atomic: Mapping<'fs>,
    store_dax: Mapping<'fs>,
    store_write: Ino,
    /// Load throughput: a 16 MiB file for each kind (a file is mapped
    /// one way at a time), one mapped read-only and faulted in, one mapped
    /// afresh each round; and one read by calls.
    load_atomic: Mapping<'fs>,
    load_dax: Mapping<'fs>,
    cold_atomic: Ino,
    cold_dax: Ino,
    load_read: Ino,
    /// Faults: DAX first store and copy-on-write; atomic write-protect;
    /// atomic replica loads on a file mapped afresh each round.
    fault_dax: Mapping<'fs>,
    fault_atomic: Mapping<'fs>,
    fault_cold: Ino,
}

#[derive(Clone, Copy)]
enum Kind {
    Atomic,
    Dax,
    /// write or read calls of this many bytes.
    Calls(usize),
}

impl<'fs> Bench<'fs> {
    fn new(fs: &'fs Fs) -> Result<Bench<'fs>> {
        let small = SMALL_PAGES * PS;
        let fault = FAULT_PAGES * PS;
        let (msync_atomic, msync_dax) = (file(fs, "msync-atomic", small)?, file(fs, "msync-dax", small)?);
        let (store_atomic, store_dax) = (file(fs, "store-atomic", BIG)?, file(fs, "store-dax", BIG)?);
        let (fault_atomic, fault_dax) = (file(fs, "fault-atomic", fault)?, file(fs, "fault-dax", fault)?);
        let (load_atomic, load_dax) = (file(fs, "load-atomic", BIG)?, file(fs, "load-dax", BIG)?);
        let b = Bench {
            fs,
            msync_atomic: fs.mmap_atomic(msync_atomic, 0, SMALL_PAGES, true)?,
            msync_dax: fs.mmap(msync_dax, 0, SMALL_PAGES, true)?,
            msync_write: file(fs, "msync-write", small)?,
            store_atomic: fs.mmap_atomic(store_atomic, 0, BIG / PS, true)?,
            store_dax: fs.mmap(store_dax, 0, BIG / PS, true)?,
            store_write: file(fs, "store-write", BIG)?,
            load_atomic: fs.mmap_atomic(load_atomic, 0, BIG / PS, false)?,
            load_dax: fs.mmap(load_dax, 0, BIG / PS, false)?,
            cold_atomic: file(fs, "load-cold-atomic", BIG)?,
            cold_dax: file(fs, "load-cold-dax", BIG)?,
            load_read: file(fs, "load-read", BIG)?,
            fault_dax: fs.mmap(fault_dax, 0, FAULT_PAGES, true)?,
            fault_atomic: fs.mmap_atomic(fault_atomic, 0, FAULT_PAGES, true)?,
            fault_cold: file(fs, "fault-cold", fault)?,
        };
        // Every page mapped once: the rounds measure the steady state.
        for m in [&b.msync_atomic, &b.msync_dax, &b.fault_atomic, &b.fault_dax] {
            store_pages(m, &in_order(m.len() / PS), 0x44)?;
            m.sync()?;
        }
        let mut buf = vec![0x55u8; MIB];
        for m in [&b.store_atomic, &b.store_dax] {
            store_all(m, &buf)?;
            m.sync()?;
        }
        for m in [&b.load_atomic, &b.load_dax] {
            load_all(m, &mut buf)?;
        }
        Ok(b)
    }

    /// msync latency with 1, 16 and 256 dirty pages, against writing them.
    fn msync(&self, round: usize, table: &mut Table) -> Result<()> {
        for (n, reps) in DIRTY {
            let measure = format!("msync, {n} dirty page{}", if n == 1 { "" } else { "s" });
            let pages: Vec<usize> = (0..n).map(|i| i * (SMALL_PAGES / n)).collect();
            for kind in order(round, &[Kind::Atomic, Kind::Dax, Kind::Calls(PS)]) {
                let mut us = Vec::with_capacity(reps);
                for rep in 0..reps {
                    let byte = (rep % 251) as u8;
                    us.push(match kind {
                        Kind::Atomic => stores_then_sync(&self.msync_atomic, &pages, byte)?,
                        Kind::Dax => stores_then_sync(&self.msync_dax, &pages, byte)?,
                        Kind::Calls(len) => {
                            let data = vec![byte; len];
                            let t = Instant::now();
                            for &p in &pages {
                                self.fs.write(self.msync_write, (p * PS) as u64, &data)?;
                            }
                            micros(t.elapsed())
                        }
                    });
                }
                let kind = match kind {
                    Kind::Atomic => "atomic mmap: msync".to_string(),
                    Kind::Dax => "DAX mmap: msync".to_string(),
                    Kind::Calls(_) => format!("{n} × write 4 KiB, no mmap"),
                };
                table.add(&measure, &kind, "µs", median(&us)?);
            }
        }
        Ok(())
    }

    /// Storing 16 MiB through each mapping, then msync (a fault a page),
    /// and again with no fault; against write calls.
    fn stores(&self, round: usize, table: &mut Table) -> Result<()> {
        let buf = vec![(round % 251) as u8; MIB];
        let durable = "store 16 MiB, durable at the end";
        for kind in order(round, &[Kind::Atomic, Kind::Dax, Kind::Calls(PS), Kind::Calls(MIB)]) {
            let (m, name) = match kind {
                Kind::Atomic => (&self.store_atomic, "atomic mmap"),
                Kind::Dax => (&self.store_dax, "DAX mmap"),
                Kind::Calls(len) => {
                    let t = Instant::now();
                    for off in (0..BIG).step_by(len) {
                        self.fs.write(self.store_write, off as u64, &buf[..len])?;
                    }
                    table.add(
                        durable,
                        &format!("write, {} calls", size(len)),
                        "GiB/s",
                        gibs(t.elapsed()),
                    );
                    continue;
                }
            };
            let t = Instant::now();
            store_all(m, &buf)?; // a fault a page
            let faulted = t.elapsed();
            let t = Instant::now();
            store_all(m, &buf)?; // every page writable now
            let free = t.elapsed();
            let t = Instant::now();
            m.sync()?;
            let synced = t.elapsed();
            table.add(durable, &format!("{name} + msync"), "GiB/s", gibs(faulted + synced));
            table.add(
                "store 16 MiB, pages writable (no fault, no msync)",
                name,
                "GiB/s",
                gibs(free),
            );
        }
        Ok(())
    }

    /// Loading 16 MiB through each mapping, its pages mapped and on first
    /// touch; against read calls.
    fn loads(&self, round: usize, table: &mut Table) -> Result<()> {
        let measure = "load 16 MiB";
        let mut buf = vec![0u8; MIB];
        for kind in order(round, &[Kind::Atomic, Kind::Dax, Kind::Calls(PS), Kind::Calls(MIB)]) {
            // A first-touch mapping is made (and unmapped) untimed.
            let (name, warm, cold) = match kind {
                Kind::Atomic => (
                    "atomic mmap",
                    &self.load_atomic,
                    self.fs.mmap_atomic(self.cold_atomic, 0, BIG / PS, false)?,
                ),
                Kind::Dax => (
                    "DAX mmap",
                    &self.load_dax,
                    self.fs.mmap(self.cold_dax, 0, BIG / PS, false)?,
                ),
                Kind::Calls(len) => {
                    let t = Instant::now();
                    for off in (0..BIG).step_by(len) {
                        self.fs.read(self.load_read, off as u64, &mut buf[..len])?;
                    }
                    table.add(
                        measure,
                        &format!("read, {} calls", size(len)),
                        "GiB/s",
                        gibs(t.elapsed()),
                    );
                    continue;
                }
            };
            let t = Instant::now();
            load_all(warm, &mut buf)?;
            table.add(measure, &format!("{name}, pages mapped"), "GiB/s", gibs(t.elapsed()));
            let t = Instant::now();
            load_all(&cold, &mut buf)?;
            table.add(measure, &format!("{name}, first touch"), "GiB/s", gibs(t.elapsed()));
            cold.close()?;
        }
        Ok(())
    }

    /// Fault latency: DAX first store and copy-on-write after a snapshot
    /// (`bench --snapshots`' measurement), atomic replica load and
    /// write-protect (the first store after an msync).
    fn faults(&self, round: usize, table: &mut Table) -> Result<()> {
        let measure = "fault";
        for kind in order(round, &[Kind::Atomic, Kind::Dax]) {
            match kind {
                Kind::Dax => {
                    for (how, order) in [
                        ("in page order", in_order(FAULT_PAGES)),
                        ("out of order", out_of_order(FAULT_PAGES)),
                    ] {
                        let f = dax_faults(self.fs, &self.fault_dax, &order, &format!("bench-mmap-{round}"))?;
                        self.fs.wait_reclaimed();
                        let (first, cow) = f.faults;
                        table.add(
                            measure,
                            &format!("DAX: first store (after msync), {how}"),
                            "µs a page",
                            f.first,
                        );
                        table.add(measure, &format!("DAX: first store, {how}"), "faults a page", first);
                        table.add(
                            measure,
                            &format!("DAX: copy-on-write (after a snapshot), {how}"),
                            "µs a page",
                            f.cow,
                        );
                        table.add(measure, &format!("DAX: copy-on-write, {how}"), "faults a page", cow);
                    }
                }
                Kind::Calls(_) => {}
                Kind::Atomic => {
                    let cold = self.fs.mmap_atomic(self.fault_cold, 0, FAULT_PAGES, false)?;
                    let t = Instant::now();
                    let mut byte = [0u8];
                    for p in 0..FAULT_PAGES {
                        cold.load(p * PS, &mut byte)?;
                    }
                    let load = micros(t.elapsed()) / FAULT_PAGES as f64;
                    cold.close()?;
                    let protect = store_pages(&self.fault_atomic, &in_order(FAULT_PAGES), (round % 251) as u8)?;
                    self.fault_atomic.sync()?;
                    table.add(measure, "atomic: first load (replica load)", "µs", load);
                    table.add(measure, "atomic: first store after msync", "µs", protect);
                }
            }
        }
        Ok(())
    }
}

/// A new file `name` in the root of `len` bytes, written.
fn file(fs: &Fs, name: &str, len: usize) -> Result<Ino> {
    let ino = fs
        .create(ROOT_INO, name.as_bytes(), 0o644, 0, 0)
        .with_context(|| format!("create {name}"))?
        .ino;
    let chunk = vec![0x33u8; MIB];
    for off in (0..len).step_by(MIB) {
        let n = MIB.min(len - off);
        fs.write(ino, off as u64, &chunk[..n])
            .with_context(|| format!("write {name}"))?;
    }
    Ok(ino)
}

/// Stores one byte to each of `pages` of `m` (untimed), then times its
/// msync; µs.
fn stores_then_sync(m: &Mapping, pages: &[usize], byte: u8) -> Result<f64> {
    for &p in pages {
        m.store(p * PS, &[byte])?;
    }
    let t = Instant::now();
    m.sync()?;
    Ok(micros(t.elapsed()))
}

/// Stores `buf` (1 MiB) all over mapping `m`.
fn store_all(m: &Mapping, buf: &[u8]) -> Result<()> {
    for off in (0..m.len()).step_by(buf.len()) {
        m.store(off, buf)?;
    }
    Ok(())
}

/// Loads all of mapping `m` into `buf` (1 MiB), a part at a time.
fn load_all(m: &Mapping, buf: &mut [u8]) -> Result<()> {
    for off in (0..m.len()).step_by(buf.len()) {
        m.load(off, buf)?;
    }
    Ok(())
}

/// A call's size in words.
fn size(len: usize) -> String {
    if len >= MIB {
        format!("{} MiB", len / MIB)
    } else {
        format!("{} KiB", len / 1024)
    }
}
