//! The TSC as a clock: what the NVMM emulation spins on and what the
//! latency breakdown (`latency`) reads, at a tenth of the cost of the
//! monotonic clock's (about 11 against 27 ns a read here, through the
//! vDSO). Where the TSC is not invariant, nanoseconds of the monotonic
//! clock instead.

use std::sync::OnceLock;
use std::time::Instant;

/// The spin clock: the TSC, or nanoseconds of the monotonic clock.
pub(crate) struct Clock {
    tsc: bool,
    pub(crate) ticks_per_ns: f64,
    /// What reading the clock costs, in ticks.
    read: u64,
    epoch: Instant,
}

pub(crate) fn clock() -> &'static Clock {
    static CLOCK: OnceLock<Clock> = OnceLock::new();
    CLOCK.get_or_init(Clock::calibrate)
}

impl Clock {
    fn calibrate() -> Clock {
        let mut c = Clock {
            tsc: invariant_tsc(),
            ticks_per_ns: 1.0,
            read: 0,
            epoch: Instant::now(),
        };
        if c.tsc {
            let (t0, k0) = c.paired();
            while t0.elapsed().as_micros() < 10_000 {
                std::hint::spin_loop();
            }
            let (t1, k1) = c.paired();
            c.ticks_per_ns = (k1 - k0) as f64 / (t1 - t0).as_nanos() as f64;
        }
        const READS: u64 = 1_000;
        let k0 = c.now();
        for _ in 0..READS {
            std::hint::black_box(c.now());
        }
        c.read = (c.now() - k0) / (READS + 1);
        c
    }

    /// The monotonic clock and the TSC read together: retried until
    /// nothing (a preemption) came between the TSC reads around it.
    fn paired(&self) -> (Instant, u64) {
        loop {
            let a = self.now();
            let t = Instant::now();
            let b = self.now();
            if b - a < 10_000 {
                return (t, a + (b - a) / 2);
            }
        }
    }

    pub(crate) fn now(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if self.tsc {
            // SAFETY: rdtsc exists on every x86_64 CPU; `tsc` says it is
            // invariant.
            return unsafe { core::arch::x86_64::_rdtsc() };
        }
        self.epoch.elapsed().as_nanos() as u64
    }

    pub(crate) fn ticks(&self, ns: u64) -> u64 {
        (ns as f64 * self.ticks_per_ns) as u64
    }

    /// Spins until tick `until`, less one clock read (so that the last
    /// read lands on time on average), never before `from + 1`.
    pub(crate) fn spin_until(&self, until: u64, from: u64) {
        let until = until.saturating_sub(self.read).max(from + 1);
        while self.now() < until {
            std::hint::spin_loop();
        }
    }
}

/// CPUID 0x8000_0007 EDX bit 8: the TSC runs at a constant rate in every
/// power state.
#[cfg(target_arch = "x86_64")]
fn invariant_tsc() -> bool {
    use core::arch::x86_64::__cpuid;
    __cpuid(0x8000_0000).eax >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0
}

#[cfg(not(target_arch = "x86_64"))]
fn invariant_tsc() -> bool {
    false
}
