//! DAX mmap in the library (NOVA-Fortis §2, §3.3, §3.4): a file's data
//! pages mapped into the program, which loads and stores the persistent
//! memory itself, with no copy and no file system call on the way.
//!
//! Pages are mapped on demand through `pm::Window`'s fault service: a load
//! maps the page read-only (a hole reads as zeros), and the first store to
//! a page is a *write fault* that this module resolves before the store is
//! retried:
//!
//! - **caveat DAXor** (§3.4): a page the program may store to cannot keep
//!   its checksums and parity up to date. Before the page becomes writable
//!   an `MMAP_UNPROTECT` entry naming it is committed to the file's log
//!   (durable first: a crash then finds it and reseals the page instead of
//!   "repairing" it from stale parity), and its data page joins the
//!   *stale* set, which reads and scrub trust without checking. Sealing
//!   (`Mapping::sync`, dropping the mapping, and any write(2), truncate or
//!   fallocate over the page) write-protects the page everywhere,
//!   recomputes its checksums and parity, and commits `MMAP_PROTECT` (or
//!   the change's own write entry, which protects too). A crash scan
//!   reseals what is still unprotected.
//! - **snapshots** (§3.3): a data page that a snapshot holds (mapped by an
//!   entry of its epoch or older) is never written in place: the write
//!   fault copies it to a new page (copy-on-write, committed as a write
//!   entry; the old page goes to the snapshot's manifest, its checksums
//!   resealed first). Taking a snapshot write-protects every writable page
//!   of every mapping *while faults are held back* ([`Mmaps::freeze`]) and
//!   lets them go only once the snapshot is recorded: a store that faults
//!   on a page already protected waits, so no later store (in program
//!   order, or after a lock hand-off) can reach a page still writable.
//!   The snapshot then holds a prefix of every thread's stores (Fig. 3).
//!
//! - **write-ahead**: a store fault on the page after the previous store
//!   fault's run makes a run of pages writable, twice as long as that run
//!   (up to 16), in one commit and one remap; any other store fault, its
//!   own page. A program storing through its pages in order faults once a
//!   run, not once a page, as the kernel's fault-around does for loads: a
//!   fault costs at least a signal's round trip (4.4 µs on the test host)
//!   and a commit. The pages ahead are unprotected (or copied) before any
//!   store: at most 15 a run that no store reaches, resealed at the next
//!   sync as the others. Holes are filled one store at a time, so that no
//!   page is allocated that no store asked for.
//!
//! Lock order: `Mmaps::faults` (fault handlers only) → the epoch gate
//! → the inode's lock → a mapping's page state. Writers never take
//! `faults`; a snapshot takes `faults` before the gate. The library
//! copies a caller's buffer that lies in a mapping before it takes any of
//! these (`Fs::read`, `Fs::write`), so no fault is ever taken under them.

use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use crate::lock::{Mutex, Rank, RwLock, RwLockWriteGuard};
use crate::mmap_atomic::{self, DaxHooks, Hand, Replicas, View, FAULT_AROUND};
use pm::{Fault, Window};

use crate::alloc::Budget;
use crate::cache::{alive, Cell};
use crate::commit::Ctx;
use crate::error::{Error, Result};
use crate::file::{self, file_map};
use crate::inode::{mmap_entry, setattr_entry, Ino, InodeState};
use crate::layout::{ENTRY_EPOCH_OFF, MMAP_PROTECT, MMAP_UNPROTECT, PAGE_SIZE};
use crate::time::now_ns;

