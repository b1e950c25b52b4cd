//! Atomic mmap (NOVA §4.5): a mapping whose stores reach the file only at
//! msync, all of them at once, so that a crash shows the file as of the
//! previous msync or of this one, never a mix.
//!
//! The program stores to *replica* pages, not to the file's pages. NOVA
//! allocates them from NVMM; here they are DRAM, pages of one memory file
//! per inode (`memfd`) that every atomic mapping of the inode maps shared,
//! so that two mappings of a file see each other's stores as the page
//! cache would let them. DRAM because nothing would survive in a replica
//! anyway: until msync commits them its bytes are not the file's, and a
//! crash drops them either way; DRAM loads and stores are cheaper than
//! PM's, and the replicas take no space from the file system.
//!
//! - A page is *loaded* at its first access: its file bytes (zeros past
//!   the end of the file) copied into the replica, then mapped read-only
//!   (a load fault brings the unmapped pages after it along, up to
//!   [`FAULT_AROUND`]).
//! - Which pages the program stored to (*dirty* pages), two ways:
//!   - *write tracking*, where the kernel has it (Linux 6.7): a writable
//!     mapping's window maps every page writable and the kernel records
//!     each page's first store itself (`pm::Window::tracking`: a
//!     userfaultfd in asynchronous write-protect mode, no fault of ours,
//!     about 1 µs); a look (`PAGEMAP_SCAN`) lists the pages stored to and
//!     records again from there ([`ReplicaState::sweep`]);
//!   - *store faults*, elsewhere or with `MountOptions::mmap_store_faults`:
//!     pages are mapped read-only, a store faults (a signal's round trip,
//!     about 5 µs on the test host) and the page becomes dirty and
//!     writable in the mapping that stored.
//! - msync ([`commit`]) copies the dirty pages as of one moment, so that
//!   the commit holds a prefix of every thread's stores: store-fault
//!   pages are write-protected first (a store waits in its fault until
//!   the commit is done); tracked pages are looked at, copied, and looked
//!   at again, and a copy no store overlapped is taken (stores that keep
//!   overlapping have the range held read-only instead). The copy goes to
//!   fresh data pages with non-temporal stores, committed with one tail
//!   store ([`file::write_pages`]: copy-on-write, as a write(2) of the
//!   same pages). Unmapping commits as msync does.
//! - read(2) returns the bytes of dirty pages ([`overlay`]): the stores
//!   are visible at once, as through a page cache, and durable only at
//!   msync.
//! - A change to the file by a call (write, truncate, fallocate) while a
//!   page is loaded: a clean replica is dropped (the next access loads the
//!   new bytes), a dirty one gets the changed bytes and keeps the rest of
//!   its pending stores, as a page-cache page would ([`rewritten`]).
//!
//! The replicas hold no data page of the file system, so snapshots, GC
//! and scrub never meet them; a snapshot holds what the last msync
//! committed.
//!
//! Lock order: the epoch gate → the inode's lock → the replicas' state
//! (`Rank::MmapReplica`) → a DAX mapping's page state. A fault takes the
//! inode's lock shared.

use std::collections::BTreeSet;
use std::fs::File;
use std::ops::{Add, Range};
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use pm::{Fault, MapSource, PmError, Window};

use crate::cache::{alive, Cell};
use crate::commit::Ctx;
use crate::error::{Error, Result};
use crate::file;
use crate::inode::{Ino, InodeState};
use crate::layout::PAGE_SIZE;
use crate::lock::{Mutex, Rank};

const PS: usize = PAGE_SIZE as usize;

/// Pages a read fault maps at most, of either kind of mapping (the
/// kernel's fault-around: 64 KiB): a program reading through a mapping
/// takes one fault per run instead of one per page.
pub(crate) const FAULT_AROUND: usize = 16;

/// How many pages a read fault on window page `page` (file page `pg`, below
/// the end of a file of `size` bytes) of an `npages`-page window may map:
/// up to the window's end, [`FAULT_AROUND`] and the page holding the last
/// byte, whichever comes first. Both kinds of mapping fault around so.
pub(crate) fn fault_around_limit(npages: usize, page: usize, size: u64, pg: u64) -> usize {
    let to_eof = size.div_ceil(PAGE_SIZE) - pg;
    (npages - page).min(FAULT_AROUND).min(to_eof as usize)
}

