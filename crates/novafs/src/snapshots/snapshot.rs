//! Snapshots (NOVA-Fortis §3): epochs, the cut, and the persistent list.
//!
//! Every log entry carries the epoch it was written in. Taking a snapshot
//! records the current epoch E in the snapshot list and moves the file
//! system on to E + 1, in constant time (§3.1): snapshot E is then every
//! entry of epoch E or older, read back by replaying only those.
//!
//! The cut must be consistent: an operation that read epoch E must not
//! commit after snapshot E was recorded, or the snapshot would miss a
//! change whose effects later operations of E + 1 already saw. Every
//! operation that writes therefore holds one shard of the epoch gate
//! ([`Epochs::enter`]) from the moment it reads the epoch until it has
//! published; taking a snapshot takes every shard ([`Epochs::cut`]),
//! which waits only for the operations in flight, records the snapshot
//! with one log commit and advances the epoch.
//!
//! The list is the log of reserved inode slot [`SNAPSHOT_LIST_OFF`]: one
//! [`SnapshotInfoEntry`] per snapshot taken or deleted, committed by its
//! tail store (R1, R5). Its head and tail words are its only state; a
//! head without a tail (a crash before the first commit) is an empty list.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::lock::{Mutex, Rank, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::alloc::{current_shard, Budget, Extent, PageAllocator};
use crate::error::{corrupt, Error, Result};
use crate::journal::{Journal, Update};
use crate::layout::Ino;
use crate::layout::{
    decode, Bounds, EntryType, SavedKept, SnapshotInfoEntry, INODE_HEAD_OFF, INODE_TAIL_OFF, KEPT_DATA, KEPT_INODE,
    PAGE_SIZE, SNAPSHOT_DELETE, SNAPSHOT_HEAD_SIZE, SNAPSHOT_LIST_OFF, SNAPSHOT_NAME_MAX, SNAPSHOT_TAKE,
};
use crate::log::{Committed, Entry, Log};
use pm::Region;

/// One snapshot in the list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub name: Vec<u8>,
    /// It holds every entry of this epoch or older.
    pub epoch: u64,
    /// When it was taken, in nanoseconds since the Unix epoch.
    pub created_ns: i64,
    /// Pages it alone keeps: what its manifest lists (Fortis §3.2), the
    /// space deleting it would give back at most.
    pub held_pages: u64,
}

/// Shards of the epoch gate: writers spread over them, a cut takes all.
const GATES: usize = 16;

/// The current epoch and the gate that makes a cut consistent (module
/// docs).
pub(crate) struct Epochs {
    current: AtomicU64,
    gates: Box<[RwLock<()>]>,
}

/// Held by an operation that writes, from reading the epoch until it has
/// published: no snapshot is taken meanwhile.
#[must_use = "an operation holds the epoch gate until it has published"]
pub(crate) struct EpochGuard<'a>(#[allow(dead_code)] RwLockReadGuard<'a, ()>);

impl Epochs {
    pub(crate) fn new(current: u64) -> Epochs {
        Epochs {
            current: AtomicU64::new(current),
            gates: (0..GATES).map(|_| RwLock::new(Rank::EpochGate, ())).collect(),
        }
    }

    /// The epoch new entries carry. Stable while an [`EpochGuard`] is held.
    pub(crate) fn current(&self) -> u64 {
        self.current.load(Ordering::Acquire)
    }

    /// Enters the gate for one operation. Recursive: an operation that
    /// calls another never waits for a cut that is waiting for it.
    pub(crate) fn enter(&self) -> EpochGuard<'_> {
        EpochGuard(self.gates[current_shard(GATES)].read_recursive())
    }

    /// Runs `record(epoch)` with no operation in flight and, if it
    /// succeeds, moves on to the next epoch.
    fn cut<T>(&self, record: impl FnOnce(u64) -> Result<T>) -> Result<T> {
        self.exclusive(|| {
            let epoch = self.current();
            let r = record(epoch)?;
            self.current.store(epoch + 1, Ordering::Release);
            Ok(r)
        })
    }

    /// Runs `f` with no operation in flight: the set of snapshots an
    /// operation sees does not change under it.
    fn exclusive<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let _all: Vec<_> = self.gates.iter().map(|g| g.write()).collect();
        f()
    }
}