/// The mappings of one mounted file system (`Fs`).
pub(crate) struct Mmaps {
    /// Held shared by every fault while it is resolved, exclusively by a
    /// snapshot while it write-protects the mappings (§3.3).
    faults: RwLock<()>,
    live: Mutex<Vec<Weak<Shared>>>,
    /// The replica pages of each inode with atomic mappings (`mmap_atomic`).
    replicas: Mutex<Vec<Weak<Replicas>>>,
    /// Held while a mapping is made (`Mapping::new`).
    making: Mutex<()>,
    /// Live mappings of both kinds: writers skip every mmap step while
    /// there are none.
    mapped: AtomicUsize,
    /// Atomic mappings find stores by faults, not the kernel's write
    /// tracking (`MountOptions::mmap_store_faults`).
    store_faults: bool,
}

impl Mmaps {
    /// The mappings of a mount; `store_faults` as the mount option says.
    pub(crate) fn new(store_faults: bool) -> Mmaps {
        Mmaps {
            store_faults,
            ..Mmaps::default()
        }
    }
}

impl Default for Mmaps {
    fn default() -> Self {
        Mmaps {
            store_faults: false,
            faults: RwLock::new(Rank::MmapFaults, ()),
            live: Mutex::new(Rank::MmapList, Vec::new()),
            replicas: Mutex::new(Rank::MmapList, Vec::new()),
            making: Mutex::new(Rank::MmapMaking, ()),
            mapped: AtomicUsize::new(0),
        }
    }
}

impl Mmaps {
    /// Whether any mapping exists.
    pub(crate) fn any(&self) -> bool {
        self.mapped.load(Ordering::Acquire) != 0
    }

    /// The replicas of inode `ino`, if it has atomic mappings.
    fn replicas_of(&self, ino: Ino) -> Option<Arc<Replicas>> {
        let list = self.replicas.lock();
        list.iter().filter_map(Weak::upgrade).find(|r| r.ino == ino)
    }

    /// The replicas of inode `ino`, new if it has none yet.
    fn replicas_for(&self, ino: Ino, cell: &Arc<Cell>) -> Result<Arc<Replicas>> {
        let mut list = self.replicas.lock();
        list.retain(|w| w.strong_count() > 0);
        if let Some(r) = list.iter().filter_map(Weak::upgrade).find(|r| r.ino == ino) {
            return Ok(r);
        }
        let r = Arc::new(Replicas::new(ino, cell.clone())?);
        list.push(Arc::downgrade(&r));
        Ok(r)
    }

    fn of_inode(&self, ino: Ino) -> Vec<Arc<Shared>> {
        let live = self.live.lock();
        live.iter().filter_map(Weak::upgrade).filter(|s| s.ino == ino).collect()
    }

    /// Holds faults back and write-protects every writable page of every
    /// mapping (§3.3, Fig. 3 a–c): the caller records the snapshot, then
    /// drops the guard, and the held faults copy on write.
    pub(crate) fn freeze(&self) -> RwLockWriteGuard<'_, ()> {
        let gate = self.faults.write();
        let all: Vec<Arc<Shared>> = self.live.lock().iter().filter_map(Weak::upgrade).collect();
        for s in all {
            s.write_protect(0..s.npages);
        }
        gate
    }
}

/// One mapping: the fault handler of its window.
pub(crate) struct Shared {
    ctx: Arc<Ctx>,
    mmaps: Arc<Mmaps>,
    cell: Arc<Cell>,
    ino: Ino,
    /// First file page mapped, and how many.
    pgoff: u64,
    npages: usize,
    /// Stores allowed (a writable mapping of a writable file system).
    writable: bool,
    state: Mutex<PageState>,
}

/// The window (None once unmapped), which of its pages are writable, and
/// the data page each window page maps (0: none, or zeros).
struct PageState {
    window: Option<Arc<Window>>,
    writable: BTreeSet<usize>,
    blocks: Vec<u64>,
    /// The page after the last store fault's run, and how many pages that
    /// fault wanted (write-ahead, `resolve`).
    next_store: usize,
    ahead: usize,
    /// Where `make_room` unmaps next.
    hand: Hand,
}