/// A clock hand over one mapping's pages, for either kind of mapping to
/// unmap some while the process's windows hold too many kernel mappings
/// (`Window::crowded`: a scattered file costs one a page, and past the
/// kernel's limit every mmap of the process fails).
#[derive(Debug, Default)]
pub(crate) struct Hand(usize);

impl Hand {
    /// Pages dropped at a time.
    const BATCH: usize = 64;
    /// Batches one fault drops at most: the work a fault adds stays small
    /// when what crowds the windows is another's.
    const MOST: usize = 16;

    /// While `w` is crowded, calls `drop_pages` on the next batch of its
    /// `n` pages from the hand on, leaving out `keep` (the pages a fault is
    /// about to map) and the page on either side: one access may straddle
    /// two pages, and dropping the one it faulted on first would make it
    /// fault there again, for ever.
    pub(crate) fn make_room(
        &mut self,
        w: &Window,
        n: usize,
        keep: Range<usize>,
        mut drop_pages: impl FnMut(Range<usize>) -> Result<()>,
    ) -> Result<()> {
        let keep = keep.start.saturating_sub(1)..keep.end + 1;
        for _ in 0..Self::MOST.min(n.div_ceil(Self::BATCH)) {
            if !w.crowded() {
                break;
            }
            let batch = self.0..(self.0 + Self::BATCH).min(n);
            self.0 = if batch.end == n { 0 } else { batch.end };
            for part in [
                batch.start..batch.end.min(keep.start),
                batch.start.max(keep.end)..batch.end,
            ] {
                if !part.is_empty() {
                    drop_pages(part)?;
                }
            }
        }
        Ok(())
    }
}

/// The replica pages of one inode, shared by its atomic mappings.
pub(crate) struct Replicas {
    pub(crate) ino: Ino,
    pub(crate) cell: Arc<Cell>,
    file: File,
    state: Mutex<ReplicaState>,
}

/// Which pages are loaded, which dirty, and how each mapping maps them.
struct ReplicaState {
    loaded: BTreeSet<u64>,
    dirty: BTreeSet<u64>,
    views: Vec<ViewPages>,
}

/// One mapping's window and the protection of each of its pages.
struct ViewPages {
    id: u64,
    window: Arc<Window>,
    pgoff: u64,
    prot: Vec<Prot>,
    hand: Hand,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Prot {
    None,
    Read,
    Write,
}

fn replica_io(source: std::io::Error) -> Error {
    Error::Pm(PmError::Io {
        path: "atomic mapping's replica pages".into(),
        source,
    })
}

impl Replicas {
    pub(crate) fn new(ino: Ino, cell: Arc<Cell>) -> Result<Replicas> {
        let file = pm::anonymous_file(c"novafs-atomic-mmap").map_err(replica_io)?;
        Ok(Replicas {
            ino,
            cell,
            file,
            state: Mutex::new(
                Rank::MmapReplica,
                ReplicaState {
                    loaded: BTreeSet::new(),
                    dirty: BTreeSet::new(),
                    views: Vec::new(),
                },
            ),
        })
    }

    /// Copies file pages `pages` (zeros past the end) into their replicas.
    fn load(&self, ctx: &Ctx, st: &InodeState, pages: Range<u64>) -> Result<()> {
        let mut buf = vec![0u8; (pages.end - pages.start) as usize * PS];
        self.read_file(ctx, st, pages.start * PAGE_SIZE, &mut buf)?;
        self.file
            .write_all_at(&buf, pages.start * PAGE_SIZE)
            .map_err(replica_io)
    }

