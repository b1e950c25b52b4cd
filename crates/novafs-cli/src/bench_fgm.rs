//! `novafs bench --fgm`: FGM's workloads (§IV-A, scaled to one machine)
//! on the library with the fine-grained journal and with block-granular
//! journaling (`--compare-journal`'s two sides), or with `--compare-modes`
//! on a strict and a relaxed mount, rounds interleaved, the order swapped
//! every round and every workload run on both sides before the next:
//! throughput, and the journal bytes and fences per operation that FGM
//! §IV-B compares.

use anyhow::{Context, Result};
use indicatif::ProgressBar;
use novafs_bench::backend::Backend;
use novafs_bench::fgm::{self, batch_total, Params, Workload, FSYNC_EVERY};
use novafs_bench::stats::{summarize, Summary};
use novafs_bench::target::LibraryTarget;

use crate::bench::saved;
use crate::info::bytes;

/// What `--fgm` runs.
pub struct Plan {
    pub rounds: usize,
    /// Seconds of each workload per round and side.
    pub secs: f64,
    pub files: u64,
    /// FileMicro_writefsync's file before the run.
    pub big_file: u64,
}

/// Runs `plan` on both sides, a configuration's name and its target;
/// prints the table, the second side measured against the first, after
/// the lines `about` the sides; with `saves`, the journal bytes the first
/// saves (two journal formats), else what relaxed mode changes (two
/// consistency modes).
pub fn run(sides: [(&str, &LibraryTarget); 2], about: &[String], plan: &Plan, saves: bool) -> Result<()> {
    let p = Params {
        secs: plan.secs,
        files: plan.files,
        big_file: plan.big_file,
    };
    let bar = ProgressBar::new((plan.rounds * Workload::ALL.len()) as u64);
    // Per workload, per side, the rounds.
    let mut runs: Vec<[Vec<fgm::Run>; 2]> = Workload::ALL.iter().map(|_| Default::default()).collect();
    for round in 0..plan.rounds {
        for (w, per) in Workload::ALL.into_iter().zip(&mut runs) {
            for which in [round % 2, 1 - round % 2] {
                let lib = sides[which].1;
                let name = format!("{}-{round}", w.name());
                let dir = lib.mkdir(&name)?;
                per[which]
                    .push(fgm::run(lib, &dir, w, &p).with_context(|| format!("{} on {}", w.name(), sides[which].0))?);
                lib.rmdir(&name)?;
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let [a, b] = sides.map(|s| s.0);
    println!(
        "{b} against {a}: FGM §IV-A workloads, {} s each per round and side, {} rounds interleaved, one thread",
        plan.secs, plan.rounds
    );
    for line in about {
        println!("{line}");
    }
    println!(
        "{} files in varmail's and fileserver's sets and PostMark's pool; FileMicro_writefsync appends \
         4 KiB to a {} file, fsync every {FSYNC_EVERY}",
        plan.files,
        bytes(plan.big_file)
    );
    let (saved_head, saved_rule) = if saves { (" bytes saved |", "---|") } else { ("", "") };
    println!(
        "\n| workload | operation | {a} ops/s | {b} ops/s | {b} ÷ {a} | {a} journal B/op | {b} journal B/op |\
         {saved_head} {a} fences/op | {b} fences/op |"
    );
    println!("|---|---|---|---|---|---|---|{saved_rule}---|---|");
    for (w, per) in Workload::ALL.into_iter().zip(&runs) {
        let med = |f: fn(&fgm::Run) -> Option<f64>| -> Result<[f64; 2]> {
            let m = |v: &[fgm::Run]| -> Result<Summary> {
                let xs = v.iter().map(f).collect::<Option<Vec<_>>>();
                summarize(&xs.context("the library counts its journal")?).context("no rounds ran")
            };
            Ok([m(&per[0])?.median, m(&per[1])?.median])
        };
        let [ta, tb] = med(|r| Some(r.ops_per_s()))?;
        let [ba, bb] = med(fgm::Run::bytes_per_op)?;
        let [fa, fb] = med(fgm::Run::fences_per_op)?;
        let saved = if saves {
            format!(" {} |", saved(ba, bb))
        } else {
            String::new()
        };
        println!(
            "| {} | {} | {ta:.0} | {tb:.0} | {:.2} | {ba:.1} | {bb:.1} |{saved} {fa:.2} | {fb:.2} |",
            w.name(),
            w.op(),
            tb / ta
        );
    }
    for (i, (name, _)) in sides.iter().enumerate() {
        batch_commits(name, &runs.iter().map(|per| &per[i][..]).collect::<Vec<_>>());
    }
    if !saves {
        // FGM §IV-A's workloads as the paper describes them: none rewrites
        // a file's bytes, so none is given an overwrite here.
        println!(
            "\nNone of these workloads overwrites bytes a file already has (varmail and fileserver create, \
             append, read and delete whole files; FileMicro_writefsync and PostMark append), so every write \
             grows its file and goes copy-on-write in both modes: relaxed mode changes none of them."
        );
    }
    Ok(())
}

/// On a side that batches, how often its running transaction committed
/// over every round of each workload, and why (FGM Fig. 14), beside the
/// journal's transactions; `per` holds each workload's runs.
fn batch_commits(side: &str, per: &[&[fgm::Run]]) {
    let totals: Vec<_> = per.iter().map(|runs| batch_total(runs)).collect();
    let Some(cap) = totals.iter().flatten().map(|b| b.capacity).max().filter(|&c| c > 0) else {
        return;
    };
    println!("\n{side} (at most {cap} words a transaction), its batch commits over every round:");
    for ((w, runs), b) in Workload::ALL.iter().zip(per).zip(totals) {
        let b = b.unwrap_or_default();
        let txns: u64 = runs.iter().filter_map(|r| r.journal).map(|j| j.txns).sum();
        let ops: u64 = runs.iter().map(|r| r.ops).sum();
        println!(
            "- {}: {} of {txns} journal transactions in {ops} operations (full {}, timer {}, fsync {}, other {})",
            w.name(),
            b.commits(),
            b.full,
            b.timer,
            b.fsync,
            b.other()
        );
    }
}
