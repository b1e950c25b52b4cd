//! What the allocator hands out and takes back: runs of pages, and the
//! evidence a free needs (rule R3).

use crate::layout::PAGE_SIZE;

/// Evidence that nothing durable references some pages any more (rule R3),
/// which [`PageAllocator::release`] asks for: only the commit points make
/// one — a log tail store or a journal transaction (`log::Committed`,
/// `journal::Durable`) and fast GC's relinking (`log::Unlinked`) — and
/// the release of the slot of an inode no commit made live
/// (`itable::Unborn`).
/// (The rule is shown not to compile when broken in `probe.rs`.) Sealed:
/// only the core's commit points implement it, so no code outside them
/// can mint the evidence, even where the `probe` feature shows the trait.
pub trait Unreferenced: sealed::Commit {}

/// Evidence that freshly reserved pages are reachable from something
/// durable, which keeping a [`super::Reserved`] asks for: only the commit
/// points make one — a log tail store (`log::Committed`), a journal
/// transaction or single committed word (`journal::Durable`) and a log
/// growing its chain (`log::Chained`). Sealed as [`Unreferenced`] is.
pub(crate) trait Linked: sealed::Link {}

pub(crate) mod sealed {
    /// The seal of [`super::Unreferenced`]: a trait outside crates cannot
    /// name, so they cannot implement the proof trait either.
    pub trait Commit {}

    /// The seal of [`super::Linked`].
    pub(crate) trait Link {}
}

/// A run of contiguous pages, by byte offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub off: u64,
    pub npages: u64,
}

/// Data pages that applied log entries left unreferenced, in runs, each
/// with the log entry that had mapped it: a page's birth epoch is that
/// entry's, which decides whether a snapshot still needs it (Fortis §3.2).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Freed(Vec<(Extent, u64)>);

impl Freed {
    /// Adds page `block`, which the entry at `entry` mapped: it extends
    /// the last run when it continues it under the same entry.
    pub(crate) fn push_page(&mut self, block: u64, entry: u64) {
        match self.0.last_mut() {
            Some((e, at)) if *at == entry && e.off + e.npages * PAGE_SIZE == block => e.npages += 1,
            _ => self.0.push((Extent { off: block, npages: 1 }, entry)),
        }
    }

    /// The runs and their entries.
    pub(crate) fn runs(&self) -> &[(Extent, u64)] {
        &self.0
    }

    /// The runs alone.
    pub(crate) fn extents(&self) -> Vec<Extent> {
        self.0.iter().map(|&(e, _)| e).collect()
    }

    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }
}