    /// The file's bytes at `off` into `buf`, zeros past its end.
    fn read_file(&self, ctx: &Ctx, st: &InodeState, off: u64, buf: &mut [u8]) -> Result<()> {
        let n = file::read(ctx, st, off, buf)?;
        buf[n..].fill(0);
        Ok(())
    }
}

impl ReplicaState {
    /// Sets every mapping's protection of the file pages of `runs` to `to`
    /// where they are mapped at all (`None` unmaps them everywhere): one
    /// mprotect or unmapping per run of pages that change.
    fn protect_everywhere(&mut self, runs: &[Range<u64>], to: Prot) -> Result<()> {
        self.set_pages(runs, |_| true, |p| p != Prot::None && p != to, to)
            .map(drop)
    }

    /// Maps as `to` the pages of file pages `runs` whose protection
    /// `want`s, in the windows `views` takes: one call a run of them.
    /// Whether there was any.
    fn set_pages(
        &mut self,
        runs: &[Range<u64>],
        views: impl Fn(&ViewPages) -> bool,
        want: impl Fn(Prot) -> bool + Copy,
        to: Prot,
    ) -> Result<bool> {
        let mut any = false;
        for v in self.views.iter_mut().filter(|v| views(v)) {
            for range in runs {
                let Some(pages) = v.pages_of(range) else {
                    continue;
                };
                for run in v.runs(pages, want) {
                    v.set(run, to)?;
                    any = true;
                }
            }
        }
        Ok(any)
    }

    /// Adds to `dirty` the pages of file pages `range` stored to through
    /// tracking windows since the last look (module docs); a store after
    /// it shows next time.
    fn sweep(&mut self, range: Range<u64>) -> Result<usize> {
        self.look(range, false)
    }

    /// [`Self::sweep`] of the pages not dirty yet: what a read needs. A
    /// dirty page stays so until a commit, whose own sweeps take the
    /// stores this one leaves.
    fn sweep_clean(&mut self, range: Range<u64>) -> Result<usize> {
        self.look(range, true)
    }

    fn look(&mut self, range: Range<u64>, skip_dirty: bool) -> Result<usize> {
        let ReplicaState { views, dirty, .. } = self;
        let mut found = 0;
        for v in views.iter().filter(|v| v.window.tracks()) {
            let Some(pages) = v.pages_of(&range) else {
                continue;
            };
            // Mapped pages only: a look at an unmapped one fails.
            let runs = runs_of(
                pages.filter(|&p| v.prot[p] != Prot::None && !(skip_dirty && dirty.contains(&(v.pgoff + p as u64)))),
            );
            for run in runs {
                let written = v.window.written(run.start, run.len())?;
                found += written.len();
                dirty.extend(written.into_iter().map(|p| v.pgoff + p as u64));
            }
        }
        Ok(found)
    }

    /// Unmaps pages of view `id` while the windows are crowded ([`Hand`]),
    /// never those of `keep`. A tracked page is made read-only and looked
    /// at first, so that no store to it goes unrecorded; the bytes stay in
    /// the replica, and a page stored to stays dirty.
    fn make_room(&mut self, id: u64, keep: Range<usize>) -> Result<()> {
        let Some(i) = self.views.iter().position(|v| v.id == id) else {
            return Ok(());
        };
        let (mut hand, window, n) = {
            let v = &mut self.views[i];
            (std::mem::take(&mut v.hand), v.window.clone(), v.prot.len())
        };
        let done = hand.make_room(&window, n, keep, |part| {
            let v = &mut self.views[i];
            let files = v.pgoff + part.start as u64..v.pgoff + part.end as u64;
            if window.tracks() {
                for run in v.runs(part.clone(), |p| p == Prot::Write) {
                    v.set(run, Prot::Read)?;
                }
                self.sweep(files)?;
            }
            let v = &mut self.views[i];
            for run in v.runs(part, |p| p != Prot::None) {
                v.set(run, Prot::None)?;
            }
            Ok(())
        });
        self.views[i].hand = hand;
        done
    }