impl PageState {
    /// Unmaps pages of this mapping while the windows are crowded
    /// ([`Hand`]), never those of `keep`: their next access faults them
    /// back in. A writable page's bytes are the file's, and its unprotect
    /// entry stays: its next store only maps it again.
    fn make_room(&mut self, keep: Range<usize>) -> Result<()> {
        let Some(w) = self.window.clone() else {
            return Ok(());
        };
        let mut hand = std::mem::take(&mut self.hand);
        let n = self.blocks.len();
        let done = hand.make_room(&w, n, keep, |part| self.drop_pages(part));
        self.hand = hand;
        done
    }

    /// Unmaps window pages `pages`: not writable, mapping nothing, until
    /// they fault in again.
    fn drop_pages(&mut self, pages: Range<usize>) -> Result<()> {
        if let Some(w) = &self.window {
            w.zap(pages.start, pages.len())?;
        }
        self.writable.retain(|p| !pages.contains(p));
        self.blocks[pages].fill(0);
        Ok(())
    }
}

impl Fault for Shared {
    fn fault(&self, page: usize, write: bool) -> bool {
        match self.resolve(page, write) {
            Ok(()) => true,
            Err(e) => {
                // As a DAX fault that fails: the access kills the program
                // (SIGBUS there, SIGSEGV here).
                tracing::error!(ino = self.ino, page, write, error = %e, "mmap fault cannot be resolved");
                false
            }
        }
    }
}

impl Shared {
    /// A DAX mapping of `npages` pages of `cell` from file page `pgoff`,
    /// registered with `mmaps`.
    fn map(
        ctx: &Arc<Ctx>,
        mmaps: &Arc<Mmaps>,
        cell: Arc<Cell>,
        ino: Ino,
        (pgoff, npages): (u64, usize),
        writable: bool,
    ) -> Result<Arc<Shared>> {
        let src = ctx.data().map_source().ok_or(Error::NotSupported(
            "DAX mmap needs a region mapped from a file (devdax and in-memory regions have none)",
        ))?;
        let shared = Arc::new(Shared {
            ctx: ctx.clone(),
            mmaps: mmaps.clone(),
            cell,
            ino,
            pgoff,
            npages,
            writable,
            state: Mutex::new(
                Rank::MmapPage,
                PageState {
                    window: None,
                    writable: BTreeSet::new(),
                    blocks: vec![0; npages],
                    next_store: usize::MAX,
                    ahead: 0,
                    hand: Hand::default(),
                },
            ),
        });
        let window = Window::new(src, npages, shared.clone())?;
        shared.state.lock().window = Some(Arc::new(window));
        let mut live = mmaps.live.lock();
        live.retain(|w| w.strong_count() > 0);
        live.push(Arc::downgrade(&shared));
        Ok(shared)
    }

    fn file_page(&self, page: usize) -> u64 {
        self.pgoff + page as u64
    }

