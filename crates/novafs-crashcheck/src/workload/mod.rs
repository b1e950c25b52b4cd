//! Workloads: the scenarios the checker sweeps, written in novafs's
//! operation vocabulary ([`novafs_ops`]) and run by its [`Runner`]: the
//! hand-written [`catalog`] (one per operation type, multi-operation
//! sequences, orphans, remounts), the [`generated`] ones that need a trial
//! run (log growth, fast and thorough GC, journal wrap-around), the
//! [`relaxed`] ones (relaxed mode's in-place changes, Fortis §4.6), the
//! [`batched`] ones (relaxed mode with FGM's batching) and [`random`]
//! sequences. This file holds what they share.

mod batched;
mod catalog;
mod generated;
mod random;
mod relaxed;

use std::sync::Arc;

use novafs::{Batching, Consistency, FormatOptions, MountOptions};
use novafs_ops::{Op, Runner};
use pm::{MemRegion, Region};

use crate::tree::Tree;

pub use batched::{batched, random_batch};
pub use catalog::{catalog, inode_table_growth};
pub use generated::{generated, Generated};
pub use random::{random, random_relaxed, random_sharded};
pub(crate) use relaxed::{check_ways, target as relaxed_target};
pub use relaxed::{look, look_ino, relaxed, way_of, Look, Way};

/// Size of every crash-test region: small, so images are cheap to copy.
/// Metadata replicas are on, as mkfs does by default, with a dead zone of
/// 64 KiB instead of 1 MiB to keep the region small.
pub const REGION_SIZE: u64 = 8 << 20;

/// A runner on `region` whose mkfs lays out `shards` shards, not mounted.
pub fn runner(region: Arc<dyn Region>, shards: u32) -> Runner {
    runner_as(region, shards, Consistency::Strict)
}

/// [`runner`] whose mkfs makes `mode` the image's default: every mount
/// the checker makes of it (the run's, a crash image's recovery, the
/// remount after it) asks for no mode, so takes that one.
pub fn runner_as(region: Arc<dyn Region>, shards: u32, mode: Consistency) -> Runner {
    let format = FormatOptions::default()
        .shards(shards)
        .dead_zone(64 << 10)
        .consistency(mode);
    Runner::new(region, format)
}

/// A runner on a freshly formatted heap region of `size` bytes with
/// `shards` shards, not mounted yet.
pub fn fresh_runner(size: u64, shards: u32) -> Result<Runner, String> {
    fresh_runner_as(size, shards, Consistency::Strict)
}

/// [`fresh_runner`] of an image whose default mode is `mode`.
pub fn fresh_runner_as(size: u64, shards: u32, mode: Consistency) -> Result<Runner, String> {
    let mut r = runner_as(Arc::new(MemRegion::new(size)), shards, mode);
    r.apply(&Op::Mkfs).map_err(|e| format!("format: {e}"))?;
    Ok(r)
}

/// Applies `op`; an error is the file system's answer, as text. With
/// `spread` the operation runs on a new thread: threads take shards in
/// turn, so operations spread over every shard's journal and inode table.
pub fn apply(r: &mut Runner, op: &Op, spread: bool) -> Result<(), String> {
    if spread {
        return std::thread::scope(|s| {
            s.spawn(|| apply(r, op, false))
                .join()
                .unwrap_or_else(|_| Err(format!("{op} panicked")))
        });
    }
    r.apply(op).map(drop).map_err(|e| e.to_string())
}

/// The visible tree of the mounted file system.
pub fn tree_of(r: &Runner) -> Result<Tree, String> {
    Tree::capture(r.fs().ok_or("not mounted")?)
}

/// [`tree_of`] keeping files of up to `keep` bytes in full
/// ([`Tree::capture_keeping`]).
pub fn tree_keeping(r: &Runner, keep: usize) -> Result<Tree, String> {
    Tree::capture_keeping(r.fs().ok_or("not mounted")?, keep)
}

/// What a recorded run must do besides its operations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Expect {
    /// Every operation must succeed.
    #[default]
    AllSucceed,
    /// Operations may fail (random sequences); a failure must change nothing.
    MaySucceed,
}

/// Which GC counter a workload must move during its recorded operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GcKind {
    Fast,
    Thorough,
}

/// A scenario: operations run before recording (not crash-tested, their
/// result cleanly unmounted is the starting image), then the recorded ones.
#[derive(Clone, Debug)]
pub struct Workload {
    pub name: String,
    pub setup: Vec<Op>,
    /// Recorded after an implicit [`Op::Mount`], which is operation 0.
    pub ops: Vec<Op>,
    pub expect: Expect,
    /// The recorded operations must run this kind of GC at least once.
    pub gc: Option<GcKind>,
    /// Region size (default [`REGION_SIZE`]).
    pub region_size: u64,
    /// Shards at mkfs (default 1), and whether operations rotate through
    /// them (see [`apply`]).
    pub shards: u32,
    pub spread: bool,
    /// The image's default mode, set by its mkfs ([`runner_as`]). A
    /// relaxed workload's in-flight overwrite may also be torn
    /// ([`crate::tree::Tree::torn_write`]).
    pub consistency: Consistency,
    /// How operations of `ops` (by index) must change the file system,
    /// checked in the live run ([`way_of`]): so that a relaxed workload
    /// that silently went copy-on-write fails.
    pub ways: Vec<(usize, Way)>,
    /// The live run must change at least this many nodes in place
    /// (random relaxed sequences, whose ops are not known one by one;
    /// with batching, [`Way::Batched`] counts too).
    pub min_in_place: usize,
    /// A relaxed workload's recorded mounts batch their in-place
    /// metadata changes ([`MountOptions::batch`]); the oracle then allows
    /// a crash to lose the running transaction ([`crate::batch`]).
    /// Recovery mounts never batch: they have nothing running.
    pub batch: Option<Batching>,
}

