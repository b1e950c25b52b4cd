//! novafs — NOVA (FAST '16) with NOVA-Fortis reliability and fine-grained
//! metadata journaling, in user space over one persistent-memory region.
//!
//! # Quick start
//!
//! A file system lives in a persistent-memory region from the `pm` crate:
//! a devdax device, a file on a DAX file system, a file on tmpfs (the
//! emulation: `/dev/shm`), or, as here, an ordinary file (through the page
//! cache: it survives a crash of the process, not of the machine).
//! [`Fs`] is the whole file system: thread-safe, its calls take inode
//! numbers as FUSE does, names are bytes.
//!
//! ```
//! use std::sync::Arc;
//!
//! use novafs::{FormatOptions, Fs, MountOptions, ROOT_INO};
//! use pm::{MapOptions, MmapRegion, Region};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let image = dir.path().join("novafs.img");
//!
//! // Make an image (`novafs mkfs` does the same): room for one inode
//! // table per CPU of this machine, and 64 MiB for files.
//! let size = novafs::minimum_size(novafs::default_shards()) + (64 << 20);
//! let region: Arc<dyn Region> = Arc::new(MmapRegion::create(&image, size, &MapOptions::default())?);
//! Fs::format(region.clone(), &FormatOptions::default())?;
//! let fs = Fs::open(region, MountOptions::default())?;
//!
//! // A directory and a file in it: mode bits, then owner uid and gid.
//! let docs = fs.mkdir(ROOT_INO, b"docs", 0o755, 1000, 1000)?;
//! let note = fs.create(docs.ino, b"note.txt", 0o644, 1000, 1000)?;
//! fs.write(note.ino, 0, b"hello, persistent memory")?;
//! // Strict mode: a call that returns Ok is atomic and durable (a crash
//! // during the write keeps none of it, a crash after it all of it), so
//! // fsync has nothing left to do; it only checks that the file exists.
//! fs.fsync(note.ino)?;
//!
//! let mut buf = [0u8; 64];
//! let n = fs.read(note.ino, 0, &mut buf)?;
//! assert_eq!(&buf[..n], b"hello, persistent memory");
//! assert_eq!(fs.resolve("/docs/note.txt")?.ino, note.ino);
//!
//! // A snapshot, in constant time; then change the file.
//! fs.take_snapshot(b"before")?;
//! fs.write(note.ino, 0, b"HELLO")?;
//! let n = fs.read(note.ino, 0, &mut buf)?;
//! assert_eq!(&buf[..n], b"HELLO, persistent memory");
//! // The snapshot, read-only, beside the live file system.
//! let before = fs.open_snapshot(b"before")?;
//! let old = before.resolve("/docs/note.txt")?;
//! let n = before.read(old.ino, 0, &mut buf)?;
//! assert_eq!(&buf[..n], b"hello, persistent memory");
//! drop(before); // a view holds the image (and its snapshot) open
//!
//! // A clean unmount (dropping an `Fs` instead is a crash: the next open
//! // recovers). Then open the image file again.
//! fs.unmount()?;
//! let region: Arc<dyn Region> = Arc::new(MmapRegion::open(&image, &MapOptions::default())?);
//! let fs = Fs::open(region, MountOptions::default())?;
//! assert!(fs.mount_report().clean);
//! let note = fs.resolve("/docs/note.txt")?;
//! let n = fs.read(note.ino, 0, &mut buf)?;
//! assert_eq!(&buf[..n], b"HELLO, persistent memory");
//! assert_eq!(fs.snapshots()[0].name, b"before");
//! fs.unmount()?;
//! # Ok(())
//! # }
//! ```
//!
//! `examples/` has a runnable program for each feature: `files` (files,
//! directories, links, renames), `snapshots`, `mmap` (DAX mmap: loads and
//! stores straight to the file's persistent memory) and `scrub` (finding
//! and repairing damage online). Run one with
//! `cargo run -p novafs --example files [IMAGE]`.
//!
//! # Layers
//!
//! One module per concept of the papers, in layers that import downward
//! only (DESIGN.md §2; the tests at the end of this file enforce it), the
//! modules grouped in folders by layer and concept:
//!
//! | layer | folder | modules | what |
//! |---|---|---|---|
//! | 0 | `base` | `error`, `hash`, `time`, `lock`, `setters` | utilities; the core's locks and their one order; the option structs' setters |
//! | 1 | `media` | `layout` | every on-media structure, declared once (FORMAT.md) |
//! | 2 | `media` | `superblock`, `replica`, `health`, `strips`, `consistency` | the superblock and its replica (Fortis §4.2); the mirroring view metadata is written through (Fortis §4.2, §4.4); repair and loss counters; data checksums and parity (Fortis §4.3); the strict and relaxed modes' names and superblock codes (Fortis §4.6) |
//! | 2 | `alloc` | `alloc` | the page allocator (NOVA §4.1): range sets, pools, mirror pairs, the reserve |
//! | 3 | `media` | `geometry` | an image's format and state in public terms (what `novafs info` prints) |
//! | 3 | `logs` | `journal` | per-shard fine-grained journals (NOVA §4.2; fine-grained journaling §III) |
//! | 4 | `logs` | `log` | per-inode logs: append, the tail-store commit, fast GC's relinking |
//! | 5 | `index` | `dir`, `pagemap`, `xattrmap`, `itable` | DRAM indexes (directory, file pages, extended attributes) and the inode tables |
//! | 5 | `snapshots` | `snapshot` | the snapshot list with the epoch gate (Fortis §3) |
//! | 6 | `inodes` | `inode` | an inode's DRAM state, replayed from its log |
//! | 7 | `inodes` | `commit` | the shared context and the commit paths, which alone make the proofs that publishing and freeing need |
//! | 8 | `logs`, `inodes`, `snapshots` | `gc`, `cache`, `reclaim` | fast and thorough log GC (NOVA §4.6); the inode cache; the background reclaimer of deleted snapshots (Fortis §3.2) |
//! | 8 | `ops` | `relaxed` | relaxed mode's in-place overwrites and setattrs (Fortis §4.6), under journal intents |
//! | 9 | `ops` | `file`, `xattr` | copy-on-write file data (NOVA §4.4); extended attributes and POSIX ACLs |
//! | 10 | `ops` | `namespace` | create, link, unlink, rename (NOVA §4.3; a symlink's target is file data) |
//! | 10 | `ops` | `access` | who may do what: Linux's permission checks (mode, ACL, capabilities; deleting, renaming, xattrs), for callers without a kernel in between |
//! | 11 | `image` | `recovery`, `paths` | mount, clean unmount, the crash scan (NOVA §4.7) and its bitmap of used pages (`used_pages`); an inode's names, found by walking the tree (what scrub reports) |
//! | 11 | `ops` | `mmap_atomic` | atomic mmap (NOVA §4.5): DRAM replica pages, committed at msync in one copy-on-write commit |
//! | 12 | `image`, `ops`, `protect` | `mkfs`, `fsck`, `mmap`, `scrub` | formatting; the offline check; DAX mmap (Fortis §2, §3.3); reading and repairing everything redundancy protects, online |
//! | 13 | `ops` | `setattr` | setattr's rules (chmod, chown, times, truncation, chattr), and who may make which change |
//! | 14 | `ops`, `protect` | [`fs`], `probe`, `inject` | the public thread-safe API; the feature-gated window for tests; fault injection into unmounted images |
//! | 15 | | the crate root | the public API re-exported (`crate::Fs`, …) |
//! | 16 | `image` | `tune` | turning features on and off by rebuilding an unmounted image through the public API |
//!
//! The journal sits below the log (the issue's "log / journal" level split
//! in two): a log append committed by a transaction becomes `Committed`
//! only with that transaction's `journal::Durable` proof.

