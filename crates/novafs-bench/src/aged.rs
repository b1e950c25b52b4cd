//! Ageing a file system the way NOVA-Fortis §4.4 did for Fig. 7 and
//! Fig. 12: several multi-threaded filebench workloads at once; when each
//! finishes, about half of its files are removed and it starts again, in a
//! new directory, until the file system is 99% full.
//!
//! Here the four personalities run side by side each round (threads of
//! their own), and each round's file sets shrink as the room left to the
//! target does, so the last rounds close on it instead of ending in
//! ENOSPC. ENOSPC from a flowop or a file set's preparation is not an
//! error: the file system is nearly full by design.

use std::sync::atomic::AtomicBool;

use anyhow::Result;
use novafs_rng::SplitMix;

use crate::backend::Backend;
use crate::personality::{self, is_nospc, Counters, FileSet, Personality, Until};
use crate::target::LibraryTarget;

/// How to age.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ageing {
    /// Entries of each personality's file set in the first rounds.
    pub files: u64,
    /// Threads per personality.
    pub threads: usize,
    /// Full enough: this share of the space writes may use (df's Use%).
    pub target: f64,
    /// Seed of the choice of the files each round removes.
    pub seed: u64,
    /// Rounds at most.
    pub max_rounds: u32,
}

/// What ageing did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Aged {
    pub rounds: u32,
    /// df's Use% at the end, as a fraction.
    pub used: f64,
    /// Flowops done, and failed with ENOSPC.
    pub ops: u64,
    pub nospc: u64,
}

/// df's Use% as a fraction: used over used plus what writes may still
/// take (the reserve is neither).
pub fn used_share(t: &LibraryTarget) -> Result<f64> {
    let s = t.statfs()?;
    let used = s.blocks - s.blocks_free;
    Ok(used as f64 / (used + s.blocks_avail).max(1) as f64)
}

/// The entries of `k`'s file set for a round with `room` bytes to fill:
/// the set at its peak (every file at the mean size) takes about twice the
/// room, since half of it goes again.
fn files_for(k: Personality, room: u64, cap: u64) -> u64 {
    (2 * room / 4 / k.shape().file_size).clamp(2, cap)
}

/// Ages the file system of `t`, calling `progress(used share)` after each
/// round.
pub fn age(t: &LibraryTarget, a: &Ageing, progress: &dyn Fn(f64)) -> Result<Aged> {
    let mut done = Aged {
        rounds: 0,
        used: used_share(t)?,
        ops: 0,
        nospc: 0,
    };
    let page = novafs::PAGE_SIZE;
    while done.used < a.target && done.rounds < a.max_rounds {
        let s = t.statfs()?;
        let usable = s.blocks - s.blocks_free + s.blocks_avail;
        let goal = (a.target * usable as f64) as u64;
        let used = s.blocks - s.blocks_free;
        // Never more than the free space at the peak.
        let room = goal.saturating_sub(used).min(s.blocks_avail / 2) * page;
        let round = done.rounds;
        let results: Vec<Result<(u64, u64)>> = std::thread::scope(|scope| {
            let handles: Vec<_> = Personality::ALL
                .iter()
                .enumerate()
                .map(|(i, &k)| {
                    let files = files_for(k, room, a.files);
                    let rng = SplitMix::derive(a.seed, u64::from(round) * 4 + i as u64);
                    scope.spawn(move || one_workload(t, k, round, files, a.threads, rng))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("an ageing thread panicked")))
                })
                .collect()
        });
        for r in results {
            let (ops, nospc) = r?;
            done.ops += ops;
            done.nospc += nospc;
        }
        done.rounds += 1;
        done.used = used_share(t)?;
        progress(done.used);
    }
    Ok(done)
}

/// One run of `k` in a directory of its own for round `round`: its file
/// set of `files` entries, one pass over it per thread, then about half of
/// its files removed. Returns the flowops done and failed with ENOSPC.
fn one_workload(
    t: &LibraryTarget,
    k: Personality,
    round: u32,
    files: u64,
    threads: usize,
    mut rng: SplitMix,
) -> Result<(u64, u64)> {
    let dir = t.mkdir(&format!("{}-{round}", k.name()))?;
    let set = match personality::prepare(t, &dir, k, files) {
        Ok(set) => set,
        // Full before the set was: what it wrote stays, as aged files do.
        Err(e) if is_nospc(&e) => return Ok((0, 1)),
        Err(e) => return Err(e),
    };
    let counters = Counters::default();
    let loops = (files / threads.max(1) as u64).max(1);
    let halt = AtomicBool::new(false);
    personality::run(t, &dir, k, &set, threads, Until::Loops(loops), &halt, &counters)?;
    remove_half(t, &dir, &set, &mut rng)?;
    Ok((counters.ops.into_inner(), counters.nospc.into_inner()))
}

/// Removes each entry of `set` that exists with probability one half.
fn remove_half(t: &LibraryTarget, dir: &novafs::Ino, set: &FileSet, rng: &mut SplitMix) -> Result<()> {
    for i in 0..set.entries() {
        if !rng.chance(1, 2) {
            continue;
        }
        match t.unlink(dir, set.name(i)) {
            Ok(()) => {}
            Err(e) if is_missing(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Whether `e` is novafs's ENOENT (an entry of the set that does not
/// exist now).
fn is_missing(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<novafs::Error>()
            .is_some_and(|n| n.errno() == libc::ENOENT)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_sets_shrink_with_the_room_left() {
        let k = Personality::Fileserver; // 128 KiB files
        assert_eq!(files_for(k, 1 << 30, 1000), 1000, "capped");
        assert_eq!(files_for(k, 64 << 20, 1000), 256);
        assert_eq!(files_for(k, 0, 1000), 2, "never empty");
    }
}