    fn resolve(&self, page: usize, write: bool) -> Result<()> {
        let ctx = &*self.ctx;
        let _held = self.mmaps.faults.read(); // §3.3: none completes during a freeze
        let _op = ctx.snapshots().epochs.enter();
        let mut st = self.cell.state.write();
        alive(&st)?;
        let pg = self.file_page(page);
        if pg * PAGE_SIZE >= st.meta.attr.size {
            return Err(Error::Invalid("access past the end of the mapped file"));
        }
        if !write {
            let map = file_map(&st)?;
            if map.lost().contains(pg) {
                // Lost, not a hole: the zero page would hide the loss.
                return Err(file::lost_page(pg));
            }
            let block = map.lookup(pg);
            let mut state = self.state.lock();
            // Fault-around, as the kernel's: the pages that follow in the
            // file and on the media (or a run of holes) come in the same
            // mapping, read-only; a page mapped writable is left alone.
            let last = mmap_atomic::fault_around_limit(self.npages, page, st.meta.attr.size, pg);
            let mut n = 1;
            while n < last && !state.writable.contains(&(page + n)) && !map.lost().contains(pg + n as u64) {
                let next = map.lookup(pg + n as u64);
                let follows = match (block, next) {
                    (Some(b), Some(x)) => x == b + n as u64 * PAGE_SIZE,
                    (None, None) => true,
                    _ => false,
                };
                if !follows {
                    break;
                }
                n += 1;
            }
            state.make_room(page..page + n)?;
            let window = state.window.as_ref().ok_or(Error::NotFound)?;
            match block {
                Some(block) => window.map(page, block, n, false)?,
                None => window.map_zero(page, n)?,
            }
            for i in 0..n {
                state.blocks[page + i] = block.map_or(0, |b| b + i as u64 * PAGE_SIZE);
            }
            return Ok(());
        }
        if !self.writable {
            return Err(Error::ReadOnly);
        }
        // Write-ahead: a store fault on the page after the last store
        // fault's run makes twice as many pages writable as that run did
        // (up to FAULT_AROUND); any other, its own page only. A program
        // storing through its pages in order faults once a run, not once
        // a page: each fault costs a signal and a commit.
        let (want, limit) = {
            let state = self.state.lock();
            let want = if state.next_store == page {
                (state.ahead * 2).clamp(1, FAULT_AROUND)
            } else {
                1
            };
            let room = mmap_atomic::fault_around_limit(self.npages, page, st.meta.attr.size, pg).min(want);
            (
                want,
                (1..room)
                    .find(|&i| state.writable.contains(&(page + i)))
                    .unwrap_or(room),
            )
        };
        let blocks = self.writable_run(&mut st, pg, limit)?;
        let mut state = self.state.lock();
        state.make_room(page..page + blocks.len())?;
        let PageState {
            window,
            writable,
            blocks: mapped,
            ..
        } = &mut *state;
        let window = window.as_ref().ok_or(Error::NotFound)?;
        // One call a sub-run: pages mapped read-only already are made
        // writable (cheaper than a remap), copies are mapped in.
        let mut i = 0;
        while i < blocks.len() {
            let same = mapped[page + i] == blocks[i];
            let mut j = i + 1;
            while j < blocks.len()
                && (mapped[page + j] == blocks[j]) == same
                && (same || blocks[j] == blocks[j - 1] + PAGE_SIZE)
            {
                j += 1;
            }
            if same {
                window.protect(page + i, j - i, true)?;
            } else {
                window.map(page + i, blocks[i], j - i, true)?;
            }
            i = j;
        }
        mapped[page..page + blocks.len()].copy_from_slice(&blocks);
        writable.extend(page..page + blocks.len());
        state.next_store = page + blocks.len();
        state.ahead = want;
        Ok(())
    }