/// Something snapshots keep that the live file system no longer
/// references (Fortis §3.2), listed in the manifest of the newest
/// snapshot that needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kept {
    /// Data pages mapped by an entry of epoch `birth`.
    Data { birth: u64, ext: Extent },
    /// A whole inode (record, log, pages: `pages` of them) created in
    /// epoch `birth`, its record marked kept.
    Inode { birth: u64, ino: Ino, off: u64, pages: u64 },
}

impl Kept {
    pub(crate) fn birth(&self) -> u64 {
        match *self {
            Kept::Data { birth, .. } | Kept::Inode { birth, .. } => birth,
        }
    }

    /// The pages it holds.
    pub(crate) fn pages(&self) -> u64 {
        match *self {
            Kept::Data { ext, .. } => ext.npages,
            Kept::Inode { pages, .. } => pages,
        }
    }
}

/// One snapshot's manifest: what it alone keeps, and its pages.
#[derive(Debug, Default)]
struct Manifest {
    items: Vec<Kept>,
    pages: u64,
}

impl Manifest {
    fn push(&mut self, item: Kept) {
        self.pages += item.pages();
        self.items.push(item);
    }
}

/// What deleting a snapshot leaves to free: what no other snapshot needs,
/// and the proof that the deletion is durable (R3).
pub(crate) struct Deleted {
    pub snapshot: Snapshot,
    pub unneeded: Vec<Kept>,
    pub proof: Committed,
}

/// The snapshot list and the epochs, shared by every operation (`Ctx`).
pub(crate) struct Snapshots {
    pub epochs: Epochs,
    list: Mutex<List>,
    /// The live snapshots by epoch. Changed only under the whole epoch
    /// gate (`take`, `delete`), so an operation inside the gate (GC asks
    /// [`Snapshots::any_in`]) reads it without ever waiting.
    live: RwLock<BTreeMap<u64, Snapshot>>,
    /// Per snapshot epoch, what it keeps (DRAM; the crash scan rebuilds it).
    manifests: Mutex<BTreeMap<u64, Manifest>>,
    /// The newest live snapshot's epoch + 1; 0 when there is none. Read
    /// without the list's lock on every path that frees something.
    newest: AtomicU64,
    /// Deletions that took items out of the manifests, changed under
    /// their lock: while it stays the same, every item a copy of the
    /// manifests ([`Snapshots::kept_items`]) lists is still listed.
    removals: AtomicU64,
    /// Held shared while something checks a manifest item in place
    /// ([`Snapshots::pin`]), exclusively while the reclaimer frees what a
    /// deletion left ([`Snapshots::freeing`]).
    freeing: RwLock<()>,
}

/// A copy of every manifest item, with the epoch of the snapshot whose
/// manifest listed it, made without holding the manifests' lock while
/// the items are used (scrub).
pub(crate) struct KeptItems {
    pub items: Vec<(u64, Kept)>,
    /// [`Snapshots::removals`] when the copy was made.
    removals: u64,
}

/// A manifest item that stays listed, and so in place, while this is
/// held: no reclaimer frees anything meanwhile ([`Snapshots::pin`]).
#[must_use = "the item stays in place only while the pin is held"]
pub(crate) struct KeptPin<'a>(#[allow(dead_code)] RwLockReadGuard<'a, ()>);

/// The list in DRAM, and its log.
struct List {
    log: Log,
    /// Records in the log, live or not: a long log is compacted.
    records: usize,
    /// The newest snapshot ever taken, deleted or not: a compacted list
    /// keeps it, so epochs never go back (`Snapshots::load`).
    newest_taken: Option<Snapshot>,
    /// Open views, by snapshot epoch: such a snapshot cannot be deleted.
    views: BTreeMap<u64, usize>,
}

