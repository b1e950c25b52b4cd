//! What an image's bytes hold (NOVA-Fortis §5.5, Fig. 12): the fixed
//! areas as the superblock places them, and the data area's pages as
//! fsck's walk finds them (`Report::space`). Fortis §4.4's scribble
//! measure reads the metadata pages' places from it too.

use crate::layout::{Bounds, Superblock, JOURNAL_HEADERS_OFF, JOURNAL_RINGS_OFF, PAGE_SIZE, RESERVED_INODES_OFF};

/// What a metadata page of the data area is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaKind {
    /// A page of an inode-table chunk.
    InodeTable,
    /// A log page: a file's, a directory's or the snapshot list's.
    Log,
}

/// A metadata page of the data area: its primary and, when the image keeps
/// replicas, the replica's place (both byte offsets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaPage {
    pub off: u64,
    pub replica: Option<u64>,
    pub kind: MetaKind,
}

/// An image's bytes by what they hold; the byte counts add up to `size`
/// ([`Space::total`]). Zero everywhere when the walk could not run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Space {
    /// The region's size.
    pub size: u64,
    /// The primary superblock and the page of reserved inodes and
    /// inode-table heads (pages 0 and 2).
    pub fixed_meta: u64,
    /// The journal: its header page and the shards' rings.
    pub journal: u64,
    /// The superblock's replica and page 2's mirror past the data area.
    pub fixed_replicas: u64,
    /// Both areas of data strip checksums (Fortis §4.3), sized for every
    /// page of the data area whether in use or not.
    pub data_csums: u64,
    /// The parity area, sized likewise.
    pub data_parity: u64,
    /// Bytes between the areas the layout's rounding leaves unused.
    pub slack: u64,
    /// Pages of the data area.
    pub data_area_pages: u64,
    /// The data area's metadata primaries the walk found, by offset.
    pub meta: Vec<MetaPage>,
    /// Pages of file data, xattr values and data only snapshots keep.
    pub data_pages: u64,
    /// Free pages (the reserve included).
    pub free_pages: u64,
    /// Pages neither found in use nor free: leaked (fsck reports them as a
    /// problem), or every unused one when a clean image's saved free lists
    /// are unusable (a problem too).
    pub unaccounted_pages: u64,
}

impl Space {
    /// The fixed areas of the image `sb` describes, the data area's pages
    /// split as `meta` (primaries), `used` (every page in use, replicas
    /// included) and `free` say.
    pub(super) fn of(sb: &Superblock, bounds: Bounds, mut meta: Vec<MetaPage>, used: u64, free: u64) -> Space {
        meta.sort_by_key(|m| m.off);
        let copies = if bounds.replicas { 2 } else { 1 };
        let data_area_pages = (sb.data_end - sb.data_start) / PAGE_SIZE;
        let meta_pages = meta.len() as u64 * copies;
        let mut s = Space {
            size: sb.size,
            data_area_pages,
            data_pages: used.saturating_sub(meta_pages),
            free_pages: free,
            unaccounted_pages: data_area_pages.saturating_sub(used + free),
            meta,
            ..Space::default()
        };
        for (area, start, end) in areas(sb) {
            let n = end - start;
            match area {
                Area::FixedMeta => s.fixed_meta += n,
                Area::Journal => s.journal += n,
                Area::FixedReplica => s.fixed_replicas += n,
                Area::Csums => s.data_csums += n,
                Area::Parity => s.data_parity += n,
                Area::Data => {}
                Area::Slack => s.slack += n,
            }
        }
        s
    }

    /// Bytes of metadata primaries in the data area.
    pub fn meta_bytes(&self) -> u64 {
        self.meta.len() as u64 * PAGE_SIZE
    }

    /// Bytes of the data area's metadata replicas.
    pub fn meta_replica_bytes(&self) -> u64 {
        self.meta.iter().filter(|m| m.replica.is_some()).count() as u64 * PAGE_SIZE
    }

