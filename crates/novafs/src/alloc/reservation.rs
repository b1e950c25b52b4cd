//! Pages reserved for an operation that no commit has made reachable yet:
//! a guard that gives them back when dropped, so an early `?` or a failed
//! commit can never leave pages neither free nor in use, and that only a
//! commit's proof ([`Linked`]) disarms.

use pm::latency::{self, Part};

use super::pages::PageAllocator;
use super::proof::{Extent, Linked};
use super::Budget;
use crate::error::Result;

/// Freshly allocated pages owned by the operation that allocated them:
/// returned to the allocator when dropped, kept only by [`Reserved::keep`]
/// with the proof of the commit that links them into something durable.
#[must_use = "reserved pages go back to the allocator unless a commit keeps them"]
pub(crate) struct Reserved<'a> {
    alloc: &'a PageAllocator,
    /// Data pages (single).
    data: Vec<Extent>,
    /// Metadata primaries, each with its mirror when the image keeps
    /// replicas.
    meta: Vec<Extent>,
}

impl<'a> Reserved<'a> {
    /// A guard holding nothing yet (for [`Reserved::merge`]).
    pub(crate) fn empty(alloc: &'a PageAllocator) -> Reserved<'a> {
        Reserved {
            alloc,
            data: Vec::new(),
            meta: Vec::new(),
        }
    }

    /// The data pages, in the order they were allocated.
    pub(crate) fn extents(&self) -> &[Extent] {
        &self.data
    }

    /// The metadata primaries, in the order they were allocated.
    pub(crate) fn meta_extents(&self) -> &[Extent] {
        &self.meta
    }

    /// Takes over what `other` holds: one guard for one commit.
    pub(crate) fn merge(&mut self, mut other: Reserved<'a>) {
        debug_assert!(
            std::ptr::eq(self.alloc, other.alloc),
            "reservations from two allocators"
        );
        self.data.append(&mut other.data);
        self.meta.append(&mut other.meta);
    }

    /// The pages are in use now: `_proof` is the durable commit that made
    /// them reachable (a log tail store, a journal transaction or a chain
    /// link, rule R1 before it), so they must not go back.
    pub(crate) fn keep(mut self, _proof: &impl Linked) {
        self.data.clear();
        self.meta.clear();
    }
}

impl std::fmt::Debug for Reserved<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reserved")
            .field("data", &self.data)
            .field("meta", &self.meta)
            .finish()
    }
}

impl Drop for Reserved<'_> {
    /// Nothing committed ever pointed at these pages, so no proof is due:
    /// they are free again.
    fn drop(&mut self) {
        if !self.data.is_empty() {
            self.alloc.abandon(&self.data);
        }
        if !self.meta.is_empty() {
            self.alloc.abandon_meta(&self.meta);
        }
    }
}

impl PageAllocator {
    /// Reserves `npages` data pages, possibly as several extents
    /// ([`PageAllocator::alloc`]'s placement; all or nothing).
    pub(crate) fn reserve(&self, npages: u64, budget: Budget) -> Result<Reserved<'_>> {
        let data = latency::timed(Part::Alloc, || self.alloc(npages, budget))?;
        Ok(Reserved {
            alloc: self,
            data,
            meta: Vec::new(),
        })
    }

    /// Reserves `npages` metadata pages and their mirrors
    /// ([`PageAllocator::alloc_meta`]).
    pub(crate) fn reserve_meta(&self, npages: u64, budget: Budget) -> Result<Reserved<'_>> {
        let meta = latency::timed(Part::Alloc, || self.alloc_meta(npages, budget))?;
        Ok(Reserved {
            alloc: self,
            data: Vec::new(),
            meta,
        })
    }

    /// Reserves `npages` contiguous metadata primaries and their mirrors
    /// ([`PageAllocator::alloc_contiguous_meta`]): one extent.
    pub(crate) fn reserve_contiguous_meta(&self, npages: u64, budget: Budget) -> Result<Reserved<'_>> {
        let off = latency::timed(Part::Alloc, || self.alloc_contiguous_meta(npages, budget))?;
        Ok(Reserved {
            alloc: self,
            data: Vec::new(),
            meta: vec![Extent { off, npages }],
        })
    }
}