impl Snapshots {
    /// Loads the list from slot [`SNAPSHOT_LIST_OFF`] (through its replica
    /// when the primary's log does not load). The current epoch is past
    /// every snapshot ever taken and at least `sb_epoch`.
    pub(crate) fn load(region: &dyn Region, data: &dyn Region, bounds: Bounds, sb_epoch: u64) -> Result<Snapshots> {
        let primary = load_list(region, bounds, SNAPSHOT_LIST_OFF);
        let (list, live) = match (primary, bounds.replica(SNAPSHOT_LIST_OFF)) {
            (Ok(l), _) => l,
            (Err(e), None) => return Err(e),
            (Err(e), Some(m)) => load_list(data, bounds, m).map_err(|_| e)?,
        };
        let newest = live.keys().next_back().map_or(0, |e| e + 1);
        Ok(Snapshots {
            epochs: Epochs::new(sb_epoch.max(list.newest_taken.as_ref().map_or(0, |s| s.epoch + 1))),
            list: Mutex::new(Rank::SnapshotList, list),
            live: RwLock::new(Rank::SnapshotLive, live),
            manifests: Mutex::new(Rank::Manifests, BTreeMap::new()),
            newest: AtomicU64::new(newest),
            removals: AtomicU64::new(0),
            freeing: RwLock::new(Rank::SnapshotFreeing, ()),
        })
    }

    /// The newest live snapshot's epoch.
    pub(crate) fn newest(&self) -> Option<u64> {
        self.newest.load(Ordering::Acquire).checked_sub(1)
    }

    /// Whether some live snapshot sees what epoch `epoch` wrote (it is
    /// that epoch or newer): what it wrote is then kept, never changed in
    /// place.
    pub(crate) fn sees(&self, epoch: u64) -> bool {
        self.newest().is_some_and(|s| epoch <= s)
    }

    /// The live snapshots, oldest first.
    pub(crate) fn list(&self) -> Vec<Snapshot> {
        let held = self.held_pages();
        self.live
            .read()
            .values()
            .map(|s| Snapshot {
                held_pages: held.get(&s.epoch).copied().unwrap_or(0),
                ..s.clone()
            })
            .collect()
    }

    /// The newest live snapshot `s` with `birth <= s < before`: the one
    /// whose manifest lists something born in `birth` that died in
    /// `before` (or that an older snapshot inherits from `before`).
    pub(crate) fn needing(&self, birth: u64, before: u64) -> Option<u64> {
        self.live.read().range(birth..before).next_back().map(|(&e, _)| e)
    }

    /// Whether a live snapshot's epoch lies in `epochs`.
    pub(crate) fn any_in(&self, epochs: std::ops::Range<u64>) -> bool {
        !epochs.is_empty() && self.live.read().range(epochs).next().is_some()
    }

    /// Opens a view of snapshot `name`: it cannot be deleted until
    /// [`Snapshots::close_view`]. Returns its epoch.
    pub(crate) fn open_view(&self, name: &[u8]) -> Result<u64> {
        let mut list = self.list.lock();
        let epoch = self
            .live
            .read()
            .values()
            .find(|s| s.name == name)
            .map(|s| s.epoch)
            .ok_or(Error::NotFound)?;
        *list.views.entry(epoch).or_default() += 1;
        Ok(epoch)
    }

    pub(crate) fn close_view(&self, epoch: u64) {
        let mut list = self.list.lock();
        if let Some(n) = list.views.get_mut(&epoch) {
            *n -= 1;
            if *n == 0 {
                list.views.remove(&epoch);
            }
        }
    }

    /// Lists `item` in snapshot `snapshot`'s manifest.
    pub(crate) fn keep(&self, snapshot: u64, item: Kept) {
        self.manifests.lock().entry(snapshot).or_default().push(item);
    }

    /// The items every manifest lists, and the DRAM they take.
    pub(crate) fn manifest_memory(&self) -> (u64, u64) {
        let manifests = self.manifests.lock();
        let items: usize = manifests.values().map(|m| m.items.len()).sum();
        let capacity: usize = manifests.values().map(|m| m.items.capacity()).sum();
        let bytes = capacity * size_of::<Kept>() + manifests.len() * size_of::<(u64, Manifest)>();
        (items as u64, bytes as u64)
    }