    /// Bytes of the primaries of `kind`.
    pub fn meta_bytes_of(&self, kind: MetaKind) -> u64 {
        self.meta.iter().filter(|m| m.kind == kind).count() as u64 * PAGE_SIZE
    }

    /// Every byte counted once: equals `size`.
    pub fn total(&self) -> u64 {
        self.fixed_meta
            + self.journal
            + self.fixed_replicas
            + self.data_csums
            + self.data_parity
            + self.slack
            + self.meta_bytes()
            + self.meta_replica_bytes()
            + (self.data_pages + self.free_pages + self.unaccounted_pages) * PAGE_SIZE
    }
}

/// What a range of the region holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Area {
    FixedMeta,
    Journal,
    FixedReplica,
    Csums,
    Parity,
    Data,
    Slack,
}

/// The region's areas in order, `(area, start, end)`, covering `[0,
/// size)` exactly: the superblock's own offsets, the gaps between them as
/// slack.
fn areas(sb: &Superblock) -> Vec<(Area, u64, u64)> {
    let pages = (sb.data_end - sb.data_start) / PAGE_SIZE;
    let area = |per_page: u64| (pages * per_page).next_multiple_of(PAGE_SIZE);
    let csum = area(crate::layout::CSUM_BYTES);
    let mut placed = vec![
        (Area::FixedMeta, 0, JOURNAL_HEADERS_OFF),
        (Area::Journal, JOURNAL_HEADERS_OFF, RESERVED_INODES_OFF),
        (Area::FixedMeta, RESERVED_INODES_OFF, JOURNAL_RINGS_OFF),
        (
            Area::Journal,
            JOURNAL_RINGS_OFF,
            JOURNAL_RINGS_OFF + u64::from(sb.shards) * sb.journal_ring_size,
        ),
        (Area::Data, sb.data_start, sb.data_end),
        (Area::FixedReplica, sb.replica_off, sb.replica_off + PAGE_SIZE),
    ];
    // Page 2's mirror has its place whether the replicas are current or stale.
    if crate::superblock::bounds_of(sb).replicas {
        placed.push((Area::FixedReplica, sb.data_end, sb.data_end + PAGE_SIZE));
    }
    if sb.csum_off[0] != 0 {
        placed.extend(sb.csum_off.map(|off| (Area::Csums, off, off + csum)));
    }
    if sb.parity_off != 0 {
        placed.push((
            Area::Parity,
            sb.parity_off,
            sb.parity_off + area(crate::layout::STRIP_SIZE),
        ));
    }
    placed.sort_by_key(|&(_, start, _)| start);
    let mut out = Vec::new();
    let mut at = 0;
    for (a, start, end) in placed {
        if at < start {
            out.push((Area::Slack, at, start));
        }
        out.push((a, start, end));
        at = at.max(end);
    }
    if at < sb.size {
        out.push((Area::Slack, at, sb.size));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The areas tile the region: in order, no overlap, no gap.
    fn assert_tiles(sb: &Superblock) {
        let mut at = 0;
        for (_, start, end) in areas(sb) {
            assert_eq!(start, at, "{:?}", areas(sb));
            assert!(end > start);
            at = end;
        }
        assert_eq!(at, sb.size);
    }

    #[test]
    fn the_areas_tile_every_layout() {
        for incompat in 0..8 {
            for size in [64u64 << 20, (100 << 20) + 3 * PAGE_SIZE, 1 << 30] {
                let g = crate::superblock::geometry(size, 4, incompat).expect("room");
                let sb = Superblock {
                    size,
                    shards: 4,
                    journal_ring_size: crate::layout::JOURNAL_RING_SIZE,
                    data_start: g.data_start,
                    data_end: g.data_end,
                    replica_off: g.replica_off,
                    csum_off: g.csum,
                    parity_off: g.parity,
                    features_incompat: incompat,
                    ..zeroed()
                };
                assert_tiles(&sb);
            }
        }
    }

    fn zeroed() -> Superblock {
        zerocopy::FromZeros::new_zeroed()
    }
}
