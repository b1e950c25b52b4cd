//! Fault injection (issue 11; NOVA-Fortis §4): finds one on-media structure
//! of an unmounted image the way the file system does and damages it, so
//! tests and users can see what detection and repair make of it.
//!
//! [`locate`] lists every instance of a kind of structure, with the offset
//! of each copy the format keeps; [`plan`] picks one instance and a byte
//! range in it from a seeded RNG (the same seed picks the same bytes);
//! [`corrupt`] overwrites that range with different bytes. Poisoning a
//! range instead (a media error) is the region's business: the caller
//! records [`plan`]'s ranges in `pm`'s bad-block list.
//!
//! Everything read here comes from an image that may already be damaged:
//! every pointer is bounded before it is followed and every chain walk is
//! bounded, so a damaged image gives an error, never a panic or a hang.

use std::fmt;
use std::ops::ControlFlow;

use pm::Region;

use crate::error::{corrupt, Error, Result};
use crate::inode::{Body, InodeState};
use crate::itable::{read_live_record, InodeTables};
use crate::layout::{
    EntryType, Ino, Inode, Superblock, INODE_HEADS_OFF, INODE_LIVE, INODE_SIZE, JOURNAL_HEADERS_OFF, PAGE_SIZE,
    RESERVED_INODES, RESERVED_INODES_OFF,
};
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
    /// A data page a file maps now (the last write of each file page wins).
    DataPage,
}

impl Target {
    pub const ALL: [Target; 7] = [
        Target::Superblock,
        Target::Inode,
        Target::LogPage,
        Target::LogEntry,
        Target::Journal,
        Target::FixedArea,
        Target::DataPage,
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
            Target::Inode | Target::LogPage | Target::LogEntry | Target::DataPage
        )
    }

    /// The copies of this structure the format keeps today. Replicas of
    /// inodes and log pages come with metadata protection (issue 11).
    pub fn copies(self) -> &'static [CopyKind] {
        match self {
            Target::Superblock => &[CopyKind::Primary, CopyKind::Replica],
            _ => &[CopyKind::Primary],
        }
    }

    /// Why a replica of this structure cannot be damaged.
    fn no_replica(self) -> &'static str {
        match self {
            Target::Inode => "this image has no replica of inode records (the format keeps one of the superblock only)",
            Target::LogPage | Target::LogEntry => {
                "this image has no replica of log pages (the format keeps one of the superblock only)"
            }
            Target::Journal => "the journal has no replica (the format keeps one of the superblock only)",
            Target::FixedArea => "the fixed area has no replica (the format keeps one of the superblock only)",
            Target::DataPage => "data pages have no replica",
            Target::Superblock => "the superblock has a replica",
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
    /// Region offset of each copy the format keeps, the primary first.
    pub copies: Vec<(CopyKind, u64)>,
}

impl Located {
    fn one(what: impl Into<String>, ino: Option<Ino>, off: u64, len: u64) -> Located {
        Located {
            what: what.into(),
            ino,
            len,
            copies: vec![(CopyKind::Primary, off)],
        }
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
        }
    }
}

/// One byte range chosen (and, by [`corrupt`], changed) in one copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    pub what: String,
    pub ino: Option<Ino>,
    /// The copy, when the format keeps more than one.
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
            vec![Located::one(what, Some(ino), off, INODE_SIZE)]
        }
        Target::LogPage => {
            let mut pages = Vec::new();
            walk_committed(region, &sb, ino, |step| {
                if let Step::Page(p) = step {
                    pages.push(Located::one("log page", Some(ino), p, PAGE_SIZE));
                }
            })?;
            pages
        }
        Target::LogEntry => {
            let mut entries = Vec::new();
            walk_committed(region, &sb, ino, |step| {
                if let Step::Entry(off, bytes) = step {
                    let kind = EntryType::from_u8(bytes[0]).map_or("unknown type", entry_name);
                    let what = format!("log entry ({kind})");
                    entries.push(Located::one(what, Some(ino), off, bytes.len() as u64));
                }
            })?;
            entries
        }
        Target::DataPage => {
            let (off, rec) = live_record(region, &sb, ino)?;
            // The pages the file system maps: its own replay of the log,
            // which verifies every entry.
            let st = InodeState::load(region, bounds, off, &rec).map_err(|e| {
                in_context(
                    e,
                    format_args!("the data pages of inode {ino} are found by replaying its log"),
                )
            })?;
            let Body::File(map) = &st.meta.body else {
                return Ok(Vec::new()); // a directory or a special file
            };
            map.runs()
                .into_iter()
                .flat_map(|(pgoff, block, n)| (0..n).map(move |i| (pgoff + i, block + i * PAGE_SIZE)))
                .map(|(pgoff, block)| {
                    Located::one(format!("data page (file page {pgoff})"), Some(ino), block, PAGE_SIZE)
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
        Target::FixedArea => vec![
            Located::one("fixed area: journal headers", None, JOURNAL_HEADERS_OFF, 64 * shards),
            Located::one(
                "fixed area: reserved inode slots",
                None,
                RESERVED_INODES_OFF,
                RESERVED_INODES * INODE_SIZE,
            ),
            Located::one("fixed area: inode-table heads", None, INODE_HEADS_OFF, 8 * shards),
        ],
    })
}

