//! Relaxed mode (NOVA-Fortis §4.6): "write operations modify existing
//! data directly rather than using copy-on-write, and metadata operations
//! modify the most recent log entry for an inode directly rather than
//! appending a new entry", the modified fields journaled (fine-grained
//! journaling §III-A: only what changes). Metadata stays atomic; data
//! atomicity is given up: a crash may leave the bytes of the write in
//! flight part old, part new, and nothing outside them.
//!
//! Unlike the paper's relaxed mode, data stays protected: each page
//! changed in place gets its strips' checksums and its parity patched
//! with it, under a journal intent that makes recovery reseal the page
//! should a crash come first (`journal::intent`). So a read after any
//! crash checks the page whole, and never "repairs" new bytes from stale
//! parity. The same intent carries the write's new time for the inode's
//! newest entry, which changes in place with the bytes: recovery redoes
//! it (the entry's checksum recomputed), so a crash never leaves the
//! entry torn, and leaves the new time whenever any byte of the write may
//! have changed. An overwrite takes two fences, as copy-on-write does:
//! the intent's, and its own.
//!
//! What still goes copy-on-write, through `file::write` (each also makes
//! the next overwrite eligible, its write entry being the newest):
//! - a write that grows the file, or covers a hole or a lost page;
//! - a page a snapshot holds (mapped by an entry of its epoch or older:
//!   §3.3 keeps it), or one a DAX mapping may store to (caveat DAXor: its
//!   checksums are already stale, and sealing it is what a write does);
//! - a write when the inode's newest log entry cannot take the new mtime
//!   in place (it is not a setattr or a write entry mapping pages, or a
//!   snapshot may replay it).

use crate::commit::Ctx;
use crate::error::Result;
use crate::inode::{setattr_entry, Attr, Body, InodeState};
use crate::journal::{Journal, Retime, Update};
use crate::layout::{
    decode, entry_csum, retime_entry, EntryHeader, EntryType, SetattrEntry, WriteEntry, ENTRY_CSUM_OFF,
    ENTRY_EPOCH_OFF, PAGE_SIZE, STRIP_SIZE,
};
use crate::pagemap::write_keeps_old_bytes;
use crate::time::now_ns;

const PS: usize = PAGE_SIZE as usize;
const STRIP: usize = STRIP_SIZE as usize;

/// Both entries relaxed mode changes in place are one 64-byte slot.
const SLOT: usize = 64;
const _: () = assert!(size_of::<WriteEntry>() == SLOT && size_of::<SetattrEntry>() == SLOT);

/// One page of an in-place overwrite: its data page, where in it the
/// bytes go, and how.
struct PagePart {
    block: u64,
    at: usize,
    len: usize,
    how: How,
}

enum How {
    /// The write leaves no byte of the file in the page: the page is
    /// written whole, with fresh checksums and parity, from zeros and
    /// the bytes (as copy-on-write does, so rewriting a damaged page's
    /// data never needs it).
    Whole,
    /// The touched strips as they were, read checked.
    Strips(Vec<u8>),
}

/// Overwrites `data` at `off` in place when relaxed mode may (module
/// docs); `None` when the write must go copy-on-write instead. Durable
/// when it returns, as every write is.
pub(crate) fn overwrite(ctx: &Ctx, st: &mut InodeState, off: u64, data: &[u8]) -> Result<Option<usize>> {
    let end = off + data.len() as u64;
    if !ctx.relaxed() || end > st.meta.attr.size {
        return Ok(None);
    }
    // The cheap test first: the pages' old strips are read next.
    let Some(mut touch) = newest_entry(ctx, st, Batched::Commit)? else {
        return Ok(None);
    };
    let Some(parts) = in_place_pages(ctx, st, off, data.len())? else {
        return Ok(None);
    };
    let now = now_ns();
    let redo = Retime::of(touch.off, &touch.old, now);
    retime_entry(&mut touch.bytes, now);
    // The shard is held from the first intent to the last page: its
    // header line has room for one.
    let mut txn = ctx.journal().begin();
    let mut done = 0usize;
    for p in &parts {
        let bytes = &data[done..done + p.len];
        txn.intend(ctx.region(), p.block, &redo)?;
        match &p.how {
            How::Strips(old) => ctx.strips().overwrite(ctx.data(), p.block, p.at, bytes, old)?,
            How::Whole if p.len == PS => ctx.put_block(p.block, bytes)?,
            How::Whole => {
                let mut page = [0u8; PS];
                page[p.at..p.at + p.len].copy_from_slice(bytes);
                ctx.put_block(p.block, &page)?;
            }
        }
        done += p.len;
    }
    // The entry's new time and checksum, durable with the bytes (R2).
    txn.end_in_place(ctx.region(), touch.off, &touch.bytes)?;
    st.meta.attr.mtime = now;
    st.meta.attr.ctime = now;
    Ok(Some(data.len()))
}

