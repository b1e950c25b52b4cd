//! File data (NOVA §4.4): copy-on-write pages described by write entries,
//! and the DRAM index from file page to data page. A write allocates new
//! pages, fills them with non-temporal stores, appends one write entry per
//! contiguous run and commits them all with one tail store, so any write is
//! atomic and durable when it returns; the old pages are freed afterwards
//! (R3).
//!
//! Invariant: bytes of a mapped page past the end of the file are zero, so
//! extending a file never exposes stale data.

use pm::latency::{self, Part};

use crate::alloc::{Budget, Extent, Reserved};
use crate::commit::{self, Ctx};
use crate::error::{corrupt, Error, Result};
use crate::gc;
use crate::inode::{setattr_entry, Attr, Body, InodeState};
use crate::layout::{EntryType, WriteEntry, FLAG_APPEND, FLAG_IMMUTABLE, MAX_FILE_SIZE, PAGE_SIZE};
use crate::log::Entry;
use crate::pagemap::{write_keeps_old_bytes, FileMap};
use crate::relaxed;
use crate::time::now_ns;

const PS: usize = PAGE_SIZE as usize;
static ZERO_PAGE: [u8; PS] = [0; PS];

pub(crate) fn file_map(st: &InodeState) -> Result<&FileMap> {
    match &st.meta.body {
        Body::File(m) => Ok(m),
        Body::Dir(_) => Err(Error::IsDir),
        Body::Special => Err(Error::Invalid("not a regular file")),
    }
}

fn write_entry(ctx: &Ctx, pgoff: u64, block: u64, npages: u64, size: u64, mtime: i64) -> Entry {
    let e = WriteEntry {
        pgoff,
        block,
        npages: npages as u32,
        size,
        mtime,
        ..WriteEntry::default()
    };
    Entry::new(EntryType::Write, ctx.epoch(), &e)
}

/// Reads up to `buf.len()` bytes at `off`; holes read as zeros. A page
/// that redundancy cannot repair is EIO (counted as a loss of the file).
pub(crate) fn read(ctx: &Ctx, st: &InodeState, off: u64, buf: &mut [u8]) -> Result<usize> {
    read_checked(ctx, st, off, buf).inspect_err(|e| {
        if matches!(e, Error::Corrupt(_) | Error::Pm(_)) {
            ctx.health().lost(st.meta.attr.ino, e);
        }
    })
}

fn read_checked(ctx: &Ctx, st: &InodeState, off: u64, buf: &mut [u8]) -> Result<usize> {
    let map = file_map(st)?;
    let size = st.meta.attr.size;
    if off >= size {
        return Ok(0);
    }
    let n = (size - off).min(buf.len() as u64) as usize;
    let mut done = 0usize;
    while done < n {
        let pos = off + done as u64;
        let pg = pos / PAGE_SIZE;
        let in_pg = (pos % PAGE_SIZE) as usize;
        let mut len = (PS - in_pg).min(n - done);
        match map.lookup(pg) {
            Some(block) if ctx.strips().enabled() => ctx.read_block(block, in_pg, &mut buf[done..done + len])?,
            Some(block) => {
                // Coalesce pages that are contiguous on media into one copy.
                let mut next = pg + 1;
                while done + len < n && map.lookup(next) == Some(block + (next - pg) * PAGE_SIZE) {
                    len += PS.min(n - done - len);
                    next += 1;
                }
                latency::timed(Part::DataCopy, || {
                    ctx.data().read(block + in_pg as u64, &mut buf[done..done + len])
                })?;
            }
            None if map.lost().contains(pg) => return Err(lost_page(pg)),
            None => buf[done..done + len].fill(0),
        }
        done += len;
    }
    Ok(n)
}

/// EIO for file page `pg`, lost (`FileMap::lost`): `fsck --repair` found
/// a write entry over it damaged in every copy.
pub(crate) fn lost_page(pg: u64) -> Error {
    corrupt!(
        DataPage,
        "file page {pg} was lost: a write entry over it was damaged in every copy"
    )
}

/// Fills freshly allocated pages for file pages `first..`: page `pg` gets
/// `fill(pg, page)` applied over its old contents (or zeros).
fn fill_pages(
    ctx: &Ctx,
    map: &FileMap,
    first: u64,
    extents: &[Extent],
    mut fill: impl FnMut(u64, &mut [u8]) -> bool,
) -> Result<()> {
    let mut page = [0u8; PS];
    let mut pg = first;
    for e in extents {
        for i in 0..e.npages {
            // `fill` returns false when it wrote the whole page itself.
            let dst = e.off + i * PAGE_SIZE;
            match map.lookup(pg) {
                Some(b) => ctx.read_block(b, 0, &mut page)?,
                // The change keeps bytes of a lost page, which no copy
                // holds: it cannot, or they would come back as zeros.
                None if map.lost().contains(pg) => return Err(lost_page(pg)),
                None => page.fill(0),
            }
            if fill(pg, &mut page) {
                ctx.put_block(dst, &page)?;
            }
            pg += 1;
        }
    }
    Ok(())
}

