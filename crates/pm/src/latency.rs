//! Where an operation's time goes: the latency breakdowns of NOVA
//! (Fig. 6c: create, append and unlink cut into their parts) and
//! NOVA-Fortis (Fig. 10: the same with each reliability mechanism's share).
//!
//! The file system marks the parts of its work ([`Part`]) with spans
//! ([`enter`]); each thread adds up, per part, the TSC ticks spent inside
//! its innermost open span, so a part nested in another (a replica write
//! inside a log append) is charged to itself and not to both. Time
//! outside every span is nobody's: the caller takes an operation's wall
//! time and calls the rest "other" (locks, lookups, the call itself).
//!
//! Off by default and then a span costs one relaxed load. On
//! ([`set_enabled`]), it costs two clock reads (about 11 ns each here)
//! and two thread-local additions: `novafs bench --breakdown` measures
//! that cost and prints it beside the breakdown.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::clock::clock;

/// A part of a file-system operation, as the papers' breakdowns name
/// them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// Claiming an inode slot and writing its record; reserving pages.
    Alloc,
    /// Writing log entries and committing a log's tail (NOVA §4.3).
    Log,
    /// The lite journal's transactions (NOVA §4.3, FGM §III).
    Journal,
    /// The second copy of every metadata write and flush (Fortis §4.2).
    Replica,
    /// File bytes copied into or out of persistent memory: NOVA's
    /// `memcpy_nocache`, Fortis's `memcpy_mcsafe`.
    DataCopy,
    /// Strip checksums and parity written, or verified on a read
    /// (Fortis §4.3). Where the CPU allows, the checksums of a whole page
    /// are computed while it is copied, so part of their cost is in
    /// [`Part::DataCopy`].
    DataProtect,
    /// Opening and closing write windows (Fortis §4.5: protection keys,
    /// or mprotect where the CPU has none).
    WriteProtect,
    /// The DRAM indexes: a file's page map, a directory's names.
    Index,
    /// Giving pages and inodes back.
    Free,
    /// Log garbage collection before an append (NOVA §4.6).
    Gc,
    /// Finding an inode in the DRAM cache, or loading it there from its
    /// log on a miss.
    Lookup,
}

impl Part {
    /// Every part, in the order reports list them.
    pub const ALL: [Part; 11] = [
        Part::Alloc,
        Part::Log,
        Part::Journal,
        Part::Replica,
        Part::DataCopy,
        Part::DataProtect,
        Part::WriteProtect,
        Part::Index,
        Part::Free,
        Part::Gc,
        Part::Lookup,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Part::Alloc => "allocation",
            Part::Log => "log append",
            Part::Journal => "journal",
            Part::Replica => "metadata replica",
            Part::DataCopy => "data copy",
            Part::DataProtect => "data checksums + parity",
            Part::WriteProtect => "write windows",
            Part::Index => "DRAM index",
            Part::Free => "freeing",
            Part::Gc => "log GC",
            Part::Lookup => "inode cache",
        }
    }
}

const PARTS: usize = Part::ALL.len();

static ENABLED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// The innermost open span's part and when it (last) became current.
    static CURRENT: Cell<Option<(Part, u64)>> = const { Cell::new(None) };
    /// Ticks spent per part by this thread.
    static SPENT: [Cell<u64>; PARTS] = const { [const { Cell::new(0) }; PARTS] };
}

/// Turns the accounting on or off for every thread. Calibrates the clock
/// first, so the first span does not pay for it.
pub fn set_enabled(on: bool) {
    clock();
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether spans are being counted.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Charges the time since the current part became current to it, and
/// makes `to` current. Returns the part that was.
fn switch(to: Option<Part>) -> Option<Part> {
    let now = clock().now();
    let was = CURRENT.get();
    if let Some((part, since)) = was {
        SPENT.with(|s| {
            let cell = &s[part as usize];
            cell.set(cell.get() + now.saturating_sub(since));
        });
    }
    CURRENT.set(to.map(|p| (p, now)));
    was.map(|(p, _)| p)
}

/// Time spent in `part` until the span is dropped; the part it
/// interrupts resumes then.
#[must_use = "the span ends when it is dropped"]
pub struct Span {
    /// `None` when the accounting was off at the start; else the part to
    /// resume.
    resume: Option<Option<Part>>,
}

impl Drop for Span {
    fn drop(&mut self) {
        if let Some(prev) = self.resume {
            switch(prev);
        }
    }
}

/// Starts a span of `part` on this thread (nothing when off).
pub fn enter(part: Part) -> Span {
    Span {
        resume: enabled().then(|| switch(Some(part))),
    }
}

/// Runs `f` inside a span of `part`.
pub fn timed<R>(part: Part, f: impl FnOnce() -> R) -> R {
    let _span = enter(part);
    f()
}

/// Time spent per part by one thread: [`Spent::thread`] before and after
/// some work, then [`Spent::since`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Spent {
    ticks: [u64; PARTS],
}

