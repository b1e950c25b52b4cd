//! Directories (NOVA §4.3): a directory's log holds dentry add and remove
//! entries; DRAM keeps name → entry and readdir-cookie → entry indexes. The
//! parent link is the dentry named "..". An add of an existing name
//! replaces it (rename over a target is one entry).
//!
//! The DRAM index is a slab of slots sorted by cookie, each holding its
//! name (inline when short) and entry, plus a hash table of slot numbers
//! keyed by name. A lookup probes the table, then reads one slot: no
//! separate name allocation to chase. A removal leaves a tombstone, so it
//! costs no search and keeps cookies in place; the slab is compacted when
//! tombstones outnumber live slots (O(1) amortised). Readdir walks the
//! slab in order from a binary search on the cookie.

use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

use foldhash::fast::FoldHasher;
use foldhash::SharedSeed;
use hashbrown::HashTable;

use crate::error::{corrupt, Error, Result};
use crate::layout::Ino;
use crate::layout::{DentryHead, EntryType, NAME_MAX};
use crate::log::{Entry, Log};

/// Readdir offsets 1 and 2 are "." and ".."; entries start after them.
pub(crate) const FIRST_SEQ: u64 = 3;

/// One live name in a directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Dent {
    pub ino: Ino,
    /// Readdir cookie: stable while the entry lives.
    pub seq: u64,
    pub ftype: u8,
    /// The add entry in the directory's log.
    pub entry: u64,
}

#[derive(Debug, Default)]
pub(crate) struct DirIndex {
    /// Entries and tombstones, sorted by cookie.
    slots: Vec<Slot>,
    /// Index in `slots` of every live entry, hashed by name.
    by_name: HashTable<usize>,
    next_seq: u64,
    parent: Ino,
    parent_entry: Option<u64>,
    /// Add entries that are cancelled but still valid on the media, with
    /// the epoch they were cancelled in: their in-place invalidation (NOVA
    /// §4.6) waits while a snapshot may see them, and must happen before
    /// log GC may drop their cancellers ([`DirIndex::take_deferred`]).
    deferred: Vec<(u64, u64)>,
}

/// Names up to this long are stored in their slot (56 bytes in all).
const INLINE_NAME: usize = 22;

#[derive(Debug)]
enum Name {
    Inline { len: u8, bytes: [u8; INLINE_NAME] },
    Heap(Box<[u8]>),
}

impl Name {
    fn new(name: &[u8]) -> Name {
        let mut bytes = [0; INLINE_NAME];
        match bytes.get_mut(..name.len()) {
            Some(head) => {
                head.copy_from_slice(name);
                Name::Inline {
                    len: name.len() as u8,
                    bytes,
                }
            }
            None => Name::Heap(name.into()),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            Name::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Name::Heap(b) => b,
        }
    }
}

#[derive(Debug)]
struct Slot {
    seq: u64,
    ino: Ino,
    entry: u64,
    ftype: u8,
    /// The add entry was invalidated on the media by the transaction that
    /// cancels it.
    invalidated: bool,
    /// `None` once removed: a tombstone until the next compaction.
    name: Option<Name>,
}

const _: () = assert!(size_of::<Slot>() == 56);

impl Slot {
    /// The name, empty for a tombstone (which no valid name matches).
    fn name(&self) -> &[u8] {
        self.name.as_ref().map_or(&[], Name::as_bytes)
    }

    fn live(&self) -> Option<(&[u8], Dent)> {
        let name = self.name.as_ref()?;
        let dent = Dent {
            ino: self.ino,
            seq: self.seq,
            ftype: self.ftype,
            entry: self.entry,
        };
        Some((name.as_bytes(), dent))
    }
}

