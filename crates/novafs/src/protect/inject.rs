//! Fault injection (NOVA-Fortis §4: media errors and scribbles): finds one
//! on-media structure of an unmounted image the way the file system does
//! and damages it, so tests and users can see what detection and repair
//! make of it.
//!
//! [`locate`] lists every instance of a kind of structure, with the offset
//! of each copy the image keeps: the superblock's replica always; on an
//! image that keeps metadata replicas (FORMAT.md "Metadata replicas"), the
//! mirror ([`Bounds::mirror`]) of every inode record, log page and log
//! entry and of page 2 of the fixed area. The journal (and so page 1 of
//! the fixed area) and data pages have no replica. [`plan`] picks one
//! instance and a byte range in it from a seeded RNG (the same seed picks
//! the same bytes; the same range in each copy it damages); [`corrupt`]
//! overwrites that range with different bytes. Poisoning a range instead
//! (a media error) is the region's business: the caller records
//! [`plan`]'s ranges in `pm`'s bad-block list.
//!
//! Everything read here comes from an image that may already be damaged:
//! every pointer is bounded before it is followed and every chain walk is
//! bounded, so a damaged image gives an error, never a panic or a hang.
//! Where the image keeps replicas, a log whose primary copy no longer
//! leads anywhere is found as a mount finds it, through the replica, so a
//! damaged copy does not keep the other from being damaged too.

use std::fmt;
use std::ops::{ControlFlow, Range};

use novafs_rng::SplitMix;
use pm::Region;

use crate::error::{Error, Result};
use crate::inode::{Body, InodeState};
use crate::itable::{read_live_record, InodeTables};
use crate::layout::{
    Bounds, EntryType, Ino, Inode, Superblock, INODE_HEADS_OFF, INODE_LIVE, INODE_SIZE, JOURNAL_HEADERS_OFF,
    LOG_NEXT_OFF, LOG_USABLE, PAGE_SIZE, RESERVED_INODES, RESERVED_INODES_OFF,
};
use crate::layout::{CSUM_BYTES, STRIP_SIZE};
use crate::log::{self, Step, Verify};
use crate::setters::setters;
use crate::superblock::{bounds_of, read_superblock};

/// The kinds of structure [`locate`] finds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// The 440-byte superblock (primary in page 0, replica in the last page).
    Superblock,
    /// The 128-byte table record of an inode.
    Inode,
    /// One page of an inode's log chain, up to the page holding the tail.
    LogPage,
    /// One committed entry of an inode's log.
    LogEntry,
    /// A shard's journal header line or its ring.
    Journal,
    /// The used parts of pages 1–2: journal headers, reserved inode slots,
    /// inode-table heads.
    FixedArea,
    /// A data page a file maps now (the last write of each file page wins),
    /// or one holding an extended attribute's value.
    DataPage,
    /// The strip checksums of such a data page: two copies, in the two
    /// checksum areas (Fortis §4.3).
    DataChecksums,
    /// The parity strip of such a data page.
    Parity,
}

impl Target {
    pub const ALL: [Target; 9] = [
        Target::Superblock,
        Target::Inode,
        Target::LogPage,
        Target::LogEntry,
        Target::Journal,
        Target::FixedArea,
        Target::DataPage,
        Target::DataChecksums,
        Target::Parity,
    ];

