//! Crash-state checker for novafs (DESIGN.md §4 "Crash tests").
//!
//! Records a workload's persistent-memory trace on a
//! [`pm::RecordingRegion`], builds every crash image the x86 persistence
//! model allows at every fence and operation boundary (all of them when a
//! point has few, a seeded sample plus torn lines otherwise), and checks
//! each: fsck is clean, recovery succeeds, and the visible tree is a legal
//! state — every completed operation applied, the in-flight one fully or
//! not at all. Crashes inside recovery are checked the same way.
//!
//! With [`Config::media_errors`], each crash image is also checked with
//! one copy of metadata the interrupted operation wrote damaged
//! ([`damage`], NOVA-Fortis §4.2).
//!
//! Modules: [`workload`] (scenarios in novafs's operation vocabulary,
//! [`novafs_ops`]), [`tree`] (the visible state), [`engine`] (recording,
//! the oracle), [`batch`] (what a batching mount's crash may lose),
//! [`choose`] (which images of a crash point), [`damage`]
//! (a damaged copy in an image), [`image`] (images as overlays); every seeded choice draws from [`novafs_rng`].

#![forbid(unsafe_code)]

pub mod batch;
pub mod choose;
pub mod damage;
pub mod engine;
pub mod image;
pub mod tree;
pub mod workload;

pub use choose::{choices, Pick};
pub use engine::{
    check_recorded, check_workload, check_workload_with, group, record, record_with, Config, Failure, Recorded, Stats,
    Wrap,
};
pub use tree::{Compare, Tree};
pub use workload::Workload;

use std::sync::Mutex;

/// Checks `workloads` on `jobs` threads; `progress` is told after each
/// workload (its name and its counts). No new workload starts once `stop`
/// says so (given the counts so far). Returns the merged counts.
pub fn sweep(
    workloads: impl Iterator<Item = Workload> + Send,
    cfg: &Config,
    jobs: usize,
    stop: &(dyn Fn(&Stats) -> bool + Sync),
    progress: &(dyn Fn(&str, &Stats) + Sync),
) -> Stats {
    let queue = Mutex::new(workloads);
    let total = Mutex::new(Stats::default());
    std::thread::scope(|s| {
        for _ in 0..jobs.max(1) {
            s.spawn(|| loop {
                if stop(&total.lock().unwrap_or_else(|e| e.into_inner())) {
                    break;
                }
                let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                let Some(w) = next else { break };
                let mut st = Stats::default();
                check_workload(&w, cfg, &mut st);
                progress(&w.name, &st);
                total.lock().unwrap_or_else(|e| e.into_inner()).merge(st);
            });
        }
    });
    total.into_inner().unwrap_or_else(|e| e.into_inner())
}