    /// Holds back the stores of tracking windows to the pages of file
    /// pages `range` that were stored to, and marks those pages dirty: a
    /// look at the written pages, then each of them made read-only, again
    /// until a look finds no page written that is still writable. Every
    /// store before one that is held is then held too, whatever the order
    /// of the program's stores (a page stored to before another was made
    /// read-only shows in the next look); a store to a page not held comes
    /// after all of them, and waits for the next msync. Rounds are few
    /// (one page set a look, unless threads keep storing to new pages);
    /// past `HOLD_ROUNDS`, the whole range is held.
    fn hold_tracked(&mut self, range: Range<u64>) -> Result<()> {
        for _ in 0..HOLD_ROUNDS {
            self.sweep(range.clone())?;
            let dirty: Vec<u64> = self.dirty.range(range.clone()).copied().collect();
            if !self.set_tracked(&runs_of(dirty.iter().copied()), Prot::Write, Prot::Read)? {
                return Ok(());
            }
        }
        self.set_tracked(std::slice::from_ref(&range), Prot::Write, Prot::Read)?;
        self.sweep(range).map(drop)
    }

    /// In every tracking window, maps the pages of file pages `runs` that
    /// are `from` as `to`; whether any was. Write → Read holds stores
    /// back while a commit or a change looks at the replicas, Read →
    /// Write lets them go.
    fn set_tracked(&mut self, runs: &[Range<u64>], from: Prot, to: Prot) -> Result<bool> {
        self.set_pages(runs, |v| v.window.tracks(), |p| p == from, to)
    }
}

/// Looks at the written pages before [`ReplicaState::hold_tracked`] holds
/// the whole range back.
const HOLD_ROUNDS: usize = 4;

impl ViewPages {
    /// The window pages that file pages `range` cover, if any.
    fn pages_of(&self, range: &Range<u64>) -> Option<Range<usize>> {
        let end = self.pgoff + self.prot.len() as u64;
        let (lo, hi) = (range.start.max(self.pgoff), range.end.min(end));
        (lo < hi).then(|| (lo - self.pgoff) as usize..(hi - self.pgoff) as usize)
    }

    /// The runs of window pages among `pages` whose protection `want`s.
    fn runs(&self, pages: Range<usize>, want: impl Fn(Prot) -> bool) -> Vec<Range<usize>> {
        runs_of(pages.filter(|&p| want(self.prot[p])))
    }

    /// Maps window pages `pages` as `to`, which they are not (unmaps them
    /// for `None`).
    fn set(&mut self, pages: Range<usize>, to: Prot) -> Result<()> {
        match to {
            Prot::None => self.window.zap(pages.start, pages.len())?,
            _ => self.window.protect(pages.start, pages.len(), to == Prot::Write)?,
        }
        self.prot[pages].fill(to);
        Ok(())
    }
}

/// Ascending distinct pages (file or window pages) as runs of
/// consecutive ones.
fn runs_of<T>(pages: impl IntoIterator<Item = T>) -> Vec<Range<T>>
where
    T: Copy + PartialEq + Add<Output = T> + From<u8>,
{
    let mut runs: Vec<Range<T>> = Vec::new();
    for pg in pages {
        let next = pg + T::from(1);
        match runs.last_mut() {
            Some(r) if r.end == pg => r.end = next,
            _ => runs.push(pg..next),
        }
    }
    runs
}

/// One atomic mapping: the fault handler of its window.
pub(crate) struct View {
    pub(crate) ctx: Arc<Ctx>,
    pub(crate) replicas: Arc<Replicas>,
    id: u64,
    pgoff: u64,
    pub(crate) npages: usize,
    pub(crate) writable: bool,
}

static NEXT_VIEW: AtomicU64 = AtomicU64::new(1);

/// What an msync commits: the dirty pages, those below the end of the
/// file, and their bytes.
struct Pending {
    dirty: Vec<u64>,
    live: Vec<u64>,
    bytes: Vec<u8>,
}

impl View {
    /// Maps `npages` pages from file page `pgoff` through `replicas`.
    pub(crate) fn new(
        ctx: &Arc<Ctx>,
        replicas: Arc<Replicas>,
        (pgoff, npages): (u64, usize),
        (writable, track): (bool, bool),
    ) -> Result<(Arc<View>, Arc<Window>)> {
        let end = (pgoff + npages as u64) * PAGE_SIZE;
        if replicas.file.metadata().map_err(replica_io)?.len() < end {
            replicas.file.set_len(end).map_err(replica_io)?;
        }
        let view = Arc::new(View {
            ctx: ctx.clone(),
            replicas: replicas.clone(),
            id: NEXT_VIEW.fetch_add(1, Ordering::Relaxed),
            pgoff,
            npages,
            writable,
        });
        let src = MapSource {
            fd: replicas.file.as_fd(),
            sync: false,
        };
        // A writable mapping's stores are recorded by the kernel where it
        // can (module docs), else each page's first store faults.
        let tracked = match track && writable {
            true => Window::tracking(src, npages, view.clone())
                .inspect_err(|e| tracing::debug!(error = %e, "no write tracking: stores fault"))
                .ok(),
            false => None,
        };
        let window = match tracked {
            Some(w) => Arc::new(w),
            None => Arc::new(Window::new(src, npages, view.clone())?),
        };
        replicas.state.lock().views.push(ViewPages {
            id: view.id,
            window: window.clone(),
            pgoff,
            prot: vec![Prot::None; npages],
            hand: Hand::default(),
        });
        Ok((view, window))
    }