/// Picks what [`corrupt`] would change, without writing: one instance of
/// the target and a byte range in it, in each copy `spec.which` names.
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
    let kept = spec.target.copies();
    if spec.which.copies().iter().any(|c| !kept.contains(c)) {
        return Err(Error::NotSupported(spec.target.no_replica()));
    }
    let found = locate(region, spec.target, spec.ino)?;
    if found.is_empty() {
        return Err(Error::Invalid(match spec.target {
            Target::LogPage => "the inode has no log pages",
            Target::LogEntry => "the inode has no committed log entries",
            Target::DataPage => "the inode maps no data pages (not a file, or an empty one)",
            _ => "no such structure on this image",
        }));
    }
    let s = &found[rng.below(found.len() as u64) as usize];
    let len = spec.bytes.min(s.len);
    let at = rng.below(s.len - len + 1);
    spec.which
        .copies()
        .iter()
        .map(|&kind| {
            let base = s.copy(kind).ok_or(Error::NotSupported(spec.target.no_replica()))?;
            Ok(Damage {
                what: s.what.clone(),
                ino: s.ino,
                copy: (kept.len() > 1).then_some(kind),
                base,
                size: s.len,
                off: base + at,
                len,
            })
        })
        .collect()
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
    })
}

/// Offset of inode `ino`'s record, where the inode tables put it.
fn record_off(region: &dyn Region, sb: &Superblock, ino: Ino) -> Result<u64> {
    if ino == 0 {
        return Err(Error::Invalid("inode numbers start at 1"));
    }
    InodeTables::load(region, sb, bounds_of(sb))?.locate(ino)
}

/// The offset and record of live inode `ino`.
fn live_record(region: &dyn Region, sb: &Superblock, ino: Ino) -> Result<(u64, Inode)> {
    let off = record_off(region, sb, ino)?;
    Ok((off, read_live_record(region, off, ino)?))
}

