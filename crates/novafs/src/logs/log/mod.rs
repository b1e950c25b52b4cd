//! Per-inode logs (NOVA §3, §4.1): a singly linked chain of 4 KiB pages of
//! typed entries. An append writes entries past the tail and makes them
//! persistent (rule R1); one 8-byte store of the new tail commits them (R5).
//! The DRAM side ([`Log`]) knows the page chain and how many entries of each
//! page are still live, which is what fast GC needs (NOVA §4.6).

use std::ops::ControlFlow;

use pm::latency::{self, Part};
use pm::Region;
use zerocopy::{Immutable, IntoBytes};

use crate::alloc::{Budget, Extent, Linked, PageAllocator, Reserved, Unreferenced};
use crate::error::{corrupt, Result};
use crate::hash::U64Map;
use crate::journal::{Check, Durable, TxnId};
use crate::layout::{
    entry_csum, xattr_payload_off, Bounds, DentryHead, EntryHeader, EntryType, SnapshotInfoEntry, XattrHead,
    ENTRY_CSUM_OFF, ENTRY_EPOCH_OFF, INODE_HEAD_OFF, INODE_TAIL_OFF, LOG_NEXT_OFF, LOG_USABLE, PAGE_SIZE, SLOT,
    XATTR_HEAD_SIZE,
};

mod walk;
pub(crate) use walk::{chain_pages, walk, Step, Verify};

/// The largest number of pages a log grows by at once; below it the log
/// doubles (NOVA §4.1 "allocates sufficient new pages to double the log").
pub(crate) const LOG_GROW_MAX: u64 = 64;

/// The largest entry: an extended attribute with its value inline (larger
/// than a dentry with a 255-byte name).
const MAX_ENTRY: u64 = crate::layout::XATTR_INLINE_MAX as u64;
const _: () = assert!(
    MAX_ENTRY.is_multiple_of(SLOT)
        && MAX_ENTRY >= (crate::layout::DENTRY_HEAD_SIZE as u64 + crate::layout::NAME_MAX as u64).div_ceil(SLOT) * SLOT
);

/// An encoded log entry: whole slots, header filled in, checksum set.
#[derive(Clone, Debug)]
pub(crate) struct Entry(Vec<u8>);

impl Entry {
    /// Encodes a fixed-size entry `body` (whose first field is the header).
    pub(crate) fn new<T: IntoBytes + Immutable>(etype: EntryType, epoch: u64, body: &T) -> Entry {
        Self::with_tail(etype, epoch, body.as_bytes(), &[])
    }

    /// Encodes a dentry: its fixed head followed by the name.
    pub(crate) fn dentry(etype: EntryType, epoch: u64, head: &DentryHead, name: &[u8]) -> Entry {
        Self::with_tail(etype, epoch, head.as_bytes(), name)
    }

    /// Encodes an extended attribute entry: its head, the name, and from
    /// the next 8-byte boundary the payload (inline value or page list).
    pub(crate) fn xattr(epoch: u64, head: &XattrHead, name: &[u8], payload: &[u8]) -> Entry {
        let at = xattr_payload_off(name.len()) - XATTR_HEAD_SIZE;
        let mut tail = vec![0u8; at + payload.len()];
        tail[..name.len()].copy_from_slice(name);
        tail[at..].copy_from_slice(payload);
        Self::with_tail(EntryType::Xattr, epoch, head.as_bytes(), &tail)
    }

    /// Encodes a snapshot record: its head followed by the name.
    pub(crate) fn snapshot(head: &SnapshotInfoEntry, name: &[u8]) -> Entry {
        Self::with_tail(EntryType::SnapshotInfo, head.epoch, head.as_bytes(), name)
    }

