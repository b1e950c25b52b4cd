//! Per-shard fine-grained metadata journals (DESIGN.md §2 item 5; NOVA §4.2
//! "lite journal"; fine-grained journaling §III). A transaction holds only
//! the modified metadata — (address, new bytes) records — closed by a TxnInfo
//! with count, magic and checksum. Protocol:
//!
//! 1. records + TxnInfo written at the ring tail and made persistent (R2);
//! 2. one 8-byte store of the new tail commits the transaction (R5);
//! 3. the records are applied in place and made persistent;
//! 4. checkpoint: head := tail, durable before any later in-place update of
//!    the same words (otherwise a replay could roll them back); the fence
//!    that opens every later commit provides that.
//!
//! Recovery replays every transaction between head and tail (idempotent:
//! records are redo images) and then checkpoints. Bytes past the tail are a
//! torn, uncommitted transaction and are ignored.

use parking_lot::{Mutex, MutexGuard};
use pm::Region;
use zerocopy::IntoBytes;

use crate::alloc::current_shard;
use crate::error::{corrupt, Error, Result};
use crate::layout::{
    decode, JournalHeader, JournalRecord, Superblock, TxnInfo, JOURNAL_HEAD_FIELD, JOURNAL_TAIL_FIELD, TXN_MAGIC,
    TXN_MARKER,
};

/// One metadata update: `bytes` become the contents at region offset `addr`.
#[derive(Clone, Debug)]
pub struct Update {
    pub addr: u64,
    pub bytes: Vec<u8>,
}

impl Update {
    /// An update of one aligned 8-byte word (log tails, heads, valid bits).
    pub fn word(addr: u64, val: u64) -> Update {
        Update {
            addr,
            bytes: val.to_le_bytes().to_vec(),
        }
    }
}

struct Shard {
    header: u64,
    ring: u64,
    /// Head == tail between transactions: each one is checkpointed at once.
    tail: u64,
    /// Encoding buffer, kept to spare an allocation per transaction.
    buf: Vec<u8>,
}

/// The set of per-shard journals.
pub struct Journal {
    shards: Vec<Mutex<Shard>>,
    ring_size: u64,
}

fn header_off(sb: &Superblock, shard: u64) -> u64 {
    sb.journal_headers_off + shard * size_of::<JournalHeader>() as u64
}

fn ring_off(sb: &Superblock, shard: u64) -> u64 {
    sb.journal_rings_off + shard * sb.journal_ring_size
}

/// Writes `bytes` into the ring at counter position `pos`, wrapping.
fn ring_write(region: &dyn Region, ring: u64, size: u64, pos: u64, bytes: &[u8]) -> Result<()> {
    let at = pos % size;
    let first = (size - at).min(bytes.len() as u64) as usize;
    region.write(ring + at, &bytes[..first])?;
    region.flush(ring + at, first as u64)?;
    if first < bytes.len() {
        region.write(ring, &bytes[first..])?;
        region.flush(ring, (bytes.len() - first) as u64)?;
    }
    Ok(())
}

/// Reads `buf.len()` ring bytes at counter position `pos`, wrapping.
fn ring_read(region: &dyn Region, ring: u64, size: u64, pos: u64, buf: &mut [u8]) -> Result<()> {
    let at = pos % size;
    let first = (size - at).min(buf.len() as u64) as usize;
    region.read(ring + at, &mut buf[..first])?;
    if first < buf.len() {
        region.read(ring, &mut buf[first..])?;
    }
    Ok(())
}

fn apply(region: &dyn Region, u: &Update) -> Result<()> {
    if u.bytes.len() == 8 && u.addr.is_multiple_of(8) {
        let v = u64::from_le_bytes(u.bytes[..8].try_into().unwrap_or_default());
        region.store_u64(u.addr, v)?;
    } else {
        region.write(u.addr, &u.bytes)?;
    }
    region.flush(u.addr, u.bytes.len() as u64)?;
    Ok(())
}

