//! File data (NOVA §4.4): copy-on-write pages described by write entries,
//! and the DRAM index from file page to data page. A write allocates new
//! pages, fills them with non-temporal stores, appends one write entry per
//! contiguous run and commits them all with one tail store, so any write is
//! atomic and durable when it returns; the old pages are freed afterwards
//! (R3).
//!
//! Invariant: bytes of a mapped page past the end of the file are zero, so
//! extending a file never exposes stale data.

use std::collections::BTreeMap;

use crate::alloc::{Budget, Extent};
use crate::ctx::Ctx;
use crate::error::{Error, Result};
use crate::hash::U64Map;
use crate::inode::{setattr_entry, Attr, Body, InodeState};
use crate::layout::{EntryType, WriteEntry, PAGE_SIZE};
use crate::log::{Entry, Log};
use crate::time::now_ns;

/// Largest file size: keeps page numbers and byte offsets far from overflow.
pub const MAX_FILE_SIZE: u64 = 1 << 52;
const PS: usize = PAGE_SIZE as usize;

/// Where a file page lives and which write entry maps it.
#[derive(Clone, Copy, Debug)]
struct Mapping {
    block: u64,
    entry: u64,
}

/// File page → data page index, with each write entry's count of pages it
/// still maps (a write entry is dead once that reaches zero, NOVA §4.6).
#[derive(Debug, Default)]
pub struct FileMap {
    pages: BTreeMap<u64, Mapping>,
    refs: U64Map<u32>,
}

fn push_page(freed: &mut Vec<Extent>, block: u64) {
    match freed.last_mut() {
        Some(e) if e.off + e.npages * PAGE_SIZE == block => e.npages += 1,
        _ => freed.push(Extent { off: block, npages: 1 }),
    }
}

impl FileMap {
    fn release(&mut self, log: &mut Log, m: Mapping, freed: &mut Vec<Extent>) {
        push_page(freed, m.block);
        if let Some(r) = self.refs.get_mut(&m.entry) {
            *r -= 1;
            if *r == 0 {
                self.refs.remove(&m.entry);
                log.kill(m.entry);
            }
        }
    }

    /// Applies a write entry at `entry`: maps `npages` pages from `pgoff` to
    /// `block`, or unmaps them when `block` is 0. Hole entries stay live
    /// until thorough GC: dropping one early would resurrect older pages.
    pub fn apply_write(
        &mut self,
        log: &mut Log,
        entry: u64,
        pgoff: u64,
        block: u64,
        npages: u64,
        freed: &mut Vec<Extent>,
    ) {
        if block != 0 {
            self.refs.insert(entry, npages as u32);
        }
        for i in 0..npages {
            let old = if block != 0 {
                self.pages.insert(
                    pgoff + i,
                    Mapping {
                        block: block + i * PAGE_SIZE,
                        entry,
                    },
                )
            } else {
                self.pages.remove(&(pgoff + i))
            };
            if let Some(m) = old {
                self.release(log, m, freed);
            }
        }
    }

    /// Unmaps every page from `first` on.
    pub fn truncate(&mut self, log: &mut Log, first: u64, freed: &mut Vec<Extent>) {
        let gone = self.pages.split_off(&first);
        for m in gone.into_values() {
            self.release(log, m, freed);
        }
    }

    pub fn mapped_pages(&self) -> u64 {
        self.pages.len() as u64
    }

    /// Live write entries.
    pub fn live_entries(&self) -> u64 {
        self.refs.len() as u64
    }

    pub fn lookup(&self, pg: u64) -> Option<u64> {
        self.pages.get(&pg).map(|m| m.block)
    }

    /// Mapped runs `(pgoff, block, npages)`, contiguous in both file and
    /// media: what a compacted log records.
    pub fn runs(&self) -> Vec<(u64, u64, u64)> {
        let mut runs: Vec<(u64, u64, u64)> = Vec::new();
        for (&pg, m) in &self.pages {
            match runs.last_mut() {
                Some((p, b, n)) if *p + *n == pg && *b + *n * PAGE_SIZE == m.block && *n < u64::from(u32::MAX) => {
                    *n += 1
                }
                _ => runs.push((pg, m.block, 1)),
            }
        }
        runs
    }

    /// Every data page, for the recovery scan and fsck.
    pub fn blocks(&self) -> impl Iterator<Item = u64> + '_ {
        self.pages.values().map(|m| m.block)
    }

    /// Every data page, freeing the index as it goes: one walk of it when
    /// a file is deleted instead of one to collect and one to drop.
    pub fn into_blocks(self) -> impl Iterator<Item = u64> {
        self.pages.into_values().map(|m| m.block)
    }

    /// First mapped page at or after `pg`.
    fn next_mapped(&self, pg: u64) -> Option<u64> {
        self.pages.range(pg..).next().map(|(&p, _)| p)
    }

    /// First unmapped page at or after `pg`.
    fn next_hole(&self, mut pg: u64) -> u64 {
        for (&p, _) in self.pages.range(pg..) {
            if p != pg {
                break;
            }
            pg += 1;
        }
        pg
    }
}