    fn resolve(&self, page: usize, write: bool) -> Result<()> {
        if write && !self.writable {
            return Err(Error::ReadOnly);
        }
        let r = &*self.replicas;
        let st = r.cell.state.read();
        alive(&st)?;
        let pg = self.pgoff + page as u64;
        if pg * PAGE_SIZE >= st.meta.attr.size {
            return Err(Error::Invalid("access past the end of the mapped file"));
        }
        let mut state = r.state.lock();
        state.make_room(self.id, page..(page + FAULT_AROUND).min(self.npages))?;
        let ReplicaState {
            loaded, dirty, views, ..
        } = &mut *state;
        let v = views.iter_mut().find(|v| v.id == self.id).ok_or(Error::NotFound)?;
        // A store maps its own page; a load, the run of unmapped pages
        // from it (fault-around), loading those no replica holds yet.
        let n = if write {
            1
        } else {
            let last = fault_around_limit(self.npages, page, st.meta.attr.size, pg);
            (1..last).find(|&i| v.prot[page + i] != Prot::None).unwrap_or(last)
        };
        let run: Vec<u64> = (pg..pg + n as u64).filter(|p| !loaded.contains(p)).collect();
        for missing in runs_of(run.iter().copied()) {
            r.load(&self.ctx, &st, missing)?;
        }
        loaded.extend(run);
        if write {
            dirty.insert(pg);
        }
        // A tracking window maps every page writable: the kernel records
        // the stores.
        let to = if write || v.window.tracks() {
            Prot::Write
        } else {
            Prot::Read
        };
        match v.prot[page] {
            Prot::None => v.window.map(page, pg * PAGE_SIZE, n, to == Prot::Write)?,
            _ => v.window.protect(page, 1, to == Prot::Write)?,
        }
        v.prot[page..page + n].fill(to);
        Ok(())
    }

    /// msync, under the inode's lock: commits the dirty pages this mapping
    /// covers in one commit (module docs); their next store faults again.
    /// `dax` keeps the file's DAX mappings right around the write.
    pub(crate) fn commit(&self, st: &mut InodeState, dax: DaxHooks<'_>) -> Result<()> {
        let r = &*self.replicas;
        let mut state = r.state.lock();
        let range = self.pgoff..self.pgoff + self.npages as u64;
        let mut held = false;
        let committed = self
            .stable_copy(st, &mut state, range.clone(), &mut held)
            .and_then(|copy| self.commit_copy(st, &mut state, copy, dax));
        if held {
            state.set_tracked(&[range], Prot::Read, Prot::Write)?;
        }
        committed
    }

