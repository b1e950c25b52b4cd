//! Cases: damage as (offset, bytes) writes and poisoned ranges on a base
//! image, generated from a seed and an index, and their text form (the
//! corpus keeps them so).

use std::fmt::Write as _;

use novafs::probe::layout::{
    entry_csum, Superblock, INODE_CSUM_END, INODE_CSUM_START, INODE_CSUM_WORD_OFF, INODE_HEADS_OFF, INODE_SIZE,
    JOURNAL_HEADERS_OFF, LOG_NEXT_OFF, LOG_USABLE, PAGE_SIZE, RECOVERY_INODE_OFF, SLOT,
};
use novafs_rng::SplitMix;
use zerocopy::{FromBytes, IntoBytes};

use super::bases::*;

// ---------------------------------------------------------------------------
// The generator of the cases.

/// `novafs_rng::SplitMix` seeded as the cases were first generated (the
/// seed mixed with a constant of its own, each case's stream derived from
/// its index), so a printed `NOVAFS_FUZZ_ONLY=SEED:INDEX` keeps naming the
/// same case; with the draws the case generator makes.
#[derive(Clone)]
pub struct Rng(pub SplitMix);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(SplitMix::from_state(seed ^ 0x6A09_E667_F3BC_C909))
    }

    pub fn for_case(seed: u64, index: u64) -> Rng {
        let mut r = Rng::new(seed);
        let a = r.next();
        Rng::new(a ^ index.wrapping_mul(0xD1B5_4A32_D192_ED03))
    }

    pub fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0.below(n)
    }

    /// In `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.0.chance(percent, 100)
    }

    pub fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        *self.0.pick(v).unwrap()
    }
}

// ---------------------------------------------------------------------------
// Cases: damage as (offset, bytes) writes and poisoned ranges on a base.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Random bytes in pages 0–2 (superblock, journal headers, reserved
    /// inodes, inode-table heads), sometimes in both superblocks.
    Fixed,
    /// Random bytes in metadata pages: inode tables, logs, journal rings,
    /// the saved allocator state.
    Meta,
    /// Whole words set to extreme values: 0, all ones, the region size,
    /// pointers into the region, to the page itself (cycles).
    Scribble,
    /// Media errors in metadata.
    Poison,
    /// A structure changed and its checksum recomputed: damage no CRC
    /// catches (a bug that wrote nonsense, or a crafted image).
    Forged,
}

pub const CLASSES: [Class; 5] = [Class::Fixed, Class::Meta, Class::Scribble, Class::Poison, Class::Forged];

