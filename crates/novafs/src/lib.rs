//! novafs — NOVA (FAST '16) with NOVA-Fortis reliability and fine-grained
//! metadata journaling, in user space over one persistent-memory region.
//!
//! One module per concept of the papers, in layers that import downward
//! only (DESIGN.md §2; the test at the end of this file enforces it):
//!
//! | layer | modules | what |
//! |---|---|---|
//! | 0 | `error`, `hash`, `time`, `lock` | utilities; the core's locks and their one order |
//! | 1 | [`layout`] | every on-media structure, declared once (FORMAT.md) |
//! | 2 | `superblock`, `alloc`, `replica`, `health`, `strips` | the superblock and its replica (Fortis §4.2); page allocator (NOVA §4.1); the mirroring view metadata is written through (Fortis §4.2, §4.4); repair and loss counters; data checksums and parity (Fortis §4.3) |
//! | 3 | `journal` | per-shard fine-grained journals (NOVA §4.2; fine-grained journaling §III) |
//! | 4 | `log` | per-inode logs: append, the tail-store commit, fast GC's relinking |
//! | 5 | `dir`, `pagemap`, `xattrmap`, `itable`, `snapshot` | DRAM indexes (directory, file pages, extended attributes), the inode tables, and the snapshot list with the epoch gate (Fortis §3) |
//! | 6 | `inode` | an inode's DRAM state, replayed from its log |
//! | 7 | `commit` | the shared context and the commit paths, which alone make the proofs that publishing and freeing need |
//! | 8 | `gc`, `cache`, `reclaim` | fast and thorough log GC (NOVA §4.6); the inode cache and lock order; the background reclaimer of deleted snapshots (Fortis §3.2) |
//! | 9 | `file`, `xattr` | copy-on-write file data (NOVA §4.4); extended attributes and POSIX ACLs |
//! | 10 | `namespace` | create, link, unlink, rename (NOVA §4.3; a symlink's target is file data) |
//! | 11 | `recovery`, `paths` | mount, clean unmount, the crash scan (NOVA §4.7); an inode's names, found by walking the tree (what scrub reports) |
//! | 12 | `mkfs`, [`fsck`], `scrub` | formatting; the offline check; reading and repairing everything redundancy protects, online |
//! | 13 | [`fs`], `probe`, [`inject`] | the public thread-safe API; the feature-gated window for tests; fault injection into unmounted images |
//! | 14 | the crate root | the public API re-exported (`crate::Fs`, …) |
//! | 15 | [`op`], [`tune`] | one vocabulary of file-system operations over the public API, shared by the model test, the crash checker and the benchmarks; turning features on and off by rebuilding an unmounted image through that API |
//!
//! The journal sits below the log (the "log / journal" level split
//! in two): a log append committed by a transaction becomes `Committed`
//! only with that transaction's `journal::Durable` proof.

#![forbid(unsafe_code)]

mod alloc;
mod cache;
mod commit;
mod dir;
pub mod error;
mod file;
pub mod fs;
pub mod fsck;
mod gc;
mod hash;
mod health;
pub mod inject;
mod inode;
mod itable;
mod journal;
pub mod layout;
mod lock;
mod log;
mod mkfs;
mod mmap;
mod namespace;
pub mod op;
mod pagemap;
mod paths;
#[cfg(feature = "probe")]
pub mod probe;
mod reclaim;
mod recovery;
mod replica;
mod scrub;
mod snapshot;
mod strips;
mod superblock;
pub mod time;
pub mod tune;
mod xattr;
mod xattrmap;