impl Workload {
    /// A strict-mode workload of one shard on a [`REGION_SIZE`] region,
    /// whose every operation must succeed.
    pub fn new(name: &str, setup: Vec<Op>, ops: Vec<Op>) -> Workload {
        Workload {
            name: name.into(),
            setup,
            ops,
            expect: Expect::AllSucceed,
            gc: None,
            region_size: REGION_SIZE,
            shards: 1,
            spread: false,
            consistency: Consistency::Strict,
            ways: Vec::new(),
            min_in_place: 0,
            batch: None,
        }
    }

    /// Whether the image is relaxed by default.
    pub fn relaxed(&self) -> bool {
        self.consistency == Consistency::Relaxed
    }

    /// Files up to this size are kept in full in the trees the checker
    /// captures: every file for a relaxed workload, whose oracle looks at
    /// the bytes of a torn write.
    pub fn keep_bytes(&self) -> usize {
        if self.relaxed() {
            usize::MAX
        } else {
            crate::tree::KEEP_BYTES
        }
    }

    /// A runner for this workload on `region`, not mounted: its mounts
    /// batch as the workload says.
    pub fn runner(&self, region: Arc<dyn Region>) -> Runner {
        runner_as(region, self.shards, self.consistency).mount_with(MountOptions::default().batch(self.batch))
    }

    /// The recorded operations: mount, then `ops`.
    pub fn recorded_ops(&self) -> Vec<Op> {
        let mut v = vec![Op::Mount];
        v.extend(self.ops.iter().cloned());
        v
    }
}

/// The GC counter for `kind` of the file system `r` has mounted (0 when
/// none is).
pub fn gc_count(r: &Runner, kind: GcKind) -> u64 {
    let s = r.fs().map(novafs::Fs::gc_stats).unwrap_or_default();
    match kind {
        GcKind::Fast => s.fast_pages,
        GcKind::Thorough => s.thorough_runs,
    }
}

/// Every named workload: the catalog, the relaxed-mode ones and the
/// generated ones; an error names each generated workload whose trial
/// run failed.
pub fn all() -> Result<Vec<Workload>, String> {
    let mut v = catalog();
    v.extend(relaxed());
    v.extend(batched());
    let mut errors = Vec::new();
    for (_, w) in generated() {
        match w {
            Ok(w) => v.push(w),
            Err(e) => errors.push(e),
        }
    }
    v.push(inode_table_growth());
    if errors.is_empty() {
        Ok(v)
    } else {
        Err(errors.join("\n"))
    }
}

/// Finds a workload by name (including `random-SEED-LEN`,
/// `random2-SEED-LEN`, `random-relaxed-SEED-LEN` and
/// `random-batch-SEED-LEN`); an error says why there is none.
pub fn by_name(name: &str) -> Result<Workload, String> {
    let none = || format!("no workload named {name:?} (see novafs crashcheck --list)");
    type Make = fn(u64, usize) -> Workload;
    let randoms: [(&str, Make); 4] = [
        ("random-relaxed-", random_relaxed),
        ("random-batch-", random_batch),
        ("random2-", random_sharded),
        ("random-", random),
    ];
    for (prefix, make) in randoms {
        if let Some(rest) = name.strip_prefix(prefix) {
            let (seed, len) = rest.split_once('-').ok_or_else(none)?;
            let (Ok(seed), Ok(len)) = (seed.parse(), len.parse()) else {
                return Err(none());
            };
            return Ok(make(seed, len));
        }
    }
    if let Some(w) = catalog()
        .into_iter()
        .chain(relaxed())
        .chain(batched())
        .find(|w| w.name == name)
    {
        return Ok(w);
    }
    if name == "inode_table_growth" {
        return Ok(inode_table_growth());
    }
    match generated().into_iter().find(|(n, _)| *n == name) {
        Some((_, w)) => w,
        None => Err(none()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_generated_workload_is_placed_and_found_by_name() {
        let all = all().unwrap();
        for (name, _) in generated() {
            assert_eq!(all.iter().filter(|w| w.name == name).count(), 1, "{name}");
        }
        assert_eq!(by_name("fast_gc").unwrap().name, "fast_gc");
        assert_eq!(by_name("random2-3-4").unwrap().ops.len(), 4);
        assert!(by_name("random-relaxed-3-4").unwrap().relaxed());
        assert!(by_name("random-batch-3-4").unwrap().batch.is_some());
        assert!(by_name("batch_full").unwrap().batch.is_some());
        assert!(by_name("relaxed_truncate").unwrap().batch.is_none());
        assert!(by_name("relaxed_overwrite_strip").unwrap().relaxed());
        assert!(!by_name("random-3-4").unwrap().relaxed());
        assert!(by_name("nothing")
            .unwrap_err()
            .contains("no workload named \"nothing\""));
        assert!(by_name("random-x-4").is_err());
    }
}