impl Class {
    pub fn name(self) -> &'static str {
        match self {
            Class::Fixed => "fixed",
            Class::Meta => "meta",
            Class::Scribble => "scribble",
            Class::Poison => "poison",
            Class::Forged => "forged",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Case {
    pub base: Variant,
    pub layout: u32,
    pub class: Class,
    pub origin: String,
    pub writes: Vec<(u64, Vec<u8>)>,
    pub poisons: Vec<(u64, u64)>,
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

pub fn parse_num(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

impl Case {
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "base {}\nlayout {:08x}\nclass {}\norigin {}\n",
            self.base.name(),
            self.layout,
            self.class.name(),
            self.origin
        );
        for (off, bytes) in &self.writes {
            let _ = writeln!(s, "write {off:#x} {}", hex(bytes));
        }
        for (off, len) in &self.poisons {
            let _ = writeln!(s, "poison {off:#x} {len}");
        }
        s
    }

    pub fn parse(text: &str) -> Result<Case, String> {
        let mut case = Case {
            base: Variant::Clean,
            layout: 0,
            class: Class::Meta,
            origin: String::new(),
            writes: Vec::new(),
            poisons: Vec::new(),
        };
        let mut have_base = false;
        for line in text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let (key, rest) = line.split_once(' ').unwrap_or((line, ""));
            let bad = || format!("bad line: {line}");
            match key {
                "base" => {
                    case.base = Variant::parse(rest).ok_or_else(bad)?;
                    have_base = true;
                }
                "layout" => case.layout = u32::from_str_radix(rest, 16).map_err(|_| bad())?,
                "class" => case.class = CLASSES.into_iter().find(|c| c.name() == rest).ok_or_else(bad)?,
                "origin" => case.origin = rest.to_string(),
                "write" => {
                    let (off, bytes) = rest.split_once(' ').ok_or_else(bad)?;
                    case.writes
                        .push((parse_num(off).ok_or_else(bad)?, unhex(bytes).ok_or_else(bad)?));
                }
                "poison" => {
                    let (off, len) = rest.split_once(' ').ok_or_else(bad)?;
                    case.poisons
                        .push((parse_num(off).ok_or_else(bad)?, parse_num(len).ok_or_else(bad)?));
                }
                _ => return Err(bad()),
            }
        }
        if !have_base {
            return Err("no base line".into());
        }
        Ok(case)
    }

    /// Whether what the walk reads must match what was written: only when
    /// nothing in the data area was touched and no checksum was forged.
    /// Damage there can legitimately change what a file holds without any
    /// error: data pages carry no checksum yet, and the words outside the
    /// checksums (an inode's log head and tail, a dentry's INVALID bit, a
    /// superblock with a recomputed CRC) may point at other valid entries.
    /// Outside it, every structure is checksummed, replicated or checked
    /// against its neighbours, so the files read back exactly or fail.
    pub fn strict(&self, map: &MetaMap) -> bool {
        self.class != Class::Forged
            && self
                .writes
                .iter()
                .map(|(off, b)| (*off, b.len() as u64))
                .chain(self.poisons.iter().copied())
                .all(|(off, len)| off + len <= map.data_start || off >= map.data_end)
    }
}

/// A case's damage, by `Rng::for_case(seed, index)`.
pub fn generate(bases: &Bases, seed: u64, index: u64) -> Case {
    let mut rng = Rng::for_case(seed, index);
    let variant = rng.pick(&VARIANTS);
    let base = bases.get(variant);
    let class = match rng.below(100) {
        0..25 => Class::Fixed,
        25..50 => Class::Meta,
        50..68 => Class::Scribble,
        68..83 => Class::Forged,
        _ => Class::Poison,
    };
    let mut case = Case {
        base: variant,
        layout: base.map.layout(),
        class,
        origin: format!("seed={seed} index={index}"),
        writes: Vec::new(),
        poisons: Vec::new(),
    };
    let g = Gen { rng, base };
    match class {
        Class::Fixed => g.fixed(&mut case),
        Class::Meta => g.meta(&mut case),
        Class::Scribble => g.scribble(&mut case),
        Class::Poison => g.poison(&mut case),
        Class::Forged => g.forged(&mut case),
    }
    case
}

pub struct Gen<'a> {
    pub rng: Rng,
    pub base: &'a Base,
}

