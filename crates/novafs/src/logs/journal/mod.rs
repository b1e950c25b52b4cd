//! Per-shard fine-grained metadata journals (DESIGN.md §2 item 5; NOVA §4.2
//! "lite journal"; fine-grained journaling §III). A transaction holds only
//! the modified metadata — (address, new bytes) update records — plus check
//! records, closed by a TxnInfo with count, magic, its ring position and a
//! checksum. Protocol:
//!
//! 1. what the transaction publishes outside the ring — log entries, page
//!    links, a new inode's record — is written and flushed, each range
//!    declared to it as a check: (range, CRC32C);
//! 2. records + TxnInfo are written at the ring position `head` and flushed;
//!    one fence makes all of it persistent (R2): the transaction is
//!    committed;
//! 3. the updates are applied in place and made persistent;
//! 4. checkpoint: head := end, flushed and fenced, so no transaction is
//!    ever replayed after a later one (which could roll back words they
//!    share).
//!
//! Departure from the paper (§III-B), as DESIGN.md R2 and R5 allow: there
//! is no separate tail store. A transaction counts as committed when, at
//! the head, its TxnInfo is found with the right position, its checksum
//! matches the records and every check matches the media — which is
//! exactly "everything step 2's fence covers is persistent" (optimistic
//! crash consistency, Chidambaram et al., SOSP '13; ext4's async-commit
//! journal checksums). That saves one flush-and-fence round trip per
//! transaction. It holds only if every byte a transaction makes reachable
//! is a check, an update, or fenced before step 2: FORMAT.md ("What a
//! transaction publishes") lists each object and which of the three
//! covers it. Nothing is applied in place before step 2's fence, so a
//! transaction that fails its checks has changed nothing; once any update
//! is applied its checked ranges are persistent, and no update of a
//! transaction targets a range it checks. A later transaction's updates
//! may (it invalidates a dentry this one added), which is another reason
//! the head must be durable before they are applied — step 4 in normal
//! operation, and recovery, which replays from the head every transaction
//! that passes, checkpointing each before replaying the next. Records are
//! redo images, so replay is idempotent.
//!
//! A relaxed-mode overwrite goes through no ring: it names the data page
//! it changes in place, and the time its log entry takes, in the shard's
//! header line first, and clears that intent when it is done (`intent`).
//!
//! Every commit counts what it writes and its fences (`stats`). A
//! benchmark can journal whole blocks instead (`blocks`), to measure what
//! fine-grained journaling saves.

mod batch;
mod blocks;
mod intent;
mod stats;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use crate::lock::{Mutex, MutexGuard, Rank};
use pm::latency::{self, Part};
use pm::Region;
use zerocopy::IntoBytes;

use crate::alloc::current_shard;
use crate::error::{Error, Result};
use crate::layout::{
    decode, Bounds, JournalHeader, JournalRecord, Superblock, TxnInfo, JOURNAL_HEAD_FIELD, PAGE_SIZE, RECORD_CHECK,
    RECORD_UPDATE, TXN_MAGIC, TXN_MARKER, VERSION,
};
use crate::replica::{readable, Mirrored};
use crate::superblock::bounds_of;
pub(crate) use intent::Retime;
pub use stats::JournalStats;
use stats::{Cost, Counters};

/// One metadata update: `bytes` become the contents at region offset `addr`.
#[derive(Clone, Debug)]
pub(crate) struct Update {
    pub addr: u64,
    pub bytes: Vec<u8>,
}

impl Update {
    /// An update of one aligned 8-byte word (log tails, heads, valid bits).
    pub(crate) fn word(addr: u64, val: u64) -> Update {
        Update {
            addr,
            bytes: val.to_le_bytes().to_vec(),
        }
    }
}

/// A range a transaction depends on: written before it, and persistent
/// exactly when its CRC32C matches the media. The range must not end with
/// a CRC32C of the bytes before it: the CRC32C of such a range is the same
/// constant whatever the bytes, so the check would pass for stale contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Check {
    addr: u64,
    len: u32,
    crc: u32,
}

/// The longest range one check covers (a record longer than this is damage).
const MAX_CHECK: u64 = PAGE_SIZE;