    /// The name the command line uses.
    pub fn name(self) -> &'static str {
        match self {
            Target::Superblock => "superblock",
            Target::Inode => "inode",
            Target::LogPage => "log-page",
            Target::LogEntry => "log-entry",
            Target::Journal => "journal",
            Target::FixedArea => "fixed-area",
            Target::DataPage => "data-page",
            Target::DataChecksums => "data-checksums",
            Target::Parity => "parity",
        }
    }

    /// What the structure is, in a line (the CLI's `--target` help).
    pub fn about(self) -> &'static str {
        match self {
            Target::Superblock => "The 440-byte superblock (primary: page 0; replica: the last page)",
            Target::Inode => "The 128-byte table record of an inode",
            Target::LogPage => {
                "A byte range anywhere in one page of an inode's log: often past the log's tail, where nothing \
                 reads it (then no check can notice it, and none needs to)"
            }
            Target::LogEntry => "Bytes inside one committed entry of an inode's log",
            Target::Journal => "A shard's journal header line or ring",
            Target::FixedArea => "Pages 1-2: journal headers, reserved inode slots, inode-table heads",
            Target::DataPage => "A data page a file maps now, or one holding an extended attribute's value",
            Target::DataChecksums => {
                "The strip checksums of such a data page (primary: the first checksum area; replica: the second)"
            }
            Target::Parity => "The parity strip of such a data page",
        }
    }

    /// The target named `name` (see [`Target::name`]).
    pub fn parse(name: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Whether the structure belongs to one inode (`--ino` picks it).
    pub fn per_inode(self) -> bool {
        matches!(
            self,
            Target::Inode
                | Target::LogPage
                | Target::LogEntry
                | Target::DataPage
                | Target::DataChecksums
                | Target::Parity
        )
    }

    /// Whether an image can keep a replica of this structure: the
    /// superblock always has one; inode records, log pages and entries and
    /// page 2 of the fixed area have one on images made with metadata
    /// replicas, data checksums their second copy; the journal, data pages
    /// and parity never do. [`locate`] gives the copies one image keeps.
    pub fn may_have_replica(self) -> bool {
        !matches!(self, Target::Journal | Target::DataPage | Target::Parity)
    }

    /// Why no instance of this structure has a replica to damage, on an
    /// image that keeps metadata replicas (`replicas`) or not.
    fn no_replica(self, replicas: bool) -> &'static str {
        match self {
            Target::Journal => {
                "the journal has no replica (replicas cover the superblock and, on images made with them, inode \
                 records, log pages and page 2 of the fixed area)"
            }
            Target::DataPage => {
                "data pages have no replica (replicas cover the superblock and metadata only; parity rebuilds data)"
            }
            Target::Parity => "parity has no replica",
            Target::DataChecksums => "data checksums always have two copies",
            Target::Superblock => "the superblock has a replica",
            _ if replicas => "the structure found lies outside the mirrored area and has no replica",
            Target::Inode => "this image has no replica of inode records (it was made without metadata replicas)",
            Target::LogPage | Target::LogEntry => {
                "this image has no replica of log pages (it was made without metadata replicas)"
            }
            Target::FixedArea => "this image has no replica of the fixed area (it was made without metadata replicas)",
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One copy of a structure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CopyKind {
    Primary,
    Replica,
}

impl fmt::Display for CopyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CopyKind::Primary => "primary",
            CopyKind::Replica => "replica",
        })
    }
}

/// Which copies to damage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Which {
    #[default]
    Primary,
    Replica,
    Both,
}

impl Which {
    pub fn copies(self) -> &'static [CopyKind] {
        match self {
            Which::Primary => &[CopyKind::Primary],
            Which::Replica => &[CopyKind::Replica],
            Which::Both => &[CopyKind::Primary, CopyKind::Replica],
        }
    }
}

/// One instance of a structure, as [`locate`] finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    /// What it is, e.g. "log entry (write)".
    pub what: String,
    /// The inode it belongs to, if any.
    pub ino: Option<Ino>,
    /// Bytes in each copy.
    pub len: u64,
    /// Region offset of each copy the image keeps, the primary first.
    pub copies: Vec<(CopyKind, u64)>,
    /// The bytes of it a mount reads, as offsets inside it, when that is
    /// not all of it: a log page's committed entries and the words that
    /// lead to them (`Spec::live` aims there).
    pub live: Option<Vec<Range<u64>>>,
}

impl Located {
    fn one(what: impl Into<String>, ino: Option<Ino>, off: u64, len: u64) -> Located {
        Located {
            what: what.into(),
            ino,
            len,
            copies: vec![(CopyKind::Primary, off)],
            live: None,
        }
    }

    /// A metadata structure: the primary at `off` and, when the image keeps
    /// replicas, the replica at its mirror. It lies in one page, so its
    /// replica is contiguous too (mirroring reverses the order of pages).
    fn mirrored(what: impl Into<String>, ino: Option<Ino>, off: u64, len: u64, bounds: Bounds) -> Located {
        debug_assert!(
            len > 0 && off / PAGE_SIZE == (off + len - 1) / PAGE_SIZE,
            "{off:#x}+{len}"
        );
        let mut l = Located::one(what, ino, off, len);
        l.copies.extend(bounds.mirror(off).map(|m| (CopyKind::Replica, m)));
        l
    }

    /// Region offset of the copy `kind`, if the format keeps one.
    pub fn copy(&self, kind: CopyKind) -> Option<u64> {
        self.copies.iter().find(|(k, _)| *k == kind).map(|&(_, off)| off)
    }
}

