//! Data-write intents: how relaxed mode (Fortis §4.6) overwrites file data
//! in place without leaving checksums that "repair" it from stale parity.
//!
//! While a relaxed overwrite changes a data page in place, the page's
//! bytes, its strips' checksums and its parity disagree. Before the first
//! byte changes, the shard's header line names the page (`intent`: one
//! aligned 8-byte store, flushed and fenced, R5); the transaction that
//! commits the write's metadata clears it, as one of its own updates. A
//! crash in between leaves the intent, and recovery reseals the page it
//! names: its checksums and parity recomputed from what the media holds.
//! Resealing is idempotent, so an intent that outlives the write it
//! guarded costs a reseal and nothing else. Data is then torn only inside
//! the write in flight, and reads after recovery check it whole.
//!
//! A write spanning pages moves the intent page by page: the next page's
//! intent is stored only after a fence makes the previous page's bytes
//! and redundancy durable.

use pm::Region;

use crate::error::Result;
use crate::layout::{JournalHeader, Superblock, INTENT_VALID, JOURNAL_INTENT_FIELD, PAGE_SIZE};
use crate::superblock::strips_of;

use super::{header_off, read_header, Txn, Update};

/// The data page a header's intent word names, if it is a whole intent:
/// the valid bit, a page-aligned address inside the data area, nothing
/// else. Anything else but 0 is damage.
pub(super) fn page_of(word: u64, sb: &Superblock) -> Option<u64> {
    let page = word & !(PAGE_SIZE - 1);
    let whole = word & (PAGE_SIZE - 1) == INTENT_VALID && page >= sb.data_start && page < sb.data_end;
    whole.then_some(page)
}

/// Whether a header line's intent word is 0 or a whole intent.
pub(super) fn is_whole(hdr: &JournalHeader, sb: &Superblock) -> bool {
    hdr.intent == 0 || page_of(hdr.intent, sb).is_some()
}

impl Txn<'_> {
    /// Declares that data page `page` is about to change in place: durable
    /// when this returns. The commit clears it.
    pub(crate) fn intend(&mut self, region: &dyn Region, page: u64) -> Result<()> {
        if self.intent {
            // The previous page's bytes and redundancy are durable before
            // its intent is overwritten.
            self.cost.fence(region);
        }
        let at = self.shard.header + JOURNAL_INTENT_FIELD;
        region.store_u64(at, page | INTENT_VALID)?;
        self.cost.flush(region, at, 8)?;
        self.cost.fence(region); // R5: named before its first byte changes.
        self.cost.journal += 8;
        self.intent = true;
        Ok(())
    }

    /// Ends the transaction without committing anything, for a change
    /// whose metadata joins the running transaction (`batch`): a fence
    /// makes the page's bytes and redundancy durable, then the intent is
    /// cleared (durable at the next fence; until then a crash only
    /// reseals the page again).
    pub(crate) fn end_intent(mut self, region: &dyn Region) -> Result<()> {
        if self.intent {
            let mut cost = std::mem::take(&mut self.cost);
            cost.fence(region);
            let at = self.shard.header + JOURNAL_INTENT_FIELD;
            region.store_u64(at, 0)?;
            cost.flush(region, at, 8)?;
            cost.journal += 8;
            self.counters.add(&cost, false);
        }
        Ok(())
    }

    /// The update that clears this transaction's intent, if it stored one:
    /// applied with the transaction's own updates, after its commit fence
    /// made the page's new bytes and redundancy durable (R2).
    pub(super) fn clearing(&self) -> Option<Update> {
        self.intent
            .then(|| Update::word(self.shard.header + JOURNAL_INTENT_FIELD, 0))
    }
}

/// Reseals the page every shard's intent names and clears the intent
/// (recovery, after the replay: a replayed commit has already cleared its
/// own). `meta` is the metadata view (the header lines are mirrored),
/// `data` the region. Returns how many pages were resealed.
pub(super) fn reseal_pending(meta: &dyn Region, data: &dyn Region, sb: &Superblock) -> Result<u64> {
    let strips = strips_of(sb);
    let mut resealed = 0;
    for i in 0..u64::from(sb.shards) {
        let hdr = header_off(sb, i);
        let Some(page) = page_of(read_header(meta, hdr)?.intent, sb) else {
            continue;
        };
        // A page the media cannot read is left as it is: reads rebuild
        // what parity can and report the rest as EIO, and the mount goes on.
        match strips.reseal(data, page) {
            Ok(()) => {
                tracing::info!(page, "resealed a page a relaxed write was changing at the crash");
                resealed += 1;
            }
            Err(e) => tracing::error!(page, %e, "cannot reseal a page a relaxed write was changing at the crash"),
        }
        data.fence(); // The page's redundancy is whole before its intent goes.
        meta.commit_u64(hdr + JOURNAL_INTENT_FIELD, 0)?; // R5
    }
    Ok(resealed)
}

/// Whether some shard's header names a page (read only).
pub(super) fn any_pending(meta: &dyn Region, sb: &Superblock) -> Result<bool> {
    for i in 0..u64::from(sb.shards) {
        if page_of(read_header(meta, header_off(sb, i))?.intent, sb).is_some() {
            return Ok(true);
        }
    }
    Ok(false)
}