    /// The data pages file pages `pg..` can be stored to now, one a page:
    /// `pg`'s and up to `limit - 1` more of the same kind (write-ahead,
    /// `resolve`). Either their own pages, each with its unprotect entry
    /// committed (module docs) and marked stale; or copies, when a
    /// snapshot holds them (copy-on-write), or for a hole (alone: filling
    /// holes ahead would allocate pages no store asked for).
    fn writable_run(&self, st: &mut InodeState, pg: u64, limit: usize) -> Result<Vec<u64>> {
        let ctx = &*self.ctx;
        let protecting = ctx.strips().enabled();
        let now = now_ns();
        // A page's data page, and whether a snapshot holds it.
        let class = |st: &InodeState, p: u64| -> Result<Option<(u64, bool)>> {
            match file_map(st)?.lookup_entry(p) {
                Some((block, entry)) => {
                    let birth = ctx.region().load_u64(entry + ENTRY_EPOCH_OFF)?;
                    Ok(Some((block, ctx.snapshots().sees(birth))))
                }
                None => Ok(None),
            }
        };
        let first = class(st, pg)?;
        let mut olds = vec![first.map(|(block, _)| block)];
        if let Some((_, held)) = first {
            while olds.len() < limit {
                match class(st, pg + olds.len() as u64)? {
                    Some((block, h)) if h == held => olds.push(Some(block)),
                    _ => break,
                }
            }
        }
        let run = pg..pg + olds.len() as u64;
        let unprotect = |p: u64| mmap_entry(ctx.epoch(), p, 1, MMAP_UNPROTECT);
        let blocks = match first {
            Some((_, false)) => {
                let fresh: Vec<u64> = run.clone().filter(|p| !st.meta.unprotected.contains_key(p)).collect();
                if protecting && !fresh.is_empty() {
                    // A store changes the file: mtime and ctime, as
                    // page_mkwrite's file_update_time.
                    let a = crate::inode::Attr {
                        mtime: now,
                        ctime: now,
                        ..st.attr()
                    };
                    let mut extra: Vec<_> = fresh.into_iter().map(unprotect).collect();
                    extra.push(setattr_entry(ctx.epoch(), &a));
                    file::commit_file(ctx, st, Budget::Normal, &extra)?; // caveat DAXor: durable before writable
                }
                olds.iter().flatten().copied().collect()
            }
            _ => {
                // Copy-on-write (§3.3), or a hole filled. Every other
                // mapping drops the old pages first; this one maps the
                // new pages over them (`resolve`), one remap instead of
                // two: its copies of the old pages are read-only (the
                // store faulted), and read the bytes the copies get until
                // then. A copy's source is sealed, so the snapshot keeps
                // it with whole checksums.
                for s in self.mmaps.of_inode(self.ino) {
                    if !std::ptr::eq(&*s, self) {
                        s.zap(run.clone())?;
                    }
                }
                for (p, old) in run.clone().zip(&olds) {
                    if let Some(old) = old.filter(|_| st.meta.unprotected.contains_key(&p)) {
                        ctx.strips().reseal(ctx.data(), old)?;
                    }
                }
                let extra = if protecting {
                    run.clone().map(unprotect).collect()
                } else {
                    Vec::new()
                };
                let new = file::materialize(ctx, st, (pg, olds.len() as u64), now, extra)?; // caveat DAXor: durable before writable
                for old in olds.iter().flatten() {
                    ctx.stale().remove(*old);
                }
                new
            }
        };
        if protecting {
            for &block in &blocks {
                ctx.stale().insert(block);
            }
        }
        Ok(blocks)
    }

    /// Unmaps file pages `range` (where this mapping has them): their next
    /// access faults in what the file holds then.
    fn zap(&self, range: Range<u64>) -> Result<()> {
        let Some(pages) = self.window_pages(&range) else {
            return Ok(());
        };
        self.state.lock().drop_pages(pages)
    }

    /// Makes this mapping's writable pages among window pages `pages`
    /// read-only: their next store faults. One mprotect a run of
    /// consecutive writable pages (the pages between may be unmapped, and
    /// must stay so).
    fn write_protect(&self, pages: Range<usize>) {
        let mut state = self.state.lock();
        let PageState { window, writable, .. } = &mut *state;
        let Some(w) = window else { return };
        let mut runs: Vec<Range<usize>> = Vec::new();
        for &p in writable.range(pages) {
            match runs.last_mut() {
                Some(r) if r.end == p => r.end += 1,
                _ => runs.push(p..p + 1),
            }
        }
        for run in runs {
            if let Err(e) = w.protect(run.start, run.len(), false) {
                tracing::error!(ino = self.ino, pages = ?run, error = %e, "mapped pages not write-protected");
                continue;
            }
            for p in run {
                writable.remove(&p);
            }
        }
    }

    /// The window pages that file pages `range` cover, if any.
    fn window_pages(&self, range: &Range<u64>) -> Option<Range<usize>> {
        let end = self.pgoff + self.npages as u64;
        let lo = range.start.max(self.pgoff);
        let hi = range.end.min(end);
        (lo < hi).then(|| (lo - self.pgoff) as usize..(hi - self.pgoff) as usize)
    }
}

