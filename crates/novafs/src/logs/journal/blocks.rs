//! The block-granular baseline, for benchmarks only
//! (`MountOptions::bench_block_journal`): each transaction journaled as
//! JBD2 journals it (FGM §III-A, Figure 4's traditional format) — a
//! descriptor block listing the home blocks, a copy of every distinct
//! 4 KiB block the updates touch as it will be after them, a fence, a
//! commit block, a fence — then applied in place and checkpointed as the
//! fine-grained journal does. The blocks go to the shard's ring, page by
//! page from the head, wrapping as JBD2's circular journal does, with
//! non-temporal stores (a whole-block copy's cheapest way to the media).
//!
//! Nothing replays them: a crash in this mode can leave a transaction half
//! applied (their position is no TxnInfo's, so recovery replays none of
//! it). Only the updates' blocks are journaled, not those of the log
//! entries and records a transaction checks, which a JBD2 file system
//! would journal too: the baseline's bytes are a lower bound.

use pm::Region;

use super::{apply, checkpoint, Cost, Shard, Update};
use crate::error::{Error, Result};
use crate::layout::PAGE_SIZE;

const DESCRIPTOR_MAGIC: u64 = u64::from_le_bytes(*b"JBDDESC1");
const COMMIT_MAGIC: u64 = u64::from_le_bytes(*b"JBDCOMT1");
/// Descriptor header: magic, ring position, block count.
const HEADER: usize = 24;

/// The distinct home blocks `updates` touch, in address order.
pub(super) fn home_blocks(updates: &[Update]) -> Vec<u64> {
    let mut blocks: Vec<u64> = updates
        .iter()
        .filter(|u| !u.bytes.is_empty())
        .flat_map(|u| {
            let last = (u.addr + u.bytes.len() as u64 - 1) / PAGE_SIZE;
            (u.addr / PAGE_SIZE..=last).map(|b| b * PAGE_SIZE)
        })
        .collect();
    blocks.sort_unstable();
    blocks.dedup();
    blocks
}

/// Applies to `block` (the bytes of home block `home`) every update that
/// falls in it.
pub(super) fn overlay(home: u64, block: &mut [u8], updates: &[Update]) {
    for u in updates {
        let start = u.addr.max(home);
        let end = (u.addr + u.bytes.len() as u64).min(home + PAGE_SIZE);
        if start < end {
            block[(start - home) as usize..(end - home) as usize]
                .copy_from_slice(&u.bytes[(start - u.addr) as usize..(end - u.addr) as usize]);
        }
    }
}

/// Commits `updates` on `shard` as whole blocks (module comment).
pub(super) fn commit(
    shard: &mut Shard,
    ring_size: u64,
    region: &dyn Region,
    updates: &[Update],
    cost: &mut Cost,
) -> Result<()> {
    let homes = home_blocks(updates);
    let pages = homes.len() as u64 + 2;
    if pages * PAGE_SIZE > ring_size || HEADER + 8 * homes.len() > PAGE_SIZE as usize {
        return Err(Error::Invalid("journal transaction larger than the block journal"));
    }
    let (ring, start) = (shard.ring, shard.head.next_multiple_of(PAGE_SIZE));
    let block_at = |i: u64| ring + (start + i * PAGE_SIZE) % ring_size;
    let buf = &mut shard.buf;
    buf.clear();
    buf.resize(PAGE_SIZE as usize, 0);
    for (i, word) in [DESCRIPTOR_MAGIC, start, homes.len() as u64]
        .into_iter()
        .chain(homes.iter().copied())
        .enumerate()
    {
        buf[i * 8..i * 8 + 8].copy_from_slice(&word.to_le_bytes());
    }
    write_block(region, block_at(0), buf, cost)?;
    for (i, &home) in homes.iter().enumerate() {
        region.read(home, buf)?;
        overlay(home, buf, updates);
        write_block(region, block_at(i as u64 + 1), buf, cost)?;
    }
    // Descriptor, copies and every checked range persistent before the
    // commit block (JBD2's ordering; R2).
    cost.fence(region);
    buf.fill(0);
    buf[..8].copy_from_slice(&COMMIT_MAGIC.to_le_bytes());
    buf[8..16].copy_from_slice(&start.to_le_bytes());
    write_block(region, block_at(pages - 1), buf, cost)?;
    cost.fence(region); // The commit point.
    for u in updates {
        apply(region, u, cost)?;
    }
    cost.fence(region); // In place persistent before the checkpoint.
    let end = start + pages * PAGE_SIZE;
    checkpoint(region, shard.header, end, cost)?;
    shard.head = end;
    Ok(())
}

fn write_block(region: &dyn Region, off: u64, block: &[u8], cost: &mut Cost) -> Result<()> {
    region.write_nt(off, block)?;
    cost.journal += block.len() as u64;
    Ok(())
}