impl Spent {
    /// This thread's totals so far (spans still open count up to their
    /// last switch).
    pub fn thread() -> Spent {
        Spent {
            ticks: SPENT.with(|s| std::array::from_fn(|i| s[i].get())),
        }
    }

    /// What was spent between `earlier` and `self`.
    pub fn since(&self, earlier: &Spent) -> Spent {
        Spent {
            ticks: std::array::from_fn(|i| self.ticks[i].saturating_sub(earlier.ticks[i])),
        }
    }

    /// Both added.
    pub fn plus(&self, other: &Spent) -> Spent {
        Spent {
            ticks: std::array::from_fn(|i| self.ticks[i] + other.ticks[i]),
        }
    }

    /// Nanoseconds spent in `part`.
    pub fn ns(&self, part: Part) -> f64 {
        self.ticks[part as usize] as f64 / clock().ticks_per_ns
    }

    /// Nanoseconds spent in every part together.
    pub fn total_ns(&self) -> f64 {
        Part::ALL.iter().map(|&p| self.ns(p)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn spin(d: Duration) {
        let t = Instant::now();
        while t.elapsed() < d {
            std::hint::spin_loop();
        }
    }

    const MS: f64 = 1e6;

    // One test: the switch is global, and another test turning it off
    // halfway would leave spans uncounted.
    #[test]
    fn nested_spans_charge_each_part_its_own_time_and_only_when_on() {
        set_enabled(false);
        let before = Spent::thread();
        timed(Part::Log, || spin(Duration::from_millis(2)));
        assert_eq!(Spent::thread(), before, "off: nothing counted");

        set_enabled(true);
        let before = Spent::thread();
        let wall = Instant::now();
        {
            let _log = enter(Part::Log);
            spin(Duration::from_millis(2));
            timed(Part::Replica, || spin(Duration::from_millis(3)));
            spin(Duration::from_millis(2));
        }
        spin(Duration::from_millis(2)); // Outside every span: nobody's.
        let wall = wall.elapsed().as_nanos() as f64;
        let spent = Spent::thread().since(&before);
        // The spins are lower bounds (a preemption only adds); the parts
        // together cannot exceed the wall time less the uncounted spin.
        assert!(spent.ns(Part::Log) >= 4.0 * MS * 0.99, "{spent:?}");
        assert!(spent.ns(Part::Replica) >= 3.0 * MS * 0.99, "{spent:?}");
        assert!(spent.total_ns() <= (wall - 2.0 * MS) * 1.01, "{spent:?} in {wall} ns");
        assert_eq!(spent.ns(Part::Alloc), 0.0);

        // A write window's opening and closing are their own part; the
        // store inside it is not.
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let opts = crate::MapOptions {
            protect: crate::WriteProtect::Mprotect,
            ..crate::MapOptions::default()
        };
        let region = crate::MmapRegion::create(&dir.path().join("img"), 16384, &opts).unwrap();
        let before = Spent::thread();
        timed(Part::DataCopy, || crate::Region::write(&region, 0, &[1u8; 4096])).unwrap();
        let spent = Spent::thread().since(&before);
        assert!(spent.ns(Part::WriteProtect) > 0.0, "{spent:?}");
        assert!(spent.ns(Part::DataCopy) > 0.0, "{spent:?}");

        // Another thread's spans are its own.
        let before = Spent::thread();
        std::thread::spawn(|| timed(Part::Gc, || spin(Duration::from_millis(1))))
            .join()
            .unwrap();
        assert_eq!(Spent::thread(), before);
        set_enabled(false);
    }
}
