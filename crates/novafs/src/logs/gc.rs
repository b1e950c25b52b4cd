//! Log garbage collection (NOVA §4.6), run when an append would grow a log
//! ([`make_room`], before the commit that appends). Fast GC unlinks pages
//! whose entries are all dead; thorough GC then compacts the log when the
//! live state would fit in under half of it.
//!
//! Departure from the paper: thorough GC writes the inode's *current state*
//! (one setattr, one link change, one write entry per mapped run or one add
//! per name) rather than copying surviving entries, and switches head and
//! tail together in one journal transaction. Extended attributes are
//! rewritten as one entry per name; removals disappear. The result is never larger than
//! the copied entries, and hole, truncate and dentry-remove entries (which
//! fast GC must keep) disappear.

use std::sync::atomic::Ordering;

use pm::latency::{self, Part};

use crate::alloc::Budget;
use crate::commit::Ctx;
use crate::dir::{dentry, DentrySpec};
use crate::error::{Error, Result};
use crate::inode::{link_entry, lost_entry, mmap_entry, setattr_entry, Body, InodeState};
use crate::journal::Update;
use crate::layout::{
    ftype_of_mode, invalidated_word, EntryType, WriteEntry, ENTRY_EPOCH_OFF, INODE_HEAD_OFF, INODE_TAIL_OFF,
    MMAP_UNPROTECT,
};
use crate::log::{Entry, Log};
use crate::xattrmap;

/// Collects garbage in `st`'s log if appending `entries` would grow it
/// (NOVA §4.6: GC runs as logs grow). Thorough GC commits through the
/// journal, so this runs before the operation's own commit begins.
pub(crate) fn make_room(ctx: &Ctx, st: &mut InodeState, entries: &[Entry]) -> Result<()> {
    if !st.log.needs_growth(entries) {
        return Ok(());
    }
    let _span = latency::enter(Part::Gc);
    if !covered_by_snapshot(ctx, st)? {
        collect(ctx, st)?;
    } else {
        // Only the pages no snapshot may replay (`fast`), after the
        // cancelled adds no snapshot may see are invalidated.
        invalidate_deferred(ctx, st)?;
        fast(ctx, st)?;
    }
    Ok(())
}

/// Whether a snapshot may need entries of `st`'s log: some snapshot is at
/// least as new as its oldest entry. Such a log is never compacted (the
/// compacted entries would carry today's epoch); it loses only its dead
/// pages that no snapshot may replay (`Log::dead_pages`), so every entry
/// a snapshot replays stays (Fortis §3.2), and with the cancelled adds it
/// may see, their cancellers (`Log::kill_cancelled`).
fn covered_by_snapshot(ctx: &Ctx, st: &InodeState) -> Result<bool> {
    let head = st.log.head();
    if head == 0 || ctx.snapshots().newest().is_none() {
        return Ok(false);
    }
    Ok(ctx.snapshots().sees(ctx.region().load_u64(head + ENTRY_EPOCH_OFF)?))
}

fn collect(ctx: &Ctx, st: &mut InodeState) -> Result<()> {
    invalidate_deferred(ctx, st)?;
    fast(ctx, st)?;
    if worth_compacting(st, Patience::Third) {
        // Compaction writes the new log before it frees the old one: on a
        // full device the log grows instead, by the page the append needs.
        match thorough(ctx, st) {
            Err(Error::NoSpace) => {}
            r => r?,
        }
    }
    Ok(())
}

/// How long thorough GC lets a log's dead entries wait for fast GC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Patience {
    /// As a log grows: until its live entries fill under a third of it.
    Third,
    /// NOVA's own test (§4.6), for space wanted now ([`compact_for_space`]).
    Half,
}

/// For an operation that found the file system full (`Fs::writing`):
/// compacts `st`'s log if NOVA's half would have, where the third kept
/// it waiting for fast GC. A log a snapshot may replay is left alone, as
/// `make_room` leaves it.
pub(crate) fn compact_for_space(ctx: &Ctx, st: &mut InodeState) -> Result<()> {
    if st.dead || !worth_compacting(st, Patience::Half) || covered_by_snapshot(ctx, st)? {
        return Ok(());
    }
    let _span = latency::enter(Part::Gc);
    invalidate_deferred(ctx, st)?;
    thorough(ctx, st)
}