/// What to damage: the command line's arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Spec {
    pub target: Target,
    pub which: Which,
    /// The inode of per-inode targets ([`Target::per_inode`]).
    pub ino: Ino,
    pub seed: u64,
    /// How many bytes to change (clipped to the structure).
    pub bytes: u64,
    /// Aim only at bytes a mount reads ([`Located::live`]): for a log
    /// page, inside its committed entries or the words that lead to them,
    /// not past the log's tail, where damage changes nothing read.
    pub live: bool,
}

impl Spec {
    /// The defaults: the primary copy, the root inode, seed 1, 8 bytes.
    pub fn new(target: Target) -> Spec {
        Spec {
            target,
            which: Which::Primary,
            ino: crate::layout::ROOT_INO,
            seed: 1,
            bytes: 8,
            live: false,
        }
    }

    setters!(
        /// Sets which copies to damage.
        which: Which,
        /// Sets the inode of a per-inode target.
        ino: Ino,
        /// Sets the seed that picks the bytes.
        seed: u64,
        /// Sets how many bytes to change.
        bytes: u64,
        /// Aims only at bytes a mount reads, or not.
        live: bool,
    );
}

/// One byte range chosen (and, by [`corrupt`], changed) in one copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    pub what: String,
    pub ino: Option<Ino>,
    /// The copy, when the image keeps more than one of the structure.
    pub copy: Option<CopyKind>,
    /// Where the whole structure (this copy) starts, and its length.
    pub base: u64,
    pub size: u64,
    /// The damaged bytes: region offsets `off..off + len`.
    pub off: u64,
    pub len: u64,
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(ino) = self.ino {
            write!(f, "inode {ino} ")?;
        }
        f.write_str(&self.what)?;
        if let Some(c) = self.copy {
            write!(f, " ({c})")?;
        }
        write!(
            f,
            " at {:#x} ({} bytes): region offsets {:#x}..{:#x} ({} bytes)",
            self.base,
            self.size,
            self.off,
            self.off + self.len,
            self.len
        )
    }
}

/// The generator of a spec's seed: the seed is the stream's state as it
/// is (not mixed as `SplitMix::new` mixes it), as it always was, so the
/// same seed damages the same bytes and a failing case can be replayed.
fn seeded(spec: &Spec) -> SplitMix {
    SplitMix::from_state(spec.seed)
}

/// A byte to XOR with: never 0, so every chosen byte really changes.
fn flip(rng: &mut SplitMix) -> u8 {
    (rng.below(255) + 1) as u8
}

/// Every instance of `target` on the image, with each copy's offset. `ino`
/// picks the inode of per-inode targets and is ignored by the others.
pub fn locate(region: &dyn Region, target: Target, ino: Ino) -> Result<Vec<Located>> {
    // Every other structure is found through a readable superblock copy.
    let sb = match target {
        Target::Superblock => return Ok(vec![superblock(region)?]),
        _ => read_superblock(region)?.0,
    };
    let bounds = bounds_of(&sb);
    let shards = u64::from(sb.shards);
    Ok(match target {
        Target::Superblock => vec![superblock(region)?], // returned above
        Target::Inode => {
            let off = record_off(region, &sb, ino)?;
            // A free slot may be damaged too; say so, it changes nothing yet.
            let live = region.load_u64(off).is_ok_and(|state| state == INODE_LIVE);
            let what = if live { "record" } else { "record (free slot)" };
            vec![Located::mirrored(what, Some(ino), off, INODE_SIZE, bounds)]
        }
        Target::LogPage => log_pages(committed_log(region, &sb, ino)?, ino, bounds),
        Target::LogEntry => committed_log(region, &sb, ino)?
            .into_iter()
            .filter_map(|f| match f {
                Found::Entry { off, etype, len } => {
                    let kind = EntryType::from_u8(etype).map_or("unknown type", entry_name);
                    Some(Located::mirrored(
                        format!("log entry ({kind})"),
                        Some(ino),
                        off,
                        len,
                        bounds,
                    ))
                }
                Found::Page(_) => None,
            })
            .collect(),
        Target::DataPage => data_pages(region, &sb, ino)?
            .into_iter()
            .map(|(what, block)| Located::one(format!("data page ({what})"), Some(ino), block, PAGE_SIZE))
            .collect(),
        Target::DataChecksums => {
            if sb.csum_off[0] == 0 {
                return Err(Error::NotSupported(
                    "this image keeps no data checksums (made with --no-data-checksums)",
                ));
            }
            data_pages(region, &sb, ino)?
                .into_iter()
                .map(|(what, block)| {
                    let at = (block - sb.data_start) / PAGE_SIZE * CSUM_BYTES;
                    Located {
                        what: format!("checksums of data page ({what})"),
                        ino: Some(ino),
                        len: CSUM_BYTES,
                        copies: vec![
                            (CopyKind::Primary, sb.csum_off[0] + at),
                            (CopyKind::Replica, sb.csum_off[1] + at),
                        ],
                        live: None,
                    }
                })
                .collect()
        }
        Target::Parity => {
            if sb.parity_off == 0 {
                return Err(Error::NotSupported(
                    "this image keeps no parity (made with --no-parity)",
                ));
            }
            data_pages(region, &sb, ino)?
                .into_iter()
                .map(|(what, block)| {
                    let at = sb.parity_off + (block - sb.data_start) / PAGE_SIZE * STRIP_SIZE;
                    Located::one(format!("parity of data page ({what})"), Some(ino), at, STRIP_SIZE)
                })
                .collect()
        }
        Target::Journal => (0..shards)
            .flat_map(|s| {
                [
                    Located::one(
                        format!("journal header of shard {s}"),
                        None,
                        sb.journal_headers_off + 64 * s,
                        64,
                    ),
                    Located::one(
                        format!("journal ring of shard {s}"),
                        None,
                        sb.journal_rings_off + s * sb.journal_ring_size,
                        sb.journal_ring_size,
                    ),
                ]
            })
            .collect(),
        // Page 1 (journal headers) has no mirror; page 2 has one.
        Target::FixedArea => vec![
            Located::one("fixed area: journal headers", None, JOURNAL_HEADERS_OFF, 64 * shards),
            Located::mirrored(
                "fixed area: reserved inode slots",
                None,
                RESERVED_INODES_OFF,
                RESERVED_INODES * INODE_SIZE,
                bounds,
            ),
            Located::mirrored(
                "fixed area: inode-table heads",
                None,
                INODE_HEADS_OFF,
                8 * shards,
                bounds,
            ),
        ],
    })
}