fn file_map(st: &InodeState) -> Result<&FileMap> {
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
    Entry::new(EntryType::Write, ctx.epoch, &e)
}

/// Reads up to `buf.len()` bytes at `off`; holes read as zeros.
pub fn read(ctx: &Ctx, st: &InodeState, off: u64, buf: &mut [u8]) -> Result<usize> {
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
            Some(block) => {
                // Coalesce pages that are contiguous on media into one copy.
                let mut next = pg + 1;
                while done + len < n && map.lookup(next) == Some(block + (next - pg) * PAGE_SIZE) {
                    len += PS.min(n - done - len);
                    next += 1;
                }
                ctx.region().read(block + in_pg as u64, &mut buf[done..done + len])?;
            }
            None => buf[done..done + len].fill(0),
        }
        done += len;
    }
    Ok(n)
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
    let mut page = vec![0u8; PS];
    let mut pg = first;
    for e in extents {
        for i in 0..e.npages {
            // `fill` returns false when it wrote the whole page itself.
            let dst = e.off + i * PAGE_SIZE;
            match map.lookup(pg) {
                Some(b) => ctx.region().read(b, &mut page)?,
                None => page.fill(0),
            }
            if fill(pg, &mut page) {
                ctx.region().write_nt(dst, &page)?;
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

/// Runs `f` with freshly allocated pages, freeing them if it fails.
fn with_pages<T>(ctx: &Ctx, npages: u64, budget: Budget, f: impl FnOnce(&[Extent]) -> Result<T>) -> Result<T> {
    let extents = ctx.alloc.alloc(npages, budget)?;
    let r = f(&extents);
    if r.is_err() {
        ctx.free_extents(&extents);
    }
    r
}

/// Copy-on-write of `data` at `off` (NOVA §4.4).
pub fn write(ctx: &Ctx, st: &mut InodeState, off: u64, data: &[u8]) -> Result<usize> {
    file_map(st)?;
    if data.is_empty() {
        return Ok(0);
    }
    let end = off
        .checked_add(data.len() as u64)
        .filter(|&e| e <= MAX_FILE_SIZE)
        .ok_or(Error::FileTooBig)?;
    let first = off / PAGE_SIZE;
    let last = (end - 1) / PAGE_SIZE;
    let size = st.meta.attr.size.max(end);
    with_pages(ctx, last - first + 1, Budget::Normal, |extents| {
        let map = file_map(st)?;
        let mut pg = first;
        for e in extents {
            for i in 0..e.npages {
                let pstart = pg * PAGE_SIZE;
                let lo = off.max(pstart);
                let hi = end.min(pstart + PAGE_SIZE);
                let src = &data[(lo - off) as usize..(hi - off) as usize];
                if hi - lo == PAGE_SIZE {
                    ctx.region().write_nt(e.off + i * PAGE_SIZE, src)?;
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
        ctx.commit_single(st, Budget::Normal, &entries) // R1 covers the non-temporal stores.
    })?;
    Ok(data.len())
}

/// Entries that prepare a shrink to `new_size`: a copy of the new last page
/// with its tail zeroed (keeps the invariant above). Their pages are
/// returned so the caller can free them if the commit fails.
pub fn shrink_prep(ctx: &Ctx, st: &InodeState, new_size: u64) -> Result<(Vec<Entry>, Vec<Extent>)> {
    let map = file_map(st)?;
    let size = st.meta.attr.size;
    if new_size >= size || new_size.is_multiple_of(PAGE_SIZE) {
        return Ok((Vec::new(), Vec::new()));
    }
    let pg = new_size / PAGE_SIZE;
    if map.lookup(pg).is_none() {
        return Ok((Vec::new(), Vec::new()));
    }
    let cut = (new_size % PAGE_SIZE) as usize;
    with_pages(ctx, 1, Budget::Reserve, |extents| {
        fill_pages(ctx, map, pg, extents, |_, page| {
            page[cut..].fill(0);
            true
        })?;
        // The entry keeps the current size; the setattr after it shrinks.
        Ok((
            entries_for(ctx, pg, extents, size, st.meta.attr.mtime),
            extents.to_vec(),
        ))
    })
}

/// fallocate modes (Linux values).
pub const FALLOC_FL_KEEP_SIZE: u32 = 0x01;
pub const FALLOC_FL_PUNCH_HOLE: u32 = 0x02;

/// fallocate: mode 0 and KEEP_SIZE allocate zeroed pages for holes in the
/// range; PUNCH_HOLE|KEEP_SIZE frees whole pages and zeroes partial ones.
pub fn fallocate(ctx: &Ctx, st: &mut InodeState, mode: u32, off: u64, len: u64) -> Result<()> {
    file_map(st)?;
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
        (off / PAGE_SIZE..end.div_ceil(PAGE_SIZE))
            .filter(|&pg| map.lookup(pg).is_none())
            .collect()
    };
    let now = now_ns();
    if holes.is_empty() {
        if size == st.meta.attr.size {
            return Ok(());
        }
        let attr = Attr {
            size,
            mtime: now,
            ctime: now,
            ..st.meta.attr
        };
        return ctx.commit_single(st, Budget::Normal, &[setattr_entry(ctx.epoch, &attr)]);
    }
    with_pages(ctx, holes.len() as u64, Budget::Normal, |extents| {
        let mut entries = Vec::new();
        let mut pages = extents
            .iter()
            .flat_map(|e| (0..e.npages).map(move |i| e.off + i * PAGE_SIZE));
        for &pg in &holes {
            let block = pages.next().ok_or(Error::NoSpace)?;
            ctx.region().zero_nt(block, PAGE_SIZE)?;
            entries.push((pg, block));
        }
        // Merge runs contiguous in file and media into one entry each.
        let mut runs: Vec<(u64, u64, u64)> = Vec::new();
        for (pg, block) in entries {
            match runs.last_mut() {
                Some((p, b, n)) if *p + *n == pg && *b + *n * PAGE_SIZE == block => *n += 1,
                _ => runs.push((pg, block, 1)),
            }
        }
        let entries: Vec<Entry> = runs
            .iter()
            .map(|&(p, b, n)| write_entry(ctx, p, b, n, size, now))
            .collect();
        ctx.commit_single(st, Budget::Normal, &entries)
    })
}

fn punch(ctx: &Ctx, st: &mut InodeState, off: u64, end: u64) -> Result<()> {
    let size = st.meta.attr.size;
    let first_full = off.div_ceil(PAGE_SIZE);
    let end_full = end / PAGE_SIZE;
    // Partial pages at either edge are rewritten with the range zeroed.
    let mut partial: Vec<u64> = Vec::new();
    if !off.is_multiple_of(PAGE_SIZE) {
        partial.push(off / PAGE_SIZE);
    }
    if !end.is_multiple_of(PAGE_SIZE) && (partial.is_empty() || end / PAGE_SIZE != off / PAGE_SIZE) {
        partial.push(end / PAGE_SIZE);
    }
    let any_full = {
        let map = file_map(st)?;
        partial.retain(|&pg| map.lookup(pg).is_some());
        // Hole entries need not reach past the last mapped page.
        let last = map.pages.keys().next_back().map_or(0, |&p| p + 1);
        (first_full < end_full.min(last)).then(|| end_full.min(last))
    };
    let now = now_ns();
    with_pages(ctx, partial.len() as u64, Budget::Reserve, |extents| {
        let map = file_map(st)?;
        let mut entries = Vec::new();
        let mut blocks = extents
            .iter()
            .flat_map(|e| (0..e.npages).map(move |i| e.off + i * PAGE_SIZE));
        for &pg in &partial {
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
        ctx.commit_single(st, Budget::Reserve, &entries)
    })
}

/// lseek SEEK_DATA / SEEK_HOLE: mapped pages are data, the rest holes, and
/// end of file is a hole. `None` means ENXIO.
pub fn seek(st: &InodeState, off: u64, data: bool) -> Result<Option<u64>> {
    let map = file_map(st)?;
    let size = st.meta.attr.size;
    if off >= size {
        return Ok(None);
    }
    let pg = off / PAGE_SIZE;
    Ok(if data {
        map.next_mapped(pg)
            .map(|p| (p * PAGE_SIZE).max(off))
            .filter(|&p| p < size)
    } else {
        Some((map.next_hole(pg) * PAGE_SIZE).max(off).min(size))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_merge_contiguous_pages_only() {
        let mut m = FileMap::default();
        let mut log = Log::default();
        let mut freed = Vec::new();
        m.apply_write(&mut log, 64, 0, 40960, 2, &mut freed);
        m.apply_write(&mut log, 128, 2, 40960 + 2 * 4096, 1, &mut freed);
        m.apply_write(&mut log, 192, 5, 8192, 1, &mut freed);
        assert_eq!(m.runs(), vec![(0, 40960, 3), (5, 8192, 1)]);
        assert!(freed.is_empty());
        m.apply_write(&mut log, 256, 1, 0, 1, &mut freed);
        assert_eq!(
            freed,
            vec![Extent {
                off: 40960 + 4096,
                npages: 1
            }]
        );
        assert_eq!(m.next_hole(0), 1);
        assert_eq!(m.next_mapped(3), Some(5));
        assert_eq!(m.live_entries(), 3);
    }
}
