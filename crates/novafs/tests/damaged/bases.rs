//! The base images the cases damage (cleanly unmounted, crashed, crashed
//! with a journal transaction waiting), what they hold, and where their
//! metadata is, found by walking each image as FORMAT.md lays it out.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use novafs::probe::layout::{
    JournalRecord, Superblock, TxnInfo, CHUNK_FOOTER_OFF, CHUNK_MAGIC, CHUNK_NEXT_OFF, CHUNK_SIZE, INODE_HEADS_OFF,
    INODE_SIZE, JOURNAL_HEADERS_OFF, JOURNAL_RINGS_OFF, JOURNAL_RING_SIZE, LOG_NEXT_OFF, LOG_USABLE, PAGE_SIZE,
    RECORD_CHECK, RECORD_UPDATE, RECOVERY_INODE_OFF, SLOT, TXN_MAGIC, TXN_MARKER,
};
use novafs::{Attr, FileType, FormatOptions, Fs, MountOptions, ROOT_INO};
use pm::{MemRegion, Region};
use zerocopy::{FromBytes, IntoBytes};

// ---------------------------------------------------------------------------
// The base images and what they hold.

pub const IMAGE_SIZE: u64 = 32 << 20;
pub const SHARDS: u32 = 2;
/// The file the rw step creates after the walk.
pub const NEW_NAME: &[u8] = b"fuzz-new";

#[derive(Clone, Debug, PartialEq)]
pub enum Expect {
    Dir,
    File(Vec<u8>),
    Symlink(Vec<u8>),
    Special(FileType),
}

/// Path ("/a/f1") → what the base image holds there.
pub type Model = BTreeMap<String, Expect>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// Cleanly unmounted: the saved allocator state is used.
    Clean,
    /// Dropped while mounted, an unlinked file still open: the recovery scan
    /// runs and reclaims the orphan.
    Crashed,
    /// Crashed, plus a committed transaction at shard 0's journal head:
    /// replay runs.
    Journal,
}

pub const VARIANTS: [Variant; 3] = [Variant::Clean, Variant::Crashed, Variant::Journal];

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Clean => "clean",
            Variant::Crashed => "crashed",
            Variant::Journal => "journal",
        }
    }

    pub fn parse(s: &str) -> Option<Variant> {
        VARIANTS.into_iter().find(|v| v.name() == s)
    }
}

pub struct Base {
    pub bytes: Vec<u8>,
    pub map: MetaMap,
}

pub struct Bases {
    pub bases: Vec<(Variant, Base)>,
    pub model: Model,
}

impl Bases {
    pub fn get(&self, v: Variant) -> &Base {
        &self.bases.iter().find(|(w, _)| *w == v).unwrap().1
    }

    /// Built once per process.
    pub fn shared() -> &'static Bases {
        static BASES: OnceLock<Bases> = OnceLock::new();
        BASES.get_or_init(Bases::build)
    }

    pub fn build() -> Bases {
        let (clean, crashed, model) = build_on_shard_zero();
        let mut journal = crashed.clone();
        let txn_head = plant_transaction(&mut journal);
        let mut jmap = map_image(&journal);
        jmap.txn_head = Some(txn_head);
        let bases = vec![
            (
                Variant::Clean,
                Base {
                    map: map_image(&clean),
                    bytes: clean,
                },
            ),
            (
                Variant::Crashed,
                Base {
                    map: map_image(&crashed),
                    bytes: crashed,
                },
            ),
            (
                Variant::Journal,
                Base {
                    map: jmap,
                    bytes: journal,
                },
            ),
        ];
        Bases { bases, model }
    }
}

pub fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u8)
                .wrapping_mul(31)
                .wrapping_add(salt)
                .wrapping_add((i >> 12) as u8)
                | 1
        })
        .collect()
}

/// Builds the image on a thread that novafs maps to shard 0, so that the
/// layout (which pages, which slots) is the same in every process and a
/// case saved as (offset, bytes) writes replays on the same structures.
/// novafs gives each new thread the next shard (`alloc::current_shard`);
/// the first file's inode number says which one a thread got.
pub fn build_on_shard_zero() -> (Vec<u8>, Vec<u8>, Model) {
    for _ in 0..32 {
        if let Some(built) = std::thread::spawn(try_build).join().unwrap() {
            return built;
        }
    }
    panic!("no thread was mapped to shard 0");
}