/// The log pages of a log walk `found`, each with the bytes a mount reads
/// in it: its committed entries, contiguous from the page's start; in a
/// page before the tail's, the type byte that ends them (when they do not
/// fill the page) and the link to the next page.
fn log_pages(found: Vec<Found>, ino: Ino, bounds: Bounds) -> Vec<Located> {
    let mut pages: Vec<Located> = Vec::new();
    for f in found {
        match f {
            Found::Page(p) => {
                let mut l = Located::mirrored("log page", Some(ino), p, PAGE_SIZE, bounds);
                l.live = Some(Vec::new());
                pages.push(l);
            }
            Found::Entry { off, len, .. } => {
                if let Some(live) = pages.last_mut().and_then(|l| l.live.as_mut()) {
                    let at = off % PAGE_SIZE;
                    match live.last_mut() {
                        Some(r) if r.end == at => r.end = at + len,
                        _ => live.push(at..at + len),
                    }
                }
            }
        }
    }
    let before_tail = pages.len().saturating_sub(1);
    for l in &mut pages[..before_tail] {
        let live = l.live.get_or_insert_with(Vec::new);
        let end = live.last().map_or(0, |r| r.end);
        if end < LOG_USABLE {
            match live.last_mut() {
                Some(r) => r.end += 1,
                None => live.push(0..1),
            }
        }
        live.push(LOG_NEXT_OFF..PAGE_SIZE);
    }
    pages
}

/// `(what it holds, data page)` for every page file `ino` maps and every
/// page holding one of its extended attribute values: the file system's
/// own replay of its log, which verifies every entry.
fn data_pages(region: &dyn Region, sb: &Superblock, ino: Ino) -> Result<Vec<(String, u64)>> {
    let st = load_inode(region, sb, ino).map_err(|e| {
        in_context(
            e,
            format_args!("the data pages of inode {ino} are found by replaying its log"),
        )
    })?;
    let mut out = Vec::new();
    if let Body::File(map) = &st.meta.body {
        for (pgoff, block, n) in map.runs() {
            out.extend((0..n).map(|i| (format!("file page {}", pgoff + i), block + i * PAGE_SIZE)));
        }
    }
    out.extend(
        st.meta
            .xattrs
            .blocks()
            .map(|b| ("an extended attribute value".to_string(), b)),
    );
    Ok(out)
}

