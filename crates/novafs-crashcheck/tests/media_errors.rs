//! Crashes with media errors (NOVA-Fortis §4.2, `novafs crashcheck
//! --media-errors`): every crash image of a few workloads, each also with
//! one copy of a metadata line the interrupted operation wrote damaged,
//! recovers to a legal state with nothing lost, and is whole after a clean
//! unmount. Several seeds: each picks other copies, lines and damage.
#![allow(clippy::unwrap_used)]

mod common;

use novafs_crashcheck::{check_workload, damage, group, workload, Stats};

fn sweep(names: &[&str], seeds: &[u64]) -> Stats {
    let mut total = Stats::default();
    for &seed in seeds {
        let mut cfg = common::config_for(seed);
        cfg.damage = vec![damage::Kind::MediaError];
        for name in names {
            let w = workload::by_name(name).unwrap();
            let mut st = Stats::default();
            check_workload(&w, &cfg, &mut st);
            eprintln!("{name} seed {seed}: {st}");
            total.merge(st);
        }
    }
    if !total.failures.is_empty() {
        let mut msg = format!("{} failure(s)\n", total.failures.len());
        for (sig, n, first) in group(&total.failures) {
            msg += &format!("{n} x {sig}\n{first}\n");
        }
        panic!("{msg}");
    }
    total
}

#[test]
fn namespace_operations_survive_a_crash_and_one_damaged_copy() {
    let seed = common::run_seed();
    let st = sweep(&["create", "rename_across_dirs", "unlink"], &[seed, seed + 1, seed + 2]);
    assert!(st.damaged > 100, "{st}");
}