    /// A copy of every manifest item with its snapshot's epoch, oldest
    /// snapshot first.
    pub(crate) fn kept_items(&self) -> KeptItems {
        let manifests = self.manifests.lock();
        let mut items = Vec::with_capacity(manifests.values().map(|m| m.items.len()).sum());
        for (&snapshot, m) in manifests.iter() {
            items.extend(m.items.iter().map(|&item| (snapshot, item)));
        }
        KeptItems {
            items,
            removals: self.removals.load(Ordering::Relaxed),
        }
    }

    /// Pins `item` of the copy `kept` if a manifest still lists it
    /// (perhaps an older snapshot's, which inherited it): until the pin
    /// is dropped it is not freed, nor are its pages or slot reused. None
    /// when a deletion made it unneeded since the copy: it may be free
    /// already. A pin is not taken again by its holder (a waiting
    /// reclaimer would deadlock the two).
    pub(crate) fn pin(&self, kept: &KeptItems, item: &Kept) -> Option<KeptPin<'_>> {
        // Shared first: an item still listed below cannot then reach a
        // reclaimer that frees it before the pin is dropped.
        let pin = self.freeing.read();
        let manifests = self.manifests.lock();
        // Only a deletion takes items out, and rarely: a search only then.
        let listed = self.removals.load(Ordering::Relaxed) == kept.removals
            || manifests.values().any(|m| m.items.contains(item));
        drop(manifests);
        listed.then_some(KeptPin(pin))
    }

    /// Held by the reclaimer while it frees what a deletion left: waits
    /// for every [`KeptPin`] to be dropped.
    pub(crate) fn freeing(&self) -> RwLockWriteGuard<'_, ()> {
        self.freeing.write()
    }

    /// Every manifest item, for the state a clean unmount saves (Fortis
    /// §3.2: manifests are saved at unmount, rebuilt by the crash scan).
    pub(crate) fn export_manifests(&self) -> Vec<SavedKept> {
        self.kept_items()
            .items
            .into_iter()
            .map(|(snapshot, item)| match item {
                Kept::Data { birth, ext } => SavedKept {
                    snapshot,
                    birth,
                    kind: KEPT_DATA,
                    off: ext.off,
                    pages: ext.npages,
                    ino: 0,
                },
                Kept::Inode { birth, ino, off, pages } => SavedKept {
                    snapshot,
                    birth,
                    kind: KEPT_INODE,
                    off,
                    pages,
                    ino,
                },
            })
            .collect()
    }

    /// Checks saved manifest items against the list, the data area
    /// (`data`: its byte range) and the inode tables (`record_of`: where
    /// an inode's record is), and only then lists them all: damage leaves
    /// the manifests empty for the scan to rebuild.
    pub(crate) fn import_manifests(
        &self,
        saved: &[SavedKept],
        data: std::ops::Range<u64>,
        record_of: impl Fn(Ino) -> Option<u64>,
    ) -> Result<()> {
        let live = self.live.read();
        let mut items = Vec::with_capacity(saved.len());
        for k in saved {
            let item = match k.kind {
                KEPT_DATA => Kept::Data {
                    birth: k.birth,
                    ext: Extent {
                        off: k.off,
                        npages: k.pages,
                    },
                },
                KEPT_INODE => Kept::Inode {
                    birth: k.birth,
                    ino: k.ino,
                    off: k.off,
                    pages: k.pages,
                },
                _ => {
                    return Err(corrupt!(
                        SnapshotManifest,
                        "saved manifest item of unknown kind {}",
                        k.kind
                    ))
                }
            };
            let placed = match item {
                Kept::Data { .. } => {
                    k.off % PAGE_SIZE == 0
                        && k.pages > 0
                        && k.off >= data.start
                        && k.pages
                            .checked_mul(PAGE_SIZE)
                            .and_then(|len| k.off.checked_add(len))
                            .is_some_and(|end| end <= data.end)
                }
                Kept::Inode { .. } => record_of(k.ino) == Some(k.off),
            };
            if !live.contains_key(&k.snapshot) || k.birth > k.snapshot || !placed {
                return Err(corrupt!(
                    SnapshotManifest,
                    "saved manifest item {k:?} names no live snapshot or lies outside the data area"
                ));
            }
            items.push((k.snapshot, item));
        }
        let mut manifests = self.manifests.lock();
        for (snapshot, item) in items {
            manifests.entry(snapshot).or_default().push(item);
        }
        Ok(())
    }

    /// Pages all manifests hold: what only snapshots keep.
    pub(crate) fn held_total(&self) -> u64 {
        self.manifests.lock().values().map(|m| m.pages).sum()
    }

    /// Pages each snapshot's manifest holds, by snapshot epoch.
    fn held_pages(&self) -> BTreeMap<u64, u64> {
        self.manifests.lock().iter().map(|(&e, m)| (e, m.pages)).collect()
    }

    /// The pages of the list's log (with their mirrors: `bounds.copies`).
    pub(crate) fn log_pages(&self) -> Vec<u64> {
        self.list.lock().log.pages().to_vec()
    }

    /// Takes snapshot `name` of everything committed so far (module docs).
    pub(crate) fn take(
        &self,
        (region, journal): (&dyn Region, &Journal),
        alloc: &PageAllocator,
        name: &[u8],
        now_ns: i64,
    ) -> Result<Snapshot> {
        check_name(name)?;
        // Lock order (`lock`): the whole gate, then the list.
        self.epochs.cut(|epoch| {
            // Relaxed mode's running transaction changes entries of the
            // epochs the snapshot keeps: it reaches them first.
            journal.commit_running(region, Journal::AT_SNAPSHOT)?;
            let mut list = self.list.lock();
            if self.live.read().values().any(|s| s.name == name) {
                return Err(Error::Exists);
            }
            let snap = Snapshot {
                name: name.to_vec(),
                epoch,
                created_ns: now_ns,
                held_pages: 0,
            };
            let live = self.live.read();
            let _ = list.record((region, journal), alloc, (SNAPSHOT_TAKE, Budget::Normal), &snap, &live)?;
            drop(live);
            self.live.write().insert(epoch, snap.clone());
            list.newest_taken = Some(snap.clone());
            self.newest.store(epoch + 1, Ordering::Release);
            Ok(snap)
        })
    }

    /// Deletes snapshot `name`: records it, then hands what it kept to
    /// the newest older snapshot that still needs each item, and returns
    /// the rest, which nothing needs any more, for the caller to free
    /// (Fortis §3.2: manifests merge). No operation is in flight meanwhile,
    /// so none can list an item in the manifest being emptied.
    pub(crate) fn delete(
        &self,
        (region, journal): (&dyn Region, &Journal),
        alloc: &PageAllocator,
        name: &[u8],
    ) -> Result<Deleted> {
        self.epochs.exclusive(|| {
            let mut list = self.list.lock();
            let mut live = self.live.write();
            let snap = live.values().find(|s| s.name == name).cloned().ok_or(Error::NotFound)?;
            if list.views.contains_key(&snap.epoch) {
                return Err(Error::Busy(
                    "the snapshot is open (mounted or read through the library)",
                ));
            }
            // Deleting frees space: it must work on a full device.
            let proof = list.record(
                (region, journal),
                alloc,
                (SNAPSHOT_DELETE, Budget::Critical),
                &snap,
                &live,
            )?;
            live.remove(&snap.epoch);
            let newest = live.keys().next_back().map_or(0, |e| e + 1);
            self.newest.store(newest, Ordering::Release);
            let mut manifests = self.manifests.lock();
            let mut unneeded = Vec::new();
            let emptied = manifests.remove(&snap.epoch).unwrap_or_default().items;
            if !emptied.is_empty() {
                // Copies made before may list what is freed next (`pin`).
                self.removals.fetch_add(1, Ordering::Relaxed);
            }
            for item in emptied {
                match live.range(item.birth()..snap.epoch).next_back() {
                    Some((&older, _)) => manifests.entry(older).or_default().push(item),
                    None => unneeded.push(item),
                }
            }
            Ok(Deleted {
                snapshot: snap,
                unneeded,
                proof,
            })
        })
    }
}