/// Picks what [`corrupt`] would change, without writing: one instance of
/// the target and a byte range in it, the same range in each copy
/// `spec.which` names. Damage to a replica picks among the instances that
/// have one (in the fixed area, the parts on page 2).
pub fn plan(region: &dyn Region, spec: &Spec) -> Result<Vec<Damage>> {
    plan_with(region, spec, &mut seeded(spec))
}

/// Overwrites the bytes [`plan`] picks with different ones (each XORed
/// with a random non-zero byte) and makes them persistent. Returns what
/// was changed.
pub fn corrupt(region: &dyn Region, spec: &Spec) -> Result<Vec<Damage>> {
    let mut rng = seeded(spec);
    let damage = plan_with(region, spec, &mut rng)?;
    for d in &damage {
        let mut buf = vec![0u8; d.len as usize];
        region.read(d.off, &mut buf)?;
        buf.iter_mut().for_each(|b| *b ^= flip(&mut rng));
        region.write(d.off, &buf)?;
        region.persist(d.off, d.len)?;
    }
    Ok(damage)
}

fn plan_with(region: &dyn Region, spec: &Spec, rng: &mut SplitMix) -> Result<Vec<Damage>> {
    if spec.bytes == 0 {
        return Err(Error::Invalid("the number of bytes to damage must be at least 1"));
    }
    if spec.live && spec.target != Target::LogPage {
        return Err(Error::Invalid(
            "aiming at the bytes a mount reads applies to log pages (every byte of the other structures is read)",
        ));
    }
    let wanted = spec.which.copies();
    if wanted.contains(&CopyKind::Replica) && !spec.target.may_have_replica() {
        return Err(Error::NotSupported(spec.target.no_replica(true)));
    }
    let found = locate(region, spec.target, spec.ino)?;
    if found.is_empty() {
        return Err(Error::Invalid(match spec.target {
            Target::LogPage => "the inode has no log pages",
            Target::LogEntry => "the inode has no committed log entries",
            Target::DataPage | Target::DataChecksums | Target::Parity => {
                "the inode maps no data pages (no file data and no extended attribute values in pages)"
            }
            _ => "no such structure on this image",
        }));
    }
    // Aimed at what is read: a page with nothing read in it is no target.
    let read = |l: &Located| !spec.live || l.live.as_ref().is_none_or(|r| !r.is_empty());
    let found: Vec<&Located> = found
        .iter()
        .filter(|l| wanted.iter().all(|&k| l.copy(k).is_some()) && read(l))
        .collect();
    let replicas = || read_superblock(region).is_ok_and(|(sb, _)| bounds_of(&sb).replicas);
    let no_replica = || Error::NotSupported(spec.target.no_replica(replicas()));
    let s = *found
        .get(rng.below(found.len() as u64) as usize)
        .ok_or_else(no_replica)?;
    let (at, len) = match (&s.live, spec.live) {
        (Some(live), true) => pick_in(rng, live, spec.bytes),
        _ => {
            let len = spec.bytes.min(s.len);
            (rng.below(s.len - len + 1), len)
        }
    };
    wanted
        .iter()
        .map(|&kind| {
            let base = s.copy(kind).ok_or_else(no_replica)?;
            Ok(Damage {
                what: s.what.clone(),
                ino: s.ino,
                copy: (s.copies.len() > 1).then_some(kind),
                base,
                size: s.len,
                off: base + at,
                len,
            })
        })
        .collect()
}

/// A run of up to `bytes` bytes inside one of the non-empty `ranges`, every
/// start position equally likely; `(start, length)`.
fn pick_in(rng: &mut SplitMix, ranges: &[Range<u64>], bytes: u64) -> (u64, u64) {
    let len = |r: &Range<u64>| bytes.min(r.end - r.start);
    let starts = |r: &Range<u64>| r.end - r.start - len(r) + 1;
    let mut k = rng.below(ranges.iter().map(starts).sum());
    for r in ranges {
        if k < starts(r) {
            return (r.start + k, len(r));
        }
        k -= starts(r);
    }
    (0, 0) // Not reached: `k` is below the sum.
}

/// Both superblock copies. The replica is where the superblock says when
/// either copy is readable, else in the region's last page.
fn superblock(region: &dyn Region) -> Result<Located> {
    let last = region
        .len()
        .checked_sub(PAGE_SIZE)
        .filter(|&l| l >= PAGE_SIZE)
        .ok_or_else(|| Error::NotNovafs(format!("only {} bytes, too small to hold novafs", region.len())))?;
    let replica = read_superblock(region).map_or(last, |(sb, _)| sb.replica_off);
    Ok(Located {
        what: "superblock".into(),
        ino: None,
        len: size_of::<Superblock>() as u64,
        copies: vec![(CopyKind::Primary, 0), (CopyKind::Replica, replica)],
        live: None,
    })
}

