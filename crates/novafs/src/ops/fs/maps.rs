//! Mapping files into the program: DAX mmap (NOVA-Fortis §3.3, §3.4) and
//! atomic mmap (NOVA §4.5).

use std::sync::Arc;

use super::Fs;
use crate::cache::alive;
use crate::error::{Error, Result};
use crate::inode::{FileType, Ino};
use crate::layout::{FEATURE_INCOMPAT_MMAP, FLAG_APPEND, FLAG_IMMUTABLE, PAGE_SIZE};
use crate::mmap::{MapKind, Mapping};

impl Fs {
    /// Maps `npages` pages of file `ino` from byte `offset` (a multiple of
    /// the page size) into this process: DAX mmap (NOVA-Fortis §3.3, §3.4;
    /// `mmap`). The program loads and stores the file's persistent memory
    /// through [`Mapping::as_ptr`] (or [`Mapping::load`] and
    /// [`Mapping::store`]); a page is mapped at its first access, and an
    /// access past the end of the file kills the program, as SIGBUS does.
    /// With `writable`, stores reach the file in place: durable once the
    /// program persists them ([`Mapping::persist`]), without checksums
    /// until [`Mapping::sync`] or the mapping's end (caveat DAXor), and
    /// copied on write where a snapshot holds the page. The mapping holds
    /// the file open. Needs a region mapped from a file (the default
    /// emulation and fsdax files; not devdax).
    pub fn mmap(&self, ino: Ino, offset: u64, npages: usize, writable: bool) -> Result<Mapping<'_>> {
        let release = Box::new(move |ino| self.release_handle(ino));
        self.map_releasing(ino, (offset, npages), writable, MapKind::Dax, release)
    }

    /// Atomic mmap (NOVA §4.5): maps pages as [`Fs::mmap`] does, but the
    /// program loads and stores DRAM replicas of them, and its stores
    /// reach the file only at [`Mapping::sync`] (msync) or when the mapping
    /// ends, every page stored to since the last sync in one commit. After
    /// a crash the file holds what the last completed sync committed,
    /// never part of one; a snapshot holds what the last sync before it
    /// committed. Reads ([`Fs::read`]) and every atomic mapping of the file
    /// see the stores at once, as through a page cache; write(2),
    /// truncation and hole punching show in the mappings at once (a page
    /// stored to keeps its other pending bytes). Works on every kind of
    /// region.
    pub fn mmap_atomic(&self, ino: Ino, offset: u64, npages: usize, writable: bool) -> Result<Mapping<'_>> {
        let release = Box::new(move |ino| self.release_handle(ino));
        self.map_releasing(ino, (offset, npages), writable, MapKind::Atomic, release)
    }

    /// [`Fs::mmap`] or [`Fs::mmap_atomic`], as `kind` says, for a holder of
    /// the file system in an `Arc` (the C ABI, the POSIX layer): the
    /// mapping keeps the file system alive instead of borrowing it, so it
    /// can be kept in a table beside it.
    pub fn mmap_shared(
        self: &Arc<Self>,
        ino: Ino,
        (offset, npages): (u64, usize),
        writable: bool,
        kind: MapKind,
    ) -> Result<Mapping<'static>> {
        let fs = self.clone();
        let release = Box::new(move |ino| fs.release_handle(ino));
        self.map_releasing(ino, (offset, npages), writable, kind, release)
    }

    /// The mapping every caller makes; `release` gives back the open
    /// handle it takes.
    fn map_releasing<'a>(
        &self,
        ino: Ino,
        (offset, npages): (u64, usize),
        writable: bool,
        kind: MapKind,
        release: Box<dyn Fn(Ino) -> Result<()> + Send + Sync + 'a>,
    ) -> Result<Mapping<'a>> {
        if !offset.is_multiple_of(PAGE_SIZE) || npages == 0 {
            return Err(Error::Invalid("mmap offset not page-aligned, or no pages"));
        }
        let end = (npages as u64)
            .checked_mul(PAGE_SIZE)
            .and_then(|len| offset.checked_add(len))
            .filter(|&e| e <= crate::layout::MAX_FILE_SIZE);
        if end.is_none() {
            return Err(Error::FileTooBig);
        }
        if writable && self.read_only {
            return Err(Error::ReadOnly);
        }
        let cell = self.cell(ino)?;
        {
            let st = cell.state.read();
            alive(&st)?;
            if st.meta.attr.kind != FileType::RegularFile {
                return Err(Error::Invalid("mmap of something other than a regular file"));
            }
            // As Linux: no shared writable mapping of an append-only or
            // immutable file.
            if writable && st.meta.attr.flags & (FLAG_APPEND | FLAG_IMMUTABLE) != 0 {
                return Err(Error::NotPermitted);
            }
        }
        // Only DAX stores leave pages unprotected (MMAP_UNPROTECT entries);
        // an atomic mapping commits ordinary write entries.
        if writable && kind == MapKind::Dax {
            self.mark_feature(FEATURE_INCOMPAT_MMAP)?;
        }
        self.open_handle(ino)?;
        Mapping::new(
            release,
            (&self.ctx, &self.mmaps),
            (cell, ino),
            (offset / PAGE_SIZE, npages),
            writable,
            kind,
        )
        .inspect_err(|_| {
            let _ = self.release_handle(ino);
        })
    }
}