impl List {
    /// Appends one record (`op` of `snap`, with pages `budget` allows) and
    /// commits it with the slot's
    /// tail store (R1, R5); the first record also sets the head, before the
    /// fence. A log that would grow while it holds more than twice the
    /// records it needs is compacted first.
    fn record(
        &mut self,
        (region, journal): (&dyn Region, &Journal),
        alloc: &PageAllocator,
        (op, budget): (u8, Budget),
        snap: &Snapshot,
        live: &BTreeMap<u64, Snapshot>,
    ) -> Result<Committed> {
        let entry = record_entry(op, snap);
        if self.log.needs_growth(std::slice::from_ref(&entry)) && self.records > 2 * (live.len() + 2) {
            // Compaction needs pages before it frees the old log: a full
            // device appends without it.
            match self.compact((region, journal), alloc, live, budget) {
                Err(Error::NoSpace) => {}
                r => r?,
            }
        }
        let p = self.log.append(region, alloc, budget, &[entry])?;
        let proof = self.log.commit(region, SNAPSHOT_LIST_OFF, p)?;
        self.log.committed(&proof);
        self.records += 1;
        Ok(proof)
    }

    /// Rewrites the list as one take record per live snapshot, oldest
    /// first, and the newest snapshot ever taken with its deletion if it
    /// is gone (the next mount's epoch starts past it), then switches head
    /// and tail in one journal transaction (R2) and frees the old log (R3),
    /// as thorough GC does an inode's.
    fn compact(
        &mut self,
        (region, journal): (&dyn Region, &Journal),
        alloc: &PageAllocator,
        live: &BTreeMap<u64, Snapshot>,
        budget: Budget,
    ) -> Result<()> {
        let mut entries: Vec<Entry> = live.values().map(|s| record_entry(SNAPSHOT_TAKE, s)).collect();
        if let Some(newest) = self.newest_taken.as_ref().filter(|n| !live.contains_key(&n.epoch)) {
            entries.push(record_entry(SNAPSHOT_TAKE, newest));
            entries.push(record_entry(SNAPSHOT_DELETE, newest));
        }
        let mut fresh = Log::default();
        let mut txn = journal.begin();
        let mut p = fresh.append(region, alloc, budget, &entries)?;
        txn.depends_on(p.bind(txn.id()));
        let switch = [
            Update::word(SNAPSHOT_LIST_OFF + INODE_HEAD_OFF, p.new_head().unwrap_or(fresh.head())),
            Update::word(SNAPSHOT_LIST_OFF + INODE_TAIL_OFF, p.tail()),
        ];
        // A failed switch drops `p`, which gives the new log's pages back.
        let durable = txn.commit(region, &switch)?;
        fresh.committed(&p.journaled(&durable)); // R2: the switch reaches its pages.
        alloc.release_meta(&durable, &self.log.page_extents()); // R3: the switch is durable.
        self.log = fresh;
        self.records = entries.len();
        Ok(())
    }
}