impl Check {
    /// The check that `bytes`, as just written at `addr`, reached the media.
    pub(crate) fn of(addr: u64, bytes: &[u8]) -> Check {
        debug_assert!(bytes.len() as u64 <= MAX_CHECK);
        Check {
            addr,
            len: bytes.len() as u32,
            crc: crc32c::crc32c(bytes),
        }
    }
}

struct Shard {
    header: u64,
    ring: u64,
    /// Ring position of the next transaction; every transaction is
    /// checkpointed at once, so it is also the durable head.
    head: u64,
    /// Checks of the transaction being built.
    checks: Vec<Check>,
    /// Encoding buffer, kept to spare an allocation per transaction.
    buf: Vec<u8>,
    /// The generation of the intent word last stored (`intent`).
    intent_gen: u64,
}

/// The set of per-shard journals.
pub(crate) struct Journal {
    shards: Vec<Mutex<Shard>>,
    ring_size: u64,
    /// Each shard's accounting.
    counters: Box<[Counters]>,
    /// Journal whole blocks: the benchmarks' baseline (`blocks`).
    blocks: bool,
    /// Relaxed mode's running transaction, when the mount batches (`batch`).
    batch: Option<batch::Batch>,
}

fn header_off(sb: &Superblock, shard: u64) -> u64 {
    sb.journal_headers_off + shard * size_of::<JournalHeader>() as u64
}

fn ring_off(sb: &Superblock, shard: u64) -> u64 {
    sb.journal_rings_off + shard * sb.journal_ring_size
}

/// Writes `bytes` into the ring at counter position `pos`, wrapping.
fn ring_write(region: &dyn Region, ring: u64, size: u64, pos: u64, bytes: &[u8], cost: &mut Cost) -> Result<()> {
    let at = pos % size;
    let first = (size - at).min(bytes.len() as u64) as usize;
    region.write(ring + at, &bytes[..first])?;
    cost.flush(region, ring + at, first as u64)?;
    if first < bytes.len() {
        region.write(ring, &bytes[first..])?;
        cost.flush(region, ring, (bytes.len() - first) as u64)?;
    }
    cost.journal += bytes.len() as u64;
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

fn apply(region: &dyn Region, u: &Update, cost: &mut Cost) -> Result<()> {
    if u.bytes.len() == 8 && u.addr.is_multiple_of(8) {
        let v = u64::from_le_bytes(u.bytes[..8].try_into().unwrap_or_default());
        region.store_u64(u.addr, v)?;
    } else {
        region.write(u.addr, &u.bytes)?;
    }
    cost.flush(region, u.addr, u.bytes.len() as u64)?;
    cost.applied += u.bytes.len() as u64;
    Ok(())
}

/// Checkpoint: `head := end`, one 8-byte store, durable (R5).
fn checkpoint(region: &dyn Region, header: u64, end: u64, cost: &mut Cost) -> Result<()> {
    region.store_u64(header + JOURNAL_HEAD_FIELD, end)?;
    cost.flush(region, header + JOURNAL_HEAD_FIELD, 8)?;
    cost.fence(region);
    cost.checkpoint += 8;
    Ok(())
}

/// Appends one record header and its padded payload to `buf`.
fn push_record(buf: &mut Vec<u8>, rec: JournalRecord, payload: &[u8]) {
    buf.extend_from_slice(rec.as_bytes());
    buf.extend_from_slice(payload);
    buf.resize(buf.len().next_multiple_of(8), 0);
}

/// Encodes the transaction into `buf` (replacing its contents): updates,
/// checks, TxnInfo.
fn encode_into(buf: &mut Vec<u8>, updates: &[Update], checks: &[Check], txn_id: u64) {
    buf.clear();
    for u in updates {
        let rec = JournalRecord {
            addr: u.addr,
            len: u.bytes.len() as u32,
            kind: RECORD_UPDATE,
        };
        push_record(buf, rec, &u.bytes);
    }
    for c in checks {
        let rec = JournalRecord {
            addr: c.addr,
            len: c.len,
            kind: RECORD_CHECK,
        };
        push_record(buf, rec, &c.crc.to_le_bytes());
    }
    let info = TxnInfo {
        marker: TXN_MARKER,
        count: (updates.len() + checks.len()) as u32,
        magic: TXN_MAGIC,
        txn_id,
        csum: crc32c::crc32c(buf),
        pad: 0,
    };
    buf.extend_from_slice(info.as_bytes());
}

/// A transaction begun on one shard ([`Journal::begin`]).
pub(crate) struct Txn<'a> {
    shard: MutexGuard<'a, Shard>,
    index: u64,
    ring_size: u64,
    counters: &'a Counters,
    blocks: bool,
    /// What it has written and fenced so far (an intent, `intent`).
    cost: Cost,
    /// It stored an intent, which `end_in_place` clears.
    intent: bool,
}