/// Write-protects file pages `range` of inode `st` in every mapping and
/// reseals those a mapping left unprotected (their blocks trusted again).
/// Returns the span resealed. Called before any change to the pages
/// (write, truncate, fallocate), whose own entries then protect them, and
/// by [`Mapping::sync`] and unmapping, which commit `MMAP_PROTECT`.
pub(crate) fn seal(ctx: &Ctx, mmaps: &Mmaps, st: &InodeState, range: Range<u64>) -> Result<Option<Range<u64>>> {
    let dirty: Vec<u64> = st.meta.unprotected.range(range.clone()).map(|(&pg, _)| pg).collect();
    let (Some(&first), Some(&last)) = (dirty.first(), dirty.last()) else {
        return Ok(None);
    };
    for s in mmaps.of_inode(st.meta.attr.ino) {
        if let Some(pages) = s.window_pages(&range) {
            s.write_protect(pages);
        }
    }
    let map = file_map(st)?;
    for pg in dirty {
        if let Some(block) = map.lookup(pg) {
            ctx.strips().reseal(ctx.data(), block)?;
            ctx.stale().remove(block);
        }
    }
    Ok(Some(first..last + 1))
}

/// Before a change to file pages `range` of `st`: seals them (the change's
/// commit fences the resealed sums, R1).
pub(crate) fn changing(ctx: &Ctx, mmaps: &Mmaps, st: &InodeState, range: Range<u64>) -> Result<()> {
    if mmaps.any() {
        seal(ctx, mmaps, st, range)?;
    }
    Ok(())
}

/// After a change to file pages `range` of inode `ino`: every mapping
/// drops them, to fault in the new pages.
pub(crate) fn changed(mmaps: &Mmaps, ino: Ino, range: Range<u64>) -> Result<()> {
    if mmaps.any() {
        for s in mmaps.of_inode(ino) {
            s.zap(range.clone())?;
        }
    }
    Ok(())
}

/// After a call changed bytes `bytes` of `st` (write, truncate, hole
/// punching): its atomic mappings' loaded replicas follow
/// (`mmap_atomic::rewritten`).
pub(crate) fn rewritten(ctx: &Ctx, mmaps: &Mmaps, st: &InodeState, bytes: Range<u64>) -> Result<()> {
    if !mmaps.any() {
        return Ok(());
    }
    match mmaps.replicas_of(st.meta.attr.ino) {
        Some(r) => mmap_atomic::rewritten(ctx, &r, st, bytes),
        None => Ok(()),
    }
}

/// The `n` bytes a read of `st` at `off` found in `buf`, with the stores
/// its atomic mappings hold and have not synced laid over them
/// (`mmap_atomic::overlay`).
pub(crate) fn pending(mmaps: &Mmaps, st: &InodeState, off: u64, buf: &mut [u8]) -> Result<()> {
    if !mmaps.any() || buf.is_empty() {
        return Ok(());
    }
    match mmaps.replicas_of(st.meta.attr.ino) {
        Some(r) => mmap_atomic::overlay(&r, off, buf),
        None => Ok(()),
    }
}

/// Seals file pages `range` of `st` and commits that they are protected.
fn seal_committed(ctx: &Ctx, mmaps: &Mmaps, st: &mut InodeState, range: Range<u64>) -> Result<()> {
    if let Some(span) = seal(ctx, mmaps, st, range)? {
        let e = mmap_entry(ctx.epoch(), span.start, span.end - span.start, MMAP_PROTECT);
        // R1: the resealed sums are durable before the entry that trusts them.
        file::commit_file(ctx, st, Budget::Critical, &[e])?;
    }
    Ok(())
}

