//! The superblock (NOVA §4.1) and its replica at the far end of the region
//! (Fortis §4.2): reading with fallback to the replica, checking, and the
//! tick-tock update (rule R4).

use pm::Region;
use zerocopy::IntoBytes;

use crate::error::{corrupt, Error, Result};
use crate::layout::{
    decode, Superblock, FEATURES_INCOMPAT_SUPPORTED, FEATURE_INCOMPAT_DATA_CSUM, FEATURE_INCOMPAT_DATA_PARITY,
    FEATURE_INCOMPAT_META_REPLICA, FEATURE_INCOMPAT_REPLICAS_STALE, INODE_HEADS_OFF, INODE_SIZE, JOURNAL_HEADERS_OFF,
    JOURNAL_RINGS_OFF, JOURNAL_RING_SIZE, MAGIC, MAX_SHARDS, PAGE_SIZE, RECOVERY_INODE_OFF, STATE_CLEAN, STRIP_SIZE,
    VERSION,
};
use crate::layout::{Bounds, Strips, CSUM_BYTES};

pub fn bounds_of(sb: &Superblock) -> Bounds {
    Bounds {
        data_start: sb.data_start,
        data_end: sb.data_end,
        replicas: sb.features_incompat & FEATURE_INCOMPAT_META_REPLICA != 0,
        dead_zone_pages: sb.dead_zone_pages,
        stale: sb.features_incompat & FEATURE_INCOMPAT_REPLICAS_STALE != 0,
    }
}

/// Writes the superblock, primary first, then the replica (rule R4).
pub(crate) fn write_superblock(region: &dyn Region, sb: &mut Superblock) -> Result<()> {
    sb.csum = sb.compute_csum();
    region.write(0, sb.as_bytes())?;
    region.persist(0, size_of::<Superblock>() as u64)?; // R4: the primary first,
    region.write(sb.replica_off, sb.as_bytes())?;
    region.persist(sb.replica_off, size_of::<Superblock>() as u64)?; // then the replica.
    Ok(())
}

fn read_sb_at(region: &dyn Region, off: u64) -> Result<Superblock> {
    let mut buf = vec![0u8; size_of::<Superblock>()];
    region.read(off, &mut buf)?;
    decode(&buf)
}

/// Checks one superblock copy against the region it was read from.
fn check_superblock(sb: &Superblock, region_len: u64) -> Result<()> {
    if sb.magic != MAGIC {
        return Err(Error::NotNovafs("no novafs magic number".into()));
    }
    if sb.csum != sb.compute_csum() {
        return Err(corrupt!(Superblock, "superblock checksum mismatch"));
    }
    if sb.version > VERSION {
        return Err(Error::TooNew {
            found: sb.version,
            supported: VERSION,
        });
    }
    // Format 1 committed journal transactions with a tail store; its journal
    // is empty after a clean unmount, and only then can this version take
    // the image over (the next read-write mount stamps it format 2).
    if sb.version < VERSION && sb.state != STATE_CLEAN {
        return Err(Error::NotSupported(
            "a format 1 image that was not cleanly unmounted: mount it once with the novafs that wrote it",
        ));
    }
    if sb.features_incompat & !FEATURES_INCOMPAT_SUPPORTED != 0 {
        return Err(Error::TooNew {
            found: sb.version,
            supported: VERSION,
        });
    }
    let sane = sb.block_size as u64 == PAGE_SIZE
        && sb.inode_size as u64 == INODE_SIZE
        && (1..=MAX_SHARDS).contains(&sb.shards)
        && sb.size <= region_len
        && sb.journal_headers_off == JOURNAL_HEADERS_OFF
        && sb.inode_heads_off == INODE_HEADS_OFF
        && sb.recovery_inode_off == RECOVERY_INODE_OFF
        && sb.journal_rings_off == JOURNAL_RINGS_OFF
        && sb.journal_ring_size == JOURNAL_RING_SIZE
        && geometry(sb.size, sb.shards, sb.features_incompat).is_some_and(|g| g.matches(sb))
        && dead_zone_fits(sb);
    if !sane {
        return Err(corrupt!(Superblock, "superblock geometry is inconsistent"));
    }
    Ok(())
}

/// With replicas, the dead zone leaves room for metadata pairs: at least
/// one page, and less than half the data area.
fn dead_zone_fits(sb: &Superblock) -> bool {
    fixed_mirror_pages(sb) == 0
        || (1..(sb.data_end.saturating_sub(sb.data_start) / PAGE_SIZE) / 2).contains(&sb.dead_zone_pages)
}

/// Pages between the data area and the superblock replica: the copy of
/// the reserved inodes and inode-table heads, with replicas.
pub(crate) fn fixed_mirror_pages(sb: &Superblock) -> u64 {
    u64::from(sb.features_incompat & FEATURE_INCOMPAT_META_REPLICA != 0)
}

/// Where the journal rings of `shards` shards end.
fn rings_end(shards: u32) -> u64 {
    (JOURNAL_RINGS_OFF + u64::from(shards) * JOURNAL_RING_SIZE).next_multiple_of(PAGE_SIZE)
}