/// One write entry per extent, mapping consecutive file pages from `first`.
fn entries_for(ctx: &Ctx, first: u64, extents: &[Extent], size: u64, mtime: i64) -> Vec<Entry> {
    let mut pg = first;
    extents
        .iter()
        .map(|e| {
            let entry = write_entry(ctx, pg, e.off, e.npages, size, mtime);
            pg += e.npages;
            entry
        })
        .collect()
}

/// Commits a change of one file: GC first, then one tail store, then the
/// DRAM index (commit.rs).
pub(crate) fn commit_file(ctx: &Ctx, st: &mut InodeState, budget: Budget, entries: &[Entry]) -> Result<()> {
    commit_kept(ctx, st, budget, entries, Reserved::empty(ctx.alloc()))
}

/// [`commit_file`] of entries that map the pages `held` reserved: the
/// commit keeps them, a failure (GC's included) gives them back.
pub(crate) fn commit_kept(
    ctx: &Ctx,
    st: &mut InodeState,
    budget: Budget,
    entries: &[Entry],
    held: Reserved<'_>,
) -> Result<()> {
    gc::make_room(ctx, st, entries)?;
    commit::single_kept(ctx, st, budget, entries, held)
}

/// Runs `f` with `npages` freshly reserved pages, which go back unless
/// `f` keeps them by a commit ([`commit_kept`]).
fn with_pages<'a, T>(
    ctx: &'a Ctx,
    npages: u64,
    budget: Budget,
    f: impl FnOnce(&[Extent], Reserved<'a>) -> Result<T>,
) -> Result<T> {
    let held = ctx.alloc().reserve(npages, budget)?;
    let extents = held.extents().to_vec();
    f(&extents, held)
}

/// Copy-on-write of `data` at `off` (NOVA §4.4), or in relaxed mode an
/// overwrite in place where it may (`relaxed`).
pub(crate) fn write(ctx: &Ctx, st: &mut InodeState, off: u64, data: &[u8]) -> Result<usize> {
    file_map(st)?;
    // chattr +i: no change; +a: appends only.
    let a = &st.meta.attr;
    if a.flags & FLAG_IMMUTABLE != 0 || (a.flags & FLAG_APPEND != 0 && off != a.size) {
        return Err(Error::NotPermitted);
    }
    if data.is_empty() {
        return Ok(0);
    }
    let end = off
        .checked_add(data.len() as u64)
        .filter(|&e| e <= MAX_FILE_SIZE)
        .ok_or(Error::FileTooBig)?;
    if let Some(n) = relaxed::overwrite(ctx, st, off, data)? {
        return Ok(n);
    }
    let first = off / PAGE_SIZE;
    let last = (end - 1) / PAGE_SIZE;
    let old_size = st.meta.attr.size;
    let size = old_size.max(end);
    with_pages(ctx, last - first + 1, Budget::Normal, |extents, held| {
        let map = file_map(st)?;
        let mut pg = first;
        for e in extents {
            for i in 0..e.npages {
                let pstart = pg * PAGE_SIZE;
                let lo = off.max(pstart);
                let hi = end.min(pstart + PAGE_SIZE);
                let src = &data[(lo - off) as usize..(hi - off) as usize];
                let keeps_old = write_keeps_old_bytes(pstart, lo, hi, old_size);
                if hi - lo == PAGE_SIZE {
                    ctx.put_block(e.off + i * PAGE_SIZE, src)?;
                } else if !keeps_old {
                    let mut page = [0u8; PS];
                    page[(lo - pstart) as usize..(hi - pstart) as usize].copy_from_slice(src);
                    ctx.put_block(e.off + i * PAGE_SIZE, &page)?;
                } else {
                    fill_pages(
                        ctx,
                        map,
                        pg,
                        &[Extent {
                            off: e.off + i * PAGE_SIZE,
                            npages: 1,
                        }],
                        |_, page| {
                            page[(lo - pstart) as usize..(hi - pstart) as usize].copy_from_slice(src);
                            true
                        },
                    )?;
                }
                pg += 1;
            }
        }
        let entries = entries_for(ctx, first, extents, size, now_ns());
        commit_kept(ctx, st, Budget::Normal, &entries, held) // R1 covers the non-temporal stores.
    })?;
    Ok(data.len())
}

