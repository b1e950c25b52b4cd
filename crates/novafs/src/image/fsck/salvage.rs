//! Salvage of a file whose log holds a write entry damaged in every copy
//! (NOVA-Fortis §4.2: both copies gone, so nothing repairs it). The rest
//! of the log still proves most of the file; what it cannot prove is
//! marked lost on the media instead of the whole file being freed.
//!
//! What is proved: every entry before and after the damaged one (each
//! passes its checksum). What is not: the damaged entry's range and data
//! pages. It may have written any page of the file, and the pages it
//! replaced were freed then (R3) and may hold another file's data now, so
//! no byte that a later entry does not rewrite can be trusted: not the
//! older data, not zeros. Hence the damaged entry is replaced, in place
//! and with the same length, by a lost range record (FORMAT.md "Logs",
//! type 9) for every page of the file up to the largest size known at or
//! after it; replay then maps what later entries wrote over it and reads
//! EIO for the rest until it is written again. It takes the epoch of the
//! entry before it, the oldest the damaged one can have had (epochs only
//! grow along a log), so every snapshot that may have seen the damaged
//! write sees the loss.
//!
//! Only a regular file's write entry is salvaged, and only when the two
//! copies agree on the entry's type and length (`log::Verify::Salvage`):
//! a damaged setattr could have changed the mode or owner, which nothing
//! later need restate, and an entry of unknown length hides where the
//! next one starts.

use std::ops::ControlFlow;
use std::sync::Arc;

use pm::Region;

use crate::commit::Ctx;
use crate::error::Result;
use crate::hash::U64Map;
use crate::inode::{attr_of_record, lost_entry, FileType, Ino, InodeState};
use crate::itable::Slot;
use crate::journal::Journal;
use crate::layout::{
    decode, EntryHeader, EntryType, Inode, SetattrEntry, WriteEntry, FEATURE_INCOMPAT_LOST, PAGE_SIZE,
};
use crate::log::{self, Entry, Step, Verify};
use crate::recovery;
use crate::superblock::{bounds_of, read_superblock, write_superblock};

/// How an inode with write entries damaged in every copy is kept.
pub(super) struct Salvage {
    /// Each damaged entry's offset and the lost range record that takes
    /// its place.
    records: U64Map<Entry>,
    /// The inode as it loads once they have.
    pub state: InodeState,
    /// One line per damaged entry: where, and what is unknown.
    pub why: Vec<String>,
}

/// One committed entry of the log, as far as salvage needs it.
enum Item {
    Good { epoch: u64, size: Option<u64> },
    Damaged { off: u64, len: u64, etype: u8 },
}

/// The file size an entry leaves, if it carries one.
fn size_after(bytes: &[u8]) -> Option<u64> {
    let hdr: EntryHeader = decode(bytes).ok()?;
    match EntryType::from_u8(hdr.etype)? {
        EntryType::Write => decode::<WriteEntry>(bytes).ok().map(|e| e.size),
        EntryType::Setattr => decode::<SetattrEntry>(bytes).ok().map(|e| e.size),
        _ => None,
    }
}

