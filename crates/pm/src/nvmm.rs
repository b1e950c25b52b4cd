//! Slower-NVMM emulation: the write side of NOVA's Table 1 (FAST'16 §5.1).
//!
//! NOVA was measured on Intel's PMEP, which slows the DRAM it calls NVMM in
//! firmware. Table 1's two settings: STT-RAM, DRAM's read latency and
//! bandwidth with a 200 ns PCOMMIT; PCM, 300 ns reads, 1/8 of DRAM's write
//! bandwidth and a 500 ns PCOMMIT (both with a 40 ns clwb). An [`Nvmm`]
//! model in [`crate::MapOptions`] slows a mapped region's writes the same
//! way, from user space:
//!
//! - **Persist barrier.** A [`crate::Region::fence`] by a thread that has
//!   flushed cache lines or issued non-temporal stores to an emulated
//!   region since its own last fence is a persist barrier (clwb/movnt,
//!   sfence, PCOMMIT): after the real `sfence` it spins for the model's
//!   barrier latency. A fence with nothing outstanding costs nothing
//!   extra: PCOMMIT drains the memory controller's write queue, and a
//!   thread with no writes in flight has nothing there to wait for. What is
//!   outstanding is counted per thread, as `sfence` orders the calling
//!   thread's own stores.
//! - **Write bandwidth.** Every byte written towards the media (a
//!   non-temporal store, or a whole cache line written back by a flush)
//!   costs `(divisor - 1) / B` more, where `B` is this machine's DRAM
//!   non-temporal copy bandwidth, measured once per process
//!   ([`dram_write_bandwidth`]): with the copy's own time, `divisor / B`,
//!   so sustained write bandwidth is `B / divisor`. The cost is charged at
//!   the barrier that waits for the bytes, against one write channel that
//!   every thread of the process shares (a drain booked by one thread
//!   delays the next thread's), so the cap holds for the process, not per
//!   thread.
//!
//! Not covered, because user space cannot slow them: **reads** (PCM's
//! 300 ns read latency: loads of file data, log scans at unlink and at
//! mount, checksum verification all run at DRAM speed); clwb's own latency
//! (the real instruction's cost on this machine stands in for Table 1's
//! 40 ns); cache lines that reach the media by eviction rather than a
//! flush (with eADR nothing is flushed, so only non-temporal stores pay
//! for bandwidth there); and a DAX program's own flushes through a
//! [`crate::Window`]. Heap and recording regions are never slowed.
//!
//! Delays are spins on the time-stamp counter (calibrated against the
//! monotonic clock once per process, the cost of reading it subtracted),
//! or on the monotonic clock where there is no invariant TSC; never
//! sleeps, which cannot wait a few hundred nanoseconds. A spin is CPU
//! time, like the media wait it stands for: on a machine shared with
//! other busy processes the scheduler stretches it as it stretches the
//! rest of the work, so compare settings by their ratios.

use std::cell::Cell;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

use crate::clock::clock;

/// How much slower than DRAM the emulated NVMM's writes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Nvmm {
    /// Extra latency of a persist barrier with writes outstanding, in ns
    /// (Table 1's PCOMMIT latency).
    pub barrier_ns: u32,
    /// Write bandwidth is DRAM's divided by this; 1 is DRAM's.
    pub write_bw_divisor: u32,
}

impl Nvmm {
    /// DRAM speed: no emulation.
    pub const DRAM: Nvmm = Nvmm {
        barrier_ns: 0,
        write_bw_divisor: 1,
    };
    /// Table 1's STT-RAM: a 200 ns PCOMMIT, DRAM's bandwidth.
    pub const STT_RAM: Nvmm = Nvmm {
        barrier_ns: 200,
        write_bw_divisor: 1,
    };
    /// Table 1's PCM: a 500 ns PCOMMIT, 1/8 of DRAM's write bandwidth.
    pub const PCM: Nvmm = Nvmm {
        barrier_ns: 500,
        write_bw_divisor: 8,
    };

    /// Whether anything is slowed.
    pub fn is_emulated(&self) -> bool {
        self.barrier_ns > 0 || self.write_bw_divisor > 1
    }

