//! Data-write intents: how relaxed mode (Fortis §4.6) overwrites file data
//! in place, and changes the file's newest log entry in place, without
//! leaving checksums that "repair" the data from stale parity or an entry
//! torn between its new time and its old checksum.
//!
//! While a relaxed overwrite changes a data page in place, the page's
//! bytes, its strips' checksums and its parity disagree, and so, for a
//! moment, do the entry's new time and its checksum. Before the first byte
//! changes, the shard's header line names the page and says what the
//! entry becomes (`intent` and the `redo_*` words: one line, one fence,
//! R5). A crash before the write's own fence leaves the intent, and
//! recovery reseals the page it names (its checksums and parity recomputed
//! from what the media holds) and redoes the entry's time (its checksum
//! recomputed): a one-record fine-grained journal (FGM §III-A: only the
//! modified field) that commits with its 8-byte intent word. Both are
//! idempotent, so an intent that outlives its write costs a reseal and
//! nothing else; that is why its clearing is not fenced: it is durable at
//! the next fence of any thread that synchronised with this one (every
//! later change of the entry or of the page does, through the inode lock,
//! and fences before it changes them: R2).
//!
//! A write spanning pages moves the intent page by page: the next page's
//! intent is stored only after a fence makes the previous page's bytes
//! and redundancy durable.

use pm::Region;
use zerocopy::IntoBytes;

use crate::error::Result;
use crate::layout::Bounds;
use crate::layout::{
    entry_identity, retime_entry, JournalHeader, Superblock, INTENT_GEN_MASK, INTENT_VALID, JOURNAL_INTENT_FIELD,
    JOURNAL_REDO_FIELD, PAGE_SIZE,
};
use crate::replica::readable;
use crate::superblock::{bounds_of, strips_of};

use super::{header_off, read_header, read_replica, Txn};

/// What a relaxed overwrite's intent has recovery redo: log entry
/// `entry` (one slot, a write or a setattr, as it is on the media now)
/// takes time `time`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Retime {
    pub entry: u64,
    pub time: i64,
    /// [`entry_identity`] of the slot.
    pub identity: u32,
}

impl Retime {
    /// The redo for `slot`, the entry at `entry` as the media holds it.
    pub(crate) fn of(entry: u64, slot: &[u8; 64], time: i64) -> Retime {
        Retime {
            entry,
            time,
            identity: entry_identity(slot),
        }
    }

    /// The `redo_check` word for this redo stored beside intent word
    /// `intent`: tied to its generation, not its page, so the pages of one
    /// write share their redo words and a line torn between two of them
    /// still holds a matching set.
    fn check(&self, intent: u64) -> u64 {
        let mut ties = [0u8; 24];
        ties[..8].copy_from_slice(&(intent & INTENT_GEN_MASK).to_le_bytes());
        ties[8..16].copy_from_slice(&self.entry.to_le_bytes());
        ties[16..].copy_from_slice(&self.time.to_le_bytes());
        u64::from(crc32c::crc32c(&ties)) | u64::from(self.identity) << 32
    }

    /// The redo a header line holds for its intent word, unless its words
    /// were stored with another intent (or are damaged).
    fn stored(hdr: &JournalHeader) -> Option<Retime> {
        let redo = Retime {
            entry: hdr.redo_entry,
            time: hdr.redo_time,
            identity: (hdr.redo_check >> 32) as u32,
        };
        (redo.entry != 0 && redo.check(hdr.intent) == hdr.redo_check).then_some(redo)
    }
}

/// The data page a header's intent word names, if it is a pending intent:
/// the valid bit and a page-aligned address inside the data area.
pub(super) fn page_of(word: u64, sb: &Superblock) -> Option<u64> {
    let page = word & !(PAGE_SIZE - 1);
    let whole =
        word & !INTENT_GEN_MASK & (PAGE_SIZE - 1) == INTENT_VALID && page >= sb.data_start && page < sb.data_end;
    whole.then_some(page)
}

/// Whether a header line's intent word is cleared (a generation alone) or
/// a pending intent. Anything else is damage.
pub(super) fn is_whole(hdr: &JournalHeader, sb: &Superblock) -> bool {
    hdr.intent & !INTENT_GEN_MASK == 0 || page_of(hdr.intent, sb).is_some()
}

/// The cleared intent word that keeps `word`'s generation.
pub(super) fn cleared(word: u64) -> u64 {
    word & INTENT_GEN_MASK
}