pub fn try_build() -> Option<(Vec<u8>, Vec<u8>, Model)> {
    let mem = Arc::new(MemRegion::new(IMAGE_SIZE));
    let region: Arc<dyn Region> = mem.clone();
    Fs::format(region.clone(), &FormatOptions::default().shards(SHARDS)).unwrap();
    let fs = Fs::open(region, MountOptions::default()).unwrap();
    let mut m = Model::new();
    let small = fs.create(ROOT_INO, b"small", 0o644, 0, 0).unwrap();
    // Shard 0's first free slot is inode 3 (the root has 1); shard 1's is 2.
    if small.ino != 3 {
        return None;
    }
    fs.write(small.ino, 0, b"small file").unwrap();
    m.insert("/small".into(), Expect::File(b"small file".to_vec()));
    populate(&fs, &mut m);
    // An unlinked file still open: the crash leaves an orphan to reclaim.
    let orphan = fs.create_open(ROOT_INO, b"orphan", 0o644, 0, 0).unwrap();
    fs.write(orphan.ino, 0, &pattern(4096, 9)).unwrap();
    fs.unlink(ROOT_INO, b"orphan").unwrap();
    // Every operation is durable when it returns: a copy now is a crash.
    let crashed = mem.snapshot();
    fs.unmount().unwrap();
    Some((mem.snapshot(), crashed, m))
}

/// Directories, files of a few pages, a hard link, a symlink, a FIFO, and
/// enough creates, unlinks, renames and writes that logs span several pages
/// and hold invalidated dentries.
pub fn populate(fs: &Fs, m: &mut Model) {
    let file = |fs: &Fs, m: &mut Model, parent: u64, path: &str, data: &[u8]| -> Attr {
        let name = path.rsplit('/').next().unwrap();
        let a = fs.create(parent, name.as_bytes(), 0o644, 0, 0).unwrap();
        // Two writes, so the file has two write entries.
        let half = data.len() / 2;
        fs.write(a.ino, 0, &data[..half]).unwrap();
        fs.write(a.ino, half as u64, &data[half..]).unwrap();
        m.insert(path.into(), Expect::File(data.to_vec()));
        a
    };
    let a = fs.mkdir(ROOT_INO, b"a", 0o755, 0, 0).unwrap();
    m.insert("/a".into(), Expect::Dir);
    let f1_data = pattern(3 * 4096 + 100, 1);
    let f1 = file(fs, m, a.ino, "/a/f1", &f1_data);
    let b = fs.mkdir(a.ino, b"b", 0o755, 0, 0).unwrap();
    m.insert("/a/b".into(), Expect::Dir);
    let f2 = file(fs, m, b.ino, "/a/b/f2", &pattern(2 * 4096, 2));
    fs.setattr(f2.ino, &novafs::SetAttr::default().mode(0o600)).unwrap();
    fs.link(f1.ino, b.ino, b"hard").unwrap();
    m.insert("/a/b/hard".into(), Expect::File(f1_data));
    fs.symlink(ROOT_INO, b"link", b"a/f1", 0, 0).unwrap();
    m.insert("/link".into(), Expect::Symlink(b"a/f1".to_vec()));
    fs.mknod(ROOT_INO, b"fifo", libc::S_IFIFO | 0o644, 0, 0, 0).unwrap();
    m.insert("/fifo".into(), Expect::Special(FileType::NamedPipe));
    let c = fs.mkdir(ROOT_INO, b"c", 0o755, 0, 0).unwrap();
    m.insert("/c".into(), Expect::Dir);
    file(fs, m, c.ino, "/c/x", b"moved across directories");
    fs.rename(c.ino, b"x", a.ino, b"moved", 0).unwrap();
    let moved = m.remove("/c/x").unwrap();
    m.insert("/a/moved".into(), moved);
    // Truncated: a setattr entry shrinks what the write entries map.
    let t = file(fs, m, ROOT_INO, "/trunc", &pattern(3 * 4096, 3));
    fs.setattr(t.ino, &novafs::SetAttr::default().size(5000)).unwrap();
    m.insert("/trunc".into(), Expect::File(pattern(3 * 4096, 3)[..5000].to_vec()));
    // One page per write: a log of a few pages of live write entries.
    let big = fs.create(ROOT_INO, b"big", 0o644, 0, 0).unwrap();
    let mut big_data = Vec::new();
    for i in 0..130u64 {
        let page = pattern(4096, i as u8);
        fs.write(big.ino, i * 4096, &page).unwrap();
        big_data.extend_from_slice(&page);
    }
    m.insert("/big".into(), Expect::File(big_data));
    // Small appends to one page: superseded entries, GC.
    let app = fs.create(ROOT_INO, b"appendlog", 0o644, 0, 0).unwrap();
    let mut app_data = Vec::new();
    for i in 0..150u32 {
        let rec = format!("append {i:08}\n").into_bytes();
        fs.write(app.ino, app_data.len() as u64, &rec).unwrap();
        app_data.extend_from_slice(&rec);
    }
    m.insert("/appendlog".into(), Expect::File(app_data));
    // A directory of long names, most removed, some renamed: a log of
    // several pages with invalidated adds.
    let ch = fs.mkdir(ROOT_INO, b"churn", 0o755, 0, 0).unwrap();
    m.insert("/churn".into(), Expect::Dir);
    let long = "n".repeat(60);
    for i in 0..120 {
        file(
            fs,
            m,
            ch.ino,
            &format!("/churn/{i:03}-{long}"),
            format!("churn {i}").as_bytes(),
        );
    }
    for i in (0..120).filter(|i| i % 4 != 0) {
        let name = format!("{i:03}-{long}");
        fs.unlink(ch.ino, name.as_bytes()).unwrap();
        m.remove(&format!("/churn/{name}"));
    }
    for i in (0..120).step_by(8) {
        let (from, to) = (format!("{i:03}-{long}"), format!("r{i:03}"));
        fs.rename(ch.ino, from.as_bytes(), ch.ino, to.as_bytes(), 0).unwrap();
        let e = m.remove(&format!("/churn/{from}")).unwrap();
        m.insert(format!("/churn/{to}"), e);
    }
}