    /// The dirty pages of file pages `range` and their bytes as of one
    /// moment, so that the commit holds a prefix of every thread's stores.
    /// A faulting window's dirty pages are made read-only before the copy
    /// (a store to one waits in its fault until the commit is done). A
    /// tracking window's pages are looked at, copied, and looked at again:
    /// a copy no store overlapped is one moment's, and costs no mprotect;
    /// when stores keep overlapping (other threads storing meanwhile), the
    /// range is held back read-only (`held`) and copied once more.
    fn stable_copy(
        &self,
        st: &InodeState,
        state: &mut ReplicaState,
        range: Range<u64>,
        held: &mut bool,
    ) -> Result<Pending> {
        for _ in 0..HOLD_ROUNDS {
            state.sweep(range.clone())?;
            let copy = self.copy_dirty(st, state, range.clone())?;
            if state.sweep(range.clone())? == 0 {
                return Ok(copy);
            }
        }
        state.set_tracked(std::slice::from_ref(&range), Prot::Write, Prot::Read)?;
        *held = true;
        state.sweep(range.clone())?;
        self.copy_dirty(st, state, range)
    }

    /// The dirty pages of `range` and their bytes now, zeros past the end
    /// of the file; faulting windows' copies of them read-only first.
    fn copy_dirty(&self, st: &InodeState, state: &mut ReplicaState, range: Range<u64>) -> Result<Pending> {
        let dirty: Vec<u64> = state.dirty.range(range).copied().collect();
        state.set_pages(
            &runs_of(dirty.iter().copied()),
            |v| !v.window.tracks(),
            |p| p == Prot::Write,
            Prot::Read,
        )?;
        // A page wholly past the end was truncated since: its stores go,
        // as stores past EOF do (`rewritten` drops such pages already).
        let size = st.meta.attr.size;
        let live: Vec<u64> = dirty.iter().copied().filter(|&pg| pg * PAGE_SIZE < size).collect();
        let mut bytes = vec![0u8; live.len() * PS];
        let mut at = 0;
        for run in runs_of(live.iter().copied()) {
            let len = (run.end - run.start) as usize * PS;
            self.replicas
                .file
                .read_exact_at(&mut bytes[at..at + len], run.start * PAGE_SIZE)
                .map_err(replica_io)?;
            at += len;
        }
        if let Some(&end_pg) = live.last() {
            // Bytes past the end of the file stay zeros on the media.
            let keep = (size - end_pg * PAGE_SIZE).min(PAGE_SIZE) as usize;
            bytes[(live.len() - 1) * PS + keep..].fill(0);
        }
        Ok(Pending { dirty, live, bytes })
    }

    /// Commits `copy` in one write of its pages; they are clean after.
    fn commit_copy(
        &self,
        st: &mut InodeState,
        state: &mut ReplicaState,
        copy: Pending,
        dax: DaxHooks<'_>,
    ) -> Result<()> {
        let Pending { dirty, live, bytes } = copy;
        let (Some(&first), Some(&last)) = (dirty.first(), dirty.last()) else {
            return Ok(());
        };
        let pages: Vec<(u64, &[u8])> = live.iter().copied().zip(bytes.chunks(PS)).collect();
        let span = first..last + 1;
        (dax.before)(st, span.clone())?;
        file::write_pages(&self.ctx, st, &pages)?;
        (dax.after)(span)?;
        for pg in dirty {
            state.dirty.remove(&pg);
        }
        Ok(())
    }

    /// munmap, after its commit: this mapping's window goes.
    pub(crate) fn detach(&self) {
        let mut state = self.replicas.state.lock();
        state.views.retain(|v| v.id != self.id);
        if state.views.is_empty() {
            // The last mapping: stores nobody committed go with it.
            state.loaded.clear();
            state.dirty.clear();
        }
    }
}

/// What an msync does for the file's DAX mappings around its write, as a
/// write(2) does (`mmap::changing`, `mmap::changed`).
pub(crate) struct DaxHooks<'a> {
    pub(crate) before: &'a dyn Fn(&InodeState, Range<u64>) -> Result<()>,
    pub(crate) after: &'a dyn Fn(Range<u64>) -> Result<()>,
}

impl Fault for View {
    fn fault(&self, page: usize, write: bool) -> bool {
        match self.resolve(page, write) {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(ino = self.replicas.ino, page, write, error = %e, "atomic mmap fault cannot be resolved");
                false
            }
        }
    }
}

