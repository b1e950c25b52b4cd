//! `novafs bench --txninfo-sweep`: FGM §IV-C's TxnInfo size sweep (Fig. 13
//! and 14) on novafs-bench's attribute storm (`txninfo`): strict, relaxed,
//! and relaxed batching with each limit, rounds interleaved with the order
//! rotated, with an fsync every 32 operations and with none.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use indicatif::ProgressBar;
use novafs_bench::fgm::FSYNC_EVERY;
use novafs_bench::txninfo::{self, Mount};
use pm::Region;

use crate::bench::media;
use crate::bench_snapshots::region;

/// What `--txninfo-sweep` runs, and where.
pub struct Plan<'a> {
    pub image: &'a Path,
    pub size: u64,
    pub eadr: bool,
    pub rounds: usize,
    pub files: u64,
    pub secs: f64,
    pub words: Vec<usize>,
    pub interval: Duration,
}

pub fn run(p: &Plan) -> Result<()> {
    let plan = txninfo::Plan {
        rounds: p.rounds,
        files: p.files,
        secs: p.secs,
        max_ops: u64::MAX,
        words: p.words.clone(),
        interval: p.interval,
        fsync_every: vec![Some(FSYNC_EVERY), None],
    };
    let result = (|| {
        let mapped = region(p.image, p.size, p.eadr)?;
        let about = media(&mapped, p.eadr);
        let runs = plan.rounds * plan.fsync_every.len() * Mount::all(&plan.words).len();
        let bar = ProgressBar::new(runs as u64);
        let region: Arc<dyn Region> = Arc::new(mapped);
        let sweep = txninfo::sweep(region, &plan, || bar.inc(1))?;
        bar.finish_and_clear();
        println!(
            "TxnInfo size sweep (FGM §IV-C): {} files, each operation a chmod or a utimens of a random one \
             (half each), {} s a run, {} rounds, the order rotated every round; one thread",
            plan.files, plan.secs, plan.rounds
        );
        println!("{about}; mkfs's default format (metadata replicas, data checksums, parity), mounted in turn");
        println!(
            "strict: each setattr appends a log entry; relaxed: each rewrites the newest entry in place in one \
             journal transaction; relaxed+batch: its words join a running transaction that commits when it \
             holds the limit, every {} ms, or at fsync",
            plan.interval.as_millis()
        );
        print!("{}", txninfo::markdown(&sweep)?);
        println!(
            "\nMedians over the rounds (throughput also min–max; ops/CPU-s: per second of the CPU time the \
             process's threads ran, the timer's commits included, which a busy machine's scheduling leaves \
             out). Journal counts are exact: journal B/op and fences/op \
             count the journal's commits only (a strict setattr's log append and its fences are not journal \
             work); commits are journal transactions; full/timer/fsync/other: the share of the batch commits \
             over every round (other: log pages freed, snapshots). What is still running at the end of a run \
             commits at its unmount, outside the timed window and these counts."
        );
        Ok(())
    })();
    let _ = std::fs::remove_file(p.image);
    result
}