/// The pages of `[off, off + len)`, when every one may be changed in
/// place: mapped (not a hole, not lost), held by no snapshot, not mapped
/// writable. A page covered in part has its touched strips read here,
/// checked (a damaged strip rebuilt), before anything changes.
fn in_place_pages(ctx: &Ctx, st: &InodeState, off: u64, len: usize) -> Result<Option<Vec<PagePart>>> {
    let Body::File(map) = &st.meta.body else {
        return Ok(None);
    };
    let end = off + len as u64;
    let size = st.meta.attr.size;
    let mut parts = Vec::new();
    let mut pos = off;
    while pos < end {
        let pg = pos / PAGE_SIZE;
        let at = (pos % PAGE_SIZE) as usize;
        let n = (PS - at).min((end - pos) as usize);
        let Some((block, entry)) = map.lookup_entry(pg) else {
            return Ok(None);
        };
        let birth = ctx.region().load_u64(entry + ENTRY_EPOCH_OFF)?;
        if st.meta.unprotected.contains_key(&pg) || ctx.stale().contains(block) || ctx.snapshots().sees(birth) {
            return Ok(None);
        }
        let pstart = pg * PAGE_SIZE;
        let keeps_old = write_keeps_old_bytes(pstart, pos, pos + n as u64, size);
        let how = if !keeps_old {
            How::Whole
        } else if !ctx.strips().enabled() {
            How::Strips(Vec::new())
        } else {
            let lo = at / STRIP * STRIP;
            let hi = (at + n).div_ceil(STRIP) * STRIP;
            let mut old = vec![0u8; hi - lo];
            ctx.read_block(block, lo, &mut old)?;
            How::Strips(old)
        };
        parts.push(PagePart { block, at, len: n, how });
        pos += n as u64;
    }
    Ok(Some(parts))
}

/// The inode's newest log entry, read to be changed in place.
struct Newest {
    off: u64,
    setattr: bool,
    old: [u8; SLOT],
    bytes: [u8; SLOT],
}

impl Newest {
    /// The journal updates that make the entry `bytes`, its checksum
    /// recomputed: one per changed aligned word (entries are 64-byte
    /// aligned slots), the checksum's word among them.
    fn updates(&mut self) -> Vec<Update> {
        let csum = entry_csum(&self.bytes);
        self.bytes[ENTRY_CSUM_OFF..ENTRY_CSUM_OFF + 4].copy_from_slice(&csum.to_le_bytes());
        self.old
            .chunks_exact(8)
            .zip(self.bytes.chunks_exact(8))
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .map(|(i, (_, b))| Update {
                addr: self.off + 8 * i as u64,
                bytes: b.to_vec(),
            })
            .collect()
    }
}

/// What [`newest_entry`] does with words of the entry that wait in the
/// running transaction (`journal::batch`).
#[derive(PartialEq)]
enum Batched {
    /// Lays them over what it reads: the change joins the batch too.
    Overlay,
    /// Commits the running transaction first: the change goes to the
    /// media now, over an entry whose every word is there.
    Commit,
}

/// The inode's newest entry if relaxed mode may change it in place: a
/// setattr or a write entry mapping pages (`Meta::newest`), whole on the
/// media, and of an epoch no snapshot may replay.
fn newest_entry(ctx: &Ctx, st: &InodeState, batched: Batched) -> Result<Option<Newest>> {
    let Some(off) = st.meta.newest else {
        return Ok(None);
    };
    let mut old = [0u8; SLOT];
    match ctx.journal().batch() {
        Some(batch) => {
            if batch.read(ctx.region(), off, &mut old)? && batched == Batched::Commit {
                // Nothing adds to them while the inode is held.
                ctx.journal().commit_running(ctx.region(), Journal::BEFORE_OVERWRITE)?;
            }
        }
        None => ctx.region().read(off, &mut old)?,
    }
    let hdr: EntryHeader = decode(&old)?;
    let whole = hdr.slots == 1 && hdr.csum == entry_csum(&old);
    if !whole || ctx.snapshots().sees(hdr.epoch) {
        return Ok(None);
    }
    Ok(Some(Newest {
        off,
        setattr: EntryType::from_u8(hdr.etype) == Some(EntryType::Setattr),
        old,
        bytes: old,
    }))
}

/// Relaxed mode's setattr: the inode's newest entry, when it is a setattr
/// no snapshot may replay, takes the attributes `a` in place, in one
/// journal transaction. For changes that imply nothing else (no size
/// change, no ACL that follows the mode: the caller checks). Returns
/// whether it did; if not, the caller appends a setattr as strict mode
/// does.
pub(crate) fn setattr(ctx: &Ctx, st: &mut InodeState, a: &Attr) -> Result<bool> {
    if !ctx.relaxed() {
        return Ok(false);
    }
    let Some(mut touch) = newest_entry(ctx, st, Batched::Overlay)? else {
        return Ok(false);
    };
    if !touch.setattr {
        return Ok(false);
    }
    let hdr: EntryHeader = decode(&touch.old)?;
    let fresh = setattr_entry(hdr.epoch, a);
    // The header stays; the body is the new entry's.
    const BODY: usize = size_of::<EntryHeader>();
    touch.bytes[BODY..].copy_from_slice(&fresh.bytes()[BODY..SLOT]);
    let updates = touch.updates();
    ctx.journal().batch_or_commit(ctx.region(), &updates)?; // R2, now or with the batch
    st.meta.attr = *a;
    Ok(true)
}