/// What a read of `buf.len()` bytes at `off` returns where atomic mappings
/// hold stores not yet synced: their bytes, as a page cache's dirty pages
/// would be read (module docs).
pub(crate) fn overlay(r: &Replicas, off: u64, buf: &mut [u8]) -> Result<()> {
    let end = off + buf.len() as u64;
    let mut state = r.state.lock();
    let pages = off / PAGE_SIZE..end.div_ceil(PAGE_SIZE);
    // A look costs a system call (most of a 4 KiB read's time); pages
    // already dirty are read from their replicas whatever it finds.
    state.sweep_clean(pages.clone())?;
    for &pg in state.dirty.range(pages) {
        let lo = off.max(pg * PAGE_SIZE);
        let hi = end.min((pg + 1) * PAGE_SIZE);
        let into = &mut buf[(lo - off) as usize..(hi - off) as usize];
        r.file.read_exact_at(into, lo).map_err(replica_io)?;
    }
    Ok(())
}

/// After a call changed bytes `bytes` of inode `st` (write, truncate,
/// fallocate; committed, its lock still held): loaded replicas of those
/// pages follow (module docs). Pages now wholly past the end of the file
/// are dropped, pending stores and all.
pub(crate) fn rewritten(ctx: &Ctx, r: &Replicas, st: &InodeState, bytes: Range<u64>) -> Result<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    let mut state = r.state.lock();
    let pages = bytes.start / PAGE_SIZE..bytes.end.div_ceil(PAGE_SIZE);
    // As in `View::commit`: no tracked store lands between the look for
    // them and the replicas' change.
    let followed = state
        .hold_tracked(pages.clone())
        .and_then(|()| follow(ctx, r, st, &mut state, bytes));
    state.set_tracked(&[pages], Prot::Read, Prot::Write)?;
    followed
}

/// [`rewritten`], tracked stores held back.
fn follow(ctx: &Ctx, r: &Replicas, st: &InodeState, state: &mut ReplicaState, bytes: Range<u64>) -> Result<()> {
    let size = st.meta.attr.size;
    let pages = bytes.start / PAGE_SIZE..bytes.end.div_ceil(PAGE_SIZE);
    let loaded: Vec<u64> = state.loaded.range(pages).copied().collect();
    let mut unload = Vec::new();
    for pg in loaded {
        let start = pg * PAGE_SIZE;
        if start < size && state.dirty.contains(&pg) {
            let lo = bytes.start.max(start);
            let hi = bytes.end.min(start + PAGE_SIZE);
            let mut buf = vec![0u8; (hi - lo) as usize];
            r.read_file(ctx, st, lo, &mut buf)?;
            r.file.write_all_at(&buf, lo).map_err(replica_io)?;
        } else {
            unload.push(pg);
        }
    }
    state.protect_everywhere(&runs_of(unload.iter().copied()), Prot::None)?;
    for pg in unload {
        state.loaded.remove(&pg);
        state.dirty.remove(&pg);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_around_stops_at_the_window_end_the_cap_or_the_last_page() {
        let big = 1 << 40;
        assert_eq!(fault_around_limit(100, 10, big, 10), FAULT_AROUND);
        assert_eq!(fault_around_limit(100, 97, big, 97), 3, "the window's end");
        // A partial last page counts: bytes 0..=2*PS reach into page 2.
        assert_eq!(fault_around_limit(100, 0, 2 * PAGE_SIZE + 1, 0), 3);
        assert_eq!(fault_around_limit(100, 5, 8 * PAGE_SIZE, 7), 1, "the last page alone");
        // A window from file page 4: window page 0 is file page 4.
        assert_eq!(fault_around_limit(3, 0, 10 * PAGE_SIZE, 4), 3);
    }

    #[test]
    fn runs_of_joins_consecutive_pages_only() {
        assert_eq!(runs_of(Vec::<u64>::new()), vec![]);
        assert_eq!(runs_of([3u64, 4, 5, 7, 9, 10]), vec![3..6, 7..8, 9..11]);
        assert_eq!(runs_of((0usize..6).filter(|p| p % 3 != 2)), vec![0..2, 3..5]);
    }
}