    fn with_tail(etype: EntryType, epoch: u64, fixed: &[u8], tail: &[u8]) -> Entry {
        let len = (fixed.len() + tail.len()).next_multiple_of(SLOT as usize);
        // Not `vec![0; len]`: glibc's calloc bypasses its per-thread cache,
        // and an entry is built for every change (15% of a write's user
        // time went to malloc and free in a perf run of the library).
        let mut buf = Vec::with_capacity(len);
        buf.extend_from_slice(fixed);
        buf.extend_from_slice(tail);
        buf.resize(len, 0);
        let hdr = EntryHeader {
            etype: etype as u8,
            slots: (len as u64 / SLOT) as u8,
            flags: 0,
            csum: 0,
            epoch,
        };
        buf[..16].copy_from_slice(hdr.as_bytes());
        let csum = entry_csum(&buf);
        buf[ENTRY_CSUM_OFF..ENTRY_CSUM_OFF + 4].copy_from_slice(&csum.to_le_bytes());
        Entry(buf)
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }

    fn len(&self) -> u64 {
        self.0.len() as u64
    }

    /// The epoch it is written in.
    fn epoch(&self) -> u64 {
        entry_epoch(&self.0)
    }
}

/// Live-entry tally of one log page.
#[derive(Clone, Copy, Debug)]
struct PageStat {
    entries: u32,
    live: u32,
    /// The oldest epoch of its entries, and the newest epoch in which one
    /// of them died: a snapshot `s` with `min_birth <= s < max_death` may
    /// replay one of them (Fortis §3.2), so the page stays.
    min_birth: u64,
    max_death: u64,
}

impl Default for PageStat {
    fn default() -> PageStat {
        PageStat {
            entries: 0,
            live: 0,
            min_birth: u64::MAX,
            max_death: 0,
        }
    }
}

/// Entries written past the tail and flushed, awaiting their commit. Only
/// a commit turns it into [`Committed`]: [`Log::commit`] (rule R1, then the
/// tail store, R5) or the journal transaction it was appended for
/// ([`Pending::journaled`], R2).
#[must_use = "appended entries do not exist until a commit makes them durable"]
#[derive(Debug)]
pub struct Pending<'a> {
    /// Offset of each appended entry, in order.
    offsets: Vec<u64>,
    /// The epoch of each.
    births: Vec<u64>,
    /// The tail to store to commit them.
    tail: u64,
    /// Set when the log was empty: the head to store before the tail.
    new_head: Option<u64>,
    /// Every range the append wrote and flushed without a fence: the
    /// entries, the marks at the unused ends of pages it left and the
    /// pointer linking new pages. All of it is what the commit commits (a
    /// journal transaction checks each range).
    written: Vec<Check>,
    /// The transaction it was appended for, if any.
    txn: Option<TxnId>,
    /// A log's first pages, which nothing reaches before the commit stores
    /// the head: dropped uncommitted, the append gives them back.
    fresh: Option<Reserved<'a>>,
}

impl Pending<'_> {
    pub(crate) fn tail(&self) -> u64 {
        self.tail
    }

    pub(crate) fn new_head(&self) -> Option<u64> {
        self.new_head
    }

    /// Binds the append to transaction `txn`, returning the ranges the
    /// transaction must check.
    pub(crate) fn bind(&mut self, txn: TxnId) -> &[Check] {
        self.txn = Some(txn);
        &self.written
    }

    /// The transaction this append was bound to is committed (R2).
    pub(crate) fn journaled(self, proof: &Durable) -> Committed {
        debug_assert!(
            self.txn.is_some() && self.txn == proof.txn(),
            "an append is committed only by the transaction it was appended for"
        );
        if let Some(fresh) = self.fresh {
            fresh.keep(proof); // R2: the transaction stored the head.
        }
        Committed {
            offsets: self.offsets,
            births: self.births,
            tail: self.tail,
            new_head: self.new_head,
        }
    }
}

impl Pending<'_> {
    /// A new log written whole and fenced (R1) before transaction `proof`
    /// switched an inode's head and tail to it (thorough GC, which then
    /// reloads the log from the media): its pages are that log's now.
    pub(crate) fn switched(self, proof: &Durable) {
        if let Some(fresh) = self.fresh {
            fresh.keep(proof); // R2: the switch is durable.
        }
    }
}