/// Which transaction: its shard and ring position, so a log append made
/// for one transaction cannot be taken as committed by another's proof.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TxnId {
    shard: u64,
    pos: u64,
}

/// Proof that a transaction is committed (R2) — or that a single word was
/// stored and fenced (R5). Only this module makes one, after the fence:
/// what the transaction made unreferenced may then be freed (R3), and the
/// log appends it checked may be published (`log::Pending::journaled`).
#[must_use = "a commit's proof is what lets its effects be published and its stale pages freed"]
#[derive(Debug)]
pub struct Durable {
    txn: Option<TxnId>,
}

impl Durable {
    /// The transaction this proves, if it was one (a single word is not).
    pub(crate) fn txn(&self) -> Option<TxnId> {
        self.txn
    }
}

impl crate::alloc::sealed::Commit for Durable {}
impl crate::alloc::Unreferenced for Durable {}
impl crate::alloc::sealed::Link for Durable {}
impl crate::alloc::Linked for Durable {}

/// The update when `updates` is one aligned word, which needs no journal.
fn single_word(updates: &[Update]) -> Option<&Update> {
    match updates {
        [u] if u.bytes.len() == 8 && u.addr.is_multiple_of(8) => Some(u),
        _ => None,
    }
}

/// A single aligned word needs no journal: it is its own commit (what
/// links a new inode-table chunk, too; not counted in [`JournalStats`]).
pub(crate) fn commit_word(region: &dyn Region, u: &Update) -> Result<Durable> {
    word(region, u, &mut Cost::default())?;
    Ok(Durable { txn: None })
}

fn word(region: &dyn Region, u: &Update, cost: &mut Cost) -> Result<()> {
    cost.fence(region); // R1: what the word commits is persistent first.
    apply(region, u, cost)?;
    cost.fence(region); // R5
    Ok(())
}

impl Txn<'_> {
    /// Declares ranges the transaction commits, already written and
    /// flushed: log entries, a page link, an inode record. Recovery replays
    /// the transaction only if they are on the media.
    pub(crate) fn depends_on(&mut self, checks: &[Check]) {
        self.shard.checks.extend_from_slice(checks);
    }

    /// This transaction's identity, for the appends it will commit.
    pub(crate) fn id(&self) -> TxnId {
        TxnId {
            shard: self.index,
            pos: self.shard.head,
        }
    }

    /// Commits `updates` (steps 2–4 of the protocol above).
    pub(crate) fn commit(mut self, region: &dyn Region, updates: &[Update]) -> Result<Durable> {
        let _span = latency::enter(Part::Journal);
        debug_assert!(!self.intent, "a transaction with an intent ends in place");
        let id = self.id();
        let mut cost = std::mem::take(&mut self.cost);
        if let Some(u) = single_word(updates) {
            // Its first fence makes every checked range persistent (R1).
            word(region, u, &mut cost)?;
            self.counters.add(&cost, false);
            return Ok(Durable { txn: Some(id) });
        }
        let shard = &mut *self.shard;
        debug_assert!(
            updates.iter().all(|u| shard
                .checks
                .iter()
                .all(|c| u.addr + u.bytes.len() as u64 <= c.addr || c.addr + u64::from(c.len) <= u.addr)),
            "an update targets a range its transaction checks"
        );
        if self.blocks {
            blocks::commit(shard, self.ring_size, region, updates, &mut cost)?;
            self.counters.add(&cost, true);
            return Ok(Durable { txn: Some(id) });
        }
        encode_into(&mut shard.buf, updates, &shard.checks, shard.head);
        if shard.buf.len() as u64 > self.ring_size {
            return Err(Error::Invalid("journal transaction larger than the ring"));
        }
        let end = shard.head + shard.buf.len() as u64;
        ring_write(region, shard.ring, self.ring_size, shard.head, &shard.buf, &mut cost)?;
        // R2: records, TxnInfo and every checked range persistent: this is
        // the commit point (see the module comment).
        cost.fence(region);
        for u in updates {
            apply(region, u, &mut cost)?;
        }
        cost.fence(region); // R2: in-place updates persistent before the checkpoint.

        // Checkpoint: one 8-byte store, durable before the operation
        // returns (R5). A later
        // transaction, on any shard, commits as soon as its lines reach the
        // media, with no fence first; were this one still behind a head,
        // recovery could replay it after the later one and roll back words
        // they share. The fence costs little: releasing the shard (a
        // locked instruction) would wait for the flush anyway.
        checkpoint(region, shard.header, end, &mut cost)?;
        shard.head = end;
        self.counters.add(&cost, true);
        Ok(Durable { txn: Some(id) })
    }
}

