//! Fault injection (issue 11; NOVA-Fortis §4): finds one on-media structure
//! of an unmounted image the way the file system does and damages it, so
//! tests and users can see what detection and repair make of it.
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

use pm::Region;

use crate::error::{corrupt, Error, Result};
use crate::inode::{Body, InodeState};
use crate::itable::{read_live_record, InodeTables};
use crate::layout::{
    Bounds, EntryType, Ino, Inode, Superblock, INODE_HEADS_OFF, INODE_LIVE, INODE_SIZE, JOURNAL_HEADERS_OFF,
    LOG_NEXT_OFF, LOG_USABLE, PAGE_SIZE, RESERVED_INODES, RESERVED_INODES_OFF,
};
use crate::layout::{CSUM_BYTES, STRIP_SIZE};
use crate::log::{self, Step, Verify};
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

/// A small deterministic RNG (splitmix64): the same seed damages the same
/// bytes, so a failing case can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform enough in `0..n` (0 when `n` is 0).
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }

    /// A byte to XOR with: never 0, so every chosen byte really changes.
    fn flip(&mut self) -> u8 {
        (self.below(255) + 1) as u8
    }
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
    plan_with(region, spec, &mut Rng(spec.seed))
}

/// Overwrites the bytes [`plan`] picks with different ones (each XORed
/// with a random non-zero byte) and makes them persistent. Returns what
/// was changed.
pub fn corrupt(region: &dyn Region, spec: &Spec) -> Result<Vec<Damage>> {
    let mut rng = Rng(spec.seed);
    let damage = plan_with(region, spec, &mut rng)?;
    for d in &damage {
        let mut buf = vec![0u8; d.len as usize];
        region.read(d.off, &mut buf)?;
        buf.iter_mut().for_each(|b| *b ^= rng.flip());
        region.write(d.off, &buf)?;
        region.persist(d.off, d.len)?;
    }
    Ok(damage)
}

fn plan_with(region: &dyn Region, spec: &Spec, rng: &mut Rng) -> Result<Vec<Damage>> {
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
fn pick_in(rng: &mut Rng, ranges: &[Range<u64>], bytes: u64) -> (u64, u64) {
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
            Step::Repaired(..) => ControlFlow::Continue(()),
        })
    })?;
    Ok(found)
}