/// Proof that appended entries are durable and committed: what publishing
/// them to the DRAM indexes ([`Log::committed`], `InodeState::publish`)
/// and freeing what they made unreferenced (R3) require. Made only from a
/// [`Pending`] by its commit.
#[must_use = "a commit's proof is what lets its entries be published"]
#[derive(Debug)]
pub struct Committed {
    offsets: Vec<u64>,
    births: Vec<u64>,
    tail: u64,
    new_head: Option<u64>,
}

impl Committed {
    /// Offset of each committed entry, in order.
    pub(crate) fn offsets(&self) -> &[u64] {
        &self.offsets
    }

    /// A proof for entries a test placed by hand.
    #[cfg(test)]
    pub fn for_test(offsets: Vec<u64>, tail: u64) -> Committed {
        Committed {
            births: vec![0; offsets.len()],
            offsets,
            tail,
            new_head: None,
        }
    }
}

impl crate::alloc::sealed::Commit for Committed {}
impl Unreferenced for Committed {}
impl crate::alloc::sealed::Link for Committed {}
impl Linked for Committed {}

/// Proof that pages a log grew by are linked from its last page (the
/// pointer store flushed after the pages were made persistent, R1): they
/// belong to the chain, as spares past the tail, whether or not the append
/// is committed. Made only by [`Log::grow`].
#[derive(Debug)]
pub(crate) struct Chained(());

impl crate::alloc::sealed::Link for Chained {}
impl Linked for Chained {}

/// Proof that fast GC unlinked log pages from their chain durably (R5):
/// they may be freed.
#[derive(Debug)]
pub(crate) struct Unlinked {
    pub pages: Vec<Extent>,
}

impl crate::alloc::sealed::Commit for Unlinked {}
impl Unreferenced for Unlinked {}

/// What marks the unused end of a log page an append leaves: no entry type.
const PAGE_END_MARK: [u8; 16] = [0; 16];

/// DRAM view of one inode's log.
#[derive(Debug, Default)]
pub struct Log {
    head: u64,
    tail: u64,
    /// The chain in order, including linked spare pages past the tail page.
    pages: Vec<u64>,
    /// Index in `pages` of the page holding the tail, when there is one:
    /// kept current by every change of the tail or the chain, so an append
    /// never searches a long chain.
    tail_idx: usize,
    stats: U64Map<PageStat>,
    /// An entry whose page fast GC must keep although the entry may be
    /// dead: a directory's newest dentry carries its link count and mtime.
    pinned: Option<u64>,
    entries: u64,
    live: u64,
    /// The epoch of the entry being applied (`Log::applying`).
    applying: u64,
    /// Ranges whose primary copy was damaged and were read from the
    /// replica, for a writable mount to copy back ([`Log::repairs`]).
    repairs: Vec<(u64, u64)>,
}

/// The epoch in an encoded entry's header.
fn entry_epoch(bytes: &[u8]) -> u64 {
    bytes
        .get(ENTRY_EPOCH_OFF as usize..ENTRY_EPOCH_OFF as usize + 8)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
}

/// The log page holding offset `off`.
pub(crate) fn page_of(off: u64) -> u64 {
    off & !(PAGE_SIZE - 1)
}

impl Log {
    /// Reads a log from media, calling `visit(offset, entry bytes)` for every
    /// committed entry in order. Every pointer and checksum is verified.
    pub fn load(
        region: &dyn Region,
        bounds: Bounds,
        head: u64,
        tail: u64,
        visit: impl FnMut(&mut Log, u64, &[u8]) -> Result<()>,
    ) -> Result<Log> {
        Self::load_salvaging(region, bounds, head, tail, None, visit)
    }

