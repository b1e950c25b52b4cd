//! `novafs bench --nvmm`: what the emulated slower NVMM (pm's nvmm
//! module) cost each side of a run.

use anyhow::Result;
use pm::NvmmStats;

/// Wall time and the emulated NVMM's delays over a side's rounds (one
/// thread: the emulation counts per thread).
#[derive(Default)]
pub(crate) struct Slowed {
    secs: f64,
    stats: NvmmStats,
}

impl Slowed {
    /// Runs `f`, one round of a side, adding its time and what it was slowed.
    pub(crate) fn time<T>(&mut self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let (before, t) = (NvmmStats::thread(), std::time::Instant::now());
        let out = f()?;
        self.secs += t.elapsed().as_secs_f64();
        self.stats = self.stats.plus(&NvmmStats::thread().since(&before));
        Ok(out)
    }

    /// One line, when anything was slowed.
    pub(crate) fn print(&self, name: &str, rounds: usize) {
        let s = &self.stats;
        if s.fences == 0 {
            return;
        }
        let per_round = |x: u64| x as f64 / rounds.max(1) as f64;
        println!(
            "emulated NVMM, {name}: {:.0} persist barriers of {:.0} fences and {:.1} MiB charged per round; \
             the delays are {:.0}% of its time",
            per_round(s.barriers),
            per_round(s.fences),
            per_round(s.bytes) / f64::from(1 << 20),
            100.0 * s.delay_ns as f64 / 1e9 / self.secs
        );
    }
}