/// Damage found while looking for a structure, with what was looked for.
fn in_context(e: Error, what: fmt::Arguments<'_>) -> Error {
    match e {
        Error::Corrupt(why) => corrupt!("{what}: {why}"),
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
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Arc;

    use pm::MemRegion;

    use super::*;
    use crate::fs::{Fs, MountOptions};
    use crate::health::HealthCounts;
    use crate::itable::InodeTables;
    use crate::layout::{INODES_PER_CHUNK, LOG_NEXT_OFF, ROOT_INO};
    use crate::log::Log;
    use crate::mkfs::FormatOptions;
    use crate::replica::Mirrored;

    /// The files of [`image`]: "a" (one page of 'A'), "b" (two pages of
    /// 'B' then one of 'C' over the second) and the directory "d" holding
    /// an empty file "e".
    #[derive(Clone, Copy, Debug)]
    struct Files {
        a: Ino,
        b: Ino,
        d: Ino,
    }

    /// A 16 MiB image with two shards holding [`Files`], with metadata
    /// replicas (the default) or without.
    fn image_with(replicas: bool) -> (Arc<MemRegion>, Files) {
        let mem = Arc::new(MemRegion::new(16 << 20));
        let region: Arc<dyn Region> = mem.clone();
        Fs::format(
            region.clone(),
            &FormatOptions {
                shards: Some(2),
                meta_replicas: replicas,
                ..FormatOptions::default()
            },
        )
        .unwrap();
        let fs = Fs::open(region, MountOptions::default()).unwrap();
        let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
        fs.write(a, 0, &[b'A'; 4096]).unwrap();
        let b = fs.create(ROOT_INO, b"b", 0o644, 0, 0).unwrap().ino;
        fs.write(b, 0, &[b'B'; 8192]).unwrap();
        fs.write(b, 4096, &[b'C'; 4096]).unwrap();
        let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
        fs.create(d, b"e", 0o644, 0, 0).unwrap();
        fs.unmount().unwrap();
        (mem, Files { a, b, d })
    }

    /// [`image_with`] replicas: what `Fs::format` makes by default.
    fn image() -> (Arc<MemRegion>, Ino, Ino) {
        let (mem, f) = image_with(true);
        (mem, f.a, f.b)
    }

    /// The offset and (primary) record of live inode `ino`.
    fn live_record(region: &dyn Region, sb: &Superblock, ino: Ino) -> Result<(u64, Inode)> {
        let off = record_off(region, sb, ino)?;
        Ok((off, read_live_record(region, off, ino)?))
    }

    fn mount(mem: &Arc<MemRegion>) -> Result<Fs> {
        Fs::open(mem.clone(), MountOptions::default())
    }

    /// The region as the file system writes metadata: both copies at once
    /// when the image keeps replicas.
    fn meta(mem: &Arc<MemRegion>) -> Arc<dyn Region> {
        let (sb, _) = read_superblock(&**mem).unwrap();
        Mirrored::view(mem.clone(), bounds_of(&sb))
    }

    fn read_file(fs: &Fs, ino: Ino, len: usize) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        let n = fs.read(ino, 0, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }

    fn names(fs: &Fs, dir: Ino) -> Result<Vec<Vec<u8>>> {
        let mut names = Vec::new();
        fs.readdir(dir, 0, |e| {
            names.push(e.name);
            false
        })?;
        Ok(names)
    }

    /// Everything of [`image`] reads as it was written.
    fn reads_everything(fs: &Fs, f: Files, why: &dyn fmt::Display) {
        assert_eq!(read_file(fs, f.a, 8192).unwrap(), [b'A'; 4096], "{why}");
        let b = read_file(fs, f.b, 8192).unwrap();
        assert_eq!(b[..4096], [b'B'; 4096], "{why}");
        assert_eq!(b[4096..], [b'C'; 4096], "{why}");
        assert_eq!(
            names(fs, ROOT_INO).unwrap(),
            [&b"."[..], b"..", b"a", b"b", b"d"],
            "{why}"
        );
        assert_eq!(names(fs, f.d).unwrap(), [&b"."[..], b"..", b"e"], "{why}");
        assert_eq!(fs.lookup(ROOT_INO, b"d").unwrap().ino, f.d, "{why}");
    }

    /// Everything of [`image`] but inode `lost` reads as it was written.
    fn others_read(fs: &Fs, f: Files, lost: Ino, why: &dyn fmt::Display) {
        if lost != f.a {
            assert_eq!(read_file(fs, f.a, 8192).unwrap(), [b'A'; 4096], "{why}");
        }
        assert_ne!(lost, f.b);
        assert_eq!(read_file(fs, f.b, 8192).unwrap()[4096..], [b'C'; 4096], "{why}");
        if lost != f.d {
            assert_eq!(names(fs, f.d).unwrap().len(), 3, "{why}");
        }
        // The root directory still names the lost inode.
        assert_eq!(names(fs, ROOT_INO).unwrap().len(), 5, "{why}");
    }

    fn fsck_problems(mem: &Arc<MemRegion>) -> Vec<String> {
        let region: Arc<dyn Region> = mem.clone();
        match crate::fsck::check(region, &|_, _| {}) {
            Ok(rep) => rep.problems,
            Err(e) => vec![format!("fsck failed: {e}")],
        }
    }

    /// Bytes `off..off + len` of the region.
    fn bytes(mem: &MemRegion, off: u64, len: u64) -> Vec<u8> {
        mem.snapshot()[off as usize..(off + len) as usize].to_vec()
    }

    /// Whether both copies of a located structure hold the same bytes in
    /// `range` (offsets inside the structure).
    fn copies_equal(mem: &MemRegion, l: &Located, range: std::ops::Range<u64>) -> bool {
        let snap = mem.snapshot();
        let at = |kind| {
            let off = (l.copy(kind).unwrap() + range.start) as usize;
            snap[off..off + (range.end - range.start) as usize].to_vec()
        };
        at(CopyKind::Primary) == at(CopyKind::Replica)
    }

    fn spec(target: Target, ino: Ino, seed: u64) -> Spec {
        Spec {
            ino,
            seed,
            ..Spec::new(target)
        }
    }

    #[test]
    fn each_target_locates_the_structure_the_file_system_uses() {
        let (mem, a, b) = image();
        let r = &*mem;
        let (sb, _) = read_superblock(r).unwrap();
        let bounds = bounds_of(&sb);
        assert!(bounds.replicas, "replicas are the default");
        // Superblock: both copies, where read_superblock looks.
        let s = locate(r, Target::Superblock, 0).unwrap();
        assert_eq!(
            s[0].copies,
            [(CopyKind::Primary, 0), (CopyKind::Replica, r.len() - PAGE_SIZE)]
        );
        assert_eq!(s[0].len, 440);
        // Inode records: where the inode tables put them, and their mirrors.
        let tables = InodeTables::load(r, &sb, bounds).unwrap();
        for ino in [ROOT_INO, a, b, 1000] {
            let l = locate(r, Target::Inode, ino).unwrap();
            let off = tables.locate(ino).unwrap();
            assert_eq!(
                l[0].copies,
                [
                    (CopyKind::Primary, off),
                    (CopyKind::Replica, bounds.mirror(off).unwrap())
                ],
                "ino {ino}"
            );
            assert!(copies_equal(r, &l[0], 0..INODE_SIZE), "ino {ino}");
        }
        // Log entries and pages: what the log replay visits, and mirrors.
        let (_, rec) = live_record(r, &sb, ROOT_INO).unwrap();
        let mut offsets = Vec::new();
        let log = Log::load(r, bounds, rec.log_head, rec.log_tail, |_, off, _| {
            offsets.push(off);
            Ok(())
        })
        .unwrap();
        let entries = locate(r, Target::LogEntry, ROOT_INO).unwrap();
        assert_eq!(entries.iter().map(|e| e.copies[0].1).collect::<Vec<_>>(), offsets);
        assert!(
            entries.iter().any(|e| e.what == "log entry (dentry add)"),
            "{entries:?}"
        );
        let pages = locate(r, Target::LogPage, ROOT_INO).unwrap();
        assert_eq!(pages[0].copies[0].1, rec.log_head);
        assert!(pages.iter().all(|p| log.pages().contains(&p.copies[0].1)));
        for l in entries.iter().chain(&pages) {
            let off = l.copies[0].1;
            assert_eq!(
                l.copies[1],
                (CopyKind::Replica, bounds.mirror(off).unwrap()),
                "{}",
                l.what
            );
            assert!(copies_equal(r, l, 0..l.len), "{} at {off:#x}", l.what);
        }
        // Data pages: the last write wins; no replica.
        let data = locate(r, Target::DataPage, b).unwrap();
        assert_eq!(data.len(), 2);
        let mut page = vec![0u8; PAGE_SIZE as usize];
        for (d, fill) in data.iter().zip([b'B', b'C']) {
            assert_eq!(d.copies.len(), 1);
            r.read(d.copies[0].1, &mut page).unwrap();
            assert!(page.iter().all(|&x| x == fill), "{}", d.what);
        }
        assert_eq!(data[1].what, "data page (file page 1)");
        // Journal and fixed area: one header and one ring per shard, no
        // replica; the used parts of pages 1 and 2, page 2 mirrored just
        // past the data area.
        let j = locate(r, Target::Journal, 0).unwrap();
        assert_eq!(j.len(), 4);
        assert_eq!(j[1].copies[0].1, sb.journal_rings_off);
        assert_eq!(j[3].len, sb.journal_ring_size);
        assert!(j.iter().all(|l| l.copies.len() == 1));
        let f = locate(r, Target::FixedArea, 0).unwrap();
        assert!(f
            .iter()
            .all(|l| l.copies[0].1 >= PAGE_SIZE && l.copies[0].1 + l.len <= 3 * PAGE_SIZE));
        assert_eq!(f[0].copies, [(CopyKind::Primary, JOURNAL_HEADERS_OFF)]);
        for l in &f[1..] {
            let off = l.copies[0].1;
            assert_eq!(l.copies[1], (CopyKind::Replica, sb.data_end + off % PAGE_SIZE));
            assert!(copies_equal(r, l, 0..l.len), "{}", l.what);
        }
    }

    #[test]
    fn without_replicas_only_the_superblock_has_two_copies() {
        let (mem, f) = image_with(false);
        let r = &*mem;
        assert!(!bounds_of(&read_superblock(r).unwrap().0).replicas);
        for target in Target::ALL {
            let found = locate(r, target, f.b).unwrap();
            assert!(!found.is_empty(), "{target}");
            let want = if matches!(target, Target::Superblock | Target::DataChecksums) {
                2
            } else {
                1
            };
            assert!(found.iter().all(|l| l.copies.len() == want), "{target}: {found:?}");
        }
        let d = plan(r, &spec(Target::Inode, f.a, 1)).unwrap();
        assert_eq!(d[0].copy, None, "one copy: not named");
        assert!(d[0].to_string().contains(" record at "), "{}", d[0]);
    }

    #[test]
    fn plans_are_deterministic_inside_their_structure_and_sized() {
        let (mem, _, b) = image();
        let r = &*mem;
        for target in Target::ALL {
            for seed in 1..20 {
                let sp = Spec {
                    bytes: 1 + seed % 12,
                    ..spec(target, b, seed)
                };
                let d = plan(r, &sp).unwrap();
                assert_eq!(d, plan(r, &sp).unwrap(), "same seed, same bytes");
                assert_eq!(d.len(), 1);
                let d = &d[0];
                assert_eq!(d.len, sp.bytes);
                assert!(d.off >= d.base && d.off + d.len <= d.base + d.size, "{target}: {d}");
                assert_eq!(d.ino.is_some(), target.per_inode());
                if !target.may_have_replica() {
                    continue;
                }
                // Both copies: the same bytes of each.
                let both = plan(
                    r,
                    &Spec {
                        which: Which::Both,
                        ..sp
                    },
                )
                .unwrap();
                assert_eq!(
                    both.iter().map(|d| d.copy).collect::<Vec<_>>(),
                    [Some(CopyKind::Primary), Some(CopyKind::Replica)],
                    "{target}"
                );
                assert_eq!(both[0].off - both[0].base, both[1].off - both[1].base, "{target}");
                assert_eq!((both[0].len, both[0].size), (both[1].len, both[1].size));
                assert_ne!(both[0].base, both[1].base);
            }
        }
        let seeds: HashSet<u64> = (1..20)
            .map(|seed| plan(r, &spec(Target::Superblock, 0, seed)).unwrap()[0].off)
            .collect();
        assert!(seeds.len() > 5, "seeds spread the damage");
        let huge = Spec {
            bytes: 1 << 20,
            ..spec(Target::Inode, b, 1)
        };
        assert_eq!(plan(r, &huge).unwrap()[0].len, INODE_SIZE, "clipped to the structure");
        let zero = Spec {
            bytes: 0,
            ..spec(Target::Inode, b, 1)
        };
        assert!(matches!(plan(r, &zero), Err(Error::Invalid(_))));
    }

    #[test]
    fn corrupt_changes_exactly_the_planned_bytes() {
        let (mem, a, _) = image();
        let before = mem.snapshot();
        let d = corrupt(&*mem, &spec(Target::LogEntry, a, 3)).unwrap();
        let after = mem.snapshot();
        let changed: Vec<usize> = (0..before.len()).filter(|&i| before[i] != after[i]).collect();
        let (off, len) = (d[0].off as usize, d[0].len as usize);
        assert_eq!(changed, (off..off + len).collect::<Vec<_>>(), "{}", d[0]);
        assert!(
            d[0].to_string().starts_with(&format!("inode {a} log entry (")),
            "{}",
            d[0]
        );
        assert!(d[0].to_string().contains(") (primary) at "), "{}", d[0]);
        // Both copies: the same bytes of each, nothing else.
        let d = corrupt(
            &*mem,
            &Spec {
                which: Which::Both,
                ..spec(Target::Inode, a, 4)
            },
        )
        .unwrap();
        let again = mem.snapshot();
        let changed: Vec<usize> = (0..after.len()).filter(|&i| after[i] != again[i]).collect();
        let mut want: Vec<usize> = d
            .iter()
            .flat_map(|d| d.off as usize..(d.off + d.len) as usize)
            .collect();
        want.sort_unstable();
        assert_eq!(changed, want);
        assert!(d[1].to_string().contains("record (replica) at "), "{}", d[1]);
    }

    #[test]
    fn structures_without_a_replica_refuse_replica_damage() {
        // With replicas: the journal and data pages have none.
        let (mem, a, _) = image();
        for target in [Target::Journal, Target::DataPage] {
            for which in [Which::Replica, Which::Both] {
                let sp = Spec {
                    which,
                    ..spec(target, a, 1)
                };
                let err = plan(&*mem, &sp).unwrap_err();
                assert!(
                    matches!(&err, Error::NotSupported(m) if m.contains("has no replica") || m.contains("have no replica")),
                    "{target}: {err}"
                );
            }
        }
        // In the fixed area only page 2 has one: a replica's damage lands
        // there whatever the seed.
        let (sb, _) = read_superblock(&*mem).unwrap();
        for seed in 1..20 {
            let sp = Spec {
                which: Which::Replica,
                ..spec(Target::FixedArea, 0, seed)
            };
            let d = plan(&*mem, &sp).unwrap();
            assert!(
                d[0].base >= sb.data_end && d[0].off + d[0].len <= sb.data_end + PAGE_SIZE,
                "{}",
                d[0]
            );
        }
        // Without metadata replicas: every structure but the superblock and
        // the data checksums (two copies whatever the metadata keeps) refuses.
        let (mem, f) = image_with(false);
        let two_copies = [Target::Superblock, Target::DataChecksums];
        for target in Target::ALL.into_iter().filter(|t| !two_copies.contains(t)) {
            for which in [Which::Replica, Which::Both] {
                let sp = Spec {
                    which,
                    ..spec(target, f.a, 1)
                };
                let err = plan(&*mem, &sp).unwrap_err();
                assert!(
                    matches!(&err, Error::NotSupported(m) if m.contains("no replica")),
                    "{target}: {err}"
                );
                if target.may_have_replica() {
                    assert!(err.to_string().contains("made without metadata replicas"), "{err}");
                }
            }
        }
    }

    /// `target` of inode `victim`, damaged in the copies `which` names on
    /// a fresh image with replicas: `bytes` bytes from `seed`.
    fn damaged(target: Target, which: Which, victim: fn(Files) -> Ino, seed: u64, bytes: u64) -> Damaged {
        let (mem, files) = image_with(true);
        let before = mem.snapshot();
        let sp = Spec {
            which,
            bytes,
            ..spec(target, victim(files), seed)
        };
        let found = locate(&*mem, target, sp.ino).unwrap();
        let damage = corrupt(&*mem, &sp).unwrap();
        assert_eq!(damage.len(), which.copies().len());
        let at = |d: &Damage| {
            found
                .iter()
                .find(|l| l.copy(d.copy.unwrap()) == Some(d.base))
                .unwrap()
                .clone()
        };
        let located = at(&damage[0]);
        let why = format!("{which:?} {}", damage[0]);
        Damaged {
            mem,
            files,
            before,
            located,
            damage,
            why,
        }
    }

    struct Damaged {
        mem: Arc<MemRegion>,
        files: Files,
        /// The image before the damage.
        before: Vec<u8>,
        /// The structure damaged.
        located: Located,
        damage: Vec<Damage>,
        why: String,
    }

    impl Damaged {
        /// The bytes of `kind`'s copy of the damaged structure, `range`
        /// inside it, now and before the damage.
        fn copy(&self, kind: CopyKind, range: std::ops::Range<u64>) -> (Vec<u8>, Vec<u8>) {
            let off = self.located.copy(kind).unwrap() + range.start;
            let len = range.end - range.start;
            let then = self.before[off as usize..(off + len) as usize].to_vec();
            (bytes(&self.mem, off, len), then)
        }
    }

    /// A damage case: the target, the inode it belongs to, how many bytes.
    type Case = (Target, fn(Files) -> Ino, u64);

    fn file_a(f: Files) -> Ino {
        f.a
    }

    fn dir_d(f: Files) -> Ino {
        f.d
    }

    /// The byte ranges of a log page the file system reads (so repairs):
    /// its committed entries and its link to the next page. The rest past
    /// the tail is never read, and damage there stays until an append
    /// overwrites it.
    fn committed_ranges(mem: &MemRegion, ino: Ino, page: u64) -> Vec<std::ops::Range<u64>> {
        let mut ranges: Vec<_> = locate(mem, Target::LogEntry, ino)
            .unwrap()
            .iter()
            .map(|e| e.copies[0].1)
            .zip(locate(mem, Target::LogEntry, ino).unwrap().iter().map(|e| e.len))
            .filter(|&(off, _)| log::page_of(off) == page)
            .map(|(off, len)| off - page..off - page + len)
            .collect();
        assert!(!ranges.is_empty());
        ranges.push(LOG_NEXT_OFF..PAGE_SIZE);
        ranges
    }

    /// What fsck says of a clean image where one copy of some metadata
    /// differs from the other: a problem naming the pages that differ (the
    /// copies were written before one fence, so a difference is damage)
    /// and, when what fsck reads was damaged in the primary, one saying
    /// it was read from the replica; nothing else. `fsck --repair`
    /// rewrites them.
    fn assert_only_copies_differ(mem: &Arc<MemRegion>, why: &dyn fmt::Display) -> crate::fsck::Report {
        let region: Arc<dyn Region> = mem.clone();
        let rep = crate::fsck::check(region, &|_, _| {}).unwrap();
        let differ = |p: &String| p.contains("differ from their replicas");
        let read = |p: &String| p.contains("read from their replicas");
        assert_eq!(
            rep.problems.iter().filter(|p| differ(p)).count(),
            1,
            "{why}: {:?}",
            rep.problems
        );
        assert!(
            rep.problems.iter().all(|p| differ(p) || read(p)),
            "{why}: {:?}",
            rep.problems
        );
        rep
    }

    fn fsck_repair(mem: &Arc<MemRegion>) {
        let region: Arc<dyn Region> = mem.clone();
        crate::fsck::repair(region).unwrap();
    }

    #[test]
    fn a_damaged_primary_is_read_from_the_replica_and_repaired() {
        // The whole log page, one entry or 8 bytes of the record: each
        // fails a check in the primary (checksum, length, link, state).
        let cases: [Case; 5] = [
            (Target::Inode, file_a, 8),
            (Target::LogEntry, file_a, 64),
            (Target::LogEntry, dir_d, 64),
            (Target::LogPage, file_a, PAGE_SIZE),
            (Target::LogPage, dir_d, PAGE_SIZE),
        ];
        for (target, victim, n) in cases {
            let seeds = if target == Target::Inode { 12 } else { 3 };
            for seed in 1..=seeds {
                let x = damaged(target, Which::Primary, victim, seed, n);
                let (f, why) = (x.files, &x.why);
                let ino = victim(f);
                // What the file system reads of the structure, so repairs.
                let ranges = match target {
                    Target::LogPage => committed_ranges(&x.mem, ino, x.located.copies[0].1),
                    _ => std::iter::once(0..x.located.len).collect(),
                };
                let damaged_now = |x: &Damaged| {
                    ranges.iter().any(|r| {
                        let (p, _) = x.copy(CopyKind::Primary, r.clone());
                        p != x.copy(CopyKind::Replica, r.clone()).0
                    })
                };
                assert!(damaged_now(&x), "{why}: the damage hits what is read");
                // fsck (read-only) reads the replica: the inode is whole,
                // only the copies differ.
                let rep = assert_only_copies_differ(&x.mem, why);
                assert!(
                    rep.problems.iter().any(|n| n.contains("read from their replicas")),
                    "{why}: {:?}",
                    rep.problems
                );
                // A read-only mount reads everything and writes nothing.
                let fs = Fs::open(
                    x.mem.clone(),
                    MountOptions {
                        read_only: true,
                        ..MountOptions::default()
                    },
                )
                .unwrap();
                reads_everything(&fs, f, why);
                drop(fs);
                assert!(damaged_now(&x), "{why}: a read-only mount repairs nothing");
                let health = || HealthCounts::of(&read_superblock(&*x.mem).unwrap().0);
                assert_eq!(health(), HealthCounts::default(), "{why}");
                // A read-write mount repairs the primary as it reads it,
                // and counts the repair in the superblock at once.
                let fs = mount(&x.mem).unwrap();
                reads_everything(&fs, f, why);
                let counted = health();
                assert!(counted.repairs >= 1 && counted.losses == 0, "{why}: {counted:?}");
                assert_eq!(fs.health(), counted, "{why}");
                fs.unmount().unwrap();
                assert_eq!(health(), counted, "{why}: nothing more at unmount");
                for r in &ranges {
                    let (primary, then) = x.copy(CopyKind::Primary, r.clone());
                    assert_eq!(primary, x.copy(CopyKind::Replica, r.clone()).0, "{why}: {r:?}");
                    assert_eq!(primary, then, "{why}: {r:?} is what it was");
                }
                // The rest of the page past the tail is never read, so
                // never repaired, and means nothing: fsck compares the
                // committed bytes only.
                assert_eq!(fsck_problems(&x.mem), Vec::<String>::new(), "{why}");
                let fs = mount(&x.mem).unwrap();
                reads_everything(&fs, f, why);
                fs.unmount().unwrap();
            }
        }
    }

    #[test]
    fn a_damaged_replica_alone_changes_nothing_read() {
        let cases: [Case; 5] = [
            (Target::Inode, file_a, INODE_SIZE),
            (Target::LogEntry, file_a, 64),
            (Target::LogEntry, dir_d, 64),
            (Target::LogPage, file_a, PAGE_SIZE),
            (Target::LogPage, dir_d, PAGE_SIZE),
        ];
        for (target, victim, n) in cases {
            let x = damaged(target, Which::Replica, victim, 1, n);
            let why = &x.why;
            assert_eq!(x.damage[0].copy, Some(CopyKind::Replica));
            let rep = assert_only_copies_differ(&x.mem, why);
            assert!(
                !rep.problems.iter().any(|n| n.contains("read from their replicas")),
                "{why}: {:?}",
                rep.problems
            );
            let fs = mount(&x.mem).unwrap();
            reads_everything(&fs, x.files, why);
            fs.unmount().unwrap();
            let (primary, then) = x.copy(CopyKind::Primary, 0..x.located.len);
            assert_eq!(primary, then, "{why}: the primary is untouched");
            // Nothing reads the replica while the primary is sound, so a
            // clean mount does not rewrite it; fsck sees the difference and
            // its repair copies the primary over.
            let (replica, _) = x.copy(CopyKind::Replica, 0..x.located.len);
            assert_ne!(replica, then, "{why}: a mount does not scrub replicas");
            assert_only_copies_differ(&x.mem, why);
            fsck_repair(&x.mem);
            let (replica, then) = x.copy(CopyKind::Replica, 0..x.located.len);
            assert_eq!(replica, then, "{why}");
            assert_eq!(fsck_problems(&x.mem), Vec::<String>::new(), "{why}");
            let fs = mount(&x.mem).unwrap();
            reads_everything(&fs, x.files, why);
            fs.unmount().unwrap();
        }
    }

    #[test]
    fn both_copies_of_a_log_damaged_fail_that_inode_only() {
        let cases: [Case; 4] = [
            (Target::LogEntry, file_a, 64),
            (Target::LogEntry, dir_d, 64),
            (Target::LogPage, file_a, PAGE_SIZE),
            (Target::LogPage, dir_d, PAGE_SIZE),
        ];
        for (target, victim, n) in cases {
            for seed in 1..=3 {
                let x = damaged(target, Which::Both, victim, seed, n);
                let (f, why) = (x.files, &x.why);
                let ino = victim(f);
                let problems = fsck_problems(&x.mem);
                assert!(
                    problems.iter().any(|p| p.starts_with(&format!("inode {ino}: "))),
                    "{why}: {problems:?}"
                );
                let fs = mount(&x.mem).unwrap();
                let err = fs.getattr(ino).map(|_| ()).unwrap_err();
                assert!(matches!(err, Error::Corrupt(_)), "{why}: {err}");
                assert_eq!(err.errno(), libc::EIO);
                if ino == f.d {
                    assert_eq!(names(&fs, f.d).unwrap_err().errno(), libc::EIO, "{why}");
                } else {
                    assert_eq!(read_file(&fs, ino, 4096).unwrap_err().errno(), libc::EIO, "{why}");
                }
                others_read(&fs, f, ino, why);
                // Met twice, counted once, in the superblock before unmount.
                let lost = HealthCounts::of(&read_superblock(&*x.mem).unwrap().0);
                assert_eq!((lost.losses, lost.last_loss_ino), (1, ino), "{why}: {lost:?}");
                assert_eq!(fs.health(), lost, "{why}");
                fs.unmount().unwrap();
                // fsck reports the counters; a new mount counts the loss again.
                let rep = crate::fsck::check(x.mem.clone(), &|_, _| {}).unwrap();
                assert!(
                    rep.notes
                        .iter()
                        .any(|n| n.contains("1 object(s) lost since mkfs (last: inode")),
                    "{why}: {:?}",
                    rep.notes
                );
                // Nothing was "repaired" from a damaged replica.
                let (primary, _) = x.copy(CopyKind::Primary, 0..x.located.len);
                let (replica, _) = x.copy(CopyKind::Replica, 0..x.located.len);
                let base = x.located.copies[0].1;
                let d = &x.damage[0];
                let hit = (d.off - base) as usize..(d.off - base + d.len) as usize;
                let (_, then) = x.copy(CopyKind::Primary, 0..x.located.len);
                assert_ne!(primary[hit.clone()], then[hit.clone()], "{why}");
                assert_ne!(replica[hit.clone()], then[hit], "{why}");
            }
        }
    }

    #[test]
    fn both_inode_record_copies_damaged_fail_that_file_only() {
        let mut eio = 0;
        for seed in 1..=12 {
            let x = damaged(Target::Inode, Which::Both, file_a, seed, 8);
            let (f, why) = (x.files, &x.why);
            assert!(!fsck_problems(&x.mem).is_empty(), "{why}");
            let fs = mount(&x.mem).unwrap();
            let err = fs.getattr(f.a).map(|_| ()).unwrap_err();
            // The valid bit hit: the slot reads as free; else a checksum or
            // pointer check fails.
            assert!(matches!(err, Error::NotFound | Error::Corrupt(_)), "{why}: {err}");
            eio += usize::from(matches!(err, Error::Corrupt(_)));
            others_read(&fs, f, f.a, why);
            fs.unmount().unwrap();
        }
        assert!(eio > 0);
    }

    #[test]
    fn poisoned_primary_metadata_is_read_from_the_replica() {
        for target in [Target::Inode, Target::LogEntry, Target::LogPage] {
            let (mem, f) = image_with(true);
            let sp = Spec {
                which: Which::Primary,
                bytes: 64,
                ..spec(target, f.a, 1)
            };
            let d = plan(&*mem, &sp).unwrap();
            let (sb, _) = read_superblock(&*mem).unwrap();
            let tail = live_record(&*mem, &sb, f.a).unwrap().1.log_tail;
            mem.poison(d[0].off, d[0].len).unwrap();
            let fs = mount(&mem).unwrap();
            reads_everything(&fs, f, &d[0]);
            fs.unmount().unwrap();
            // fsck reads around the media error too, and reports the lost
            // copy as a difference between the copies, unless it lies past
            // the log's tail, where nothing is committed.
            let past_tail =
                target == Target::LogPage && d[0].off >= tail && log::page_of(d[0].off) == log::page_of(tail);
            if past_tail {
                assert_eq!(fsck_problems(&mem), Vec::<String>::new(), "{}", d[0]);
            } else {
                assert_only_copies_differ(&mem, &d[0]);
            }
            // Both copies poisoned: that inode reads as EIO.
            let (mem, f) = image_with(true);
            let both = Spec {
                which: Which::Both,
                ..sp
            };
            for d in plan(&*mem, &both).unwrap() {
                mem.poison(d.off, d.len).unwrap();
            }
            let fs = mount(&mem).unwrap();
            assert_eq!(fs.getattr(f.a).map(|_| ()).unwrap_err().errno(), libc::EIO, "{target}");
            others_read(&fs, f, f.a, &target);
        }
    }

    #[test]
    fn fixed_area_page_2_is_read_from_its_replica_when_the_primary_is_damaged() {
        // Page 2 of the fixed area (the recovery inode, the reserved
        // slots, the inode-table heads) is mirrored at `data_end`.
        let (mem, f1) = image_with(true);
        let before = mem.snapshot();
        let (sb, _) = read_superblock(&*mem).unwrap();
        let bounds = bounds_of(&sb);
        // Seed 1 picks the inode-table heads.
        let heads = Spec {
            bytes: 16,
            ..spec(Target::FixedArea, 0, 1)
        };
        let d = corrupt(&*mem, &heads).unwrap();
        assert!(d[0].what.ends_with("inode-table heads"), "{}", d[0]);
        let m = bounds.mirror(d[0].off).unwrap();
        assert_eq!(
            bytes(&mem, m, 16),
            before[m as usize..m as usize + 16],
            "the replica is intact"
        );
        assert_only_copies_differ(&mem, &d[0]);
        let fs = mount(&mem).unwrap();
        reads_everything(&fs, f1, &d[0]);
        fs.unmount().unwrap();
        // Its replica damaged instead: nothing read changes; fsck sees the
        // copies differ.
        let (mem, f2) = image_with(true);
        let d = corrupt(
            &*mem,
            &Spec {
                which: Which::Replica,
                ..heads
            },
        )
        .unwrap();
        assert!(
            d[0].what.ends_with("inode-table heads") && d[0].base >= sb.data_end,
            "{}",
            d[0]
        );
        assert_only_copies_differ(&mem, &d[0]);
        let fs = mount(&mem).unwrap();
        reads_everything(&fs, f2, &d[0]);
        fs.unmount().unwrap();
        // Its primary poisoned: the mount reads the replica.
        let (mem, f3) = image_with(true);
        let d = plan(&*mem, &heads).unwrap();
        mem.poison(d[0].off, d[0].len).unwrap();
        let fs = mount(&mem).unwrap();
        reads_everything(&fs, f3, &d[0]);
        fs.unmount().unwrap();
        // The recovery inode's primary damaged: the mount takes the saved
        // allocator state from the replica; the unmount saves the state
        // again, in both copies.
        let (mem, f4) = image_with(true);
        let off = crate::layout::RECOVERY_INODE_OFF;
        let mut buf = [0u8; 16];
        mem.read(off, &mut buf).unwrap();
        buf.iter_mut().for_each(|b| *b ^= 0x33);
        mem.write(off, &buf).unwrap();
        assert_only_copies_differ(&mem, &"recovery inode");
        let fs = mount(&mem).unwrap();
        assert!(fs.mount_report().clean, "the replica's saved state, no scan");
        reads_everything(&fs, f4, &"recovery inode");
        fs.unmount().unwrap();
        let mirror = bounds.mirror(off).unwrap();
        assert_eq!(bytes(&mem, off, INODE_SIZE), bytes(&mem, mirror, INODE_SIZE));
        assert_eq!(fsck_problems(&mem), Vec::<String>::new());
    }

    #[test]
    fn a_damaged_file_record_fails_that_file_only_without_replicas() {
        let mut eio = 0;
        for seed in 1..=12 {
            let (mem, f) = image_with(false);
            let d = corrupt(&*mem, &spec(Target::Inode, f.a, seed)).unwrap();
            let fs = mount(&mem).unwrap();
            let err = fs.getattr(f.a).map(|_| ()).unwrap_err();
            // The valid bit hit: the slot reads as free; else a checksum
            // or pointer check fails.
            assert!(matches!(err, Error::NotFound | Error::Corrupt(_)), "{}: {err}", d[0]);
            if matches!(err, Error::Corrupt(_)) {
                assert_eq!(err.errno(), libc::EIO);
                eio += 1;
            }
            let fb = fs.lookup(ROOT_INO, b"b").unwrap();
            assert_eq!(read_file(&fs, fb.ino, 8192).unwrap()[4096..], [b'C'; 4096]);
            assert_eq!(fb.ino, f.b);
        }
        assert!(eio > 0);
    }

    #[test]
    fn damaged_log_entries_and_pages_are_found_by_fsck_without_replicas() {
        for target in [Target::LogEntry, Target::LogPage] {
            let (mem, f) = image_with(false);
            // The first log page of "a" holds all its entries: damage there
            // always hits an entry, the end mark or the next pointer.
            let sp = Spec {
                bytes: PAGE_SIZE,
                ..spec(target, f.a, 1)
            };
            let d = corrupt(&*mem, &sp).unwrap();
            assert_eq!(d[0].copy, None);
            assert!(!fsck_problems(&mem).is_empty(), "{target}: {}", d[0]);
            let fs = mount(&mem).unwrap();
            assert!(fs.getattr(f.a).is_err(), "{target}");
            let b = fs.lookup(ROOT_INO, b"b").unwrap();
            assert_eq!(read_file(&fs, b.ino, 4096).unwrap(), [b'B'; 4096]);
        }
    }

    #[test]
    fn a_damaged_primary_superblock_is_repaired_from_the_replica() {
        let (mem, a, _) = image();
        let d = corrupt(&*mem, &spec(Target::Superblock, 0, 5)).unwrap();
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].copy, Some(CopyKind::Primary));
        assert!(
            d[0].to_string().starts_with("superblock (primary) at 0x0 (440 bytes)"),
            "{}",
            d[0]
        );
        assert!(read_superblock(&*mem).unwrap().1, "primary reads as damaged");
        let fs = mount(&mem).unwrap();
        assert!(fs.mount_report().superblock_repaired);
        assert_eq!(read_file(&fs, a, 4096).unwrap(), [b'A'; 4096]);
        drop(fs);
        assert!(!read_superblock(&*mem).unwrap().1, "the mount rewrote the primary");
    }

    #[test]
    fn both_superblocks_damaged_is_a_clear_error() {
        let (mem, _, _) = image();
        let sp = Spec {
            which: Which::Both,
            ..spec(Target::Superblock, 0, 2)
        };
        let d = corrupt(&*mem, &sp).unwrap();
        assert_eq!(
            d.iter().map(|d| d.copy).collect::<Vec<_>>(),
            [Some(CopyKind::Primary), Some(CopyKind::Replica)]
        );
        assert_eq!(d[0].off, d[1].off - d[1].base, "the same bytes of each copy");
        let err = mount(&mem).map(|_| ()).unwrap_err();
        assert!(matches!(err, Error::Corrupt(_) | Error::NotNovafs(_)), "{err}");
        // Still locatable, so a second injection works on a dead image.
        let d = corrupt(
            &*mem,
            &Spec {
                which: Which::Replica,
                ..sp
            },
        )
        .unwrap();
        assert_eq!(d[0].base, mem.len() - PAGE_SIZE);
    }

    #[test]
    fn a_damaged_primary_does_not_hide_the_log_from_locate() {
        let (mem, f) = image_with(true);
        let r = &*mem;
        let entries = locate(r, Target::LogEntry, f.a).unwrap();
        let pages = locate(r, Target::LogPage, f.a).unwrap();
        let data = locate(r, Target::DataPage, f.a).unwrap();
        assert_eq!(data.len(), 1);
        // The primary log page destroyed: lengths and links read as
        // garbage there; the replica still leads through the log.
        let all = Spec {
            bytes: PAGE_SIZE,
            ..spec(Target::LogPage, f.a, 1)
        };
        corrupt(r, &all).unwrap();
        assert_eq!(locate(r, Target::LogEntry, f.a).unwrap(), entries);
        assert_eq!(locate(r, Target::LogPage, f.a).unwrap(), pages);
        // The primary record destroyed too: the replica's names the log.
        let rec = Spec {
            bytes: INODE_SIZE,
            ..spec(Target::Inode, f.a, 1)
        };
        corrupt(r, &rec).unwrap();
        assert_eq!(locate(r, Target::LogEntry, f.a).unwrap(), entries);
        // The data pages are still what a mount maps: it reads the
        // replica's record and entries.
        assert_eq!(locate(r, Target::DataPage, f.a).unwrap(), data);
        let fs = Fs::open(
            mem.clone(),
            MountOptions {
                read_only: true,
                ..MountOptions::default()
            },
        )
        .unwrap();
        assert_eq!(read_file(&fs, f.a, 8192).unwrap(), [b'A'; 4096]);
        drop(fs);
        // So the replica can be damaged too: the inode is lost.
        corrupt(
            r,
            &Spec {
                which: Which::Replica,
                ..all
            },
        )
        .unwrap();
        assert!(locate(r, Target::LogEntry, f.a).is_err(), "no copy leads anywhere now");
        assert!(locate(r, Target::DataPage, f.a).is_err());
        let fs = mount(&mem).unwrap();
        assert!(fs.getattr(f.a).is_err());
        others_read(&fs, f, f.a, &"both pages damaged");
    }

    #[test]
    fn a_damaged_log_can_be_damaged_again_but_its_data_pages_are_unknown() {
        for replicas in [true, false] {
            let (mem, f) = image_with(replicas);
            let a = f.a;
            let r = &*mem;
            let w = meta(&mem);
            let entries = locate(r, Target::LogEntry, a).unwrap();
            let pages = locate(r, Target::LogPage, a).unwrap();
            assert!(!locate(r, Target::DataPage, a).unwrap().is_empty());
            // Damage every entry's body in every copy (its first 16 bytes,
            // type and length, stay): each now fails its checksum.
            for e in &entries {
                let off = e.copies[0].1 + 16;
                let mut buf = vec![0u8; (e.len - 16) as usize];
                r.read(off, &mut buf).unwrap();
                buf.iter_mut().for_each(|b| *b ^= 0x5A);
                w.write(off, &buf).unwrap();
            }
            let (sb, _) = read_superblock(r).unwrap();
            let (_, rec) = live_record(r, &sb, a).unwrap();
            let load = Log::load(r, bounds_of(&sb), rec.log_head, rec.log_tail, |_, _, _| Ok(()));
            assert!(matches!(load, Err(Error::Corrupt(m)) if m.contains("checksum")));
            // Still the same entries and pages to damage, a second time.
            assert_eq!(locate(r, Target::LogEntry, a).unwrap(), entries);
            assert_eq!(locate(r, Target::LogPage, a).unwrap(), pages);
            let which = if replicas { Which::Both } else { Which::Primary };
            corrupt(
                r,
                &Spec {
                    which,
                    ..spec(Target::LogEntry, a, 2)
                },
            )
            .unwrap();
            // The data pages are what the file system's replay maps: none now.
            let err = locate(r, Target::DataPage, a).unwrap_err();
            assert!(
                matches!(&err, Error::Corrupt(m) if m.contains(&format!("data pages of inode {a}")) && m.contains("checksum")),
                "{err}"
            );
        }
    }

    /// The data protection structures themselves damaged: one checksum
    /// copy is rewritten from the data and the other copy; parity is only
    /// read when a strip needs rebuilding, so damage to it alone changes
    /// nothing read, but then a damaged strip is EIO; both checksum copies
    /// of a strip damaged leave it unverifiable: EIO, that file only.
    #[test]
    fn damaged_checksums_or_parity_are_repaired_or_confined() {
        let mut whole = vec![b'B'; 4096];
        whole.extend([b'C'; 4096]);
        let read_b = |mem: &Arc<MemRegion>, b: Ino| {
            let fs = mount(mem).unwrap();
            let before = fs.health().data_repairs; // counted since mkfs
            let r = read_file(&fs, b, 8192);
            let repairs = fs.health().data_repairs - before;
            fs.unmount().unwrap();
            (r, repairs)
        };
        // One checksum copy, either one: read fine; the first is rewritten.
        for which in [Which::Primary, Which::Replica] {
            let (mem, _, b) = image();
            let sp = Spec {
                which,
                bytes: 32,
                ..spec(Target::DataChecksums, b, 1)
            };
            corrupt(&*mem, &sp).unwrap();
            let (r, repairs) = read_b(&mem, b);
            assert!(r.unwrap() == whole, "{which:?}");
            assert_eq!(
                repairs > 0,
                which == Which::Primary,
                "{which:?}: the second copy is read only when needed"
            );
            assert_eq!(read_b(&mem, b).1, 0, "{which:?}: repaired on the media");
        }
        // Both copies of the checksums: the data cannot be verified.
        let (mem, a, b) = image();
        let sp = Spec {
            which: Which::Both,
            bytes: 32,
            ..spec(Target::DataChecksums, b, 1)
        };
        corrupt(&*mem, &sp).unwrap();
        assert_eq!(read_b(&mem, b).0.unwrap_err().errno(), libc::EIO);
        let fs = mount(&mem).unwrap();
        assert_eq!(read_file(&fs, a, 4096).unwrap(), [b'A'; 4096]);
        fs.unmount().unwrap();
        // Parity alone: nothing read changes; with a bad strip too: EIO.
        let (mem, _, b) = image();
        let p = corrupt(
            &*mem,
            &Spec {
                bytes: 512,
                ..spec(Target::Parity, b, 1)
            },
        )
        .unwrap();
        assert_eq!(read_b(&mem, b).0.unwrap(), whole);
        let page = mem.snapshot();
        let data = locate(&*mem, Target::DataPage, b).unwrap();
        // The data page whose parity was damaged: the same index.
        let sb = read_superblock(&*mem).unwrap().0;
        let index = (p[0].base - sb.parity_off) / STRIP_SIZE;
        let victim = data
            .iter()
            .find(|l| (l.copies[0].1 - sb.data_start) / PAGE_SIZE == index)
            .unwrap();
        let at = victim.copies[0].1 + 10;
        mem.write(at, &[page[at as usize] ^ 0xFF]).unwrap();
        assert_eq!(read_b(&mem, b).0.unwrap_err().errno(), libc::EIO);
    }

    /// Data pages are protected by strip checksums and parity (Fortis
    /// §4.3, on by default): one poisoned strip is rebuilt, two in the same
    /// page make that file EIO and nothing else.
    #[test]
    fn a_poisoned_data_strip_is_rebuilt_and_two_are_eio_for_that_file_only() {
        let (mem, a, b) = image();
        let d = plan(&*mem, &spec(Target::DataPage, b, 1)).unwrap();
        let page = d[0].off - d[0].off % PAGE_SIZE;
        let mut whole = vec![b'B'; 4096];
        whole.extend([b'C'; 4096]);
        mem.poison(page + 100, 1).unwrap();
        let fs = mount(&mem).unwrap();
        assert!(read_file(&fs, b, 8192).unwrap() == whole, "rebuilt from parity");
        assert!(fs.health().data_repairs > 0);
        fs.unmount().unwrap();
        mem.poison(page + 3000, 1).unwrap();
        let fs = mount(&mem).unwrap();
        assert_eq!(read_file(&fs, b, 8192).unwrap_err().errno(), libc::EIO);
        assert_eq!(read_file(&fs, a, 4096).unwrap(), [b'A'; 4096]);
        assert_eq!((fs.health().losses, fs.health().last_loss_ino), (1, b));
    }

    #[test]
    fn bad_inode_numbers_and_damaged_chains_are_errors_not_hangs() {
        for replicas in [true, false] {
            let (mem, f) = image_with(replicas);
            let a = f.a;
            let r = &*mem;
            // Damage goes to both copies, as the file system would write it.
            let w = meta(&mem);
            assert!(matches!(locate(r, Target::Inode, 0), Err(Error::Invalid(_))));
            assert!(matches!(locate(r, Target::Inode, u64::MAX), Err(Error::NotFound)));
            assert!(matches!(locate(r, Target::LogEntry, 999), Err(Error::NotFound)));
            let d = locate(r, Target::DataPage, ROOT_INO).unwrap();
            assert!(d.is_empty(), "a directory has no data pages");
            assert!(matches!(
                plan(r, &spec(Target::DataPage, ROOT_INO, 1)),
                Err(Error::Invalid(_))
            ));
            // A log whose tail is lost and whose page links to itself.
            let (sb, _) = read_superblock(r).unwrap();
            let off = record_off(r, &sb, a).unwrap();
            let head = r.load_u64(off + 8).unwrap();
            w.store_u64(off + 16, head + PAGE_SIZE + 64).unwrap();
            w.store_u64(head + LOG_NEXT_OFF, head).unwrap();
            let err = locate(r, Target::LogEntry, a).unwrap_err();
            assert!(matches!(&err, Error::Corrupt(m) if m.contains("loops")), "{err}");
            // An inode-table chunk chain looping back to its first chunk.
            let first = r.load_u64(sb.inode_heads_off).unwrap();
            w.store_u64(first + crate::layout::CHUNK_NEXT_OFF, first).unwrap();
            let far = 1 + 2 * INODES_PER_CHUNK * 3;
            assert!(matches!(locate(r, Target::Inode, far), Err(Error::Corrupt(_))));
            // A destroyed fixed area: the heads are garbage.
            w.write(INODE_HEADS_OFF, &[0xA5; 16]).unwrap();
            assert!(matches!(locate(r, Target::Inode, a), Err(Error::Corrupt(_))));
        }
    }

    fn mount_skipping(mem: &Arc<MemRegion>) -> Fs {
        let opts = MountOptions {
            meta_replicas: crate::MetaReplicas::Skipped,
            ..MountOptions::default()
        };
        Fs::open(mem.clone(), opts).unwrap()
    }

    fn stale(mem: &MemRegion) -> bool {
        bounds_of(&read_superblock(mem).unwrap().0).stale
    }

    /// A mount without metadata protection leaves the replicas behind and
    /// says so before its first write; fsck accepts the difference; the
    /// next protected mount rewrites every replica, after which damage to
    /// a primary is repaired again, whether the skipping mount ended
    /// cleanly or crashed.
    #[test]
    fn a_mount_without_protection_leaves_stale_replicas_that_the_next_protected_mount_rewrites() {
        for crash in [false, true] {
            let (mem, f) = image_with(true);
            let fs = mount_skipping(&mem);
            assert!(stale(&mem), "stale from the start of the mount");
            fs.write(f.a, 0, &[b'Z'; 4096]).unwrap();
            let (sb, _) = read_superblock(&*mem).unwrap();
            let (off, rec) = live_record(&*mem, &sb, f.a).unwrap();
            let m = bounds_of(&sb).mirror(off).unwrap();
            let replica_tail = mem.load_u64(m + crate::layout::INODE_TAIL_OFF).unwrap();
            assert_ne!(replica_tail, rec.log_tail, "the replica was not written");
            if crash {
                drop(fs);
            } else {
                fs.unmount().unwrap();
                let rep = crate::fsck::check(mem.clone(), &|_, _| {}).unwrap();
                assert_eq!(rep.problems, Vec::<String>::new());
                assert!(
                    rep.notes.iter().any(|n| n.contains("replicas are stale")),
                    "{:?}",
                    rep.notes
                );
            }
            assert!(stale(&mem));
            // A read-only mount cannot rewrite them and leaves them stale.
            drop(
                Fs::open(
                    mem.clone(),
                    MountOptions {
                        read_only: true,
                        ..MountOptions::default()
                    },
                )
                .unwrap(),
            );
            assert!(stale(&mem));
            let fs = mount(&mem).unwrap();
            assert!(fs.mount_report().replicas_refreshed, "crash {crash}");
            assert!(!stale(&mem));
            assert_eq!(mem.load_u64(m + crate::layout::INODE_TAIL_OFF).unwrap(), rec.log_tail);
            fs.unmount().unwrap();
            assert_eq!(fsck_problems(&mem), Vec::<String>::new(), "crash {crash}");
            // The replicas are whole again: a damaged primary reads from them.
            let sp = Spec {
                bytes: PAGE_SIZE,
                ..spec(Target::LogPage, f.a, 1)
            };
            corrupt(&*mem, &sp).unwrap();
            let fs = mount(&mem).unwrap();
            assert_eq!(read_file(&fs, f.a, 8192).unwrap(), [b'Z'; 4096], "crash {crash}");
            fs.unmount().unwrap();
        }
    }

    /// While the replicas are stale nothing reads them: a damaged primary
    /// is EIO, never the older contents its replica still holds.
    #[test]
    fn a_stale_replica_is_never_used_for_repair() {
        let (mem, f) = image_with(true);
        let fs = mount_skipping(&mem);
        fs.write(f.a, 0, &[b'Z'; 4096]).unwrap();
        fs.unmount().unwrap();
        let sp = Spec {
            bytes: PAGE_SIZE,
            ..spec(Target::LogPage, f.a, 1)
        };
        corrupt(&*mem, &sp).unwrap();
        for opts in [
            MountOptions {
                read_only: true,
                ..MountOptions::default()
            },
            MountOptions {
                meta_replicas: crate::MetaReplicas::Skipped,
                ..MountOptions::default()
            },
        ] {
            let fs = Fs::open(mem.clone(), opts).unwrap();
            let err = read_file(&fs, f.a, 8192).unwrap_err();
            assert_eq!(err.errno(), libc::EIO, "{opts:?}: {err}");
            drop(fs);
        }
        assert!(fsck_problems(&mem)
            .iter()
            .any(|p| p.starts_with(&format!("inode {}: ", f.a))));
    }

    #[test]
    fn requiring_protection_refuses_an_image_without_replicas() {
        let (mem, _) = image_with(false);
        let opts = MountOptions {
            meta_replicas: crate::MetaReplicas::Required,
            ..MountOptions::default()
        };
        let err = Fs::open(mem.clone(), opts).map(|_| ()).unwrap_err();
        assert!(
            err.to_string().contains("novafs tune --enable meta-protection"),
            "{err}"
        );
        // Skipping on an image without replicas changes nothing.
        mount_skipping(&mem).unmount().unwrap();
        assert!(!stale(&mem));
        let (mem, _) = image_with(true);
        Fs::open(mem.clone(), opts).unwrap().unmount().unwrap();
    }

    #[test]
    fn target_names_round_trip() {
        for t in Target::ALL {
            assert_eq!(Target::parse(t.name()), Some(t));
        }
        assert_eq!(Target::parse("nope"), None);
    }
}