impl Journal {
    /// Opens the journals of a recovered image (every committed transaction
    /// replayed and checkpointed: the durable head is where the next goes).
    pub(crate) fn open(region: &dyn Region, sb: &Superblock) -> Result<Journal> {
        let shards = (0..u64::from(sb.shards))
            .map(|i| {
                let hdr = header_off(sb, i);
                Ok(Mutex::new(
                    Rank::Journal,
                    Shard {
                        header: hdr,
                        ring: ring_off(sb, i),
                        head: load_head(region, hdr, sb.journal_ring_size)?,
                        checks: Vec::new(),
                        buf: Vec::new(),
                        intent_gen: intent::cleared(read_header(region, hdr)?.intent),
                    },
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Journal {
            counters: shards.iter().map(|_| Counters::default()).collect(),
            shards,
            ring_size: sb.journal_ring_size,
            blocks: false,
            batch: None,
        })
    }

    /// From now on, journals transactions as whole blocks: the benchmarks'
    /// block-granular baseline, which nothing recovers (`blocks`).
    pub(crate) fn use_blocks(&mut self) {
        self.blocks = true;
    }

    /// From now on, collects relaxed mode's in-place words in a running
    /// transaction of at most `limit` words (`batch`), no more than the
    /// ring holds.
    pub(crate) fn use_batch(&mut self, limit: usize) {
        let fits = (self.ring_size as usize - size_of::<TxnInfo>()) / (size_of::<JournalRecord>() + 8);
        self.batch = Some(batch::Batch::new(limit.min(fits)));
    }

    /// What every commit since the open wrote and fenced.
    pub(crate) fn stats(&self) -> JournalStats {
        stats::sum(&self.counters)
    }

    /// Applies `updates` atomically: after a crash either all or none are
    /// visible.
    pub(crate) fn commit(&self, region: &dyn Region, updates: &[Update]) -> Result<Durable> {
        let _span = latency::enter(Part::Journal);
        if let Some(u) = single_word(updates) {
            // Without taking a shard; counted on this thread's.
            let mut cost = Cost::default();
            word(region, u, &mut cost)?;
            self.counters[current_shard(self.counters.len())].add(&cost, false);
            return Ok(Durable { txn: None });
        }
        self.begin().commit(region, updates)
    }

    /// Takes this thread's shard for a transaction, before the log appends
    /// it will commit: taking a lock is a locked instruction, which waits
    /// for every outstanding cache-line flush, so taken after the appends it
    /// would cost a drain of its own; taken first, the appends' flushes
    /// share the transaction's R2 fence. Nothing that commits through the
    /// journal (thorough GC) may run while it is held.
    pub(crate) fn begin(&self) -> Txn<'_> {
        let index = current_shard(self.shards.len());
        let mut shard = self.shards[index].lock();
        shard.checks.clear();
        Txn {
            shard,
            index: index as u64,
            ring_size: self.ring_size,
            counters: &self.counters[index],
            blocks: self.blocks,
            cost: Cost::default(),
            intent: false,
        }
    }

    /// Whether any shard holds a committed transaction that recovery would
    /// replay, or an intent it would reseal. Reads only, so it is safe on a mounted image.
    pub(crate) fn pending(region: &Arc<dyn Region>, sb: &Superblock) -> Result<bool> {
        let bounds = bounds_of(sb);
        let meta = Mirrored::view(region.clone(), bounds);
        for i in 0..u64::from(sb.shards) {
            let head = load_head(&*meta, header_off(sb, i), sb.journal_ring_size)?;
            if let Some(txn) = txn_at(&*meta, sb, i, head)? {
                if checks_hold(&*meta, &**region, bounds, &txn.checks)?.is_some() {
                    return Ok(true);
                }
            }
        }
        intent::any_pending(&*meta, sb)
    }

    /// Replays the committed transactions of every shard of the image on
    /// `region`, from its head, and checkpoints them (NOVA §4.7 step 1).
    /// What follows them — a transaction torn by the crash, or whose
    /// checked ranges did not all reach the media, or bytes of an older
    /// lap of the ring — was never committed and is ignored: nothing of it
    /// was applied in place (module comment). Replayed updates reach both
    /// copies of what they change (the mirroring view).
    pub(crate) fn recover(region: &Arc<dyn Region>, sb: &Superblock) -> Result<Replay> {
        let bounds = bounds_of(sb);
        let meta = Mirrored::view(region.clone(), bounds);
        let mut done = Replay::default();
        for i in 0..u64::from(sb.shards) {
            let hdr = header_off(sb, i);
            done.headers += u64::from(restore_header(&*meta, hdr, sb)?);
            let head = load_head(&*meta, hdr, sb.journal_ring_size)?;
            let mut pos = head;
            while let Some(txn) = txn_at(&*meta, sb, i, pos)? {
                let Some(from_replica) = checks_hold(&*meta, &**region, bounds, &txn.checks)? else {
                    forget_uncommitted(&*meta, ring_off(sb, i), sb.journal_ring_size, pos)?;
                    break;
                };
                // Accepted on the replica's copy of a checked range: that
                // copy is the one the image keeps from now on (FORMAT.md
                // "A crash and a damaged copy": one fixed mix of lines),
                // so it goes over the primary, which may be damaged or a
                // stale record a reused slot still holds.
                for &(addr, len) in &from_replica {
                    copy_replica_over_primary(&**region, bounds, addr, len)?;
                }
                done.repaired += from_replica.len() as u64;
                for u in &txn.updates {
                    apply(&*meta, u, &mut Cost::default())?;
                }
                // Replayed updates (and primaries rewritten from their
                // replicas) persistent, then checkpointed before the next
                // transaction is replayed: its updates may overwrite
                // ranges this one checks (invalidate a dentry it added), so
                // a crash must not find this one at the head again (R2,
                // then the checkpoint store, R5).
                meta.fence();
                meta.commit_u64(hdr + JOURNAL_HEAD_FIELD, txn.end)?;
                pos = txn.end;
                done.replayed += 1;
            }
        }
        done.resealed = intent::reseal_pending(&*meta, &**region, sb)?;
        Ok(done)
    }
}

/// What [`Journal::recover`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Replay {
    /// Committed transactions replayed.
    pub replayed: u64,
    /// Checked ranges whose primary failed the check while the replica
    /// held it: rewritten from the replica (damage, counted as repairs).
    pub repaired: u64,
    /// Damaged header lines rewritten ([`damaged_headers`]).
    pub headers: u64,
    /// Data pages a relaxed write was changing in place, resealed (`intent`).
    pub resealed: u64,
}

/// Heads past this are damage: 2^62 bytes of transactions never happen.
const MAX_HEAD: u64 = 1 << 62;

/// Whether `head` is a count some run of transactions reaches: below
/// 2^62, and a multiple of 8 (every record and TxnInfo is).
fn head_is_whole(head: u64) -> bool {
    head < MAX_HEAD && head.is_multiple_of(8)
}

/// A shard's durable head. A damaged one (far past any real count, or
/// between two words) is replaced by a count no transaction ever reached
/// (2^61 and up), at (the word holding) the same ring position: nothing is
/// replayed from it (every transaction names the count it was written
/// at), and counting on from it stays whole (below 2^62) for 2^61 bytes.
fn load_head(region: &dyn Region, header: u64, ring_size: u64) -> Result<u64> {
    let head = region.load_u64(header + JOURNAL_HEAD_FIELD)?;
    if head_is_whole(head) {
        return Ok(head);
    }
    tracing::error!(header, head, "journal head is damaged; continuing at its ring position");
    let base = MAX_HEAD / 2;
    Ok(base - base % ring_size + ((head % ring_size) & !7))
}

/// What is wrong with each shard's header line, in words: a head no run
/// of transactions reaches, an intent that names no data page, or
/// reserved words that are not zero (nothing writes them). Damage either way: [`Journal::recover`] rewrites the line.
/// A format 1 image kept a tail in the line: its first mount rewrites it.
pub(crate) fn damaged_headers(region: &dyn Region, sb: &Superblock) -> Result<Vec<String>> {
    let mut out = Vec::new();
    if sb.version < VERSION {
        return Ok(out);
    }
    for i in 0..u64::from(sb.shards) {
        let hdr: JournalHeader = read_header(region, header_off(sb, i))?;
        if !head_is_whole(hdr.head) {
            out.push(format!("journal head of shard {i} is damaged ({:#x})", hdr.head));
        }
        if !intent::is_whole(&hdr, sb) {
            out.push(format!("journal intent of shard {i} is damaged ({:#x})", hdr.intent));
        }
        if hdr.reserved != [0; 3] {
            out.push(format!("journal header of shard {i} has damaged reserved words"));
        }
    }
    Ok(out)
}

fn read_header(region: &dyn Region, off: u64) -> Result<JournalHeader> {
    let mut buf = [0u8; size_of::<JournalHeader>()];
    region.read(off, &mut buf)?;
    decode(&buf)
}

/// Rewrites the header line at `off` if it is damaged ([`damaged_headers`]):
/// the head [`load_head`] continues from, a whole intent kept (a damaged
/// one cleared: which page it named is lost), reserved words zero.
/// Returns whether it did.
fn restore_header(region: &dyn Region, off: u64, sb: &Superblock) -> Result<bool> {
    let hdr = read_header(region, off)?;
    let intent_whole = intent::is_whole(&hdr, sb);
    if head_is_whole(hdr.head) && intent_whole && hdr.reserved == [0; 3] {
        return Ok(false);
    }
    let whole = JournalHeader {
        head: load_head(region, off, sb.journal_ring_size)?,
        intent: if intent_whole { hdr.intent } else { 0 },
        reserved: [0; 3],
        ..hdr
    };
    region.write(off, whole.as_bytes())?;
    region.flush(off, size_of::<JournalHeader>() as u64)?;
    region.fence(); // R5: the head is whole before anything counts on from it.
    Ok(true)
}

/// Zeroes the first record of the transaction at ring position `pos`,
/// whole but for a checked range that did not reach the media: it is not
/// committed, but should a later operation write the very bytes it checks,
/// a second crash before the next transaction overwrites it would let
/// recovery replay it.
fn forget_uncommitted(region: &dyn Region, ring: u64, size: u64, pos: u64) -> Result<()> {
    ring_write(
        region,
        ring,
        size,
        pos,
        &[0; size_of::<JournalRecord>()],
        &mut Cost::default(),
    )?;
    region.fence(); // R2: forgotten before anything later can satisfy its checks.
    Ok(())
}

/// A transaction read back from the ring.
#[derive(Debug)]
struct Parsed {
    updates: Vec<Update>,
    checks: Vec<Check>,
    /// Ring position just past its TxnInfo.
    end: u64,
}

/// The transaction at ring position `pos` of shard `shard` (see [`read_txn`]).
fn txn_at(region: &dyn Region, sb: &Superblock, shard: u64, pos: u64) -> Result<Option<Parsed>> {
    let read = |at: u64, buf: &mut [u8]| ring_read(region, ring_off(sb, shard), sb.journal_ring_size, at, buf);
    read_txn(&read, pos, sb.journal_ring_size, region.len())
}

/// Reads the transaction that starts at ring position `pos`: `None` unless
/// its records are well formed, target the region, and are closed by a
/// TxnInfo naming position `pos` whose checksum matches them.
fn read_txn(
    read: &dyn Fn(u64, &mut [u8]) -> Result<()>,
    pos: u64,
    ring_size: u64,
    region_len: u64,
) -> Result<Option<Parsed>> {
    let mut bytes = Vec::new();
    let mut txn = Parsed {
        updates: Vec::new(),
        checks: Vec::new(),
        end: pos,
    };
    let mut head = [0u8; size_of::<TxnInfo>()];
    loop {
        if bytes.len() as u64 + head.len() as u64 > ring_size {
            return Ok(None);
        }
        read(pos + bytes.len() as u64, &mut head)?;
        if u64::from_le_bytes(head[..8].try_into().unwrap_or_default()) == TXN_MARKER {
            let info: TxnInfo = decode(&head)?;
            let whole = info.magic == TXN_MAGIC
                && info.txn_id == pos
                && info.count as usize == txn.updates.len() + txn.checks.len()
                && info.csum == crc32c::crc32c(&bytes);
            txn.end = pos + (bytes.len() + head.len()) as u64;
            return Ok(whole.then_some(txn));
        }
        let rec: JournalRecord = decode(&head[..size_of::<JournalRecord>()])?;
        let payload = match rec.kind {
            RECORD_UPDATE => rec.len as usize,
            // Checks cover one log entry, one inode record or one word:
            // never more than a page, so verifying one reads little.
            RECORD_CHECK if u64::from(rec.len) <= MAX_CHECK => 4,
            _ => return Ok(None),
        };
        let padded = (size_of::<JournalRecord>() + payload).next_multiple_of(8);
        let in_region = rec
            .addr
            .checked_add(u64::from(rec.len))
            .is_some_and(|e| e <= region_len);
        if rec.len == 0 || !in_region || (bytes.len() + padded) as u64 > ring_size {
            return Ok(None);
        }
        let at = bytes.len();
        bytes.resize(at + padded, 0);
        read(pos + at as u64, &mut bytes[at..])?;
        let data = &bytes[at + size_of::<JournalRecord>()..at + size_of::<JournalRecord>() + payload];
        if rec.kind == RECORD_UPDATE {
            txn.updates.push(Update {
                addr: rec.addr,
                bytes: data.to_vec(),
            });
        } else {
            txn.checks.push(Check {
                addr: rec.addr,
                len: rec.len,
                crc: u32::from_le_bytes(data.try_into().unwrap_or_default()),
            });
        }
    }
}

/// Whether every checked range is on the media as the transaction wrote
/// it: `None` if one is not, else the ranges that hold only in their
/// replica. Each is read through the metadata view `meta` (a line the
/// media cannot read comes from its replica), and when that fails the
/// check, from the replica alone (on `data`, the raw region): a primary
/// scribbled over reads back as garbage, not as an error. Either copy
/// alone obeys R2 (FORMAT.md "A crash and a damaged copy"), so a check
/// that holds in either means the transaction was committed; after the
/// commit fence both copies hold it, so one damaged copy cannot hide a
/// committed transaction whose updates have begun to land in place.
fn checks_hold(
    meta: &dyn Region,
    data: &dyn Region,
    bounds: Bounds,
    checks: &[Check],
) -> Result<Option<Vec<(u64, u64)>>> {
    let mut buf = Vec::new();
    let mut from_replica = Vec::new();
    for c in checks {
        buf.resize(c.len as usize, 0);
        let primary = readable(meta.read(c.addr, &mut buf))?;
        if primary && crc32c::crc32c(&buf) == c.crc {
            continue;
        }
        if !read_replica(data, bounds, c.addr, &mut buf)? || crc32c::crc32c(&buf) != c.crc {
            return Ok(None);
        }
        from_replica.push((c.addr, u64::from(c.len)));
    }
    Ok(Some(from_replica))
}

/// Reads the replica of `[addr, addr + buf.len())` into `buf`, page piece
/// by page piece (mirroring reverses the order of pages): false when a
/// piece has no replica or the media cannot read it.
fn read_replica(data: &dyn Region, bounds: Bounds, addr: u64, buf: &mut [u8]) -> Result<bool> {
    let end = addr + buf.len() as u64;
    let mut at = addr;
    while at < end {
        let piece_end = (at - at % PAGE_SIZE + PAGE_SIZE).min(end);
        let piece = &mut buf[(at - addr) as usize..(piece_end - addr) as usize];
        let Some(m) = bounds.replica(at) else {
            return Ok(false);
        };
        if !readable(data.read(m, piece))? {
            return Ok(false);
        }
        at = piece_end;
    }
    Ok(true)
}

/// Copies the replica of `[addr, addr + len)` over its primary, flushed
/// (the caller's fence makes it durable).
fn copy_replica_over_primary(data: &dyn Region, bounds: Bounds, addr: u64, len: u64) -> Result<()> {
    let mut buf = vec![0u8; len as usize];
    if read_replica(data, bounds, addr, &mut buf)? {
        data.write(addr, &buf)?;
        data.flush(addr, len)?;
        // A crash between the copies' stores leaves this too: no warning.
        tracing::info!(addr, len, "journal-checked metadata taken from its replica");
    }
    Ok(())
}