    /// [`Log::load`], but an entry damaged in every copy whose offset
    /// `salvage` holds is visited as the entry it maps to: the record
    /// `fsck --repair` puts in its place (`fsck::salvage`).
    pub(crate) fn load_salvaging(
        region: &dyn Region,
        bounds: Bounds,
        head: u64,
        tail: u64,
        salvage: Option<&U64Map<Entry>>,
        mut visit: impl FnMut(&mut Log, u64, &[u8]) -> Result<()>,
    ) -> Result<Log> {
        let mut log = Log {
            head,
            tail,
            ..Log::default()
        };
        let verify = if salvage.is_some() {
            Verify::Salvage
        } else {
            Verify::Checksums
        };
        walk(region, bounds, head, tail, verify, |step| {
            let (off, bytes) = match step {
                Step::Page(page) => {
                    log.pages.push(page);
                    return Ok(ControlFlow::Continue(()));
                }
                Step::Entry(off, bytes) => (off, bytes),
                Step::Damaged { off, len, .. } => match salvage.and_then(|m| m.get(&off)) {
                    Some(e) if e.len() == len => (off, e.bytes()),
                    _ => {
                        return Err(corrupt!(
                            LogEntry,
                            at = off,
                            "log entry at {off:#x} is damaged in every copy"
                        ))
                    }
                },
                Step::Tail => return Ok(ControlFlow::Continue(())),
                Step::Repaired(off, len) => {
                    log.repairs.push((off, len));
                    return Ok(ControlFlow::Continue(()));
                }
            };
            log.count_new(off, entry_epoch(bytes));
            visit(&mut log, off, bytes)?;
            Ok(ControlFlow::Continue(()))
        })?;
        log.tail_idx = log.find_tail(0);
        Ok(log)
    }

    pub(crate) fn head(&self) -> u64 {
        self.head
    }

    /// The committed tail the log was loaded with (or last committed).
    pub(crate) fn tail(&self) -> u64 {
        self.tail
    }

    /// The `(offset, length)` ranges the load read from the replica
    /// because the primary was damaged.
    pub(crate) fn repairs(&self) -> &[(u64, u64)] {
        &self.repairs
    }

    /// Every page of the chain, spare pages included.
    pub fn pages(&self) -> &[u64] {
        &self.pages
    }

    /// Drops the spare pages past the tail's page from the first one
    /// `owned` refuses on: a link into a page the allocator says is free is
    /// damage, and an append must link pages of its own there instead (it
    /// overwrites that link). Returns how many were dropped.
    pub(crate) fn drop_spares_unless(&mut self, owned: impl Fn(u64) -> bool) -> usize {
        let Some(first) = self.tail_index().map(|i| i + 1) else {
            return 0;
        };
        match (first..self.pages.len()).find(|&i| !owned(self.pages[i])) {
            Some(bad) => {
                let n = self.pages.len() - bad;
                self.pages.truncate(bad);
                n
            }
            None => 0,
        }
    }

    /// The chain's pages, leaving the log empty. A log without a head has
    /// none: pages an uncommitted append grew it by were its `Pending`'s.
    pub(crate) fn take_pages(&mut self) -> Vec<u64> {
        let log = std::mem::take(self);
        if log.head == 0 {
            return Vec::new();
        }
        log.pages
    }

    fn count_new(&mut self, off: u64, birth: u64) {
        let st = self.stats.entry(page_of(off)).or_default();
        st.min_birth = st.min_birth.min(birth);
        st.entries += 1;
        st.live += 1;
        self.entries += 1;
        self.live += 1;
    }

    /// The epoch of the entry being applied: entries it kills die in it.
    pub(crate) fn applying(&mut self, epoch: u64) {
        self.applying = epoch;
    }

    pub(crate) fn applying_epoch(&self) -> u64 {
        self.applying
    }

    /// Kills the add entry at `add`, cancelled by the entry at `canceller`
    /// but still valid on the media (its in-place invalidation deferred
    /// for the snapshots: `dir`). The canceller's page then stays as long
    /// as the add's may be replayed by a snapshot: it takes on the add's
    /// page's oldest birth and this death, so fast GC never drops it while
    /// a snapshot lies between them, and the add is invalidated in place
    /// (`gc`) before it may.
    pub(crate) fn kill_cancelled(&mut self, add: u64, canceller: u64) {
        self.kill(add);
        let birth = self.stats.get(&page_of(add)).map_or(0, |s| s.min_birth);
        let death = self.applying;
        if let Some(st) = self.stats.get_mut(&page_of(canceller)) {
            st.min_birth = st.min_birth.min(birth);
            st.max_death = st.max_death.max(death);
        }
    }