/// Appends the encoded transaction to `buf`.
fn encode_into(buf: &mut Vec<u8>, updates: &[Update], txn_id: u64) {
    let start = buf.len();
    for u in updates {
        let rec = JournalRecord {
            addr: u.addr,
            len: u.bytes.len() as u32,
            pad: 0,
        };
        buf.extend_from_slice(rec.as_bytes());
        buf.extend_from_slice(&u.bytes);
        buf.resize(buf.len().next_multiple_of(8), 0);
    }
    let info = TxnInfo {
        marker: TXN_MARKER,
        count: updates.len() as u32,
        magic: TXN_MAGIC,
        txn_id,
        csum: crc32c::crc32c(&buf[start..]),
        pad: 0,
    };
    buf.extend_from_slice(info.as_bytes());
}

/// A transaction begun on one shard ([`Journal::begin`]).
pub struct Txn<'a> {
    shard: MutexGuard<'a, Shard>,
    ring_size: u64,
}

/// The update when `updates` is one aligned word, which needs no journal.
fn single_word(updates: &[Update]) -> Option<&Update> {
    match updates {
        [u] if u.bytes.len() == 8 && u.addr.is_multiple_of(8) => Some(u),
        _ => None,
    }
}

/// A single aligned word needs no journal: it is its own commit.
fn commit_word(region: &dyn Region, u: &Update) -> Result<()> {
    region.fence(); // R1: what the word commits is persistent first.
    apply(region, u)?;
    region.fence(); // R5
    Ok(())
}

impl Txn<'_> {
    /// Commits `updates` (steps 1–4 of the protocol above).
    pub fn commit(mut self, region: &dyn Region, updates: &[Update]) -> Result<()> {
        if let Some(u) = single_word(updates) {
            return commit_word(region, u);
        }
        let shard = &mut *self.shard;
        shard.buf.clear();
        encode_into(&mut shard.buf, updates, shard.tail);
        if shard.buf.len() as u64 > self.ring_size {
            return Err(Error::Invalid("journal transaction larger than the ring"));
        }
        let start = shard.tail;
        let end = start + shard.buf.len() as u64;
        ring_write(region, shard.ring, self.ring_size, start, &shard.buf)?;
        region.fence(); // R2: records, TxnInfo and the log entries they commit persistent before the commit.
        region.commit_u64(shard.header + JOURNAL_TAIL_FIELD, end)?; // R5: committed.
        for u in updates {
            apply(region, u)?;
        }
        region.fence(); // In-place updates persistent before the checkpoint.

        // Checkpoint. No fence of its own: every later in-place update of
        // these words is preceded by a fence in its own protocol (R1/R2),
        // which makes this store durable first; and releasing the shard (a
        // locked instruction) waits for its flush.
        region.store_u64(shard.header + JOURNAL_HEAD_FIELD, end)?;
        region.flush(shard.header + JOURNAL_HEAD_FIELD, 8)?;
        shard.tail = end;
        Ok(())
    }
}

impl Journal {
    /// Opens the journals of a recovered image (head == tail everywhere).
    pub fn open(region: &dyn Region, sb: &Superblock) -> Result<Journal> {
        let shards = (0..u64::from(sb.shards))
            .map(|i| {
                let hdr = header_off(sb, i);
                let tail = region.load_u64(hdr + JOURNAL_TAIL_FIELD)?;
                Ok(Mutex::new(Shard {
                    header: hdr,
                    ring: ring_off(sb, i),
                    tail,
                    buf: Vec::new(),
                }))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Journal {
            shards,
            ring_size: sb.journal_ring_size,
        })
    }

    /// Applies `updates` atomically: after a crash either all or none are
    /// visible.
    pub fn commit(&self, region: &dyn Region, updates: &[Update]) -> Result<()> {
        if let Some(u) = single_word(updates) {
            return commit_word(region, u); // Without taking a shard.
        }
        self.begin().commit(region, updates)
    }

    /// Takes this thread's shard for a transaction, before the log appends
    /// it will commit: taking a lock is a locked instruction, which waits
    /// for every outstanding cache-line flush, so taken after the appends it
    /// would cost a drain of its own; taken first, the appends' flushes
    /// share the transaction's R2 fence. Nothing that commits through the
    /// journal (thorough GC) may run while it is held.
    pub fn begin(&self) -> Txn<'_> {
        Txn {
            shard: self.shards[current_shard(self.shards.len())].lock(),
            ring_size: self.ring_size,
        }
    }