impl Txn<'_> {
    /// Declares that data page `page` is about to change in place, and
    /// what its write makes of the file's newest entry: durable when this
    /// returns.
    pub(crate) fn intend(&mut self, region: &dyn Region, page: u64, redo: &Retime) -> Result<()> {
        if self.intent {
            // The previous page's bytes and redundancy are durable before
            // its intent is overwritten.
            self.cost.fence(region);
        }
        let shard = &mut *self.shard;
        if !self.intent {
            // A new write: redo words of an earlier one fail its check.
            shard.intent_gen = (shard.intent_gen + 2) & INTENT_GEN_MASK;
        }
        let word = page | shard.intent_gen | INTENT_VALID;
        let words = [redo.entry, redo.time as u64, redo.check(word)];
        // The redo words first, the intent word last, all in one line: a
        // line torn by a crash may hold the new intent word beside older
        // redo words, which its check then refuses.
        region.write(shard.header + JOURNAL_REDO_FIELD, words.as_bytes())?;
        region.store_u64(shard.header + JOURNAL_INTENT_FIELD, word)?;
        self.cost.flush(region, shard.header + JOURNAL_INTENT_FIELD, 32)?;
        self.cost.fence(region); // R5: named before its first byte changes.
        self.cost.journal += 32;
        self.intent = true;
        Ok(())
    }

    /// Ends an in-place change: log entry `entry` becomes `slot` (its new
    /// time and checksum, both copies, flushed), a fence makes the pages'
    /// bytes and redundancy and the entry durable (R2), then the intent is
    /// cleared, its clearing flushed and left to the next fence (module
    /// docs). Nothing goes to the ring.
    pub(crate) fn end_in_place(mut self, region: &dyn Region, entry: u64, slot: &[u8; 64]) -> Result<()> {
        debug_assert!(self.intent, "an in-place change begins with its intent");
        let mut cost = std::mem::take(&mut self.cost);
        region.write(entry, slot)?;
        cost.flush(region, entry, slot.len() as u64)?;
        cost.applied += slot.len() as u64;
        cost.fence(region);
        let at = self.shard.header + JOURNAL_INTENT_FIELD;
        region.store_u64(at, self.shard.intent_gen)?;
        cost.flush(region, at, 8)?;
        cost.journal += 8;
        self.counters.add(&cost, false);
        Ok(())
    }
}

/// Reseals the page every shard's pending intent names, redoes its entry's
/// time, and clears the intent (recovery, after the replay). `meta` is the
/// metadata view (header lines and log pages are mirrored), `data` the
/// region. Returns how many pages were resealed.
pub(super) fn reseal_pending(meta: &dyn Region, data: &dyn Region, sb: &Superblock) -> Result<u64> {
    let strips = strips_of(sb);
    let bounds = bounds_of(sb);
    let mut resealed = 0;
    for i in 0..u64::from(sb.shards) {
        let at = header_off(sb, i);
        let hdr = read_header(meta, at)?;
        let Some(page) = page_of(hdr.intent, sb) else {
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
        if let Some(redo) = Retime::stored(&hdr) {
            redo_time(meta, data, bounds, &redo)?;
        }
        // The page's redundancy and the entry are whole before the intent
        // goes (R2), then the clearing (R5).
        data.fence();
        meta.commit_u64(at + JOURNAL_INTENT_FIELD, cleared(hdr.intent))?;
    }
    Ok(resealed)
}

/// Sets the redo's time into its entry, both copies, flushed (the caller
/// fences): from the primary slot, or the replica's when the primary no
/// longer holds that entry (damage). A slot holding neither is left alone:
/// the entry was reused since, so the intent is older than what is there.
fn redo_time(meta: &dyn Region, data: &dyn Region, bounds: Bounds, redo: &Retime) -> Result<()> {
    let mut slot = [0u8; 64];
    let holds = |slot: &[u8; 64]| entry_identity(slot) == redo.identity;
    let found = (readable(data.read(redo.entry, &mut slot))? && holds(&slot))
        || (read_replica(data, bounds, redo.entry, &mut slot)? && holds(&slot));
    if !found {
        tracing::warn!(
            entry = redo.entry,
            "a relaxed write's log entry is no longer where its intent says"
        );
        return Ok(());
    }
    retime_entry(&mut slot, redo.time);
    meta.write(redo.entry, &slot)?;
    meta.flush(redo.entry, slot.len() as u64)?;
    Ok(())
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