#![forbid(unsafe_code)]
#![warn(unreachable_pub)]
// Without the `tools` feature the parts of the core only the tools use
// (fsck's and injection's readers, the layout they name) go unused, and
// what only the tools show is unreachable: the workspace, whose command
// turns `tools` on, is where unused and unreachable code is found.
#![cfg_attr(not(feature = "tools"), allow(dead_code, unused_imports, unreachable_pub))]

// The folders group the modules by layer and concept (the table above);
// the root names every module by its own name, so each module imports
// what it depends on as `crate::<module>` and the layering test below
// reads the imports off that.
// The probe feature shows a few of these modules' types (the proofs and
// what takes them); without it they reach no one outside the crate.
#[cfg_attr(not(feature = "probe"), allow(unreachable_pub))]
mod alloc;
mod base;
mod image;
mod index;
mod inodes;
mod logs;
mod media;
mod ops;
#[cfg(feature = "probe")]
pub mod probe;
mod protect;
mod snapshots;

pub use base::{error, time};
use base::{hash, lock, setters};
#[cfg(feature = "tools")]
pub use image::{fsck, tune};
use image::{mkfs, paths, recovery};
use index::{dir, itable, pagemap, xattrmap};
use inodes::{cache, commit, inode};
use logs::{gc, journal, log};
#[cfg(feature = "tools")]
use media::geometry;
use media::{consistency, health, layout, replica, strips, superblock};
pub use ops::fs;
use ops::{access, file, mmap, mmap_atomic, namespace, relaxed, setattr, xattr};
#[cfg(feature = "tools")]
pub use protect::inject;
use protect::scrub;
use snapshots::{reclaim, snapshot};

