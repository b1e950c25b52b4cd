//! The checker itself: it must catch the bugs crash-image tools found in
//! NOVA (missing flushes, missing fences), so a clean sweep means something.
//! Each test breaks one persistence rule in a region wrapper and expects
//! illegal post-crash states.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use novafs_crashcheck::{check_workload_with, workload, Stats};
use pm::{PmError, RecordingRegion, Region, RegionKind};

/// Which rule the wrapper breaks.
#[derive(Clone, Copy)]
enum Fault {
    /// 8-byte flushes (commit points: log tails, journal words) are dropped.
    CommitNotFlushed,
    /// Non-temporal stores stay in the cache (data pages never flushed).
    DataNotFlushed,
    /// Fences do nothing until the operation ends (flushes are unordered).
    NoFences,
}

struct Faulty {
    inner: Arc<RecordingRegion>,
    fault: Fault,
}

impl Region for Faulty {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), PmError> {
        self.inner.read(off, buf)
    }
    fn write(&self, off: u64, data: &[u8]) -> Result<(), PmError> {
        self.inner.write(off, data)
    }
    fn write_nt(&self, off: u64, data: &[u8]) -> Result<(), PmError> {
        match self.fault {
            Fault::DataNotFlushed => self.inner.write(off, data),
            _ => self.inner.write_nt(off, data),
        }
    }
    fn zero_nt(&self, off: u64, len: u64) -> Result<(), PmError> {
        self.inner.zero_nt(off, len)
    }
    fn flush(&self, off: u64, len: u64) -> Result<(), PmError> {
        match self.fault {
            Fault::CommitNotFlushed if len == 8 => Ok(()),
            _ => self.inner.flush(off, len),
        }
    }
    fn fence(&self) {
        if !matches!(self.fault, Fault::NoFences) {
            self.inner.fence()
        }
    }
    fn store_u64(&self, off: u64, val: u64) -> Result<(), PmError> {
        self.inner.store_u64(off, val)
    }
    fn load_u64(&self, off: u64) -> Result<u64, PmError> {
        self.inner.load_u64(off)
    }
    fn kind(&self) -> RegionKind {
        RegionKind::Memory
    }
}

fn run_with(name: &str, fault: Fault) -> Stats {
    let w = workload::by_name(name).unwrap();
    let mut st = Stats::default();
    let wrap = move |r: Arc<RecordingRegion>| -> Arc<dyn Region> { Arc::new(Faulty { inner: r, fault }) };
    check_workload_with(&w, &common::config(), &mut st, &wrap);
    st
}

fn illegal_states(st: &Stats) -> usize {
    st.failures
        .iter()
        .filter(|f| f.message.contains("not a legal state"))
        .count()
}

#[test]
fn checker_finds_a_commit_that_was_never_flushed() {
    let st = run_with("rename_across_dirs", Fault::CommitNotFlushed);
    assert!(illegal_states(&st) > 0, "no illegal state found: {st}");
    let f = &st.failures[0];
    assert!(f
        .to_string()
        .contains("reproduce: novafs crashcheck --workload rename_across_dirs"));
}

/// File data that misses the media shows as wrong contents, or, with data
/// protection (the default), as strips that fail their checksums: rebuilt
/// from parity (recovery "needed redundancy") or EIO.
#[test]
fn checker_finds_file_data_not_flushed_before_its_commit() {
    let st = run_with("overwrite", Fault::DataNotFlushed);
    let found = |f: &&novafs_crashcheck::Failure| {
        ["content", "needed redundancy", "damaged on the media"]
            .iter()
            .any(|m| f.message.contains(m))
    };
    assert!(st.failures.iter().any(|f| found(&f)), "no bad data found: {st}");
}

#[test]
fn checker_finds_a_commit_not_ordered_after_what_it_commits() {
    let st = run_with("create", Fault::NoFences);
    assert!(!st.failures.is_empty(), "nothing found: {st}");
}

#[test]
fn the_unmodified_region_passes_the_same_workloads() {
    for name in ["rename_across_dirs", "overwrite", "create"] {
        common::assert_atomic(name);
    }
}