/// What a mapping's pages are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MapKind {
    /// DAX (Fortis §2, §3.3): the file's own persistent-memory pages.
    /// Stores change the file in place, durable once persisted
    /// ([`Mapping::persist`]); a crash may show some of them.
    #[default]
    Dax,
    /// Atomic (NOVA §4.5): DRAM replicas of the pages. Stores reach the
    /// file only at [`Mapping::sync`] (or unmapping), all of them in one
    /// commit: a crash shows the previous sync or this one, never a mix.
    Atomic,
}

/// The pages behind a mapping, of either kind.
enum Pages {
    Dax(Arc<Shared>),
    Atomic {
        view: Arc<View>,
        window: Arc<Window>,
        mmaps: Arc<Mmaps>,
    },
}

/// A file's pages mapped into this process (`Fs::mmap`, `Fs::mmap_atomic`).
/// Dropping it commits what it must and unmaps them (munmap).
pub struct Mapping<'fs> {
    pages: Pages,
    ino: Ino,
    /// Releases the open handle the mapping holds (`Fs::release_handle`).
    release: Box<dyn Fn(Ino) -> Result<()> + Send + Sync + 'fs>,
    closed: bool,
}

impl std::fmt::Debug for Mapping<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapping")
            .field("ino", &self.ino)
            .field("kind", &self.kind())
            .field("len", &self.len())
            .finish()
    }
}