pub use access::{Access, Caps, Cred};
pub use consistency::{Consistency, ParseConsistencyError};
pub use error::{Corruption, Error, Result, Structure};
pub use file::{FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE};
pub use fs::{
    Atime, BatchStats, Batching, DirEntry, Fs, GcStats, Make, MountOptions, SetAttr, StatFs, RENAME_EXCHANGE,
    RENAME_NOREPLACE, RENAME_WHITEOUT, SEEK_DATA, SEEK_HOLE, XATTR_CREATE, XATTR_REPLACE,
};
pub use health::HealthCounts;
pub use inode::{Attr, FileType, Ino, ROOT_INO};
pub use journal::JournalStats;
pub use layout::{DEFAULT_DEAD_ZONE, FLAG_APPEND, FLAG_IMMUTABLE, FLAG_NODUMP, MAX_FILE_SIZE, PAGE_SIZE};
pub use mkfs::{default_shards, minimum_size, FormatOptions};
pub use mmap::{MapKind, Mapping};
pub use recovery::{MetaReplicas, MountReport, ShardReport};
pub use scrub::{Damaged, ScrubOptions, ScrubReport};
pub use snapshot::Snapshot;
#[cfg(feature = "tools")]
pub use {
    geometry::Geometry,
    recovery::{inspect, Inspect},
};

#[cfg(test)]
mod layering {
    /// Each module's layer (the table above) and its source.
    /// Each module's layer (the table above), the folder it sits in, and
    /// its source (a folder module's files, its tests left out).
    const MODULES: &[(&str, u32, &str, &str)] = &[
        ("error", 0, "base", include_str!("base/error.rs")),
        ("hash", 0, "base", include_str!("base/hash.rs")),
        ("time", 0, "base", include_str!("base/time.rs")),
        ("lock", 0, "base", include_str!("base/lock.rs")),
        ("setters", 0, "base", include_str!("base/setters.rs")),
        ("layout", 1, "media", include_str!("media/layout.rs")),
        ("superblock", 2, "media", include_str!("media/superblock.rs")),
        ("geometry", 3, "media", include_str!("media/geometry.rs")),
        (
            "alloc",
            2,
            "",
            concat!(
                include_str!("alloc/mod.rs"),
                include_str!("alloc/budget.rs"),
                include_str!("alloc/mirror.rs"),
                include_str!("alloc/pages.rs"),
                include_str!("alloc/pool.rs"),
                include_str!("alloc/proof.rs"),
                include_str!("alloc/ranges.rs"),
                include_str!("alloc/reservation.rs")
            ),
        ),
        ("replica", 2, "media", include_str!("media/replica.rs")),
        ("health", 2, "media", include_str!("media/health.rs")),
        ("strips", 2, "media", include_str!("media/strips.rs")),
        ("consistency", 2, "media", include_str!("media/consistency.rs")),
        (
            "journal",
            3,
            "logs",
            concat!(
                include_str!("logs/journal/stats.rs"),
                include_str!("logs/journal/blocks.rs"),
                include_str!("logs/journal/mod.rs")
            ),
        ),
        (
            "log",
            4,
            "logs",
            concat!(include_str!("logs/log/mod.rs"), include_str!("logs/log/walk.rs")),
        ),
        ("dir", 5, "index", include_str!("index/dir.rs")),
        (
            "pagemap",
            5,
            "index",
            concat!(
                include_str!("index/pagemap/mod.rs"),
                include_str!("index/pagemap/lost.rs")
            ),
        ),
        ("xattrmap", 5, "index", include_str!("index/xattrmap.rs")),
        ("itable", 5, "index", include_str!("index/itable.rs")),
        ("snapshot", 5, "snapshots", include_str!("snapshots/snapshot.rs")),
        ("inode", 6, "inodes", include_str!("inodes/inode.rs")),
        ("commit", 7, "inodes", include_str!("inodes/commit.rs")),
        ("gc", 8, "logs", include_str!("logs/gc.rs")),
        ("cache", 8, "inodes", include_str!("inodes/cache.rs")),
        ("reclaim", 8, "snapshots", include_str!("snapshots/reclaim.rs")),
        ("relaxed", 8, "ops", include_str!("ops/relaxed.rs")),
        ("file", 9, "ops", include_str!("ops/file.rs")),
        ("xattr", 9, "ops", include_str!("ops/xattr.rs")),
        ("namespace", 10, "ops", include_str!("ops/namespace.rs")),
        ("access", 10, "ops", include_str!("ops/access.rs")),
        ("setattr", 13, "ops", include_str!("ops/setattr.rs")),
        (
            "recovery",
            11,
            "image",
            concat!(
                include_str!("image/recovery/mod.rs"),
                include_str!("image/recovery/used_pages.rs")
            ),
        ),
        ("paths", 11, "image", include_str!("image/paths.rs")),
        ("mkfs", 12, "image", include_str!("image/mkfs.rs")),
        (
            "fsck",
            12,
            "image",
            concat!(
                include_str!("image/fsck/mod.rs"),
                include_str!("image/fsck/data.rs"),
                include_str!("image/fsck/salvage.rs"),
                include_str!("image/fsck/space.rs")
            ),
        ),
        ("mmap_atomic", 11, "ops", include_str!("ops/mmap_atomic.rs")),
        ("mmap", 12, "ops", include_str!("ops/mmap.rs")),
        ("scrub", 12, "protect", include_str!("protect/scrub.rs")),
        (
            "fs",
            14,
            "ops",
            concat!(
                include_str!("ops/fs/mod.rs"),
                include_str!("ops/fs/maps.rs"),
                include_str!("ops/fs/names.rs"),
                include_str!("ops/fs/perms.rs")
            ),
        ),
        ("probe", 14, "", include_str!("probe.rs")),
        ("inject", 14, "protect", include_str!("protect/inject.rs")),
        ("tune", 16, "image", include_str!("image/tune.rs")),
    ];