/// Thorough GC's test for `st` ([`compaction_due`]).
fn worth_compacting(st: &InodeState, patience: Patience) -> bool {
    pages_back(st, patience).is_some()
}

/// The pages compacting `st`'s log would give back, if thorough GC with
/// `patience` is due for it ([`compaction_due`]).
pub(crate) fn pages_back(st: &InodeState, patience: Patience) -> Option<u64> {
    let (_, entries) = st.log.live_ratio();
    compaction_due(st.meta.live_estimate(), entries, st.log.written_pages(), patience)
}

/// Thorough GC's test (NOVA §4.6: live entries under 50% of the log), in
/// whole pages as NOVA's code counts it: the live entries, at the log's
/// average entries per page, would fill fewer than half of the `pages`
/// before the tail page (the pages GC checks; it never frees the tail
/// page). A log is thus compacted only from four pages on for one page of
/// live entries: until then fast GC frees its older pages as their
/// entries die, with no copy. Counting entries instead (live under half
/// of them) compacted a two-page log at every growth and left fast GC
/// nothing (issue 28: 0 fast pages in the Table 3 run).
///
/// Departure from NOVA: as a log grows, its live entries must fill under
/// a third ([`Patience::Third`]), one page later for one live page. The
/// compacted page holds the entries that have lived longest (and a
/// directory's `..`), so with the half a log was compacted again before
/// the page after it could die: fast GC took 47% of the pages, against
/// about 90% with the third, and those need no copy (BENCHMARKS "NOVA's
/// own workload: fileserver"). The longer logs cost space. A full file
/// system gets it back on demand: an operation that finds no space first
/// compacts the logs the half would have, most pages back first, until
/// it has an eighth of the reserve (`Fs::writing`). Switching to the
/// half by free space alone (below 1/64 of the data area beyond the
/// reserve) left fast GC 47% at 95% full, and a lower switch ran out of
/// space after 7 minutes there.
/// Returns the pages a compaction would give back (the log's less its
/// live entries'), when it is due.
fn compaction_due(live: u64, entries: u64, pages: usize, patience: Patience) -> Option<u64> {
    let pages = pages as u64;
    if entries == 0 || pages < 2 {
        return None;
    }
    let live_pages = live.saturating_mul(pages).div_ceil(entries).max(1);
    let parts = match patience {
        Patience::Third => 3,
        Patience::Half => 2,
    };
    (live_pages * parts < pages - 1).then(|| pages - live_pages)
}

/// Invalidates in place the cancelled adds of directory `st` whose
/// invalidation waited for the snapshots that might see them
/// (`commit::Multi::cancel`) and that no live snapshot may see now (none
/// lies between the add's epoch and its cancellation): fast GC may be
/// about to drop their cancellers. The rest wait on (`Log::kill_cancelled`
/// keeps their cancellers' pages). Each is one 8-byte store of a flag;
/// the cancellers are durable, so the stores are idempotent (R5), and all
/// are durable before any page goes.
fn invalidate_deferred(ctx: &Ctx, st: &mut InodeState) -> Result<()> {
    let Body::Dir(dir) = &mut st.meta.body else {
        return Ok(());
    };
    let deferred = dir.take_deferred();
    if deferred.is_empty() {
        return Ok(());
    }
    let r = ctx.region();
    let mut waiting = Vec::new();
    let mut stored = false;
    for (entry, death) in deferred {
        let birth = r.load_u64(entry + ENTRY_EPOCH_OFF)?;
        if ctx.snapshots().any_in(birth..death) {
            waiting.push((entry, death));
            continue;
        }
        r.store_u64(entry, invalidated_word(r.load_u64(entry)?))?;
        r.flush(entry, 8)?;
        stored = true;
    }
    dir.defer(waiting);
    if stored {
        r.fence(); // R5: the flags are durable before fast GC unlinks a page.
    }
    Ok(())
}

