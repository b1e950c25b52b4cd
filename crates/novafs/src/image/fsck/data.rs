//! fsck's check of file data (NOVA-Fortis §4.3): every data page an inode
//! maps, and every page holding one of its extended attribute values, is
//! checked strip by strip against both checksum copies and its parity, as
//! scrub checks it (`Strips::scrub_page`). A page whose redundancy
//! rebuilds it is counted (and with `repair` rewritten); a page that
//! cannot be rebuilt (two strips bad) is named with the bytes it held, as
//! `zpool status -v` lists files with permanent errors: they read EIO
//! until they are written again, and nothing else of the file is lost.
//! Bytes a lost range record marks (`salvage`) are named the same way.

use std::ops::Range;

use crate::commit::Ctx;
use crate::error::{Error, Result};
use crate::inode::{Body, InodeState};
use crate::layout::PAGE_SIZE;

/// What the check of one inode's data found.
#[derive(Debug, Default)]
pub(super) struct DataCheck {
    /// Pages whose strips, checksum copies or parity differed and were
    /// (or, with `repair`, would be) rebuilt from the rest.
    pub rebuildable: u64,
    /// What cannot be rebuilt: the bytes of the file (or "an extended
    /// attribute value"), and why.
    pub lost: Vec<(Lost, String)>,
    /// Bytes of the file a lost range record marks lost (`salvage`):
    /// consistent, reading EIO until written again, but gone.
    pub marked: Vec<Range<u64>>,
}

impl DataCheck {
    /// Whether there is anything to tell.
    pub(super) fn any(&self) -> bool {
        self.rebuildable > 0 || !self.lost.is_empty() || !self.marked.is_empty()
    }
}

/// Data that cannot be rebuilt.
#[derive(Debug)]
pub(super) enum Lost {
    /// Bytes of the file.
    Bytes(Range<u64>),
    /// A page holding an extended attribute value.
    Xattr,
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lost::Bytes(r) => write!(f, "bytes {}..{}", r.start, r.end),
            Lost::Xattr => f.write_str("an extended attribute value"),
        }
    }
}

/// Checks (with `repair`, rebuilds) every data page of inode `st`. Pages
/// a DAX mapping left unprotected at a crash carry no checksums to hold
/// them to (caveat DAXor, Fortis §3.4): the next mount reseals them.
pub(super) fn check_data(ctx: &Ctx, st: &InodeState, repair: bool) -> Result<DataCheck> {
    let mut out = DataCheck::default();
    if let Body::File(map) = &st.meta.body {
        let size = st.attr().size;
        out.marked = map
            .lost()
            .runs()
            .map(|r| r.start * PAGE_SIZE..(r.end * PAGE_SIZE).min(size))
            .filter(|r| !r.is_empty())
            .collect();
    }
    if !ctx.strips().enabled() {
        return Ok(out);
    }
    let mut buf = vec![0u8; PAGE_SIZE as usize];
    let mut one = |block: u64, lost: Lost, out: &mut DataCheck| -> Result<()> {
        match ctx.strips().scrub_page(ctx.data(), block, &mut buf, repair) {
            Ok(c) if c.repaired > 0 => {
                out.rebuildable += 1;
                if repair {
                    ctx.health().data_repaired(c.repaired);
                }
            }
            Ok(_) => {}
            Err(e @ (Error::Corrupt(_) | Error::Pm(_))) => out.lost.push((lost, e.to_string())),
            Err(e) => return Err(e),
        }
        Ok(())
    };
    for block in st.meta.xattrs.blocks() {
        one(block, Lost::Xattr, &mut out)?;
    }
    if let Body::File(map) = &st.meta.body {
        let size = st.attr().size;
        for (pgoff, block, n) in map.runs() {
            for i in (0..n).filter(|i| !st.meta.unprotected.contains_key(&(pgoff + i))) {
                let start = (pgoff + i) * PAGE_SIZE;
                let bytes = start..(start + PAGE_SIZE).min(size.max(start));
                one(block + i * PAGE_SIZE, Lost::Bytes(bytes), &mut out)?;
            }
        }
    }
    Ok(out)
}
