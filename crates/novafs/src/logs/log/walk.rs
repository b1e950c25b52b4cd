//! Walking a log's page chain and entries as they are on the media: every
//! pointer bounded, the chain without a loop, each entry checked as
//! [`Verify`] asks, damaged copies read from the replica.

use std::ops::ControlFlow;

use pm::Region;

use crate::error::{corrupt, Result};
use crate::hash::U64Map;
use crate::layout::{entry_csum, Bounds, ENTRY_CSUM_OFF, LOG_NEXT_OFF, LOG_USABLE, PAGE_SIZE, SLOT};

/// What [`walk`] verifies besides a log's structure (every page pointer
/// inside the data area and the chain without a loop, every entry's length
/// inside its page, the tail in the chain).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verify {
    /// Every committed entry's checksum too: what a mount relies on.
    Checksums,
    /// Nothing more: entries that fail their checksums are visited too
    /// (fault injection, which may target a log it has damaged already).
    Structure,
    /// As `Checksums`, but an entry that fails in every copy, when the
    /// copies agree on its type and length, is reported
    /// ([`Step::Damaged`]) and stepped over instead of ending the walk:
    /// what `fsck --repair` salvages the rest of the log with.
    Salvage,
}

/// One step of [`walk`], in chain order.
#[derive(Debug)]
pub(crate) enum Step<'a> {
    /// A page of the chain, before its entries.
    Page(u64),
    /// A committed entry: its offset and bytes.
    Entry(u64, &'a [u8]),
    /// A committed entry that fails its checksum in every copy, whose
    /// copies agree on its type byte and length ([`Verify::Salvage`]).
    Damaged { off: u64, len: u64, etype: u8 },
    /// The tail is reached: every committed entry has been visited. Pages
    /// linked past the tail's page follow (spare pages an append grew).
    Tail,
    /// The primary copy of `len` bytes at this offset is damaged and the
    /// walk used the replica's (already visited as an entry or a link):
    /// a writable mount copies the replica back (Fortis §4.2).
    Repaired(u64, u64),
}