    /// The model in words, with the DRAM bandwidth its cap divides
    /// (measured, the first time, when it caps bandwidth).
    pub fn explain(&self) -> String {
        if !self.is_emulated() {
            return "DRAM speed (no emulation)".to_string();
        }
        let bw = match self.write_bw_divisor {
            0 | 1 => "DRAM's write bandwidth".to_string(),
            d => {
                let dram = dram_write_bandwidth() / 1e9;
                format!(
                    "write bandwidth 1/{d} of DRAM's (non-temporal copy here: {dram:.1} GB/s, capped to {:.2} GB/s)",
                    dram / f64::from(d)
                )
            }
        };
        format!(
            "{}: {} ns persist barrier, {bw}; reads at DRAM speed",
            match *self {
                Nvmm::STT_RAM => "STT-RAM (NOVA Table 1)",
                Nvmm::PCM => "PCM (NOVA Table 1)",
                _ => "custom",
            },
            self.barrier_ns
        )
    }
}

impl Default for Nvmm {
    fn default() -> Nvmm {
        Nvmm::DRAM
    }
}

/// `dram`, `stt`, `pcm`, or `NS:DIVISOR` for any other model.
impl fmt::Display for Nvmm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Nvmm::DRAM => f.write_str("dram"),
            Nvmm::STT_RAM => f.write_str("stt"),
            Nvmm::PCM => f.write_str("pcm"),
            Nvmm {
                barrier_ns,
                write_bw_divisor,
            } => write!(f, "{barrier_ns}:{write_bw_divisor}"),
        }
    }
}

/// Parses what [`Nvmm`]'s `Display` writes: `dram`, `stt` (or `stt-ram`),
/// `pcm`, or `NS:DIVISOR` (barrier latency in ns, write bandwidth divisor:
/// `500:8` is `pcm`, `0:8` PCM's bandwidth alone, as NOVA-Fortis' PMEP
/// setting without PCOMMIT).
impl FromStr for Nvmm {
    type Err = String;

    fn from_str(s: &str) -> Result<Nvmm, String> {
        let usage = || {
            format!(
                "{s:?} is not an NVMM model: use dram, stt, pcm or NS:DIVISOR (barrier ns, write bandwidth divisor)"
            )
        };
        match s {
            "dram" => Ok(Nvmm::DRAM),
            "stt" | "stt-ram" => Ok(Nvmm::STT_RAM),
            "pcm" => Ok(Nvmm::PCM),
            _ => {
                let (ns, div) = s.split_once(':').ok_or_else(usage)?;
                let barrier_ns = ns.parse().map_err(|_| usage())?;
                let write_bw_divisor = div.parse().map_err(|_| usage())?;
                if write_bw_divisor == 0 {
                    return Err(usage());
                }
                Ok(Nvmm {
                    barrier_ns,
                    write_bw_divisor,
                })
            }
        }
    }
}

/// A model's costs in this process's terms; `None` at DRAM speed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slow {
    model: Nvmm,
    barrier_ns: u64,
    /// Extra picoseconds each byte written to the media costs.
    ps_per_byte: u64,
}

impl Slow {
    /// The costs of `model`; measures DRAM's bandwidth the first time the
    /// model caps it.
    pub(crate) fn new(model: Nvmm) -> Option<Slow> {
        if !model.is_emulated() {
            return None;
        }
        let ps_per_byte = match model.write_bw_divisor {
            0 | 1 => 0,
            d => (f64::from(d - 1) * 1e12 / dram_write_bandwidth()).round() as u64,
        };
        // Calibrate the clock now rather than inside the first barrier.
        clock();
        Some(Slow {
            model,
            barrier_ns: u64::from(model.barrier_ns),
            ps_per_byte,
        })
    }

    pub(crate) fn model(&self) -> Nvmm {
        self.model
    }

    /// `bytes` were sent towards the media by this thread: the next fence
    /// is a persist barrier.
    pub(crate) fn wrote(&self, bytes: usize) {
        PENDING.with(|p| p.set(p.get() + bytes as u64));
    }