pub use error::{Error, Result};
pub use file::{FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE};
pub use fs::{
    Atime, DirEntry, Fs, GcStats, Make, MountOptions, SetAttr, StatFs, RENAME_EXCHANGE, RENAME_NOREPLACE,
    RENAME_WHITEOUT, SEEK_DATA, SEEK_HOLE, XATTR_CREATE, XATTR_REPLACE,
};
pub use health::HealthCounts;
pub use inode::{Attr, FileType, Ino, ROOT_INO};
pub use layout::MAX_FILE_SIZE;
pub use mkfs::{default_shards, minimum_size, FormatOptions};
pub use mmap::Mapping;
pub use recovery::{inspect, Inspect, MetaReplicas, MountReport};
pub use scrub::{Damaged, ScrubOptions, ScrubReport};
pub use snapshot::Snapshot;

#[cfg(test)]
mod layering {
    /// Each module's layer (the table above) and its source.
    const MODULES: &[(&str, u32, &str)] = &[
        ("error", 0, include_str!("error.rs")),
        ("hash", 0, include_str!("hash.rs")),
        ("time", 0, include_str!("time.rs")),
        ("lock", 0, include_str!("lock.rs")),
        ("layout", 1, include_str!("layout.rs")),
        ("superblock", 2, include_str!("superblock.rs")),
        ("alloc", 2, include_str!("alloc.rs")),
        ("replica", 2, include_str!("replica.rs")),
        ("health", 2, include_str!("health.rs")),
        ("strips", 2, include_str!("strips.rs")),
        ("journal", 3, include_str!("journal.rs")),
        ("log", 4, include_str!("log.rs")),
        ("dir", 5, include_str!("dir.rs")),
        ("pagemap", 5, include_str!("pagemap/mod.rs")),
        ("xattrmap", 5, include_str!("xattrmap.rs")),
        ("itable", 5, include_str!("itable.rs")),
        ("snapshot", 5, include_str!("snapshot.rs")),
        ("inode", 6, include_str!("inode.rs")),
        ("commit", 7, include_str!("commit.rs")),
        ("gc", 8, include_str!("gc.rs")),
        ("cache", 8, include_str!("cache.rs")),
        ("reclaim", 8, include_str!("reclaim.rs")),
        ("file", 9, include_str!("file.rs")),
        ("xattr", 9, include_str!("xattr.rs")),
        ("namespace", 10, include_str!("namespace.rs")),
        ("recovery", 11, include_str!("recovery.rs")),
        ("paths", 11, include_str!("paths.rs")),
        ("mkfs", 12, include_str!("mkfs.rs")),
        ("fsck", 12, include_str!("fsck.rs")),
        ("mmap", 12, include_str!("mmap.rs")),
        ("scrub", 12, include_str!("scrub.rs")),
        ("fs", 13, include_str!("fs.rs")),
        ("probe", 13, include_str!("probe.rs")),
        ("inject", 13, include_str!("inject.rs")),
        ("tune", 15, include_str!("tune.rs")),
        ("op", 15, concat!(include_str!("op.rs"), include_str!("op/runner.rs"))),
    ];

    /// `crate::{…}` and `crate::Type` name the public API at the root.
    const ROOT: u32 = 14;

    fn layer(name: &str) -> Option<u32> {
        if name.is_empty() {
            return Some(ROOT);
        }
        MODULES.iter().find(|(n, _, _)| *n == name).map(|&(_, l, _)| l)
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

    #[test]
    fn every_module_is_listed_once() {
        let files: Vec<String> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/src"))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter_map(|e| e.file_name().to_str().map(str::to_owned))
                    .filter(|n| n != "lib.rs")
                    .map(|n| n.trim_end_matches(".rs").to_owned())
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect()
            })
            .unwrap_or_default();
        assert!(!files.is_empty());
        for f in &files {
            assert!(layer(f).is_some(), "module {f} has no layer in lib.rs");
        }
        assert_eq!(files.len(), MODULES.len(), "a listed module has no file");
    }

    /// No module imports one of its own layer or above: the imports form
    /// no cycle, and a new one that would fails here.
    #[test]
    fn modules_import_only_lower_layers() {
        let mut wrong = Vec::new();
        for &(name, level, src) in MODULES {
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