/// Names come from untrusted users: the hash is seeded from the OS once per
/// process (through std's SipHash keys), so nobody can pick names that all
/// collide. foldhash itself is several times faster than SipHash.
fn hash_name(name: &[u8]) -> u64 {
    static SEED: OnceLock<(u64, SharedSeed)> = OnceLock::new();
    let (per_hasher, shared) = SEED.get_or_init(|| {
        let random = || std::hash::RandomState::new().build_hasher().finish();
        (random(), SharedSeed::from_u64(random()))
    });
    let mut h = FoldHasher::with_seed(*per_hasher, shared);
    h.write(name);
    h.finish()
}

/// Rejects names the file system cannot store or that POSIX reserves.
pub(crate) fn check_name(name: &[u8]) -> Result<()> {
    if name.len() > NAME_MAX {
        return Err(Error::NameTooLong);
    }
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0) {
        return Err(Error::Invalid("bad file name"));
    }
    Ok(())
}

impl DirIndex {
    pub(crate) fn apply_add(&mut self, log: &mut Log, off: u64, name: &[u8], d: &DentryHead) -> Result<()> {
        if name == b".." {
            self.parent = d.ino;
            if let Some(prev) = self.parent_entry.replace(off) {
                log.kill(prev);
            }
            return Ok(());
        }
        check_name(name).map_err(|_| corrupt!(Directory, at = off, "dentry at {off:#x} has an invalid name"))?;
        let slot = Slot {
            seq: d.seq,
            ino: d.ino,
            entry: off,
            ftype: d.ftype,
            invalidated: false,
            name: Some(Name::new(name)),
        };
        // Cookies come from `next_seq`, and replay and thorough GC see adds
        // in log order, so a new slot goes at the end. A log written in
        // another order still works: a sorted insert, renumbering slots.
        let at = match self.slots.last() {
            Some(last) if last.seq > d.seq => {
                let at = self.slots.partition_point(|s| s.seq <= d.seq);
                self.slots.insert(at, slot);
                self.by_name.iter_mut().filter(|i| **i >= at).for_each(|i| *i += 1);
                at
            }
            _ => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        };
        let slots = &self.slots;
        let old = match self.by_name.entry(
            hash_name(name),
            |&i| slots[i].name() == name,
            |&i| hash_name(slots[i].name()),
        ) {
            hashbrown::hash_table::Entry::Occupied(mut e) => Some(std::mem::replace(e.get_mut(), at)),
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert(at);
                None
            }
        };
        if let Some(old) = old {
            self.kill_slot(log, old, off);
        }
        self.next_seq = self.next_seq.max(d.seq.saturating_add(1));
        Ok(())
    }

    /// Removes `name`. The add it cancels was invalidated on media in the
    /// same transaction (NOVA §4.6), so the remove entry itself is dead at
    /// once: it only carries the directory's new link count and mtime.
    pub(crate) fn apply_remove(&mut self, log: &mut Log, off: u64, name: &[u8]) {
        let slots = &self.slots;
        if let Ok(e) = self.by_name.find_entry(hash_name(name), |&i| slots[i].name() == name) {
            let (old, _) = e.remove();
            self.kill_slot(log, old, off);
        }
        log.kill(off);
    }

    /// Turns slot `i`, already gone from `by_name`, into a tombstone and
    /// kills its add entry, cancelled by the entry at `canceller`, whose
    /// invalidation is deferred unless its transaction made it.
    fn kill_slot(&mut self, log: &mut Log, i: usize, canceller: u64) {
        let slot = &mut self.slots[i];
        slot.name = None;
        if slot.invalidated {
            log.kill(slot.entry);
        } else {
            // The canceller must outlive the add on the media (`Log`).
            log.kill_cancelled(slot.entry, canceller);
            self.deferred.push((slot.entry, log.applying_epoch()));
        }
        if self.slots.len() > 2 * self.by_name.len() {
            self.compact();
        }
    }

    /// Drops the tombstones and renumbers the table: O(live entries), run
    /// after at least as many removals.
    fn compact(&mut self) {
        self.slots.retain(|s| s.name.is_some());
        if self.slots.capacity() > 4 * self.slots.len() {
            // The directory shrank a lot: give the memory back.
            self.slots.shrink_to(2 * self.slots.len());
            self.by_name = HashTable::with_capacity(self.slots.len());
        } else {
            self.by_name.clear();
        }
        let slots = &self.slots;
        for (i, s) in slots.iter().enumerate() {
            self.by_name
                .insert_unique(hash_name(s.name()), i, |&j| hash_name(slots[j].name()));
        }
    }

    /// Records that the transaction cancelling `name`'s add entry also
    /// invalidated it on the media (called between its commit and its
    /// publication).
    pub(crate) fn mark_invalidated(&mut self, name: &[u8]) {
        let slots = &self.slots;
        if let Some(&i) = self.by_name.find(hash_name(name), |&i| slots[i].name() == name) {
            self.slots[i].invalidated = true;
        }
    }

    /// The add entries whose invalidation was deferred (see `deferred`),
    /// each with the epoch it was cancelled in, leaving none.
    pub(crate) fn take_deferred(&mut self) -> Vec<(u64, u64)> {
        std::mem::take(&mut self.deferred)
    }

    /// Defers the invalidation of these again (`take_deferred`).
    pub(crate) fn defer(&mut self, adds: Vec<(u64, u64)>) {
        self.deferred.extend(adds);
    }

    pub(crate) fn get(&self, name: &[u8]) -> Option<Dent> {
        let i = *self.by_name.find(hash_name(name), |&i| self.slots[i].name() == name)?;
        self.slots[i].live().map(|(_, d)| d)
    }

    pub(crate) fn parent(&self) -> Ino {
        self.parent
    }

    pub(crate) fn len(&self) -> usize {
        self.by_name.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// The cookie the next added entry gets.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq.max(FIRST_SEQ)
    }

    /// Entries with cookies after `after`, in cookie order.
    pub(crate) fn entries_after(&self, after: u64) -> impl Iterator<Item = (&[u8], Dent)> + '_ {
        let from = self.slots.partition_point(|s| s.seq <= after);
        self.slots[from..].iter().filter_map(Slot::live)
    }

    /// Every live entry (for GC compaction, the scan and fsck).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], Dent)> + '_ {
        self.slots.iter().filter_map(Slot::live)
    }
}