/// The list's record of `op` (take or delete) for `snap`.
fn record_entry(op: u8, snap: &Snapshot) -> Entry {
    let head = SnapshotInfoEntry {
        epoch: snap.epoch,
        created_ns: snap.created_ns,
        op,
        name_len: snap.name.len() as u8,
        ..SnapshotInfoEntry::default()
    };
    Entry::snapshot(&head, &snap.name)
}

/// A snapshot name: a file name's rules (it names a directory of
/// `.snapshots` and a mount).
fn check_name(name: &[u8]) -> Result<()> {
    if name.len() > SNAPSHOT_NAME_MAX {
        return Err(Error::NameTooLong);
    }
    if name.is_empty() || name == b"." || name == b".." || name.iter().any(|&b| b == b'/' || b == 0) {
        return Err(Error::Invalid(
            "a snapshot name is a file name: not empty, '.', '..', and without '/'",
        ));
    }
    Ok(())
}

/// The list whose head and tail words are at `off`, and its live
/// snapshots.
fn load_list(region: &dyn Region, bounds: Bounds, off: u64) -> Result<(List, BTreeMap<u64, Snapshot>)> {
    let head = region.load_u64(off + INODE_HEAD_OFF)?;
    let tail = region.load_u64(off + INODE_TAIL_OFF)?;
    let mut list = List {
        log: Log::default(),
        records: 0,
        newest_taken: None,
        views: BTreeMap::new(),
    };
    let mut live = BTreeMap::new();
    if tail == 0 {
        return Ok((list, live));
    }
    list.log = Log::load(region, bounds, head, tail, |_, eoff, bytes| {
        let e: SnapshotInfoEntry = decode(bytes)?;
        let name = bytes
            .get(SNAPSHOT_HEAD_SIZE..SNAPSHOT_HEAD_SIZE + usize::from(e.name_len))
            .ok_or_else(|| {
                corrupt!(
                    SnapshotList,
                    at = eoff,
                    "snapshot record at {eoff:#x} has a bad name length"
                )
            })?;
        if e.hdr.etype != EntryType::SnapshotInfo as u8 {
            return Err(corrupt!(
                SnapshotList,
                at = eoff,
                "entry of type {} in the snapshot list at {eoff:#x}",
                e.hdr.etype
            ));
        }
        list.records += 1;
        match e.op {
            SNAPSHOT_TAKE => {
                if list.newest_taken.as_ref().is_some_and(|l| e.epoch <= l.epoch) {
                    return Err(corrupt!(
                        SnapshotList,
                        at = eoff,
                        "snapshot record at {eoff:#x} goes back in epochs"
                    ));
                }
                let snap = Snapshot {
                    name: name.to_vec(),
                    epoch: e.epoch,
                    created_ns: e.created_ns,
                    held_pages: 0,
                };
                live.insert(e.epoch, snap.clone());
                list.newest_taken = Some(snap);
            }
            SNAPSHOT_DELETE => {
                live.remove(&e.epoch).ok_or_else(|| {
                    corrupt!(
                        SnapshotList,
                        at = eoff,
                        "snapshot record at {eoff:#x} deletes an unknown snapshot"
                    )
                })?;
            }
            op => {
                return Err(corrupt!(
                    SnapshotList,
                    at = eoff,
                    "snapshot record at {eoff:#x} has unknown op {op}"
                ))
            }
        }
        Ok(())
    })?;
    Ok((list, live))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_file_name_rules() {
        assert!(check_name(b"daily-2026-11-25").is_ok());
        assert!(check_name(&[b'n'; 255]).is_ok());
        assert!(matches!(check_name(&[b'n'; 256]), Err(Error::NameTooLong)));
        for bad in [&b""[..], b".", b"..", b"a/b", b"a\0b"] {
            assert!(matches!(check_name(bad), Err(Error::Invalid(_))), "{bad:?}");
        }
    }

    #[test]
    fn a_cut_waits_for_operations_in_flight_and_advances_the_epoch() {
        let epochs = std::sync::Arc::new(Epochs::new(7));
        let guard = epochs.enter();
        let inner = epochs.enter(); // recursive entry of one operation
        let e2 = epochs.clone();
        let cut = std::thread::spawn(move || e2.cut(Ok).expect("cut"));
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(epochs.current(), 7, "no cut while an operation is in flight");
        drop(inner);
        drop(guard);
        assert_eq!(cut.join().expect("cut thread"), 7);
        assert_eq!(epochs.current(), 8);
        let failed: Result<()> = epochs.cut(|_| Err(Error::NoSpace));
        assert!(failed.is_err());
        assert_eq!(epochs.current(), 8, "a failed record does not advance");
    }
}