    /// `crate::{…}` and `crate::Type` name the public API at the root.
    const ROOT: u32 = 15;

    fn layer(name: &str) -> Option<u32> {
        if name.is_empty() {
            return Some(ROOT);
        }
        MODULES.iter().find(|m| m.0 == name).map(|m| m.1)
    }

    /// The modules `src` names as `crate::<module>`, outside its tests.
    fn imports(src: &str) -> Vec<&str> {
        let code = src.split("#[cfg(test)]\nmod tests").next().unwrap_or(src);
        code.match_indices("crate::")
            .map(|(i, _)| {
                let rest = &code[i + "crate::".len()..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                    .unwrap_or(rest.len());
                &rest[..end]
            })
            .collect()
    }

    /// Every source file below `dir` (relative to `src`), sorted.
    fn sources(dir: &std::path::Path, rel: &str, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.filter_map(|e| e.ok()) {
            let name = e.file_name().to_string_lossy().into_owned();
            let path = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            if e.path().is_dir() {
                sources(&e.path(), &path, out);
            } else if name.ends_with(".rs") {
                out.push(path);
            }
        }
        out.sort();
    }

    /// The folders that group modules; a folder of its own module (its
    /// `mod.rs` and the files beside it) is that module.
    fn is_group(folder: &str) -> bool {
        MODULES.iter().any(|m| m.2 == folder && !folder.is_empty())
    }

    /// Every file belongs to a module of the table, in the folder the table
    /// says, and every module of the table has its files: the tree reads as
    /// the table.
    #[test]
    fn every_module_is_listed_once_in_its_folder() {
        let mut files = Vec::new();
        sources(
            std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src")),
            "",
            &mut files,
        );
        assert!(!files.is_empty());
        let mut seen = std::collections::BTreeSet::new();
        for f in files.iter().filter(|f| *f != "lib.rs") {
            let parts: Vec<&str> = f.split('/').collect();
            let (folder, rest) = match parts.as_slice() {
                [g, rest @ ..] if is_group(g) => (*g, rest),
                rest => ("", rest),
            };
            if rest == ["mod.rs"] {
                continue; // a group's front page
            }
            let module = rest[0].trim_end_matches(".rs");
            let entry = MODULES.iter().find(|m| m.0 == module);
            let Some(&(_, _, listed, _)) = entry else {
                panic!("{f}: module {module} has no layer in lib.rs");
            };
            assert_eq!(listed, folder, "{f}: lib.rs puts module {module} in folder {listed:?}");
            seen.insert(module);
        }
        let missing: Vec<&str> = MODULES.iter().map(|m| m.0).filter(|m| !seen.contains(m)).collect();
        assert!(missing.is_empty(), "listed modules without files: {missing:?}");
    }

    /// No module imports one of its own layer or above: the imports form
    /// no cycle, and a new one that would fails here.
    #[test]
    fn modules_import_only_lower_layers() {
        let mut wrong = Vec::new();
        for &(name, level, _, src) in MODULES {
            for dep in imports(src) {
                match layer(dep) {
                    Some(l) if l < level || l == 0 => {}
                    Some(l) => wrong.push(format!("{name} (layer {level}) imports {dep} (layer {l})")),
                    None => wrong.push(format!("{name} imports unknown module {dep}")),
                }
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn the_check_sees_imports() {
        assert_eq!(
            imports("use crate::log::{Entry};\nfn f() { crate::alloc::x(); }"),
            ["log", "alloc"]
        );
        assert_eq!(
            imports("use crate::a;\n#[cfg(test)]\nmod tests {\n use crate::b;\n}"),
            ["a"]
        );
    }
}
