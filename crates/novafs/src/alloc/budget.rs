//! The reserve and who may use it (FORMAT.md "The reserve").

/// Who may use the last free pages (FORMAT.md "The reserve"). Part of
/// the device is held back from ordinary allocations so that a full file
/// system can always be emptied, as ext4's reserved blocks, btrfs's global
/// reserve and ZFS's slop space do: its upper part for operations that
/// free space, its lower (critical) part for what must finish even when
/// those operations have used everything else (they free nothing while a
/// snapshot keeps what they drop).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Budget {
    /// Writes, creates, links, plain renames, xattrs, snapshot creation:
    /// they stop at the reserve.
    Normal,
    /// Unlink, rmdir, rename over an existing name, truncate down, punching
    /// holes: they stop at the critical part.
    Freeing,
    /// Snapshot deletion, the reclaimer, log GC, the clean unmount's saved
    /// state, the crash scan's commits and `fsck --repair`: every page.
    Critical,
}

/// The critical part of the reserve, per shard: what one thread's
/// critical operation needs at most at once, with room to spare: two log
/// pages and their mirrors (the snapshot list's record, a GC's fresh log
/// page), and several pages of the clean unmount's saved state.
const CRITICAL_PAGES_PER_SHARD: u64 = 64;

/// The reserve as a fraction of the data area, as ZFS's slop space (1/32).
const RESERVE_DIVISOR: u64 = 32;

/// The pages held back from ordinary allocations in a data area of
/// `total` pages split in `shards`, and the critical part of them
/// ([`Budget`]): a 32nd of the area, at least enough for every shard's
/// critical operations twice over, at most a quarter of a tiny area.
pub(crate) fn reserve_pages(total: u64, shards: u64) -> (u64, u64) {
    let floor = 2 * CRITICAL_PAGES_PER_SHARD * shards;
    let reserve = (total / RESERVE_DIVISOR).max(floor).min(total / 4);
    (reserve, reserve / 2)
}