/// Copy-on-write of whole pages, `(file page, its bytes)` in ascending
/// order, committed in one tail store: an atomic mapping's msync (NOVA
/// §4.5), whose pages a crash shows all old or all new.
pub(crate) fn write_pages(ctx: &Ctx, st: &mut InodeState, pages: &[(u64, &[u8])]) -> Result<()> {
    file_map(st)?;
    if st.meta.attr.flags & (FLAG_IMMUTABLE | FLAG_APPEND) != 0 {
        return Err(Error::NotPermitted);
    }
    if pages.is_empty() {
        return Ok(());
    }
    let size = st.meta.attr.size;
    let mtime = now_ns();
    with_pages(ctx, pages.len() as u64, Budget::Normal, |extents, held| {
        let blocks = extents
            .iter()
            .flat_map(|e| (0..e.npages).map(move |i| e.off + i * PAGE_SIZE));
        // Runs of consecutive file pages in consecutive blocks: one entry each.
        let mut runs: Vec<(u64, u64, u64)> = Vec::new();
        for (&(pg, data), block) in pages.iter().zip(blocks) {
            ctx.put_block(block, data)?;
            match runs.last_mut() {
                Some((first, start, n)) if *first + *n == pg && *start + *n * PAGE_SIZE == block => *n += 1,
                _ => runs.push((pg, block, 1)),
            }
        }
        let entries: Vec<Entry> = runs
            .into_iter()
            .map(|(pg, block, n)| write_entry(ctx, pg, block, n, size, mtime))
            .collect();
        commit_kept(ctx, st, Budget::Normal, &entries, held) // R1 covers the non-temporal stores.
    })
}

/// Fresh data pages for file pages `pg..pg + npages`, for a DAX mapping
/// to store to (`mmap`): copies of their pages (copy-on-write: a snapshot
/// keeps the old ones) or zeros for a hole, committed with `extra` entries
/// in one tail store. Returns the new page of each file page.
pub(crate) fn materialize(
    ctx: &Ctx,
    st: &mut InodeState,
    (pg, npages): (u64, u64),
    now: i64,
    extra: Vec<Entry>,
) -> Result<Vec<u64>> {
    let size = st.meta.attr.size;
    with_pages(ctx, npages, Budget::Normal, |extents, held| {
        fill_pages(ctx, file_map(st)?, pg, extents, |_, _| true)?;
        let blocks = extents
            .iter()
            .flat_map(|e| (0..e.npages).map(move |i| e.off + i * PAGE_SIZE))
            .collect();
        let mut entries = entries_for(ctx, pg, extents, size, now);
        entries.extend(extra);
        commit_kept(ctx, st, Budget::Normal, &entries, held)?; // R1 covers the copies.
        Ok(blocks)
    })
}

/// Entries that prepare a shrink to `new_size`: a copy of the new last page
/// with its tail zeroed (keeps the invariant above), and the reservation
/// of its page, for the caller's commit to keep.
pub(crate) fn shrink_prep<'a>(ctx: &'a Ctx, st: &InodeState, new_size: u64) -> Result<(Vec<Entry>, Reserved<'a>)> {
    let map = file_map(st)?;
    let size = st.meta.attr.size;
    let none = || Ok((Vec::new(), Reserved::empty(ctx.alloc())));
    if new_size >= size || new_size.is_multiple_of(PAGE_SIZE) {
        return none();
    }
    let pg = new_size / PAGE_SIZE;
    if map.lookup(pg).is_none() {
        return none();
    }
    let cut = (new_size % PAGE_SIZE) as usize;
    with_pages(ctx, 1, Budget::Freeing, |extents, held| {
        fill_pages(ctx, map, pg, extents, |_, page| {
            page[cut..].fill(0);
            true
        })?;
        // The entry keeps the current size; the setattr after it shrinks.
        Ok((entries_for(ctx, pg, extents, size, st.meta.attr.mtime), held))
    })
}

/// fallocate modes (Linux values).
pub const FALLOC_FL_KEEP_SIZE: u32 = 0x01;
pub const FALLOC_FL_PUNCH_HOLE: u32 = 0x02;
pub const FALLOC_FL_ZERO_RANGE: u32 = 0x10;

