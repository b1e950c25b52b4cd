//! The superblock (NOVA §4.1) and its replica at the far end of the region
//! (Fortis §4.2): reading with fallback to the replica, checking, and the
//! tick-tock update (rule R4).

use pm::Region;
use zerocopy::IntoBytes;

use crate::error::{corrupt, Error, Result};
use crate::layout::Bounds;
use crate::layout::{
    decode, Superblock, FEATURES_INCOMPAT_SUPPORTED, FEATURE_INCOMPAT_META_REPLICA, FEATURE_INCOMPAT_REPLICAS_STALE,
    INODE_HEADS_OFF, INODE_SIZE, JOURNAL_HEADERS_OFF, JOURNAL_RINGS_OFF, JOURNAL_RING_SIZE, MAGIC, MAX_SHARDS,
    PAGE_SIZE, RECOVERY_INODE_OFF, STATE_CLEAN, VERSION,
};

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
pub fn write_superblock(region: &dyn Region, sb: &mut Superblock) -> Result<()> {
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
        return Err(corrupt!("superblock checksum mismatch"));
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
        && sb.data_start == data_start(sb.shards)
        && sb.data_start < sb.data_end
        && sb.data_end + fixed_mirror_pages(sb) * PAGE_SIZE == sb.replica_off
        && sb.replica_off + PAGE_SIZE == sb.size
        && dead_zone_fits(sb);
    if !sane {
        return Err(corrupt!("superblock geometry is inconsistent"));
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
pub fn fixed_mirror_pages(sb: &Superblock) -> u64 {
    u64::from(sb.features_incompat & FEATURE_INCOMPAT_META_REPLICA != 0)
}

/// Where the data area starts with `shards` journal rings before it.
pub fn data_start(shards: u32) -> u64 {
    (JOURNAL_RINGS_OFF + u64::from(shards) * JOURNAL_RING_SIZE).next_multiple_of(PAGE_SIZE)
}

/// True when the replica holds exactly the same bytes as `sb`.
pub fn replica_matches(region: &dyn Region, sb: &Superblock) -> bool {
    read_sb_at(region, sb.replica_off).is_ok_and(|rep| rep.as_bytes() == sb.as_bytes())
}

/// Reads the superblock, falling back to the replica (Fortis §4.2) when the
/// primary is damaged. Returns it and whether the primary was bad.
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
                Err(Error::NotNovafs(_)) => Err(first),
                Err(e) => Err(e),
            }
        }
    }
}