/// Walks the committed part of inode `ino`'s log, from its head to the
/// page holding the tail: pages and entries as [`log::walk`] finds them,
/// checking the structure only, since damaged entries are still entries
/// to damage (and spare pages past the tail hold nothing committed).
fn walk_committed(region: &dyn Region, sb: &Superblock, ino: Ino, mut visit: impl FnMut(Step<'_>)) -> Result<()> {
    let (_, rec) = live_record(region, sb, ino)?;
    log::walk(
        region,
        bounds_of(sb),
        rec.log_head,
        rec.log_tail,
        Verify::Structure,
        |step| {
            Ok(match step {
                Step::Tail => ControlFlow::Break(()),
                step => {
                    visit(step);
                    ControlFlow::Continue(())
                }
            })
        },
    )
    .map_err(|e| in_context(e, format_args!("the log of inode {ino}")))
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
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Arc;

    use pm::MemRegion;

    use super::*;
    use crate::fs::{Fs, MountOptions};
    use crate::itable::InodeTables;
    use crate::layout::{INODES_PER_CHUNK, LOG_NEXT_OFF, ROOT_INO};
    use crate::log::Log;
    use crate::mkfs::FormatOptions;

    /// A 16 MiB image with two shards: "a" (one page of 'A'), "b" (two
    /// pages of 'B' then one of 'C' over the second), a directory "d".
    fn image() -> (Arc<MemRegion>, Ino, Ino) {
        let mem = Arc::new(MemRegion::new(16 << 20));
        let region: Arc<dyn Region> = mem.clone();
        Fs::format(
            region.clone(),
            &FormatOptions {
                shards: Some(2),
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
        fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
        fs.unmount().unwrap();
        (mem, a, b)
    }

    fn mount(mem: &Arc<MemRegion>) -> Result<Fs> {
        Fs::open(mem.clone(), MountOptions::default())
    }

    fn read_file(fs: &Fs, ino: Ino, len: usize) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        let n = fs.read(ino, 0, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
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
        // Superblock: both copies, where read_superblock looks.
        let s = locate(r, Target::Superblock, 0).unwrap();
        assert_eq!(
            s[0].copies,
            [(CopyKind::Primary, 0), (CopyKind::Replica, r.len() - PAGE_SIZE)]
        );
        assert_eq!(s[0].len, 440);
        // Inode records: where the inode tables put them.
        let tables = InodeTables::load(r, &sb, bounds).unwrap();
        for ino in [ROOT_INO, a, b, 1000] {
            let l = locate(r, Target::Inode, ino).unwrap();
            assert_eq!(
                l[0].copies,
                [(CopyKind::Primary, tables.locate(ino).unwrap())],
                "ino {ino}"
            );
        }
        // Log entries and pages: what the log replay visits.
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
        // Data pages: the last write wins.
        let data = locate(r, Target::DataPage, b).unwrap();
        assert_eq!(data.len(), 2);
        let mut page = vec![0u8; PAGE_SIZE as usize];
        for (d, fill) in data.iter().zip([b'B', b'C']) {
            r.read(d.copies[0].1, &mut page).unwrap();
            assert!(page.iter().all(|&x| x == fill), "{}", d.what);
        }
        assert_eq!(data[1].what, "data page (file page 1)");
        // Journal and fixed area: one header and one ring per shard; the
        // used parts of pages 1 and 2.
        let j = locate(r, Target::Journal, 0).unwrap();
        assert_eq!(j.len(), 4);
        assert_eq!(j[1].copies[0].1, sb.journal_rings_off);
        assert_eq!(j[3].len, sb.journal_ring_size);
        let f = locate(r, Target::FixedArea, 0).unwrap();
        assert!(f
            .iter()
            .all(|l| l.copies[0].1 >= PAGE_SIZE && l.copies[0].1 + l.len <= 3 * PAGE_SIZE));
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
    }

    #[test]
    fn a_damaged_file_record_fails_that_file_only() {
        let mut eio = 0;
        for seed in 1..=12 {
            let (mem, a, b) = image();
            let d = corrupt(&*mem, &spec(Target::Inode, a, seed)).unwrap();
            let fs = mount(&mem).unwrap();
            let err = fs.getattr(a).map(|_| ()).unwrap_err();
            // The valid bit hit: the slot reads as free; else a checksum
            // or pointer check fails.
            assert!(matches!(err, Error::NotFound | Error::Corrupt(_)), "{}: {err}", d[0]);
            if matches!(err, Error::Corrupt(_)) {
                assert_eq!(err.errno(), libc::EIO);
                eio += 1;
            }
            let fb = fs.lookup(ROOT_INO, b"b").unwrap();
            assert_eq!(read_file(&fs, fb.ino, 8192).unwrap()[4096..], [b'C'; 4096]);
            assert_eq!(fb.ino, b);
        }
        assert!(eio > 0);
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
    fn structures_without_a_replica_refuse_replica_damage() {
        let (mem, a, _) = image();
        for target in Target::ALL.into_iter().filter(|&t| t != Target::Superblock) {
            for which in [Which::Replica, Which::Both] {
                let sp = Spec {
                    which,
                    ..spec(target, a, 1)
                };
                let err = plan(&*mem, &sp).unwrap_err();
                assert!(
                    matches!(err, Error::NotSupported(m) if m.contains("replica")),
                    "{target}: {err}"
                );
            }
        }
    }

    #[test]
    fn damaged_log_entries_and_pages_are_found_by_fsck() {
        for target in [Target::LogEntry, Target::LogPage] {
            let (mem, a, _) = image();
            // The first log page of "a" holds all its entries: damage there
            // always hits an entry, the end mark or the next pointer.
            let sp = Spec {
                bytes: PAGE_SIZE,
                ..spec(target, a, 1)
            };
            let d = corrupt(&*mem, &sp).unwrap();
            let region: Arc<dyn Region> = mem.clone();
            let rep = crate::fsck::check(region, &|_, _| {});
            assert!(rep.is_err() || !rep.unwrap().is_clean(), "{target}: {}", d[0]);
            let fs = mount(&mem).unwrap();
            assert!(fs.getattr(a).is_err(), "{target}");
            let b = fs.lookup(ROOT_INO, b"b").unwrap();
            assert_eq!(read_file(&fs, b.ino, 4096).unwrap(), [b'B'; 4096]);
        }
    }

    #[test]
    fn a_damaged_log_can_be_damaged_again_but_its_data_pages_are_unknown() {
        let (mem, a, _) = image();
        let r = &*mem;
        let entries = locate(r, Target::LogEntry, a).unwrap();
        let pages = locate(r, Target::LogPage, a).unwrap();
        assert!(!locate(r, Target::DataPage, a).unwrap().is_empty());
        // Damage every entry's body (its first 16 bytes, type and length,
        // stay): each now fails its checksum.
        for e in &entries {
            let off = e.copies[0].1 + 16;
            let mut buf = vec![0u8; (e.len - 16) as usize];
            r.read(off, &mut buf).unwrap();
            buf.iter_mut().for_each(|b| *b ^= 0x5A);
            r.write(off, &buf).unwrap();
        }
        let (sb, _) = read_superblock(r).unwrap();
        let (_, rec) = live_record(r, &sb, a).unwrap();
        let load = Log::load(r, bounds_of(&sb), rec.log_head, rec.log_tail, |_, _, _| Ok(()));
        assert!(matches!(load, Err(Error::Corrupt(m)) if m.contains("checksum")));
        // Still the same entries and pages to damage, a second time.
        assert_eq!(locate(r, Target::LogEntry, a).unwrap(), entries);
        assert_eq!(locate(r, Target::LogPage, a).unwrap(), pages);
        corrupt(r, &spec(Target::LogEntry, a, 2)).unwrap();
        // The data pages are what the file system's replay maps: none now.
        let err = locate(r, Target::DataPage, a).unwrap_err();
        assert!(
            matches!(&err, Error::Corrupt(m) if m.contains(&format!("data pages of inode {a}")) && m.contains("checksum")),
            "{err}"
        );
    }

    #[test]
    fn poisoned_data_page_reads_as_eio_and_the_rest_reads_fine() {
        let (mem, a, b) = image();
        let d = plan(&*mem, &spec(Target::DataPage, b, 1)).unwrap();
        mem.poison(d[0].off, d[0].len).unwrap();
        let fs = mount(&mem).unwrap();
        assert_eq!(read_file(&fs, b, 8192).unwrap_err().errno(), libc::EIO);
        assert_eq!(read_file(&fs, a, 4096).unwrap(), [b'A'; 4096]);
    }

    #[test]
    fn bad_inode_numbers_and_damaged_chains_are_errors_not_hangs() {
        let (mem, a, _) = image();
        let r = &*mem;
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
        r.store_u64(off + 16, head + PAGE_SIZE + 64).unwrap();
        r.store_u64(head + LOG_NEXT_OFF, head).unwrap();
        assert!(matches!(locate(r, Target::LogEntry, a), Err(Error::Corrupt(m)) if m.contains("loops")));
        // An inode-table chunk chain looping back to its first chunk.
        let first = r.load_u64(sb.inode_heads_off).unwrap();
        r.store_u64(first + crate::layout::CHUNK_NEXT_OFF, first).unwrap();
        let far = 1 + 2 * INODES_PER_CHUNK * 3;
        assert!(matches!(locate(r, Target::Inode, far), Err(Error::Corrupt(_))));
        // A destroyed fixed area: the heads are garbage.
        r.write(INODE_HEADS_OFF, &[0xA5; 16]).unwrap();
        assert!(matches!(locate(r, Target::Inode, a), Err(Error::Corrupt(_))));
    }

    #[test]
    fn target_names_round_trip() {
        for t in Target::ALL {
            assert_eq!(Target::parse(t.name()), Some(t));
        }
        assert_eq!(Target::parse("nope"), None);
    }
}