/// What a dentry entry records besides the name.
pub(crate) struct DentrySpec {
    pub ino: Ino,
    pub seq: u64,
    pub ftype: u8,
    /// The directory's link count and mtime after this change.
    pub dir_nlink: u32,
    pub dir_mtime: i64,
}

/// Encodes a dentry add (`add`) or remove entry.
pub(crate) fn dentry(epoch: u64, add: bool, name: &[u8], s: &DentrySpec) -> Entry {
    let head = DentryHead {
        ino: s.ino,
        seq: s.seq,
        dir_mtime: s.dir_mtime,
        dir_nlink: s.dir_nlink,
        name_len: name.len() as u8,
        ftype: s.ftype,
        ..DentryHead::default()
    };
    let etype = if add {
        EntryType::DentryAdd
    } else {
        EntryType::DentryRemove
    };
    Entry::dentry(etype, epoch, &head, name)
}

#[cfg(test)]
mod tests {
    use pm::MemRegion;

    use super::*;
    use crate::alloc::{Budget, PageAllocator};
    use crate::layout::PAGE_SIZE;

    /// A log of `n` committed entries (their offsets returned), so a test
    /// can count the entries the index kills through `live_ratio`.
    fn log_of(n: usize) -> Result<(Log, Vec<u64>)> {
        let region = MemRegion::new(64 * PAGE_SIZE);
        let alloc = PageAllocator::new(PAGE_SIZE, 64 * PAGE_SIZE, 1);
        alloc.add_free(PAGE_SIZE, 63);
        let spec = DentrySpec {
            ino: 0,
            seq: 0,
            ftype: 0,
            dir_nlink: 2,
            dir_mtime: 0,
        };
        let entries: Vec<Entry> = (0..n).map(|_| dentry(0, true, b"x", &spec)).collect();
        let mut log = Log::default();
        let p = log.append(&region, &alloc, Budget::Critical, &entries)?;
        let c = log.commit(&region, 0, p)?;
        log.committed(&c);
        Ok((log, c.offsets().to_vec()))
    }