/// fallocate: mode 0 and KEEP_SIZE allocate zeroed pages for holes in the
/// range; PUNCH_HOLE|KEEP_SIZE frees whole pages and zeroes partial ones.
pub(crate) fn fallocate(ctx: &Ctx, st: &mut InodeState, mode: u32, off: u64, len: u64) -> Result<()> {
    file_map(st)?;
    // chattr +i: no change; +a: only allocation, which changes no byte.
    let flags = st.meta.attr.flags;
    if flags & FLAG_IMMUTABLE != 0 || (flags & FLAG_APPEND != 0 && mode & !FALLOC_FL_KEEP_SIZE != 0) {
        return Err(Error::NotPermitted);
    }
    let end = off
        .checked_add(len)
        .filter(|&e| e <= MAX_FILE_SIZE)
        .ok_or(Error::FileTooBig)?;
    if len == 0 {
        return Err(Error::Invalid("fallocate length is zero"));
    }
    match mode {
        0 | FALLOC_FL_KEEP_SIZE => preallocate(ctx, st, off, end, mode == FALLOC_FL_KEEP_SIZE),
        m if m == FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE => punch(ctx, st, off, end),
        FALLOC_FL_ZERO_RANGE => zero_range(ctx, st, off, end, false),
        m if m == FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE => zero_range(ctx, st, off, end, true),
        FALLOC_FL_PUNCH_HOLE => Err(Error::Invalid("PUNCH_HOLE needs KEEP_SIZE")),
        _ => Err(Error::NotSupported("this fallocate mode")),
    }
}

fn preallocate(ctx: &Ctx, st: &mut InodeState, off: u64, end: u64, keep_size: bool) -> Result<()> {
    let size = if keep_size {
        st.meta.attr.size
    } else {
        st.meta.attr.size.max(end)
    };
    let holes: Vec<u64> = {
        let map = file_map(st)?;
        // A lost page is no hole: zeros would hide the loss.
        (off / PAGE_SIZE..end.div_ceil(PAGE_SIZE))
            .filter(|&pg| map.lookup(pg).is_none() && !map.lost().contains(pg))
            .collect()
    };
    let now = now_ns();
    if holes.is_empty() {
        return match resized(ctx, st, size, now) {
            Some(e) => commit_file(ctx, st, Budget::Normal, &[e]),
            None => Ok(()),
        };
    }
    with_pages(ctx, holes.len() as u64, Budget::Normal, |extents, held| {
        let entries = zeroed(ctx, &holes, &mut blocks_of(extents), size, now)?;
        commit_kept(ctx, st, Budget::Normal, &entries, held)
    })
}

/// The entry that makes `st`'s size `size`, unless it is already.
fn resized(ctx: &Ctx, st: &InodeState, size: u64, now: i64) -> Option<Entry> {
    (size != st.meta.attr.size).then(|| {
        let attr = Attr {
            size,
            mtime: now,
            ctime: now,
            ..st.meta.attr
        };
        setattr_entry(ctx.epoch(), &attr)
    })
}

/// The pages of `extents`, one by one.
fn blocks_of(extents: &[Extent]) -> impl Iterator<Item = u64> + '_ {
    extents
        .iter()
        .flat_map(|e| (0..e.npages).map(move |i| e.off + i * PAGE_SIZE))
}

/// Zeroed pages from `blocks` for the file pages `pages` (ascending), as
/// write entries: one per run contiguous in the file and on the media.
fn zeroed(ctx: &Ctx, pages: &[u64], blocks: &mut dyn Iterator<Item = u64>, size: u64, now: i64) -> Result<Vec<Entry>> {
    let mut runs: Vec<(u64, u64, u64)> = Vec::new();
    for &pg in pages {
        let block = blocks.next().ok_or(Error::NoSpace)?;
        ctx.put_block(block, &ZERO_PAGE)?;
        match runs.last_mut() {
            Some((p, b, n)) if *p + *n == pg && *b + *n * PAGE_SIZE == block => *n += 1,
            _ => runs.push((pg, block, 1)),
        }
    }
    Ok(runs
        .iter()
        .map(|&(p, b, n)| write_entry(ctx, p, b, n, size, now))
        .collect())
}

/// The mapped pages that `[off, end)` covers only in part.
fn partial_pages(map: &FileMap, off: u64, end: u64) -> Vec<u64> {
    let mut partial: Vec<u64> = Vec::new();
    if !off.is_multiple_of(PAGE_SIZE) {
        partial.push(off / PAGE_SIZE);
    }
    if !end.is_multiple_of(PAGE_SIZE) && (partial.is_empty() || end / PAGE_SIZE != off / PAGE_SIZE) {
        partial.push(end / PAGE_SIZE);
    }
    partial.retain(|&pg| map.lookup(pg).is_some());
    partial
}