    /// Replays committed transactions of every shard and checkpoints them
    /// (NOVA §4.7 step 1). Returns how many were replayed and how many were
    /// discarded as damaged. Discarding is safe: each shard holds at most
    /// one transaction (each is checkpointed at once), whose records are
    /// either applied already or not at all, and the log entries it would
    /// commit lie past the old tails, invisible.
    pub fn recover(region: &dyn Region, sb: &Superblock) -> Result<(u64, u64)> {
        let mut replayed = 0;
        let mut discarded = 0;
        for i in 0..u64::from(sb.shards) {
            let hdr = header_off(sb, i);
            let head = region.load_u64(hdr + JOURNAL_HEAD_FIELD)?;
            let tail = region.load_u64(hdr + JOURNAL_TAIL_FIELD)?;
            if head == tail {
                continue;
            }
            if tail < head || tail - head > sb.journal_ring_size {
                return Err(corrupt!("journal {i}: head {head} and tail {tail} are inconsistent"));
            }
            let mut buf = vec![0u8; (tail - head) as usize];
            ring_read(region, ring_off(sb, i), sb.journal_ring_size, head, &mut buf)?;
            let txns = parse(&buf, region.len()).unwrap_or_else(|e| {
                tracing::error!(shard = i, error = %e, "damaged journal transaction discarded");
                discarded += 1;
                Vec::new()
            });
            for updates in &txns {
                for u in updates {
                    apply(region, u)?;
                }
            }
            region.fence();
            region.commit_u64(hdr + JOURNAL_HEAD_FIELD, tail)?;
            replayed += txns.len() as u64;
        }
        Ok((replayed, discarded))
    }
}

/// Splits committed ring bytes into transactions, verifying each TxnInfo and
/// that every record targets the region.
fn parse(buf: &[u8], region_len: u64) -> std::result::Result<Vec<Vec<Update>>, String> {
    let mut txns = Vec::new();
    let mut updates = Vec::new();
    let mut pos = 0usize;
    let mut txn_start = 0usize;
    while pos < buf.len() {
        let marker: u64 = decode(&buf[pos..]).map_err(|_| "truncated record")?;
        if marker == TXN_MARKER {
            let info: TxnInfo = decode(&buf[pos..]).map_err(|_| "truncated TxnInfo")?;
            if info.magic != TXN_MAGIC || info.count as usize != updates.len() {
                return Err(format!("bad TxnInfo at ring byte {pos}"));
            }
            if crc32c::crc32c(&buf[txn_start..pos]) != info.csum {
                return Err(format!("transaction ending at ring byte {pos} fails its checksum"));
            }
            txns.push(std::mem::take(&mut updates));
            pos += size_of::<TxnInfo>();
            txn_start = pos;
            continue;
        }
        let rec: JournalRecord = decode(&buf[pos..]).map_err(|_| "truncated record")?;
        let data = pos + size_of::<JournalRecord>();
        let len = rec.len as usize;
        if data + len > buf.len() || rec.addr.checked_add(rec.len as u64).is_none_or(|e| e > region_len) {
            return Err(format!("record at ring byte {pos} is out of bounds"));
        }
        updates.push(Update {
            addr: rec.addr,
            bytes: buf[data..data + len].to_vec(),
        });
        pos = (data + len).next_multiple_of(8);
    }
    if !updates.is_empty() {
        return Err("records after the last TxnInfo".into());
    }
    Ok(txns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_round_trips_and_rejects_corruption() {
        let t1 = vec![
            Update::word(64, 7),
            Update {
                addr: 100,
                bytes: vec![1, 2, 3],
            },
        ];
        let t2 = vec![Update::word(8, 9)];
        let mut buf = Vec::new();
        encode_into(&mut buf, &t1, 0);
        encode_into(&mut buf, &t2, 1);
        let txns = parse(&buf, 4096).unwrap();
        assert_eq!(txns.len(), 2);
        assert_eq!(txns[0][1].bytes, vec![1, 2, 3]);
        assert_eq!(txns[1][0].addr, 8);
        let mut bad = buf.clone();
        bad[20] ^= 1;
        assert!(parse(&bad, 4096).is_err());
        assert!(parse(&buf, 64).is_err(), "record beyond the region");
    }
}
