//! The shared context every operation works in: the region, the allocators,
//! the journals and the inode tables, plus the commit paths that tie a log
//! append to its persistence rules.

use std::sync::Arc;

use pm::Region;

use crate::alloc::{Budget, Extent, PageAllocator};
use crate::error::Result;
use crate::gc;
use crate::inode::{InodeState, InodeTables};
use crate::journal::{Journal, Txn, Update};
use crate::layout::INODE_TAIL_OFF;
use crate::log::{Bounds, Entry, Pending};

pub struct Ctx {
    pub region: Arc<dyn Region>,
    pub alloc: PageAllocator,
    pub tables: InodeTables,
    pub journal: Journal,
    pub bounds: Bounds,
    /// Snapshot epoch stamped into new entries (Fortis §3).
    pub epoch: u64,
}

impl Ctx {
    pub fn region(&self) -> &dyn Region {
        &*self.region
    }

    /// Returns extents to the allocator (rule R3: only after the commit that
    /// made them unreferenced is durable).
    pub fn free_extents(&self, extents: &[Extent]) {
        for e in extents {
            self.alloc.free(e.off, e.npages);
        }
    }

    /// Collects garbage in `st`'s log if appending `entries` would grow it
    /// (NOVA §4.6: GC runs as logs grow). Thorough GC commits through the
    /// journal, so this runs before a journal transaction is begun.
    pub fn make_room(&self, st: &mut InodeState, entries: &[Entry]) -> Result<()> {
        if st.log.needs_growth(entries) {
            gc::collect(self, st)?;
        }
        Ok(())
    }

    /// Appends `entries` to `st`'s log after [`Ctx::make_room`]. Persisted,
    /// not yet committed.
    pub fn append(&self, st: &mut InodeState, budget: Budget, entries: &[Entry]) -> Result<Pending> {
        self.make_room(st, entries)?;
        st.log.append(self.region(), &self.alloc, budget, entries)
    }

    /// Appends `entries` to `st`'s log for `txn` to commit, declaring every
    /// byte written as one of its checks. GC must have run first
    /// ([`Ctx::make_room`]): thorough GC commits through the journal.
    pub fn append_in(
        &self,
        txn: &mut Txn<'_>,
        st: &mut InodeState,
        budget: Budget,
        entries: &[Entry],
    ) -> Result<Pending> {
        let p = st.log.append(self.region(), &self.alloc, budget, entries)?;
        txn.depends_on(&p.written);
        Ok(p)
    }

    /// Applies committed entries to the DRAM state and frees what they made
    /// unreferenced (R3).
    pub fn apply(&self, st: &mut InodeState, entries: &[Entry], p: &Pending) -> Result<()> {
        st.log.committed(p);
        let mut freed = Vec::new();
        for (e, &off) in entries.iter().zip(&p.offsets) {
            st.meta.apply(&mut st.log, self.bounds, off, e.bytes(), &mut freed)?;
        }
        self.free_extents(&freed);
        Ok(())
    }

    /// A single-inode update: append, commit with one tail store (R1, R5),
    /// apply to DRAM.
    pub fn commit_single(&self, st: &mut InodeState, budget: Budget, entries: &[Entry]) -> Result<()> {
        let p = self.append(st, budget, entries)?;
        st.log.commit(self.region(), st.off, &p)?;
        self.apply(st, entries, &p)
    }

    /// The journal updates that commit a pending append of inode `st`.
    pub fn tail_updates(st: &InodeState, p: &Pending, out: &mut Vec<Update>) {
        if let Some(h) = p.new_head {
            out.push(Update::word(st.off + crate::layout::INODE_HEAD_OFF, h));
        }
        out.push(Update::word(st.off + INODE_TAIL_OFF, p.tail));
    }
}