impl<'fs> Mapping<'fs> {
    /// Maps `npages` pages of `cell` (inode `ino`) from file page `pgoff`;
    /// the caller holds an open handle on it, which the mapping releases.
    pub(crate) fn new(
        release: Box<dyn Fn(Ino) -> Result<()> + Send + Sync + 'fs>,
        (ctx, mmaps): (&Arc<Ctx>, &Arc<Mmaps>),
        (cell, ino): (Arc<Cell>, Ino),
        (pgoff, npages): (u64, usize),
        writable: bool,
        kind: MapKind,
    ) -> Result<Mapping<'fs>> {
        // One kind at a time per file: a DAX store reaches the file behind
        // the replicas' backs, and an msync would overwrite it. Checked
        // and registered under `making`.
        let _making = mmaps.making.lock();
        let other = match kind {
            MapKind::Dax => mmaps.replicas_of(ino).is_some(),
            MapKind::Atomic => !mmaps.of_inode(ino).is_empty(),
        };
        if other {
            return Err(Error::Busy("the file is mapped with the other kind of mmap"));
        }
        let pages = match kind {
            MapKind::Dax => Pages::Dax(Shared::map(ctx, mmaps, cell, ino, (pgoff, npages), writable)?),
            MapKind::Atomic => {
                let replicas = mmaps.replicas_for(ino, &cell)?;
                let track = !mmaps.store_faults;
                let (view, window) = View::new(ctx, replicas, (pgoff, npages), (writable, track))?;
                Pages::Atomic {
                    view,
                    window,
                    mmaps: mmaps.clone(),
                }
            }
        };
        mmaps.mapped.fetch_add(1, Ordering::AcqRel);
        Ok(Mapping {
            pages,
            ino,
            release,
            closed: false,
        })
    }

    /// Which kind of mapping this is.
    pub fn kind(&self) -> MapKind {
        match self.pages {
            Pages::Dax(_) => MapKind::Dax,
            Pages::Atomic { .. } => MapKind::Atomic,
        }
    }

    /// The first byte of the mapping: the program's own loads and stores
    /// go here (a page is mapped at its first access).
    pub fn as_ptr(&self) -> *mut u8 {
        self.window().map_or(std::ptr::null_mut(), |w| w.as_ptr())
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        let npages = match &self.pages {
            Pages::Dax(s) => s.npages,
            Pages::Atomic { view, .. } => view.npages,
        };
        npages * PAGE_SIZE as usize
    }

    /// Never empty: a mapping has at least one page.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Copies bytes at `off` of the mapping into `out`, as loads would.
    pub fn load(&self, off: usize, out: &mut [u8]) -> Result<()> {
        Ok(self.window()?.load(off, out)?)
    }

    /// Stores `bytes` at `off` of the mapping, as the program would: not
    /// durable until persisted ([`Mapping::persist`], DAX) or synced
    /// ([`Mapping::sync`], both kinds).
    pub fn store(&self, off: usize, bytes: &[u8]) -> Result<()> {
        Ok(self.window()?.store(off, bytes)?)
    }

    /// How many faults on this mapping have been resolved, loads' and
    /// stores': how its pages came in (a store fault may bring in a run).
    pub fn faults(&self) -> u64 {
        self.window().map_or(0, |w| w.faults())
    }

    /// The persist barrier of a DAX program: bytes `off..off + len` are
    /// flushed and fenced. An atomic mapping's stores are the file's only
    /// at [`Mapping::sync`]: nothing to do here.
    pub fn persist(&self, off: usize, len: usize) -> Result<()> {
        match &self.pages {
            Pages::Dax(_) => Ok(self.window()?.persist(off, len)?),
            Pages::Atomic { .. } => Ok(()),
        }
    }

    /// The window, without holding the page-state lock: a load or store
    /// through it may fault, and the fault takes that lock.
    fn window(&self) -> Result<Arc<Window>> {
        match &self.pages {
            Pages::Dax(s) => s.state.lock().window.clone().ok_or(Error::NotFound),
            Pages::Atomic { window, .. } => Ok(window.clone()),
        }
    }

    /// msync. DAX: the pages stored to since they were last sealed get
    /// their checksums and parity back (caveat DAXor), committed; their
    /// data is persistent when this returns. Atomic: every page stored to
    /// since the last sync is written to the file in one commit
    /// (`mmap_atomic`). Either way their next store faults again.
    pub fn sync(&self) -> Result<()> {
        match &self.pages {
            Pages::Dax(s) => {
                let _op = s.ctx.snapshots().epochs.enter();
                let mut st = s.cell.state.write();
                alive(&st)?;
                seal_committed(&s.ctx, &s.mmaps, &mut st, s.pgoff..s.pgoff + s.npages as u64)?;
                s.ctx.data().fence(); // msync: stores that needed no resealing are persistent too
                Ok(())
            }
            Pages::Atomic { view, mmaps, .. } => {
                let ctx = &*view.ctx;
                let _op = ctx.snapshots().epochs.enter();
                let mut st = view.replicas.cell.state.write();
                alive(&st)?;
                let before = |st: &InodeState, span| changing(ctx, mmaps, st, span);
                let after = |span| changed(mmaps, self.ino, span);
                view.commit(
                    &mut st,
                    DaxHooks {
                        before: &before,
                        after: &after,
                    },
                )
            }
        }
    }

    /// munmap, with its error: what [`Drop`] does, which can only log it.
    pub fn close(mut self) -> Result<()> {
        self.closed = true;
        self.unmap()
    }

    fn unmap(&self) -> Result<()> {
        let (synced, mmaps) = match &self.pages {
            Pages::Dax(s) => {
                let sealed = if s.writable { self.sync() } else { Ok(()) };
                let window = s.state.lock().window.take();
                drop(window); // unregistered from the fault service: no fault reaches `s` now
                (sealed, &s.mmaps)
            }
            Pages::Atomic { view, mmaps, .. } => {
                // A read-only mapping leaves the pages others stored to
                // for their own sync or unmap.
                let committed = if view.writable { self.sync() } else { Ok(()) };
                view.detach();
                (committed, mmaps)
            }
        };
        mmaps.mapped.fetch_sub(1, Ordering::AcqRel);
        let released = (self.release)(self.ino);
        synced.and(released)
    }
}

impl Drop for Mapping<'_> {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        if let Err(e) = self.unmap() {
            tracing::error!(ino = self.ino, error = %e, "unmapping failed");
        }
    }
}