/// Fast GC (NOVA §4.6, Figure 5a): unlinks every page before the tail page
/// whose entries are all dead, with one 8-byte pointer store each, then
/// frees them (R3: after the stores are durable).
fn fast(ctx: &Ctx, st: &mut InodeState) -> Result<()> {
    // A page is kept while a snapshot lies between its oldest entry's
    // birth and its newest death: that snapshot may replay it.
    let dead = st.log.dead_pages(|lives| ctx.snapshots().any_in(lives));
    if dead.is_empty() {
        return Ok(());
    }
    let unlinked = st.log.unlink_pages(ctx.region(), st.off, &dead)?;
    ctx.release_log(&unlinked, &unlinked.pages);
    ctx.gc().fast_pages.fetch_add(dead.len() as u64, Ordering::Relaxed);
    Ok(())
}

/// The entries of a compacted log describing `st` as it is now.
fn compact_entries(ctx: &Ctx, st: &InodeState) -> Vec<Entry> {
    let a = st.meta.attr;
    let mut out = Vec::new();
    match &st.meta.body {
        Body::File(map) => {
            for (pgoff, block, npages) in map.runs() {
                let e = WriteEntry {
                    pgoff,
                    block,
                    npages: npages as u32,
                    size: a.size,
                    mtime: a.mtime,
                    ..WriteEntry::default()
                };
                out.push(Entry::new(EntryType::Write, ctx.epoch(), &e));
            }
            // Pages still lost stay lost: a compacted log without their
            // entries would show them as holes, reading zeros.
            for r in map.lost().runs() {
                out.push(lost_entry(ctx.epoch(), r));
            }
        }
        Body::Dir(dir) => {
            let spec = |ino, seq, ftype| DentrySpec {
                ino,
                seq,
                ftype,
                dir_nlink: a.nlink,
                dir_mtime: a.mtime,
            };
            out.push(dentry(
                ctx.epoch(),
                true,
                b"..",
                &spec(dir.parent(), 0, ftype_of_mode(libc::S_IFDIR)),
            ));
            for (name, d) in dir.iter() {
                out.push(dentry(ctx.epoch(), true, name, &spec(d.ino, d.seq, d.ftype)));
            }
        }
        Body::Special => {}
    }
    // Pages still mapped writable stay unprotected (caveat DAXor).
    for &pg in st.meta.unprotected.keys() {
        out.push(mmap_entry(ctx.epoch(), pg, 1, MMAP_UNPROTECT));
    }
    // Values in pages keep their pages: only the entries are rewritten.
    for (name, value) in st.meta.xattrs.iter() {
        out.push(xattrmap::entry(ctx.epoch(), name, Some(value), a.ctime));
    }
    out.push(link_entry(ctx.epoch(), a.nlink, a.ctime));
    out.push(setattr_entry(ctx.epoch(), &a));
    out
}

/// Thorough GC (NOVA §4.6, Figure 5b): write the compacted log, switch head
/// and tail atomically, free the old log (R3), rebuild the DRAM view.
pub(crate) fn thorough(ctx: &Ctx, st: &mut InodeState) -> Result<()> {
    let entries = compact_entries(ctx, st);
    let mut fresh = Log::default();
    let p = fresh.append(ctx.region(), ctx.alloc(), Budget::Critical, &entries)?;
    let head = p.new_head().unwrap_or(fresh.head());
    let switch = [
        Update::word(st.off + INODE_HEAD_OFF, head),
        Update::word(st.off + INODE_TAIL_OFF, p.tail()),
    ];
    ctx.region().fence(); // R1: the new log is persistent before it is committed.
                          // A failed switch drops `p`, which gives the new log's pages back.
    let durable = ctx.journal().commit(ctx.region(), &switch)?;
    p.switched(&durable); // R2: the switch reaches the new log's pages.
    let old_pages = st.log.pages().len() as u64;
    let rec = ctx.live_record(st.off, st.meta.attr.ino)?;
    let rebuilt = InodeState::load(ctx.region(), ctx.bounds(), st.off, &rec)?;
    ctx.release_log(&durable, &st.log.page_extents()); // R3: the switch is durable.
    st.log = rebuilt.log;
    st.meta = rebuilt.meta;
    ctx.gc().thorough_runs.fetch_add(1, Ordering::Relaxed);
    ctx.gc()
        .thorough_pages
        .fetch_add(old_pages.saturating_sub(st.log.pages().len() as u64), Ordering::Relaxed);
    Ok(())
}