/// Puts a committed transaction at shard 0's journal head, as
/// `corruption.rs` does: it stores a word in a free page and checks 64
/// zero bytes of another. Returns the head (its ring counter).
pub fn plant_transaction(img: &mut [u8]) -> u64 {
    let sb = Superblock::read_from_bytes(&img[..size_of::<Superblock>()]).unwrap();
    let head = u64_at(img, JOURNAL_HEADERS_OFF);
    // Two zero (free) pages whose mirrors are zero too: replay writes a
    // metadata update to both copies when the image keeps replicas.
    let pages = (sb.data_end - sb.data_start) / PAGE_SIZE;
    let mirror = |off: u64| sb.data_start + (pages - 1 - (off - sb.data_start) / PAGE_SIZE) * PAGE_SIZE;
    let zero = |off: u64| img[off as usize..(off + PAGE_SIZE) as usize].iter().all(|&b| b == 0);
    let target = (1..pages)
        .map(|i| sb.data_end - i * PAGE_SIZE)
        .find(|&t| [t, t - PAGE_SIZE].iter().all(|&p| zero(p) && zero(mirror(p))))
        .expect("two free pages with free mirrors");
    let checked = target - PAGE_SIZE;
    let mut txn = Vec::new();
    let update = JournalRecord {
        addr: target,
        len: 8,
        kind: RECORD_UPDATE,
    };
    txn.extend_from_slice(update.as_bytes());
    txn.extend_from_slice(&0x1234_5678_u64.to_le_bytes());
    let check = JournalRecord {
        addr: checked,
        len: 64,
        kind: RECORD_CHECK,
    };
    txn.extend_from_slice(check.as_bytes());
    txn.extend_from_slice(&u64::from(crc32c::crc32c(&[0u8; 64])).to_le_bytes());
    let info = TxnInfo {
        marker: TXN_MARKER,
        count: 2,
        magic: TXN_MAGIC,
        txn_id: head,
        csum: crc32c::crc32c(&txn),
        pad: 0,
    };
    txn.extend_from_slice(info.as_bytes());
    for (i, b) in txn.iter().enumerate() {
        img[ring_byte(head + i as u64) as usize] = *b;
    }
    head
}

/// Region offset of byte `counter` of shard 0's journal ring.
pub fn ring_byte(counter: u64) -> u64 {
    JOURNAL_RINGS_OFF + counter % JOURNAL_RING_SIZE
}

pub fn u64_at(img: &[u8], off: u64) -> u64 {
    u64::from_le_bytes(img[off as usize..off as usize + 8].try_into().unwrap())
}

// ---------------------------------------------------------------------------
// Where the metadata is, found by walking the image as FORMAT.md lays it out.

#[derive(Default)]
pub struct MetaMap {
    pub size: u64,
    pub data_start: u64,
    pub data_end: u64,
    pub replica: u64,
    pub shards: u64,
    pub chunks: Vec<u64>,
    /// Pages of the inode tables that hold something.
    pub chunk_pages: Vec<u64>,
    /// Live inode records.
    pub inodes: Vec<u64>,
    /// Free slots next to live ones (a forged record there comes to life).
    pub free_slots: Vec<u64>,
    pub log_pages: Vec<u64>,
    /// (offset, length) of every entry found in a log page.
    pub entries: Vec<(u64, u64)>,
    /// The recovery inode's chain: the saved allocator state.
    pub chain: Vec<u64>,
    pub chain_len: u64,
    pub ring_pages: Vec<u64>,
    /// Words that hold pointers, heads, tails or the valid bit, by kind:
    /// journal heads, inode-table heads and links, inode records' state,
    /// head and tail, log page links, the recovery inode and its chain.
    pub pointers: [Vec<u64>; 5],
    /// The planted transaction (journal variant).
    pub txn_head: Option<u64>,
}

