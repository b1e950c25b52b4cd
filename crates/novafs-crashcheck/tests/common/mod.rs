//! Helpers of the crash-test sweep: check one scenario with the bounded
//! configuration and fail with every kind of failure and its reproducer.
#![allow(dead_code, clippy::unwrap_used)]

use novafs_crashcheck::{check_workload, group, workload, Config, Stats, Workload};

/// Seed of the bounded sweep (`novafs crashcheck --seed 0` reproduces it
/// with the same sampled images).
pub const SEED: u64 = 0;

/// Known core bugs, reported to the lead engineer, each with its own
/// `#[ignore = "BUG: ..."]` regression test in tests/regressions.rs.
/// Failures matching them are counted apart so the other scenarios keep
/// checking everything else. Remove an entry when its bug is fixed.
pub const KNOWN_BUGS: &[&str] = &[];

pub fn config() -> Config {
    config_for(SEED)
}

/// The bounded configuration with another seed.
pub fn config_for(seed: u64) -> Config {
    let mut cfg = Config::quick(seed);
    cfg.known = KNOWN_BUGS.iter().map(|s| s.to_string()).collect();
    cfg
}

/// The bounded configuration for relaxed-mode workloads: their in-place
/// commits make most recoveries replay the journal, and quick() crashes
/// 1 in 3 of those; 1 in 8 here keeps the short run short (the CLI keeps
/// 1 in 3).
pub fn relaxed_config(seed: u64) -> Config {
    let mut cfg = config_for(seed);
    cfg.recovery_busy_every = 8;
    cfg
}

/// A seed that changes from run to run, so that the bounded sweep does not
/// check the same images forever; `NOVAFS_CRASH_SEED` pins it (.ci/run
/// sets and prints it). Failures print a reproducer naming it.
pub fn run_seed() -> u64 {
    std::env::var("NOVAFS_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            now.map_or(1, |d| d.as_secs() % 1_000_000)
        })
}

/// Checks `w` at every crash point; panics listing each kind of failure.
pub fn assert_atomic_workload(w: &Workload) -> Stats {
    assert_atomic_with(w, &config())
}

/// [`assert_atomic_workload`] with `cfg`.
pub fn assert_atomic_with(w: &Workload, cfg: &Config) -> Stats {
    let mut st = Stats::default();
    check_workload(w, cfg, &mut st);
    eprintln!("{}: {st}", w.name);
    if !st.failures.is_empty() {
        let mut msg = format!("{}: {} failure(s)\n", w.name, st.failures.len());
        for (sig, n, first) in group(&st.failures) {
            msg += &format!("{n} x {sig}\n{first}\n");
        }
        panic!("{msg}");
    }
    assert!(st.images > 0, "{}: no crash image was checked", w.name);
    st
}

/// Checks the named workload (see `novafs crashcheck --list`).
pub fn assert_atomic(name: &str) -> Stats {
    let w = workload::by_name(name).unwrap_or_else(|e| panic!("{e}"));
    assert_atomic_workload(&w)
}