    /// After a fence: if this thread has writes outstanding, waits for
    /// their drain through the shared channel, then the barrier latency.
    pub(crate) fn barrier(&self) {
        let pending = PENDING.with(|p| p.replace(0));
        let delay_ns = self.barrier_ns + pending * self.ps_per_byte / 1000;
        STATS.with(|s| {
            let mut st = s.get();
            st.fences += 1;
            if pending > 0 {
                st.barriers += 1;
                st.bytes += pending;
                st.delay_ns += delay_ns;
            }
            s.set(st);
        });
        if pending == 0 {
            return;
        }
        let clock = clock();
        let now = clock.now();
        let drain = clock.ticks(pending * self.ps_per_byte / 1000);
        let drained = if drain == 0 {
            now
        } else {
            let booked = CHANNEL_FREE_AT
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |free| Some(free.max(now) + drain))
                .unwrap_or(now);
            booked.max(now) + drain
        };
        clock.spin_until(drained + clock.ticks(self.barrier_ns), now);
    }
}

/// What the emulation did on the calling thread so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NvmmStats {
    /// Fences on emulated regions.
    pub fences: u64,
    /// Those of them that had writes outstanding and so were slowed.
    pub barriers: u64,
    /// Bytes charged to the write bandwidth.
    pub bytes: u64,
    /// Delay asked for, in ns (the spins wait at least this long).
    pub delay_ns: u64,
}

impl NvmmStats {
    /// The calling thread's counts.
    pub fn thread() -> NvmmStats {
        STATS.with(Cell::get)
    }

    /// Both counts added.
    pub fn plus(&self, other: &NvmmStats) -> NvmmStats {
        NvmmStats {
            fences: self.fences + other.fences,
            barriers: self.barriers + other.barriers,
            bytes: self.bytes + other.bytes,
            delay_ns: self.delay_ns + other.delay_ns,
        }
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &NvmmStats) -> NvmmStats {
        NvmmStats {
            fences: self.fences - earlier.fences,
            barriers: self.barriers - earlier.barriers,
            bytes: self.bytes - earlier.bytes,
            delay_ns: self.delay_ns - earlier.delay_ns,
        }
    }
}

thread_local! {
    /// Bytes this thread sent towards an emulated region since its last
    /// fence on one.
    static PENDING: Cell<u64> = const { Cell::new(0) };
    static STATS: Cell<NvmmStats> = const {
        Cell::new(NvmmStats { fences: 0, barriers: 0, bytes: 0, delay_ns: 0 })
    };
}

/// When (in [`clock`] ticks) the emulated write channel has drained what
/// was booked on it.
static CHANNEL_FREE_AT: AtomicU64 = AtomicU64::new(0);

/// This machine's DRAM non-temporal copy bandwidth in bytes per second,
/// measured the first time it is asked for: the best of 40 copies of
/// 8 MiB made with the region's own non-temporal copy, after one that
/// faults the destination in. The source stays in the cache, as a
/// file system's user buffers mostly are. Short copies, many of them: on
/// a shared machine most copies of 64 MiB were interrupted (best-of-6 of
/// those varied twofold between runs).
pub fn dram_write_bandwidth() -> f64 {
    static BW: OnceLock<f64> = OnceLock::new();
    *BW.get_or_init(|| {
        const LEN: usize = 8 << 20;
        let src: Vec<u8> = (0..LEN).map(|i| ((i * 31) >> 6) as u8).collect();
        let mut dst = vec![0u8; LEN + 64];
        let at = dst.as_ptr().align_offset(64);
        let p = crate::Persist::new(false);
        let mut best = f64::MAX;
        for pass in 0..41 {
            let t = Instant::now();
            // SAFETY: `dst[at..at + LEN]` is a separate writable buffer.
            unsafe { p.write_nt(dst.as_mut_ptr().add(at), &src) };
            if pass > 0 {
                best = best.min(t.elapsed().as_secs_f64());
            }
        }
        std::hint::black_box(&dst);
        LEN as f64 / best
    })
}

#[cfg(test)]
mod tests;