    /// Marks the entry at `off` dead (NOVA §4.6 rules, decided by the
    /// caller), in the epoch of the entry being applied.
    pub(crate) fn kill(&mut self, off: u64) {
        let death = self.applying;
        if let Some(st) = self.stats.get_mut(&page_of(off)) {
            debug_assert!(st.live > 0, "entry {off:#x} killed twice");
            st.max_death = st.max_death.max(death);
            st.live = st.live.saturating_sub(1);
            self.live = self.live.saturating_sub(1);
        }
    }

    /// Keeps the page of `entry` out of fast GC (see `pinned`).
    pub(crate) fn pin(&mut self, entry: u64) {
        self.pinned = Some(entry);
    }

    /// Index in `pages` of the page holding the tail (the append page).
    fn tail_index(&self) -> Option<usize> {
        (self.tail != 0).then_some(self.tail_idx)
    }

    /// Finds the index of the tail's page, searching from `from` on (the
    /// tail only moves forward) and then from the start.
    fn find_tail(&self, from: usize) -> usize {
        if self.tail == 0 {
            return 0; // No tail page (tail_index says so).
        }
        let tp = if self.tail.is_multiple_of(PAGE_SIZE) {
            self.tail - PAGE_SIZE
        } else {
            page_of(self.tail)
        };
        let from = from.min(self.pages.len());
        self.pages[from..]
            .iter()
            .position(|&p| p == tp)
            .map(|i| from + i)
            .or_else(|| self.pages.iter().position(|&p| p == tp))
            .unwrap_or(0)
    }

    /// Where each of `lens` would go, starting at the tail: the offsets, or
    /// `None` when the chain is too short and must grow.
    fn place(&self, lens: impl Iterator<Item = u64>) -> Option<(Vec<u64>, u64)> {
        let mut idx = self.tail_index();
        let mut pos = self.tail;
        let mut offs = Vec::new();
        for len in lens {
            let fits = idx.is_some_and(|i| pos - self.pages[i] + len <= LOG_USABLE);
            if !fits {
                let next = idx.map_or(0, |i| i + 1);
                if next >= self.pages.len() {
                    return None;
                }
                idx = Some(next);
                pos = self.pages[next];
            }
            offs.push(pos);
            pos += len;
        }
        Some((offs, pos))
    }

    /// True when appending `entries` needs new pages (the moment to GC).
    pub(crate) fn needs_growth(&self, entries: &[Entry]) -> bool {
        self.place(entries.iter().map(Entry::len)).is_none()
    }