/// Where the areas after the fixed ones lie (FORMAT.md, "Region map"):
/// the first checksum area, the data area, the fixed area's mirror page,
/// the parity area, the second checksum area and (last page) the
/// superblock replica, in that order, each present only with its feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub data_start: u64,
    pub data_end: u64,
    pub csum: [u64; 2],
    pub parity: u64,
    pub replica_off: u64,
}

impl Geometry {
    fn matches(&self, sb: &Superblock) -> bool {
        (sb.data_start, sb.data_end, sb.csum_off, sb.parity_off, sb.replica_off)
            == (self.data_start, self.data_end, self.csum, self.parity, self.replica_off)
    }
}

/// The checksum and parity areas of `sb` as the data path uses them.
pub(crate) fn strips_of(sb: &Superblock) -> Strips {
    Strips {
        data_start: sb.data_start,
        data_end: sb.data_end,
        csum: sb.csum_off,
        parity: sb.parity_off,
    }
}

/// The geometry of a region of `size` bytes (a multiple of the page size)
/// with `shards` shards and the incompatible features `incompat`, or None
/// when not even one data page fits.
pub(crate) fn geometry(size: u64, shards: u32, incompat: u64) -> Option<Geometry> {
    let csum = incompat & FEATURE_INCOMPAT_DATA_CSUM != 0;
    let parity = incompat & FEATURE_INCOMPAT_DATA_PARITY != 0;
    let fixed_mirror = u64::from(incompat & FEATURE_INCOMPAT_META_REPLICA != 0) * PAGE_SIZE;
    let start = rings_end(shards);
    let room = size.checked_sub(start + fixed_mirror + PAGE_SIZE)?;
    let area = |pages: u64, per_page: u64, on: bool| {
        if on {
            (pages * per_page).next_multiple_of(PAGE_SIZE)
        } else {
            0
        }
    };
    let need = |pages: u64| pages * PAGE_SIZE + 2 * area(pages, CSUM_BYTES, csum) + area(pages, STRIP_SIZE, parity);
    // Per data page: the page, two checksum copies, a parity strip.
    let per_page = PAGE_SIZE + 2 * u64::from(csum) * CSUM_BYTES + u64::from(parity) * STRIP_SIZE;
    let mut pages = room / per_page;
    while pages > 0 && need(pages) > room {
        pages -= 1;
    }
    if pages == 0 {
        return None;
    }
    let data_start = start + area(pages, CSUM_BYTES, csum);
    let data_end = data_start + pages * PAGE_SIZE;
    let parity_off = data_end + fixed_mirror;
    let csum_b = parity_off + area(pages, STRIP_SIZE, parity);
    Some(Geometry {
        data_start,
        data_end,
        csum: if csum { [start, csum_b] } else { [0, 0] },
        parity: if parity { parity_off } else { 0 },
        replica_off: size - PAGE_SIZE,
    })
}

/// True when the replica holds exactly the same bytes as `sb`.
pub(crate) fn replica_matches(region: &dyn Region, sb: &Superblock) -> bool {
    read_sb_at(region, sb.replica_off).is_ok_and(|rep| rep.as_bytes() == sb.as_bytes())
}

/// Whether the primary and the replica of the superblock differ from
/// `sb`, the one a mount holds; a copy the media cannot read differs.
pub(crate) fn copies_differ(region: &dyn Region, sb: &Superblock) -> (bool, bool) {
    let differs = |off| read_sb_at(region, off).map_or(true, |copy| copy.as_bytes() != sb.as_bytes());
    (differs(0), differs(sb.replica_off))
}

/// Reads the superblock, falling back to the replica (Fortis §4.2) when the
/// primary is damaged. Returns it and whether the primary was bad.
///
/// When one copy cannot be read at all and the other carries no magic
/// number, no copy says this is novafs: the answer is "not novafs", naming
/// the media error. That is what an mkfs interrupted after it cleared one
/// copy's magic leaves once the other copy's line is lost too (the old file
/// system is gone, the new one was never made), and what a foreign device
/// with a bad first line shows.
pub fn read_superblock(region: &dyn Region) -> Result<(Superblock, bool)> {
    if region.len() < 3 * PAGE_SIZE {
        return Err(Error::NotNovafs(format!(
            "only {} bytes, too small to hold novafs",
            region.len()
        )));
    }
    let primary = read_sb_at(region, 0).and_then(|sb| check_superblock(&sb, region.len()).map(|_| sb));
    match primary {
        Ok(sb) => Ok((sb, false)),
        Err(Error::TooNew { found, supported }) => Err(Error::TooNew { found, supported }),
        Err(first) => {
            let replica_off = region.len() - PAGE_SIZE;
            match read_sb_at(region, replica_off).and_then(|sb| check_superblock(&sb, region.len()).map(|_| sb)) {
                Ok(sb) => Ok((sb, true)),
                Err(Error::NotNovafs(why)) if matches!(first, Error::Pm(_)) => Err(Error::NotNovafs(format!(
                    "{why} in the replica; the primary is unreadable: {first}"
                ))),
                Err(Error::NotNovafs(_)) => Err(first),
                Err(e @ Error::Pm(_)) => match first {
                    Error::NotNovafs(why) => Err(Error::NotNovafs(format!(
                        "{why} in the primary; the replica is unreadable: {e}"
                    ))),
                    _ => Err(e),
                },
                Err(e) => Err(e),
            }
        }
    }
}