/// Offset of inode `ino`'s record, where the inode tables put it.
fn record_off(region: &dyn Region, sb: &Superblock, ino: Ino) -> Result<u64> {
    if ino == 0 {
        return Err(Error::Invalid("inode numbers start at 1"));
    }
    InodeTables::load(region, sb, bounds_of(sb))?.locate(ino)
}

/// Inode `ino` as a mount loads it: its record and log verified, the
/// primary record's and then, with replicas, the replica's (as
/// `Ctx::live_record` and `Ctx::load_inode` fall back). The error is the
/// primary's.
fn load_inode(region: &dyn Region, sb: &Superblock, ino: Ino) -> Result<InodeState> {
    let bounds = bounds_of(sb);
    let off = record_off(region, sb, ino)?;
    let load = |rec_off: u64| {
        read_live_record(region, rec_off, ino).and_then(|rec| InodeState::load(region, bounds, off, &rec))
    };
    let first = load(off);
    match (first, bounds.mirror(off)) {
        (Err(e), Some(m)) => load(m).map_err(|_| e),
        (first, _) => first,
    }
}

/// What a walk of a log visits: a page, or an entry (offset, type byte,
/// length).
enum Found {
    Page(u64),
    Entry { off: u64, etype: u8, len: u64 },
}

/// The committed part of inode `ino`'s log, from its head to the page
/// holding the tail: pages and entries as [`log::walk`] finds them,
/// checking the structure only, since damaged entries are still entries
/// to damage (and spare pages past the tail hold nothing committed).
///
/// On an image with replicas a damaged primary alone does not lose the
/// log: when the primary record or log does not lead through it, the log
/// is walked as a mount walks it (entries and links that fail in the
/// primary taken from the replica), from the primary record and then from
/// the replica's. The offsets found are the primaries' either way (the
/// replica record holds the same pointers). The error is the first one.
fn committed_log(region: &dyn Region, sb: &Superblock, ino: Ino) -> Result<Vec<Found>> {
    let bounds = bounds_of(sb);
    let off = record_off(region, sb, ino)?;
    let attempt = |rec_off: u64, verify: Verify| {
        read_live_record(region, rec_off, ino).and_then(|rec| walk_committed(region, bounds, &rec, verify))
    };
    let first = attempt(off, Verify::Structure);
    let Err(e) = first else {
        return first;
    };
    if bounds.replicas {
        let retries = bounds
            .copies(off)
            .flat_map(|o| [(o, Verify::Structure), (o, Verify::Checksums)])
            .skip(1);
        for (rec_off, verify) in retries {
            if let Ok(found) = attempt(rec_off, verify) {
                return Ok(found);
            }
        }
    }
    Err(in_context(e, format_args!("the log of inode {ino}")))
}

/// One walk of the committed part of the log of record `rec`.
fn walk_committed(region: &dyn Region, bounds: Bounds, rec: &Inode, verify: Verify) -> Result<Vec<Found>> {
    let mut found = Vec::new();
    log::walk(region, bounds, rec.log_head, rec.log_tail, verify, |step| {
        Ok(match step {
            Step::Tail => ControlFlow::Break(()),
            Step::Page(p) => {
                found.push(Found::Page(p));
                ControlFlow::Continue(())
            }
            Step::Entry(off, bytes) => {
                found.push(Found::Entry {
                    off,
                    etype: bytes[0],
                    len: bytes.len() as u64,
                });
                ControlFlow::Continue(())
            }
            Step::Repaired(..) | Step::Damaged { .. } => ControlFlow::Continue(()),
        })
    })?;
    Ok(found)
}

/// Damage found while looking for a structure, with what was looked for.
fn in_context(e: Error, what: fmt::Arguments<'_>) -> Error {
    match e {
        Error::Corrupt(why) => Error::Corrupt(why.within(what)),
        e => e,
    }
}

fn entry_name(t: EntryType) -> &'static str {
    match t {
        EntryType::Write => "write",
        EntryType::DentryAdd => "dentry add",
        EntryType::DentryRemove => "dentry remove",
        EntryType::Setattr => "setattr",
        EntryType::LinkChange => "link change",
        EntryType::Mmap => "mmap",
        EntryType::SnapshotInfo => "snapshot info",
        EntryType::Xattr => "xattr",
        EntryType::Lost => "lost range",
    }
}