    fn head(ino: Ino, seq: u64) -> DentryHead {
        DentryHead {
            ino,
            seq,
            ftype: 1,
            ..DentryHead::default()
        }
    }

    /// (name, ino, seq) of what `it` yields.
    fn listed<'a>(it: impl Iterator<Item = (&'a [u8], Dent)>) -> Vec<(String, Ino, u64)> {
        it.map(|(n, d)| (String::from_utf8_lossy(n).into_owned(), d.ino, d.seq))
            .collect()
    }

    fn row(name: &str, ino: Ino, seq: u64) -> (String, Ino, u64) {
        (name.to_owned(), ino, seq)
    }

    #[test]
    fn adds_replacing_adds_and_removes_keep_cookie_order() -> Result<()> {
        let (mut log, offs) = log_of(9)?;
        let mut dir = DirIndex::default();
        assert_eq!(dir.next_seq(), FIRST_SEQ);
        dir.apply_add(&mut log, offs[0], b"..", &head(1, 0))?;
        dir.apply_add(&mut log, offs[1], b"a", &head(10, 3))?;
        dir.apply_add(&mut log, offs[2], b"b", &head(11, 4))?;
        dir.apply_add(&mut log, offs[3], b"c", &head(12, 5))?;
        assert_eq!(dir.parent(), 1);
        assert_eq!(listed(dir.iter()), [row("a", 10, 3), row("b", 11, 4), row("c", 12, 5)]);
        assert_eq!(listed(dir.entries_after(3)), [row("b", 11, 4), row("c", 12, 5)]);
        assert_eq!(listed(dir.entries_after(5)), []);
        assert_eq!(dir.next_seq(), 6);
        assert_eq!(log.live_ratio(), (9, 9));

        // Rename over "a": the new add takes a new cookie, the old one dies.
        dir.apply_add(&mut log, offs[4], b"a", &head(20, 6))?;
        assert_eq!(log.live_ratio(), (8, 9));
        assert_eq!(
            dir.get(b"a"),
            Some(Dent {
                ino: 20,
                seq: 6,
                ftype: 1,
                entry: offs[4],
            })
        );
        assert_eq!(
            listed(dir.entries_after(2)),
            [row("b", 11, 4), row("c", 12, 5), row("a", 20, 6)]
        );

        // A remove kills the add and itself; its cookie is skipped, not reused.
        dir.apply_remove(&mut log, offs[5], b"b");
        assert_eq!(log.live_ratio(), (6, 9));
        assert_eq!(dir.get(b"b"), None);
        assert_eq!(listed(dir.entries_after(3)), [row("c", 12, 5), row("a", 20, 6)]);
        assert_eq!(listed(dir.entries_after(4)), [row("c", 12, 5), row("a", 20, 6)]);
        assert_eq!((dir.len(), dir.next_seq()), (2, 7));

        // Removing a name that is not there only kills the remove entry.
        dir.apply_remove(&mut log, offs[6], b"zz");
        assert_eq!(log.live_ratio(), (5, 9));
        dir.apply_remove(&mut log, offs[7], b"a");
        dir.apply_remove(&mut log, offs[8], b"c");
        assert!(dir.is_empty());
        assert_eq!(log.live_ratio(), (1, 9));
        assert_eq!(listed(dir.iter()), []);
        assert_eq!(dir.next_seq(), 7);
        Ok(())
    }

    #[test]
    fn compaction_drops_tombstones_and_keeps_lookups_and_cookies() -> Result<()> {
        let mut log = Log::default();
        let mut dir = DirIndex::default();
        let name = |i: u64| format!("file-{i}").into_bytes();
        for i in 0..100 {
            dir.apply_add(&mut log, 64 * i, &name(i), &head(i, FIRST_SEQ + i))?;
        }
        // Remove all but every tenth; compactions run along the way.
        for i in (0..100).filter(|i| i % 10 != 0) {
            dir.apply_remove(&mut log, 0, &name(i));
        }
        assert!(
            dir.slots.len() <= 2 * dir.len(),
            "{} slots for {} names",
            dir.slots.len(),
            dir.len()
        );
        let want: Vec<_> = (0..100)
            .step_by(10)
            .map(|i| row(&format!("file-{i}"), i, FIRST_SEQ + i))
            .collect();
        assert_eq!(listed(dir.iter()), want);
        assert_eq!(listed(dir.entries_after(FIRST_SEQ + 45)), want[5..]);
        for i in 0..100 {
            assert_eq!(dir.get(&name(i)).map(|d| d.ino), (i % 10 == 0).then_some(i), "file-{i}");
        }
        for i in (0..100).step_by(10) {
            dir.apply_remove(&mut log, 0, &name(i));
        }
        assert!(dir.is_empty());
        assert!(dir.slots.is_empty());
        assert_eq!(dir.next_seq(), FIRST_SEQ + 100);
        Ok(())
    }

    #[test]
    fn out_of_order_cookies_are_listed_in_order() -> Result<()> {
        let (mut log, offs) = log_of(6)?;
        let mut dir = DirIndex::default();
        dir.apply_add(&mut log, offs[0], b"e", &head(1, 9))?;
        dir.apply_add(&mut log, offs[1], b"c", &head(2, 5))?;
        dir.apply_add(&mut log, offs[2], b"d", &head(3, 7))?;
        dir.apply_add(&mut log, offs[3], b"b", &head(4, 4))?;
        assert_eq!(
            listed(dir.iter()),
            [row("b", 4, 4), row("c", 2, 5), row("d", 3, 7), row("e", 1, 9)]
        );
        // A replacing add with an older cookie moves the name back.
        dir.apply_add(&mut log, offs[4], b"e", &head(5, 6))?;
        assert_eq!(log.live_ratio(), (5, 6));
        assert_eq!(
            listed(dir.entries_after(4)),
            [row("c", 2, 5), row("e", 5, 6), row("d", 3, 7)]
        );
        dir.apply_remove(&mut log, offs[5], b"c");
        assert_eq!(log.live_ratio(), (3, 6));
        for (name, ino) in [(&b"b"[..], 4), (b"d", 3), (b"e", 5)] {
            assert_eq!(dir.get(name).map(|d| d.ino), Some(ino));
        }
        assert_eq!(listed(dir.entries_after(4)), [row("e", 5, 6), row("d", 3, 7)]);
        assert_eq!(dir.next_seq(), 10);
        Ok(())
    }

    #[test]
    fn long_names_and_inline_boundary_round_trip() -> Result<()> {
        let mut log = Log::default();
        let mut dir = DirIndex::default();
        let names: Vec<Vec<u8>> = [1, INLINE_NAME - 1, INLINE_NAME, INLINE_NAME + 1, NAME_MAX]
            .iter()
            .map(|&n| vec![b'n'; n])
            .collect();
        for (i, n) in names.iter().enumerate() {
            dir.apply_add(&mut log, 0, n, &head(i as u64, FIRST_SEQ + i as u64))?;
        }
        for (i, n) in names.iter().enumerate() {
            assert_eq!(dir.get(n).map(|d| d.ino), Some(i as u64));
        }
        let got: Vec<&[u8]> = dir.iter().map(|(n, _)| n).collect();
        assert_eq!(got, names);
        assert_eq!(dir.get(&[b'n'; INLINE_NAME + 2]), None);
        Ok(())
    }
}