impl MetaMap {
    pub fn fixed_pages(&self) -> Vec<u64> {
        vec![0, PAGE_SIZE, 2 * PAGE_SIZE, self.replica]
    }

    /// A fingerprint of the layout, to tell when the library now places
    /// things elsewhere and a saved case no longer hits what it did.
    pub fn layout(&self) -> u32 {
        let mut c = 0;
        for list in [&self.chunks, &self.inodes, &self.log_pages, &self.chain] {
            c = crc32c::crc32c_append(c, list.as_bytes());
        }
        c
    }

    pub fn in_data_area(&self, off: u64) -> bool {
        off >= self.data_start && off < self.data_end
    }
}

pub fn page_is_zero(img: &[u8], page: u64) -> bool {
    img[page as usize..(page + PAGE_SIZE) as usize].iter().all(|&b| b == 0)
}

/// Follows a page chain (next pointer at the end of each page), bounded.
pub fn chain_from(img: &[u8], map: &MetaMap, head: u64) -> Vec<u64> {
    let mut pages = Vec::new();
    let mut p = head;
    while p != 0 && p.is_multiple_of(PAGE_SIZE) && map.in_data_area(p) && pages.len() < 10_000 {
        pages.push(p);
        p = u64_at(img, p + LOG_NEXT_OFF);
    }
    pages
}

pub fn map_image(img: &[u8]) -> MetaMap {
    let sb = Superblock::read_from_bytes(&img[..size_of::<Superblock>()]).unwrap();
    let mut m = MetaMap {
        size: img.len() as u64,
        data_start: sb.data_start,
        data_end: sb.data_end,
        replica: sb.replica_off,
        shards: u64::from(sb.shards),
        ..MetaMap::default()
    };
    for s in 0..m.shards {
        m.pointers[0].push(JOURNAL_HEADERS_OFF + 64 * s);
        m.pointers[1].push(INODE_HEADS_OFF + 8 * s);
        let mut c = u64_at(img, INODE_HEADS_OFF + 8 * s);
        while c != 0 && m.in_data_area(c) && u64_at(img, c + CHUNK_FOOTER_OFF) == CHUNK_MAGIC {
            m.chunks.push(c);
            m.pointers[1].push(c + CHUNK_NEXT_OFF);
            c = u64_at(img, c + CHUNK_NEXT_OFF);
        }
    }
    for &c in &m.chunks.clone() {
        for p in (c..c + CHUNK_SIZE).step_by(PAGE_SIZE as usize) {
            if !page_is_zero(img, p) {
                m.chunk_pages.push(p);
            }
        }
        let mut free_near = 0;
        for rec in (c..c + CHUNK_FOOTER_OFF).step_by(INODE_SIZE as usize) {
            let bytes = &img[rec as usize..(rec + INODE_SIZE) as usize];
            if u64_at(img, rec) == 1 {
                m.inodes.push(rec);
                m.pointers[2].extend([rec, rec + 8, rec + 16]);
            } else if bytes.iter().all(|&b| b == 0) && free_near < 8 {
                m.free_slots.push(rec);
                free_near += 1;
            }
        }
    }
    for &rec in &m.inodes.clone() {
        for p in chain_from(img, &m, u64_at(img, rec + 8)) {
            m.log_pages.push(p);
            m.pointers[3].push(p + LOG_NEXT_OFF);
            let mut pos = 0;
            while pos < LOG_USABLE {
                let (etype, slots) = (img[(p + pos) as usize], img[(p + pos + 1) as usize]);
                let len = u64::from(slots) * SLOT;
                if etype == 0 || len == 0 || pos + len > LOG_USABLE {
                    break;
                }
                m.entries.push((p + pos, len));
                pos += len;
            }
        }
    }
    m.pointers[4].extend([RECOVERY_INODE_OFF, RECOVERY_INODE_OFF + 8, RECOVERY_INODE_OFF + 16]);
    if u64_at(img, RECOVERY_INODE_OFF) == 1 {
        m.chain = chain_from(img, &m, u64_at(img, RECOVERY_INODE_OFF + 8));
        m.chain_len = u64_at(img, RECOVERY_INODE_OFF + 16);
        m.pointers[4].extend(m.chain.iter().map(|p| p + LOG_NEXT_OFF));
    }
    let rings_end = JOURNAL_RINGS_OFF + m.shards * JOURNAL_RING_SIZE;
    m.ring_pages = (JOURNAL_RINGS_OFF..rings_end)
        .step_by(PAGE_SIZE as usize)
        .filter(|&p| !page_is_zero(img, p))
        .collect();
    m
}
