//! A narrow window onto the internals, behind the `probe` feature: what
//! the crash checker's tests measure inside an image, and the types of the
//! persistence proofs, so their rules can be shown not to compile when
//! broken. Not part of the stable API.
//!
//! Publishing appended entries to the DRAM indexes takes the proof that
//! their commit is durable (rules R1, R2, R5):
//!
//! ```compile_fail,E0308
//! use novafs::probe::{Log, Pending};
//! fn publish_before_commit(log: &mut Log, appended: &Pending) {
//!     log.committed(appended);
//! }
//! ```
//!
//! and only a commit makes one:
//!
//! ```
//! use novafs::probe::{Committed, Log};
//! fn publish_after_commit(log: &mut Log, proof: &Committed) {
//!     log.committed(proof);
//! }
//! ```
//!
//! Freeing pages likewise takes a commit's proof (R3):
//!
//! ```compile_fail,E0277
//! use novafs::probe::{Extent, PageAllocator};
//! fn free_before_commit(alloc: &PageAllocator, stale: &[Extent]) {
//!     alloc.release(&(), stale);
//! }
//! ```
//!
//! ```
//! use novafs::probe::{Durable, Extent, PageAllocator};
//! fn free_after_commit(alloc: &PageAllocator, proof: &Durable, stale: &[Extent]) {
//!     alloc.release(proof, stale);
//! }
//! ```
//!
//! and no code outside the core can make its own proof: the trait is
//! sealed.
//!
//! ```compile_fail,E0277
//! use novafs::probe::{Extent, PageAllocator, Unreferenced};
//! struct Forged;
//! impl Unreferenced for Forged {}
//! fn free_with_a_forged_proof(alloc: &PageAllocator, stale: &[Extent]) {
//!     alloc.release(&Forged, stale);
//! }
//! ```

use pm::Region;

use crate::error::Result;

pub use crate::alloc::{Extent, PageAllocator, Unreferenced};
pub use crate::journal::Durable;
pub use crate::log::{Committed, Log, Pending};

// What the fault-injection tests check `inject`'s findings against: the
// superblock, inode records and logs as the file system reads them, and
// its writes of metadata to both copies.
pub use crate::itable::{read_live_record, InodeTables};
pub use crate::replica::Mirrored;
pub use crate::superblock::{bounds_of, read_superblock};

/// Every on-media structure (FORMAT.md), for tests that damage or read
/// one at its offset; `Fs::superblock` shows the mounted superblock.
pub mod layout {
    pub use crate::layout::*;
}

/// The repair and loss counters superblock `sb` holds.
pub fn health(sb: &layout::Superblock) -> crate::health::HealthCounts {
    crate::health::HealthCounts::of(sb)
}

/// How many 2 MiB chunks the inode tables of the image on `region` have.
pub fn inode_table_chunks(region: &dyn Region) -> Result<usize> {
    let (sb, _) = read_superblock(region)?;
    let tables = crate::itable::InodeTables::load(region, &sb, bounds_of(&sb))?;
    Ok(tables.all_chunks().len())
}