impl<'a> Gen<'a> {
    // Borrowed from the base, not from `self`: the generator stays mutable.
    pub fn img(&self) -> &'a [u8] {
        &self.base.bytes
    }

    pub fn map(&self) -> &'a MetaMap {
        &self.base.map
    }

    /// A byte value different from the one at `off`.
    pub fn new_byte(&mut self, off: u64) -> u8 {
        self.img()[off as usize] ^ (self.rng.range(1, 255) as u8)
    }

    pub fn fixed(mut self, case: &mut Case) {
        let m = self.map();
        // The bytes that mean something, each structure as likely as the
        // superblock (which a checksum and a replica protect): the journal
        // heads and the rest of their lines, the recovery inode's state,
        // head and tail and the rest of it, the inode-table heads.
        let used: Vec<(u64, u64)> = vec![
            (0, size_of::<Superblock>() as u64),
            (JOURNAL_HEADERS_OFF, 8),
            (JOURNAL_HEADERS_OFF + 64, 8),
            (JOURNAL_HEADERS_OFF, 64 * m.shards),
            (RECOVERY_INODE_OFF, 24),
            (RECOVERY_INODE_OFF + 24, INODE_SIZE - 24),
            (INODE_HEADS_OFF, 8 * m.shards),
        ];
        let replica = m.replica;
        let n = self.rng.range(1, 16);
        let mode = self.rng.below(4);
        let mut offs = Vec::new();
        for _ in 0..n {
            let off = if self.rng.chance(50) {
                let (start, len) = self.rng.pick(&used);
                start + self.rng.below(len)
            } else {
                self.rng.below(3 * PAGE_SIZE)
            };
            offs.push(off);
        }
        if mode >= 2 {
            // The primary superblock and the rest at once.
            offs[0] = self.rng.below(size_of::<Superblock>() as u64);
            offs.push(PAGE_SIZE + self.rng.below(2 * PAGE_SIZE));
        }
        if mode == 3 {
            // Both superblocks: no good copy is left.
            for _ in 0..self.rng.range(1, 4) {
                offs.push(replica + self.rng.below(size_of::<Superblock>() as u64));
            }
        }
        for off in offs {
            let b = self.new_byte(off);
            case.writes.push((off, vec![b]));
        }
    }

    /// A metadata page, weighted by kind.
    pub fn meta_page(&mut self) -> u64 {
        let m = self.map();
        let fixed = m.fixed_pages();
        let kinds: Vec<&Vec<u64>> = [
            &m.log_pages,
            &m.log_pages,
            &m.chunk_pages,
            &m.ring_pages,
            &fixed,
            &m.chain,
        ]
        .into_iter()
        .filter(|v| !v.is_empty())
        .collect();
        let list = kinds[self.rng.below(kinds.len() as u64) as usize];
        list[self.rng.below(list.len() as u64) as usize]
    }

    /// An offset in `page`, near something non-zero more often than not.
    pub fn offset_in(&mut self, page: u64, align: u64) -> u64 {
        let bytes = &self.img()[page as usize..(page + PAGE_SIZE) as usize];
        if self.rng.chance(75) {
            let nonzero: Vec<u64> = (0..PAGE_SIZE)
                .step_by(align as usize)
                .filter(|&o| bytes[o as usize..(o + align) as usize].iter().any(|&b| b != 0))
                .collect();
            if !nonzero.is_empty() {
                return page + self.rng.pick(&nonzero);
            }
        }
        page + self.rng.below(PAGE_SIZE / align) * align
    }

    pub fn meta(mut self, case: &mut Case) {
        for _ in 0..self.rng.range(1, 3) {
            let page = self.meta_page();
            for _ in 0..self.rng.range(1, 16) {
                let off = self.offset_in(page, 1);
                let b = self.new_byte(off);
                case.writes.push((off, vec![b]));
            }
        }
    }

    /// An extreme or structural value for a word at `at` that holds `cur`.
    pub fn extreme(&mut self, at: u64, cur: u64) -> u64 {
        let m = self.map();
        let page = at & !(PAGE_SIZE - 1);
        let pages = m.size / PAGE_SIZE;
        let data_pages = (m.data_end - m.data_start) / PAGE_SIZE;
        let other = if m.log_pages.is_empty() {
            page
        } else {
            m.log_pages[self.rng.below(m.log_pages.len() as u64) as usize]
        };
        let (size, ds, de) = (m.size, m.data_start, m.data_end);
        let choices = [
            0,
            u64::MAX,
            1 << 63,
            size,
            size - 8,
            size - PAGE_SIZE,
            ds,
            de,
            de - PAGE_SIZE,
            self.rng.below(pages) * PAGE_SIZE,
            ds + self.rng.below(data_pages) * PAGE_SIZE,
            page,
            at,
            other,
            cur ^ (1 << self.rng.below(64)),
            cur.wrapping_add(1),
            cur.wrapping_sub(1),
            cur.wrapping_add(PAGE_SIZE),
            cur.wrapping_add(SLOT),
            u64::from(u32::MAX),
            u64::from(u32::MAX) << 32,
            self.rng.next(),
            1,
            self.rng.below(4096),
        ];
        self.rng.pick(&choices)
    }

    pub fn scribble(mut self, case: &mut Case) {
        for _ in 0..self.rng.range(1, 4) {
            let at = if self.rng.chance(50) {
                let kind = &self.map().pointers[self.rng.below(5) as usize];
                self.rng.pick(kind)
            } else {
                let page = self.meta_page();
                self.offset_in(page, 8)
            };
            let v = self.extreme(at, u64_at(self.img(), at));
            case.writes.push((at, v.to_le_bytes().to_vec()));
        }
    }

    pub fn poison(mut self, case: &mut Case) {
        for _ in 0..self.rng.range(1, 2) {
            let page = if self.rng.chance(10) { 0 } else { self.meta_page() };
            let (off, len) = match self.rng.below(4) {
                0 => (page, PAGE_SIZE),
                1 => (page + self.rng.below(PAGE_SIZE / 64) * 64, 64),
                2 => (self.offset_in(page, 8), 8),
                _ => {
                    let off = self.offset_in(page, 1);
                    (off, self.rng.range(1, 64).min(page + PAGE_SIZE - off))
                }
            };
            case.poisons.push((off, len));
        }
        if case.poisons[0].0 == 0 && self.rng.chance(50) {
            // Both superblocks unreadable.
            case.poisons.push((self.map().replica, 64));
        }
    }

    /// A value of `width` bytes for a field: extremes, small numbers, or a
    /// structural value for 8-byte fields.
    pub fn field_value(&mut self, at: u64, width: u64) -> Vec<u8> {
        let cur = {
            let mut b = [0u8; 8];
            b[..width as usize].copy_from_slice(&self.img()[at as usize..(at + width) as usize]);
            u64::from_le_bytes(b)
        };
        let v = if width == 8 {
            self.extreme(at, cur)
        } else {
            let max = if width == 8 { u64::MAX } else { (1 << (8 * width)) - 1 };
            let choices = [0, max, max >> 1, 1, 2, cur.wrapping_add(1) & max, self.rng.next() & max];
            self.rng.pick(&choices)
        };
        v.to_le_bytes()[..width as usize].to_vec()
    }

    pub fn forged(mut self, case: &mut Case) {
        let m = self.map();
        let mut kinds = vec![0, 1, 1, 2, 2, 2, 2];
        if !m.chain.is_empty() {
            kinds.extend([3, 3]);
        }
        if m.txn_head.is_some() {
            kinds.extend([4, 4, 4, 4]);
        }
        match self.rng.pick(&kinds) {
            0 => self.forge_superblock(case),
            1 => self.forge_inode(case),
            2 => self.forge_entry(case),
            3 => self.forge_alloc_state(case),
            _ => self.forge_txn(case),
        }
    }

    pub fn forge_superblock(&mut self, case: &mut Case) {
        let len = size_of::<Superblock>();
        let mut sb = self.img()[..len].to_vec();
        for _ in 0..self.rng.range(1, 3) {
            // Skip the magic word most of the time: a bad magic is dull.
            let at = self
                .rng
                .range(1, (std::mem::offset_of!(Superblock, csum) / 8 - 1) as u64)
                * 8;
            let v = self.field_value(at, 8);
            sb[at as usize..at as usize + 8].copy_from_slice(&v);
        }
        let mut s = Superblock::read_from_bytes(&sb).unwrap();
        s.csum = s.compute_csum();
        case.writes.push((0, s.as_bytes().to_vec()));
        case.writes.push((self.map().replica, s.as_bytes().to_vec()));
    }

    pub fn forge_inode(&mut self, case: &mut Case) {
        let m = self.map();
        let (rec, fresh) = if m.free_slots.is_empty() || self.rng.chance(80) {
            (self.rng.pick(&m.inodes), false)
        } else {
            (self.rng.pick(&m.free_slots), true)
        };
        let mut bytes = self.img()[rec as usize..(rec + INODE_SIZE) as usize].to_vec();
        if fresh {
            // A free slot comes to life with made-up fields.
            bytes[..8].copy_from_slice(&1u64.to_le_bytes());
            for at in [8u64, 16] {
                let v = self.field_value(rec + at, 8);
                bytes[at as usize..at as usize + 8].copy_from_slice(&v);
            }
            let mode = self
                .rng
                .pick(&[libc::S_IFREG, libc::S_IFDIR, libc::S_IFLNK, 0, u32::MAX])
                | 0o644;
            bytes[40..44].copy_from_slice(&mode.to_le_bytes());
        }
        // (offset, width): state, log head and tail, then the checksummed
        // fields ino … delete_epoch.
        let fields = [
            (0, 8),
            (8, 8),
            (16, 8),
            (24, 8),
            (32, 8),
            (40, 4),
            (44, 4),
            (48, 4),
            (52, 4),
            (56, 4),
            (64, 8),
            (72, 8),
            (96, 8),
            (104, 8),
            (112, 8),
        ];
        for _ in 0..self.rng.range(1, 3) {
            let (at, w) = self.rng.pick(&fields);
            let v = self.field_value(rec + at, w);
            bytes[at as usize..(at + w) as usize].copy_from_slice(&v);
        }
        let csum = crc32c::crc32c(&bytes[INODE_CSUM_START..INODE_CSUM_END]);
        let w = INODE_CSUM_WORD_OFF as usize;
        bytes[w..w + 4].copy_from_slice(&csum.to_le_bytes());
        case.writes.push((rec, bytes));
    }

    pub fn forge_entry(&mut self, case: &mut Case) {
        let (off, len) = self.rng.pick(&self.map().entries);
        let page_pos = off % PAGE_SIZE;
        // The entry and what follows it up to the page's footer: a forged
        // length may take in the bytes after it.
        let room = LOG_USABLE - page_pos;
        let mut bytes = self.img()[off as usize..(off + room) as usize].to_vec();
        let etype = bytes[0];
        // (offset, width) of each field, by entry type (layout.rs).
        let mut fields: Vec<(u64, u64)> = vec![(0, 1), (1, 1), (2, 2), (8, 8)];
        fields.extend_from_slice(match etype {
            1 => &[(16, 8), (24, 8), (32, 4), (40, 8), (48, 8)][..],
            2 | 3 => &[(16, 8), (24, 8), (32, 8), (40, 4), (44, 1), (45, 1), (48, 1), (49, 1)][..],
            4 => &[(16, 4), (20, 4), (24, 4), (32, 8), (40, 8), (48, 8), (56, 8)][..],
            5 => &[(16, 4), (24, 8)][..],
            _ => &[(16, 8), (24, 8), (32, 8)][..],
        });
        // Mostly the type-specific fields: the header ones are dull.
        for _ in 0..self.rng.range(1, 3) {
            let (at, w) = if self.rng.chance(80) {
                self.rng.pick(&fields[4..])
            } else {
                self.rng.pick(&fields[..4])
            };
            let v = self.field_value(off + at, w);
            bytes[at as usize..(at + w) as usize].copy_from_slice(&v);
        }
        let new_len = u64::from(bytes[1]) * SLOT;
        let csum_len = if new_len > 0 && new_len <= room { new_len } else { len };
        let csum = entry_csum(&bytes[..csum_len as usize]);
        bytes[4..8].copy_from_slice(&csum.to_le_bytes());
        bytes.truncate(csum_len.max(len) as usize);
        case.writes.push((off, bytes));
    }

    pub fn forge_alloc_state(&mut self, case: &mut Case) {
        let m = self.map();
        let payload = LOG_NEXT_OFF;
        let mut blob = Vec::new();
        for &p in &m.chain {
            blob.extend_from_slice(&self.img()[p as usize..(p + payload) as usize]);
        }
        let len = (m.chain_len as usize).min(blob.len());
        let words = len / 8;
        for _ in 0..self.rng.range(1, 3) {
            // Header counts (words 1, 2) or a (start, len) pair.
            let w = if self.rng.chance(25) {
                self.rng.range(1, 2)
            } else {
                self.rng.range(5, (words as u64).max(6) - 1)
            } as usize;
            let cur = u64::from_le_bytes(blob[w * 8..w * 8 + 8].try_into().unwrap());
            let choices = [
                0,
                1,
                u64::MAX,
                1 << 47,
                (1 << 48) - 1,
                cur.wrapping_add(1),
                cur.wrapping_sub(1),
                cur << 1,
                m.size / PAGE_SIZE,
                self.rng.next(),
            ];
            let v = self.rng.pick(&choices);
            blob[w * 8..w * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        let csum = crc32c::crc32c(&blob[40..len]);
        blob[32..36].copy_from_slice(&csum.to_le_bytes());
        // Only the words that changed: the saved state holds no times, so
        // its checksum is the same in every build of the base.
        for w in 0..words {
            let at = w * 8;
            let page = m.chain[at / payload as usize];
            let off = page + (at % payload as usize) as u64;
            if blob[at..at + 8] != self.img()[off as usize..off as usize + 8] {
                case.writes.push((off, blob[at..at + 8].to_vec()));
            }
        }
    }

    /// The planted transaction with forged records and a checksum that
    /// matches them.
    pub fn forge_txn(&mut self, case: &mut Case) {
        let head = self.map().txn_head.unwrap();
        let mut txn: Vec<u8> = (0..80).map(|i| self.img()[ring_byte(head + i) as usize]).collect();
        // (offset, width): update addr, len, kind, payload; check addr,
        // len, kind; TxnInfo count.
        let fields = [(0, 8), (8, 4), (12, 4), (16, 8), (24, 8), (32, 4), (36, 4), (56, 4)];
        for _ in 0..self.rng.range(1, 2) {
            let (at, w) = self.rng.pick(&fields);
            let v = self.field_value(ring_byte(head + at), w);
            txn[at as usize..(at + w) as usize].copy_from_slice(&v);
        }
        // Make the forged check hold when its range is readable, so the
        // transaction commits and its updates are applied.
        let (addr, len) = (
            u64_at(&txn, 24),
            u64::from(u32::from_le_bytes(txn[32..36].try_into().unwrap())),
        );
        if len <= PAGE_SIZE && addr.checked_add(len).is_some_and(|e| e <= self.map().size) {
            let crc = crc32c::crc32c(&self.img()[addr as usize..(addr + len) as usize]);
            txn[40..48].copy_from_slice(&u64::from(crc).to_le_bytes());
        }
        let csum = crc32c::crc32c(&txn[..48]);
        txn[72..76].copy_from_slice(&csum.to_le_bytes());
        for (i, b) in txn.into_iter().enumerate() {
            case.writes.push((ring_byte(head + i as u64), vec![b]));
        }
    }
}
