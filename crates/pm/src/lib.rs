//! `pm` — the persistent-memory region and its persist primitives.
//!
//! This crate is the only place (besides the later C ABI) that holds raw
//! pointers into persistent memory (DESIGN.md §2 layer 1). Everything above it
//! talks to a [`Region`]: a real mapping ([`MmapRegion`]) in production, a
//! heap-backed [`MemRegion`] in tests (with poison injection), and later a
//! recording region for crash enumeration.
//!
//! Offsets are byte offsets from the start of the region; persistent pointers
//! are always such offsets, never virtual addresses.
//!
//! A slower NVMM's writes can be emulated on a mapped region ([`nvmm`]:
//! NOVA's Table 1, persist barrier latency and write bandwidth).
//!
//! Media errors can be emulated on both: [`MemRegion::poison`] in tests, and
//! for an image file a sidecar `IMAGE.badblocks` ([`BadBlocks`]: one
//! `offset length` pair per line) that [`MmapRegion`] loads when it maps the
//! image. Reads of a listed byte fail with [`PmError::Media`]; writes do not
//! clear it. `rm IMAGE.badblocks` clears emulated poison.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod badblocks;
mod clock;
mod error;
mod flush;
pub mod latency;
mod mem;
mod mmap;
pub mod nvmm;
mod prefault;
mod protect;
mod record;
mod sigbus;
pub mod stripe;
mod track;
mod vmas;
mod window;

pub use badblocks::{BadBlocks, SIDECAR_SUFFIX};
pub use error::PmError;
pub use flush::{FlushKind, Persist};
pub use mem::MemRegion;
pub use mmap::{above_program_descriptors, MapOptions, MmapRegion, RegionKind};
pub use nvmm::{Nvmm, NvmmStats};
pub use prefault::Prefault;
pub use protect::{Protection, WriteProtect};
pub use record::{Choice, CrashPoint, Event, PointKind, RecordingRegion, Torn, Trace, UncertainLine};
pub use sigbus::c_str_len;
pub use window::{anonymous_file, overlaps_window, Fault, MapSource, Window, WINDOW_PAGE};

/// Size of a CPU cache line: the unit of flushing and of crash tearing.
pub const CACHELINE: u64 = 64;

/// A byte-addressable persistent-memory region.
///
/// Durability model (x86, DESIGN.md §3): a store becomes durable once the cache
/// line holding it has been flushed *and* a later [`Region::fence`] has
/// completed; non-temporal stores ([`Region::write_nt`]) only need the fence.
/// An aligned 8-byte store ([`Region::store_u64`]) is never torn: it is the
/// commit point of rule R5.
///
/// Implementations must be callable from many threads at once. The file system
/// guarantees that no two threads write the same bytes concurrently, except
/// through `store_u64`/`load_u64`, which are atomic.
pub trait Region: Send + Sync {
    /// Size of the region in bytes.
    fn len(&self) -> u64;

    /// True when the region has no bytes (never for a usable region).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `buf.len()` bytes at `off` out of the region. A poisoned
    /// (media-error) range yields [`PmError::Media`] instead of a crash.
    fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), PmError>;

    /// Cached stores of `data` at `off`; durable only after `flush` + `fence`.
    fn write(&self, off: u64, data: &[u8]) -> Result<(), PmError>;

    /// Stores `data` at `off` bypassing the cache where possible (whole,
    /// aligned cache lines); any partial edge lines are written and flushed.
    /// Durable after the next `fence`.
    fn write_nt(&self, off: u64, data: &[u8]) -> Result<(), PmError>;

    /// Stores the page `page` at `off` like [`Region::write_nt`] and returns
    /// its strips' checksums and parity ([`stripe`]), computed while
    /// copying where the region and the CPU allow.
    fn write_nt_summed(&self, off: u64, page: &[u8; stripe::PAGE]) -> Result<stripe::PageSums, PmError> {
        let sums = stripe::page_sums(page);
        self.write_nt(off, page)?;
        Ok(sums)
    }

    /// Zeroes `len` bytes at `off` like [`Region::write_nt`]; durable after the
    /// next `fence`.
    fn zero_nt(&self, off: u64, len: u64) -> Result<(), PmError>;

    /// Writes back every cache line overlapping `[off, off + len)`.
    fn flush(&self, off: u64, len: u64) -> Result<(), PmError>;

    /// Store fence: every earlier flush and non-temporal store is durable
    /// before any later store.
    fn fence(&self);

    /// Atomic aligned 8-byte store (not flushed). `off` must be 8-aligned.
    fn store_u64(&self, off: u64, val: u64) -> Result<(), PmError>;

    /// Atomic aligned 8-byte load. `off` must be 8-aligned.
    fn load_u64(&self, off: u64) -> Result<u64, PmError>;

    /// What backs the region and how durable it is.
    fn kind(&self) -> RegionKind;

    /// The file its pages can be mapped from into a [`Window`] (DAX
    /// `mmap()`), if they can: a region mapped from a file page by page.
    fn map_source(&self) -> Option<MapSource<'_>> {
        None
    }

    /// Flush then fence: `[off, off + len)` is durable when this returns.
    fn persist(&self, off: u64, len: u64) -> Result<(), PmError> {
        self.flush(off, len)?;
        self.fence();
        Ok(())
    }

    /// Rule R5: one aligned 8-byte store, flushed and fenced. This is the
    /// commit point of every log append and journal transaction.
    fn commit_u64(&self, off: u64, val: u64) -> Result<(), PmError> {
        self.store_u64(off, val)?;
        self.persist(off, 8)
    }
}