    /// Writes `entries` after the tail, growing the chain when needed, and
    /// flushes them. Nothing is visible until the tail is committed.
    pub(crate) fn append<'a>(
        &mut self,
        region: &dyn Region,
        alloc: &'a PageAllocator,
        budget: Budget,
        entries: &[Entry],
    ) -> Result<Pending<'a>> {
        let _span = latency::enter(Part::Log);
        if self.head == 0 {
            // Pages of a log without a head were an earlier append's,
            // never committed: its Pending gave them back.
            self.forget_unreached();
        }
        let lens = || entries.iter().map(Entry::len);
        let mut written = Vec::with_capacity(entries.len());
        let mut fresh = None;
        let placed = match self.place(lens()) {
            Some(p) => Ok(p),
            None => {
                // A page wastes at most one largest entry less a slot at its end.
                let per_page = LOG_USABLE - (MAX_ENTRY - SLOT);
                let need = entries.iter().map(Entry::len).sum::<u64>().div_ceil(per_page);
                let (link, first) = self.grow(region, alloc, budget, need)?;
                written.extend(link);
                fresh = first;
                self.place(lens())
                    .ok_or_else(|| corrupt!(LogPage, "log growth did not make room"))
            }
        };
        let written = placed.and_then(|(offs, end)| self.write_entries(region, entries, offs, end, written));
        let (offs, end, written) = written.inspect_err(|_| {
            if fresh.is_some() {
                self.forget_unreached(); // `fresh` gives the pages back.
            }
        })?;
        let new_head = (self.head == 0).then(|| self.pages[0]);
        Ok(Pending {
            offsets: offs,
            births: entries.iter().map(Entry::epoch).collect(),
            tail: end,
            new_head,
            written,
            txn: None,
            fresh,
        })
    }

    /// Writes and flushes `entries` at `offs` (ending at `end`), marking
    /// the unused end of each page they leave; returns the offsets, the
    /// end and every range written.
    fn write_entries(
        &self,
        region: &dyn Region,
        entries: &[Entry],
        offs: Vec<u64>,
        end: u64,
        mut written: Vec<Check>,
    ) -> Result<(Vec<u64>, u64, Vec<Check>)> {
        // Mark the unused rest of a page we leave, so a stale entry from an
        // earlier, uncommitted append is never read back as live.
        let mut cursor = if self.tail == 0 { self.pages[0] } else { self.tail };
        for (e, &off) in entries.iter().zip(&offs) {
            if page_of(off) != page_of(cursor) && cursor % PAGE_SIZE != 0 && cursor % PAGE_SIZE < LOG_USABLE {
                region.write(cursor, &PAGE_END_MARK)?;
                region.flush(cursor, PAGE_END_MARK.len() as u64)?;
                written.push(Check::of(cursor, &PAGE_END_MARK));
            }
            region.write(off, e.bytes())?;
            region.flush(off, e.len())?;
            written.push(Check::of(off, e.bytes()));
            cursor = off + e.len();
        }
        Ok((offs, end, written))
    }

    /// Adds at least `need` pages: doubles the log up to LOG_GROW_MAX pages.
    /// Returns the pointer store linking them, if it made one (flushed, not
    /// fenced), or else, for a log without pages, the reservation of its
    /// first pages, which only the append's commit reaches.
    fn grow<'a>(
        &mut self,
        region: &dyn Region,
        alloc: &'a PageAllocator,
        budget: Budget,
        need: u64,
    ) -> Result<(Option<Check>, Option<Reserved<'a>>)> {
        let n = need.max((self.pages.len() as u64).clamp(1, LOG_GROW_MAX));
        // Near a full device, settle for what this append needs.
        let reserved = alloc
            .reserve_meta(n, budget)
            .or_else(|_| alloc.reserve_meta(need, budget))?;
        let new: Vec<u64> = reserved
            .meta_extents()
            .iter()
            .flat_map(|e| (0..e.npages).map(move |i| e.off + i * PAGE_SIZE))
            .collect();
        let init = || -> Result<Option<Check>> {
            for (i, &p) in new.iter().enumerate() {
                region.zero_nt(p, PAGE_SIZE)?;
                if let Some(&next) = new.get(i + 1) {
                    region.store_u64(p + LOG_NEXT_OFF, next)?;
                    region.flush(p + LOG_NEXT_OFF, 8)?;
                }
            }
            // New pages are persistent before the pointer that links them
            // (R1: nothing reachable from a committed pointer is garbage).
            region.fence();
            let Some(&last) = self.pages.last() else {
                return Ok(None);
            };
            region.store_u64(last + LOG_NEXT_OFF, new[0])?;
            region.flush(last + LOG_NEXT_OFF, 8)?;
            Ok(Some(Check::of(last + LOG_NEXT_OFF, &new[0].to_le_bytes())))
        };
        let link = init()?;
        self.pages.extend(new);
        Ok(match link {
            Some(check) => {
                reserved.keep(&Chained(()));
                (Some(check), None)
            }
            None => (None, Some(reserved)),
        })
    }

    /// Commits `p` as a single-inode update: rule R1 (entries and head are
    /// persistent) then R5 (one 8-byte tail store, flushed and fenced). The
    /// DRAM view is updated separately by [`Log::committed`].
    pub(crate) fn commit(&self, region: &dyn Region, inode_off: u64, p: Pending) -> Result<Committed> {
        let _span = latency::enter(Part::Log);
        if let Some(h) = p.new_head {
            region.store_u64(inode_off + INODE_HEAD_OFF, h)?;
            region.flush(inode_off + INODE_HEAD_OFF, 8)?;
        }
        region.fence(); // R1
        region.commit_u64(inode_off + INODE_TAIL_OFF, p.tail)?; // R5
        let committed = Committed {
            offsets: p.offsets,
            births: p.births,
            tail: p.tail,
            new_head: p.new_head,
        };
        if let Some(fresh) = p.fresh {
            fresh.keep(&committed); // R5: the tail store reaches them.
        }
        Ok(committed)
    }

    /// Updates the DRAM view after `p` was committed (directly or by a
    /// journal transaction).
    pub fn committed(&mut self, p: &Committed) {
        if let Some(h) = p.new_head {
            self.head = h;
        }
        self.tail = p.tail;
        self.tail_idx = self.find_tail(self.tail_idx);
        for (&off, &birth) in p.offsets.iter().zip(&p.births) {
            self.count_new(off, birth);
        }
    }

    /// Indices of the pages before the tail page whose entries are all dead
    /// (fast GC's candidates, NOVA §4.6), but for the pinned entry's page
    /// and those `needed(min_birth..max_death)` says a snapshot may replay.
    pub(crate) fn dead_pages(&self, needed: impl Fn(std::ops::Range<u64>) -> bool) -> Vec<usize> {
        let Some(tail_idx) = self.tail_index() else {
            return Vec::new();
        };
        let pinned = self.pinned.map(page_of);
        (0..tail_idx)
            .filter(|&i| Some(self.pages[i]) != pinned)
            .filter(|&i| {
                self.stats
                    .get(&self.pages[i])
                    .is_none_or(|s| s.live == 0 && !needed(s.min_birth..s.max_death))
            })
            .collect()
    }

    /// Unlinks the pages at indices `dead` (sorted, none of them the tail
    /// page) from the chain with one 8-byte pointer store per removed run,
    /// made durable (R5). The proof returned lets them be freed (R3).
    pub(crate) fn unlink_pages(&mut self, region: &dyn Region, inode_off: u64, dead: &[usize]) -> Result<Unlinked> {
        // R2: a pending journal checkpoint becomes durable before these
        // in-place pointer updates (journal/mod.rs step 4).
        region.fence();
        let mut keep = Vec::with_capacity(self.pages.len() - dead.len());
        let mut gap = false;
        for (i, &p) in self.pages.iter().enumerate() {
            if dead.binary_search(&i).is_ok() {
                gap = true;
                continue;
            }
            if gap {
                // First surviving page after a removed run: relink it.
                let at = keep
                    .last()
                    .map_or(inode_off + INODE_HEAD_OFF, |&pp: &u64| pp + LOG_NEXT_OFF);
                region.store_u64(at, p)?;
                region.flush(at, 8)?;
                gap = false;
            }
            keep.push(p);
        }
        region.fence(); // R5 for the pointer stores, before R3 frees.
        let mut pages = Vec::with_capacity(dead.len());
        for &i in dead {
            let p = self.pages[i];
            if let Some(st) = self.stats.remove(&p) {
                self.entries -= u64::from(st.entries);
            }
            pages.push(Extent { off: p, npages: 1 });
        }
        self.head = keep[0];
        self.pages = keep;
        self.tail_idx = self.find_tail(0);
        Ok(Unlinked { pages })
    }

    /// Live entries and all entries, for thorough GC's test (`gc`).
    pub(crate) fn live_ratio(&self) -> (u64, u64) {
        (self.live, self.entries)
    }

    /// Pages holding entries: the chain up to the tail page (spare pages
    /// linked past it are empty).
    pub(crate) fn written_pages(&self) -> usize {
        self.tail_index().map_or(0, |i| i + 1)
    }

    /// Every page of the chain as extents, for freeing it whole (the inode
    /// is gone or the log replaced).
    pub(crate) fn page_extents(&self) -> Vec<Extent> {
        self.pages.iter().map(|&off| Extent { off, npages: 1 }).collect()
    }

    /// After a failed commit: a log whose first append was never committed
    /// has pages no head reaches on the media (a later log has its new
    /// pages linked from its last page, as spares, and keeps them). The
    /// append's [`Pending`] gave them back when it was dropped; the log
    /// forgets them.
    pub(crate) fn forget_unreached(&mut self) {
        if self.head == 0 && !self.pages.is_empty() {
            *self = Log::default();
        }
    }
}
