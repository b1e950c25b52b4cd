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
    let mut cfg = Config::quick(SEED);
    cfg.known = KNOWN_BUGS.iter().map(|s| s.to_string()).collect();
    cfg
}

/// Checks `w` at every crash point; panics listing each kind of failure.
pub fn assert_atomic_workload(w: &Workload) -> Stats {
    let mut st = Stats::default();
    check_workload(w, &config(), &mut st);
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
    let w = workload::by_name(name).unwrap_or_else(|| panic!("no workload {name}"));
    assert_atomic_workload(&w)
}