/// Rewrites each of the `partial` pages from `blocks` with its part of
/// `[off, end)` zeroed, as write entries.
fn zero_partial(
    ctx: &Ctx,
    map: &FileMap,
    partial: &[u64],
    blocks: &mut dyn Iterator<Item = u64>,
    (off, end): (u64, u64),
    size: u64,
    now: i64,
) -> Result<Vec<Entry>> {
    let mut entries = Vec::new();
    for &pg in partial {
        let block = blocks.next().ok_or(Error::NoSpace)?;
        let pstart = pg * PAGE_SIZE;
        let lo = (off.max(pstart) - pstart) as usize;
        let hi = (end.min(pstart + PAGE_SIZE) - pstart) as usize;
        fill_pages(ctx, map, pg, &[Extent { off: block, npages: 1 }], |_, page| {
            page[lo..hi].fill(0);
            true
        })?;
        entries.push(write_entry(ctx, pg, block, 1, size, now));
    }
    Ok(entries)
}

/// FALLOC_FL_ZERO_RANGE: `[off, end)` reads as zeros and is allocated,
/// in one commit. Pages it covers whole get fresh zeroed pages (the old
/// ones go back to the allocator with the commit, as any overwrite's);
/// the mapped pages it covers in part are rewritten with their part
/// zeroed. Without `keep_size` the file grows to `end`.
fn zero_range(ctx: &Ctx, st: &mut InodeState, off: u64, end: u64, keep_size: bool) -> Result<()> {
    let size = if keep_size {
        st.meta.attr.size
    } else {
        st.meta.attr.size.max(end)
    };
    let whole: Vec<u64> = (off.div_ceil(PAGE_SIZE)..end / PAGE_SIZE).collect();
    let partial = partial_pages(file_map(st)?, off, end);
    let now = now_ns();
    with_pages(
        ctx,
        (whole.len() + partial.len()) as u64,
        Budget::Normal,
        |extents, held| {
            let map = file_map(st)?;
            let mut blocks = blocks_of(extents);
            let mut entries = zero_partial(ctx, map, &partial, &mut blocks, (off, end), size, now)?;
            entries.extend(zeroed(ctx, &whole, &mut blocks, size, now)?);
            if entries.is_empty() {
                // Only holes in part: nothing to zero, the size may change.
                match resized(ctx, st, size, now) {
                    Some(e) => entries.push(e),
                    None => return Ok(()),
                }
            }
            commit_kept(ctx, st, Budget::Normal, &entries, held)
        },
    )
}

fn punch(ctx: &Ctx, st: &mut InodeState, off: u64, end: u64) -> Result<()> {
    let size = st.meta.attr.size;
    let first_full = off.div_ceil(PAGE_SIZE);
    let end_full = end / PAGE_SIZE;
    // Partial pages at either edge are rewritten with the range zeroed.
    let (partial, any_full) = {
        let map = file_map(st)?;
        // Hole entries need not reach past the last mapped page.
        let last = map.end();
        let any_full = (first_full < end_full.min(last)).then(|| end_full.min(last));
        (partial_pages(map, off, end), any_full)
    };
    let now = now_ns();
    with_pages(ctx, partial.len() as u64, Budget::Freeing, |extents, held| {
        let map = file_map(st)?;
        let mut entries = zero_partial(ctx, map, &partial, &mut blocks_of(extents), (off, end), size, now)?;
        if let Some(stop) = any_full {
            for from in (first_full..stop).step_by(u32::MAX as usize) {
                entries.push(write_entry(
                    ctx,
                    from,
                    0,
                    (stop - from).min(u64::from(u32::MAX)),
                    size,
                    now,
                ));
            }
        }
        if entries.is_empty() {
            return Ok(());
        }
        commit_kept(ctx, st, Budget::Freeing, &entries, held)
    })
}

/// lseek SEEK_DATA / SEEK_HOLE: mapped and lost pages are data (a copy
/// must not take a lost page for zeros), the rest holes, and
/// end of file is a hole. `None` means ENXIO.
pub(crate) fn seek(st: &InodeState, off: u64, data: bool) -> Result<Option<u64>> {
    let map = file_map(st)?;
    let size = st.meta.attr.size;
    if off >= size {
        return Ok(None);
    }
    let pg = off / PAGE_SIZE;
    Ok(if data {
        map.next_data(pg)
            .map(|p| (p * PAGE_SIZE).max(off))
            .filter(|&p| p < size)
    } else {
        Some((map.next_hole(pg) * PAGE_SIZE).max(off).min(size))
    })
}
