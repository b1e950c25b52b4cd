//! An image's format, geometry and state as its superblock records them,
//! in terms a tool prints (`novafs info`): the superblock itself stays
//! inside the crate, its layout free to change with the format.

use crate::consistency::Consistency;
use crate::health::HealthCounts;
use crate::layout::{
    Superblock, FEATURE_INCOMPAT_META_REPLICA, FEATURE_INCOMPAT_RELAXED, FEATURE_INCOMPAT_REPLICAS_STALE, PAGE_SIZE,
    STATE_CLEAN,
};

/// What an image's superblock says about it (`inspect` reads it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Geometry {
    /// The format version (FORMAT.md).
    pub version: u32,
    /// The feature flags: compatible, incompatible, read-only compatible.
    pub features: [u64; 3],
    /// The image's size in bytes.
    pub size: u64,
    /// Pages of the data area (file data, logs, inode tables, replicas).
    pub data_pages: u64,
    /// Shards: inode tables, journals and allocator pools.
    pub shards: u32,
    /// Metadata has replicas (Fortis §4.2).
    pub meta_replicas: bool,
    /// The replicas went stale (a mount skipped them); the next
    /// protected read-write mount rewrites them.
    pub replicas_stale: bool,
    /// Least distance between a metadata page and its replica, in bytes.
    pub dead_zone: u64,
    /// File data has two copies of strip checksums (Fortis §4.3).
    pub data_csum: bool,
    /// File data has a parity strip per page (Fortis §4.3).
    pub data_parity: bool,
    /// The consistency mode mounts take by default (Fortis §4.6); else
    /// the code the superblock holds instead, which mounts refuse.
    pub consistency: Result<Consistency, u64>,
    /// A relaxed mount is in use, or crashed and left data-write intents
    /// that the next mount reseals (the RELAXED feature bit).
    pub relaxed_mount: bool,
    /// What redundancy repaired and what was lost since mkfs.
    pub health: HealthCounts,
    /// When mkfs made the image, and when it was last mounted
    /// (nanoseconds since the epoch).
    pub created_ns: i64,
    pub mounted_ns: i64,
    /// Mounts since mkfs.
    pub mount_count: u64,
    /// The last mount ended with a clean unmount.
    pub clean: bool,
}

impl Geometry {
    pub(crate) fn of(sb: &Superblock) -> Geometry {
        let incompat = sb.features_incompat;
        Geometry {
            version: sb.version,
            features: [sb.features_compat, incompat, sb.features_ro_compat],
            size: sb.size,
            data_pages: (sb.data_end - sb.data_start) / PAGE_SIZE,
            shards: sb.shards,
            meta_replicas: incompat & (FEATURE_INCOMPAT_META_REPLICA | FEATURE_INCOMPAT_REPLICAS_STALE) != 0,
            replicas_stale: incompat & FEATURE_INCOMPAT_REPLICAS_STALE != 0,
            dead_zone: sb.dead_zone_pages * PAGE_SIZE,
            data_csum: sb.csum_off[0] != 0,
            data_parity: sb.parity_off != 0,
            consistency: Consistency::from_code(sb.consistency).ok_or(sb.consistency),
            relaxed_mount: incompat & FEATURE_INCOMPAT_RELAXED != 0,
            health: HealthCounts::of(sb),
            created_ns: sb.created_ns,
            mounted_ns: sb.mounted_ns,
            mount_count: sb.mount_count,
            clean: sb.state == STATE_CLEAN,
        }
    }
}