/// Walks the log from `head` to `tail` as FORMAT.md "Logs" describes,
/// calling `visit` for every page of the chain (spare pages past the tail
/// included) and every committed entry; `visit` may end the walk early
/// with [`ControlFlow::Break`]. The one walker of a log's pages and
/// entries: [`Log::load`] (mount) and fault injection share it.
pub(crate) fn walk(
    region: &dyn Region,
    bounds: Bounds,
    head: u64,
    tail: u64,
    verify: Verify,
    mut visit: impl FnMut(Step<'_>) -> Result<ControlFlow<()>>,
) -> Result<()> {
    if head == 0 {
        return if tail == 0 {
            Ok(())
        } else {
            Err(corrupt!(LogPage, at = tail, "log tail {tail:#x} without a head"))
        };
    }
    let mut tail_seen = tail == 0;
    if tail_seen && visit(Step::Tail)?.is_break() {
        return Ok(());
    }
    let mut buf = vec![0u8; PAGE_SIZE as usize];
    let mut page = head;
    let mut walk = ChainWalk::new(bounds, head, true);
    // Past the tail's page: spare pages, zeroed when linked (`Log::grow`).
    let mut spare = false;
    loop {
        walk.enter(page)?;
        region.read(page, &mut buf)?;
        if spare && buf[..LOG_NEXT_OFF as usize].iter().any(|&b| b != 0) {
            // A damaged link into a page that holds something (another
            // log's entries): following it, an append would overwrite
            // them. The log ends at its tail's page instead.
            tracing::warn!(page, "a spare log page is not empty; the link to it is ignored");
            break;
        }
        if visit(Step::Page(page))?.is_break() {
            return Ok(());
        }
        let mut pos = 0u64;
        while !tail_seen && pos < LOG_USABLE && page + pos != tail {
            let mut found = entry_at(&buf, page, pos, verify);
            if verify != Verify::Structure && !matches!(found, Ok(Some(_))) {
                // Damaged here, or a zero type byte before the tail: the
                // replica's entry, if it is whole, is the entry.
                if let Some(len) = from_replica(region, bounds, page, pos, &mut buf)? {
                    if visit(Step::Repaired(page + pos, len))?.is_break() {
                        return Ok(());
                    }
                    found = entry_at(&buf, page, pos, verify);
                }
            }
            let len = match found {
                Ok(Some(len)) => len,
                Ok(None) => break,
                Err(e) if verify == Verify::Salvage => {
                    let Some((len, etype)) = agreed_head(region, bounds, page, pos, &buf) else {
                        return Err(e);
                    };
                    if visit(Step::Damaged {
                        off: page + pos,
                        len,
                        etype,
                    })?
                    .is_break()
                    {
                        return Ok(());
                    }
                    pos += len;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let bytes = &buf[pos as usize..(pos + len) as usize];
            if visit(Step::Entry(page + pos, bytes))?.is_break() {
                return Ok(());
            }
            pos += len;
        }
        if !tail_seen && page + pos == tail {
            tail_seen = true;
            if visit(Step::Tail)?.is_break() {
                return Ok(());
            }
        }
        let mut next = u64::from_le_bytes(buf[LOG_NEXT_OFF as usize..].try_into().unwrap_or_default());
        if next != 0 && !walk.may_enter(next) {
            // A damaged link: the replica's, if that one leads on.
            if let Some(m) = bounds.replica(page) {
                let other = region.load_u64(m + LOG_NEXT_OFF)?;
                if other != next && (other == 0 || walk.may_enter(other)) {
                    if visit(Step::Repaired(page + LOG_NEXT_OFF, 8))?.is_break() {
                        return Ok(());
                    }
                    next = other;
                }
            }
        }
        if next == 0 {
            break;
        }
        spare = tail_seen;
        page = next;
    }
    if !tail_seen {
        return Err(corrupt!(
            LogPage,
            at = tail,
            "log tail {tail:#x} is not in the chain from {head:#x}"
        ));
    }
    Ok(())
}

/// The length of the entry at `pos` of a log page held in `buf`: None at
/// the unused rest of the page (a zero type byte), an error when the
/// entry is damaged (a bad length, or with `verify` a failed checksum).
fn entry_at(buf: &[u8], page: u64, pos: u64, verify: Verify) -> Result<Option<u64>> {
    let at = pos as usize;
    if buf[at] == 0 {
        return Ok(None);
    }
    let len = u64::from(buf[at + 1]) * SLOT;
    if len == 0 || pos + len > LOG_USABLE {
        return Err(corrupt!(
            LogEntry,
            at = page + pos,
            "log entry at {:#x} has a bad length",
            page + pos
        ));
    }
    let bytes = &buf[at..at + len as usize];
    if verify != Verify::Structure {
        let stored = u32::from_le_bytes([
            bytes[ENTRY_CSUM_OFF],
            bytes[ENTRY_CSUM_OFF + 1],
            bytes[ENTRY_CSUM_OFF + 2],
            bytes[ENTRY_CSUM_OFF + 3],
        ]);
        if entry_csum(bytes) != stored {
            return Err(corrupt!(
                LogEntry,
                at = page + pos,
                "log entry at {:#x} fails its checksum",
                page + pos
            ));
        }
    }
    Ok(Some(len))
}

/// The length and type of the damaged entry at `pos` of the page held in
/// `buf`, when its replica's header agrees on both and the length fits the
/// page. Its checksum fails in both copies, so nothing in it is proved;
/// two copies that agree on these bytes are what is left to go by, and
/// one copy alone (no replica) is not enough.
fn agreed_head(region: &dyn Region, bounds: Bounds, page: u64, pos: u64, buf: &[u8]) -> Option<(u64, u8)> {
    let m = bounds.replica(page)?;
    let mut other = [0u8; 2];
    region.read(m + pos, &mut other).ok()?;
    let at = pos as usize;
    let len = u64::from(buf[at + 1]) * SLOT;
    (other == buf[at..at + 2] && buf[at] != 0 && len > 0 && pos + len <= LOG_USABLE).then_some((len, buf[at]))
}

/// Replaces the entry at `pos` of the page held in `buf` by the replica's
/// copy when that copy is a whole entry; returns its length.
fn from_replica(region: &dyn Region, bounds: Bounds, page: u64, pos: u64, buf: &mut [u8]) -> Result<Option<u64>> {
    let Some(m) = bounds.replica(page) else {
        return Ok(None);
    };
    let mut other = vec![0u8; LOG_USABLE as usize];
    if region.read(m, &mut other).is_err() {
        return Ok(None);
    }
    Ok(match entry_at(&other, page, pos, Verify::Checksums) {
        Ok(Some(len)) => {
            let r = pos as usize..(pos + len) as usize;
            buf[r.clone()].copy_from_slice(&other[r]);
            Some(len)
        }
        _ => None,
    })
}

/// Walks a page chain for the recovery scan without parsing entries.
/// `meta` says the chain is metadata (a log): its pages must be primaries
/// when the image keeps replicas.
pub(crate) fn chain_pages(region: &dyn Region, bounds: Bounds, head: u64, meta: bool) -> Result<Vec<u64>> {
    let mut pages = Vec::new();
    let mut page = head;
    let mut walk = ChainWalk::new(bounds, head, meta);
    while page != 0 {
        walk.enter(page)?;
        pages.push(page);
        page = region.load_u64(page + LOG_NEXT_OFF)?;
    }
    Ok(pages)
}

/// Checks each pointer of a page chain read from media before it is
/// followed: inside the data area, and not a page the walk has visited
/// already. A loop is found when it closes, in time linear in the chain,
/// not after as many steps as the data area has pages.
struct ChainWalk {
    bounds: Bounds,
    head: u64,
    /// A metadata chain: every page must be a metadata primary.
    meta: bool,
    seen: U64Map<()>,
}

impl ChainWalk {
    fn new(bounds: Bounds, head: u64, meta: bool) -> ChainWalk {
        ChainWalk {
            bounds,
            head,
            meta,
            seen: U64Map::default(),
        }
    }

    fn allowed(&self, page: u64) -> bool {
        if self.meta {
            self.bounds.is_meta_page(page)
        } else {
            self.bounds.is_page(page)
        }
    }

    /// Whether [`ChainWalk::enter`] would accept `page`.
    fn may_enter(&self, page: u64) -> bool {
        self.allowed(page) && !self.seen.contains_key(&page)
    }

    fn enter(&mut self, page: u64) -> Result<()> {
        if !self.allowed(page) {
            return Err(corrupt!(
                LogPage,
                at = page,
                "page pointer {page:#x} in the chain from {:#x} is outside the area it may use",
                self.head
            ));
        }
        if self.seen.insert(page, ()).is_some() {
            return Err(corrupt!(
                LogPage,
                at = page,
                "page chain from {:#x} loops back to {page:#x}",
                self.head
            ));
        }
        Ok(())
    }
}