/// How the live inode whose record `rec` (checked) is at `off` can be
/// kept, when its log fails to load only for write entries damaged in
/// every copy; None when it cannot (the caller frees it as before).
pub(super) fn plan(ctx: &Ctx, off: u64, rec: &Inode) -> Option<Salvage> {
    if attr_of_record(rec).ok()?.kind != FileType::RegularFile {
        return None;
    }
    let mut items = Vec::new();
    log::walk(
        ctx.region(),
        ctx.bounds(),
        rec.log_head,
        rec.log_tail,
        Verify::Salvage,
        |step| {
            match step {
                Step::Entry(_, bytes) => items.push(Item::Good {
                    epoch: decode::<EntryHeader>(bytes)?.epoch,
                    size: size_after(bytes),
                }),
                Step::Damaged { off, len, etype } => items.push(Item::Damaged { off, len, etype }),
                _ => {}
            }
            Ok(ControlFlow::Continue(()))
        },
    )
    .ok()?;
    let mut records = U64Map::default();
    let mut why = Vec::new();
    let (mut epoch, mut size) = (rec.create_epoch, rec.size);
    for (i, item) in items.iter().enumerate() {
        match *item {
            Item::Good { epoch: e, size: s } => {
                epoch = e;
                size = s.unwrap_or(size);
            }
            Item::Damaged { off, len, etype } => {
                if etype != EntryType::Write as u8 || len != size_of::<WriteEntry>() as u64 {
                    return None;
                }
                let later = items[i + 1..].iter().filter_map(|it| match it {
                    Item::Good { size, .. } => *size,
                    Item::Damaged { .. } => None,
                });
                let known = later.clone().max();
                let top = known.map_or(size, |k| k.max(size));
                records.insert(off, lost_entry(epoch, 0..top.div_ceil(PAGE_SIZE)));
                why.push(format!(
                    "the write entry at {off:#x} is damaged in every copy: what it wrote is unknown{}",
                    if known.is_none() {
                        format!(", and the file may have been longer than {size} bytes")
                    } else {
                        String::new()
                    }
                ));
            }
        }
    }
    if records.is_empty() {
        return None;
    }
    let state = InodeState::load_salvaged(ctx.region(), ctx.bounds(), off, rec, &records).ok()?;
    Some(Salvage { records, state, why })
}

/// `fsck --repair`'s first step, before the scan that rebuilds the
/// allocators (which must count the salvaged files' pages as theirs):
/// replays the journal as a mount would, then puts the lost range
/// records of every file [`plan`] can keep in place. Returns how many
/// journal transactions it replayed and one line per file kept.
pub(super) fn salvage_all(region: Arc<dyn Region>) -> Result<(u64, Vec<String>)> {
    let (sb, _) = read_superblock(&*region)?;
    let bounds = bounds_of(&sb);
    let replayed = Journal::recover(&region, &sb)?.replayed;
    // Read-only: only the records below are written, nothing repaired.
    let ctx = recovery::open_ctx(region.clone(), &sb, true)?;
    let mut plans: Vec<(Ino, Salvage)> = Vec::new();
    for shard in 0..ctx.tables().shard_count() as usize {
        ctx.tables().scan_shard(ctx.region(), shard, |slot| {
            if let Slot::Live { ino, off, rec, .. } = slot {
                if ctx.load_inode(off, &rec).is_err() {
                    plans.extend(plan(&ctx, off, &rec).map(|p| (ino, p)));
                }
            }
            Ok(())
        })?;
    }
    if plans.is_empty() {
        return Ok((replayed, Vec::new()));
    }
    // The feature bit is durable before the first record (R4): a novafs
    // that does not know them refuses the image instead of freeing these
    // files as damaged.
    let (mut sb, _) = read_superblock(&*region)?;
    if sb.features_incompat & FEATURE_INCOMPAT_LOST == 0 {
        sb.features_incompat |= FEATURE_INCOMPAT_LOST;
        write_superblock(&*region, &mut sb)?;
    }
    let mut done = Vec::new();
    for (ino, p) in plans {
        for (&off, e) in &p.records {
            // Primary, then replica (R4): one copy is always whole or still
            // the damaged entry whose copies agree on its head.
            for copy in [Some(off), bounds.replica(off)].into_iter().flatten() {
                put(ctx.data(), copy, e.bytes())?;
            }
        }
        for why in p.why {
            done.push(format!(
                "salvaged inode {ino}: {why}; the file is kept, the bytes it may have written read EIO"
            ));
        }
    }
    Ok((replayed, done))
}

/// Writes entry `bytes` over a damaged entry of the same length at `at`.
/// The first word (type, length, checksum) goes last, with one 8-byte
/// store (R5): until it lands the copy keeps the damaged entry's head,
/// so an interrupted repair leaves an entry the next one salvages again.
fn put(data: &dyn Region, at: u64, bytes: &[u8]) -> Result<()> {
    let (head, rest) = bytes.split_at(8);
    data.write(at + 8, rest)?;
    data.persist(at + 8, rest.len() as u64)?;
    let word = u64::from_le_bytes(head.try_into().unwrap_or_default());
    data.commit_u64(at, word)?; // R5
    Ok(())
}
