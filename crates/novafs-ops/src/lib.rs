//! One vocabulary of file-system operations and its one interpreter
//! (DESIGN.md §4; STYLE.md "One vocabulary of operations"). The model
//! test, the crash checker and the benchmarks drive novafs through [`Op`]
//! and [`Runner`], so an operation added here is then tested, crash-checked
//! and benchmarked everywhere.
//!
//! This file owns what an operation means by path (so a recorded sequence
//! means the same in every run) and the bytes a write carries ([`data`]);
//! [`Runner`] (op/runner.rs) interprets operations: path resolution, the
//! handles it holds open, and the life cycle of one image (mkfs, mount,
//! unmount, crash). It touches only the public API of [`novafs::Fs`];
//! nothing in the core imports this module.

use std::fmt;

use novafs::SetAttr;
pub use novafs_rng::SplitMix;

mod runner;

pub use runner::{Observed, OpError, Runner};

/// Permission bits the shorthand constructors give a new file.
pub const FILE_PERM: u32 = 0o644;
/// Permission bits the shorthand constructors give a new directory.
pub const DIR_PERM: u32 = 0o755;

/// The node an operation acts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum At {
    /// An absolute path, resolved as [`novafs::Fs::resolve`] does (symlinks are
    /// not followed).
    Path(String),
    /// The `i`-th handle the runner holds open, counting in the order they
    /// were opened, released ones left out.
    Handle(usize),
}

impl From<&str> for At {
    fn from(path: &str) -> At {
        At::Path(path.to_string())
    }
}

impl From<String> for At {
    fn from(path: String) -> At {
        At::Path(path)
    }
}

impl At {
    /// The handle index, if this names a handle.
    pub fn handle(&self) -> Option<usize> {
        match self {
            At::Handle(i) => Some(*i),
            At::Path(_) => None,
        }
    }
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            At::Path(p) => f.write_str(p),
            At::Handle(i) => write!(f, "#{i}"),
        }
    }
}

/// Owner of a new node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

impl Owner {
    /// An ordinary user: the owner the shorthand constructors use.
    pub const USER: Owner = Owner { uid: 1000, gid: 1000 };
}

/// Which end of a run of data `lseek` looks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Whence {
    /// SEEK_DATA: the next offset that holds data.
    Data,
    /// SEEK_HOLE: the next offset in a hole (or the end of the file).
    Hole,
}

/// One file-system operation. Nodes are named by path or by open handle,
/// never by inode number, so that a sequence means the same in every run.
#[derive(Clone, Debug)]
pub enum Op {
    /// A regular file.
    Create {
        path: String,
        perm: u32,
        owner: Owner,
    },
    Mkdir {
        path: String,
        perm: u32,
        owner: Owner,
    },
    /// A node of any non-directory type from a full `mode` (type bits
    /// included), and its device number.
    Mknod {
        path: String,
        mode: u32,
        rdev: u64,
        owner: Owner,
    },
    Symlink {
        path: String,
        target: Vec<u8>,
        owner: Owner,
    },
    /// A new name `to` for the node `from` names.
    Link {
        from: At,
        to: String,
    },
    /// A name `to` again for a file unlinked while open, by a handle that
    /// holds it (`Fs::relink`).
    Relink {
        from: At,
        to: String,
    },
    Unlink(String),
    Rmdir(String),
    /// rename(2) with its flags ([`novafs::RENAME_NOREPLACE`],
    /// [`novafs::RENAME_EXCHANGE`]).
    Rename {
        from: String,
        to: String,
        flags: u32,
    },
    /// The node's attributes.
    Stat(At),
    Readlink(At),
    /// Up to `limit` entries of a directory, "." and ".." included, from
    /// `offset` (0, or the `next_offset` of the last entry seen).
    Readdir {
        path: String,
        offset: u64,
        limit: usize,
    },
    Statfs,
    /// Writes `len` bytes of [`data`]`(seed, len)` at `off`.
    Write {
        at: At,
        off: u64,
        len: u64,
        seed: u64,
    },
    /// Stores through an atomic mapping of the whole file, then its msync
    /// (`Fs::mmap_atomic`, NOVA §4.5): every store, `(off, len, seed)`,
    /// reaches the file in one commit. The bytes of a store past the end
    /// of the file are left out (an access there is fatal, as SIGBUS).
    MappedWrite {
        at: At,
        stores: Vec<(u64, u64, u64)>,
    },
    /// Reads up to `len` bytes at `off`.
    Read {
        at: At,
        off: u64,
        len: u64,
    },
    /// fallocate(2) with its mode (0, [`novafs::FALLOC_FL_KEEP_SIZE`],
    /// or punching a hole).
    Fallocate {
        at: At,
        mode: u32,
        off: u64,
        len: u64,
    },
    Lseek {
        at: At,
        off: u64,
        whence: Whence,
    },
    Fsync(At),
    /// Changes attributes; a size is a truncate. See [`Op::truncate`],
    /// [`Op::chmod`], [`Op::chown`] and [`Op::utimens`] for the usual forms.
    Setattr {
        at: At,
        set: SetAttr,
    },
    /// setxattr(2) with its flags ([`novafs::XATTR_CREATE`],
    /// [`novafs::XATTR_REPLACE`]).
    SetXattr {
        at: At,
        name: Vec<u8>,
        value: Vec<u8>,
        flags: u32,
    },
    RemoveXattr {
        at: At,
        name: Vec<u8>,
    },
    /// An attribute's value.
    GetXattr {
        at: At,
        name: Vec<u8>,
    },
    /// Every attribute name, each ending in NUL.
    ListXattr(At),
    /// Takes snapshot NAME of everything committed so far (Fortis §3).
    Snapshot(String),
    /// Deletes snapshot NAME.
    DeleteSnapshot(String),
    /// Opens a handle, kept until [`Op::Release`]: an unlinked open file
    /// lives on.
    Open(At),
    /// Releases a handle: [`At::Handle`] names it; a path names the last
    /// handle opened by that path.
    Release(At),
    /// Mounts the image (recovering after a crash).
    Mount,
    MountReadOnly,
    /// Mounts without keeping the metadata replicas current
    /// (`MetaReplicas::Skipped`, `-o meta_protection=off`).
    MountUnprotected,
    /// Clean unmount.
    Unmount,
    /// The mounted file system goes away without unmounting: a crash.
    Crash,
    /// Clean unmount, then mount again.
    Remount,
    /// mkfs over the unmounted image, with the runner's format options.
    Mkfs,
}

impl Op {
    /// A file with [`FILE_PERM`] owned by [`Owner::USER`].
    pub fn create(path: impl Into<String>) -> Op {
        Op::Create {
            path: path.into(),
            perm: FILE_PERM,
            owner: Owner::USER,
        }
    }

    /// A directory with [`DIR_PERM`] owned by [`Owner::USER`].
    pub fn mkdir(path: impl Into<String>) -> Op {
        Op::Mkdir {
            path: path.into(),
            perm: DIR_PERM,
            owner: Owner::USER,
        }
    }

    /// A node of `mode` owned by [`Owner::USER`].
    pub fn mknod(path: impl Into<String>, mode: u32, rdev: u64) -> Op {
        Op::Mknod {
            path: path.into(),
            mode,
            rdev,
            owner: Owner::USER,
        }
    }

    /// A symlink owned by [`Owner::USER`].
    pub fn symlink(path: impl Into<String>, target: impl Into<Vec<u8>>) -> Op {
        Op::Symlink {
            path: path.into(),
            target: target.into(),
            owner: Owner::USER,
        }
    }

    pub fn write(at: impl Into<At>, off: u64, len: u64, seed: u64) -> Op {
        Op::Write {
            at: at.into(),
            off,
            len,
            seed,
        }
    }

    pub fn fallocate(at: impl Into<At>, mode: u32, off: u64, len: u64) -> Op {
        Op::Fallocate {
            at: at.into(),
            mode,
            off,
            len,
        }
    }

    pub fn link(from: impl Into<At>, to: impl Into<String>) -> Op {
        Op::Link {
            from: from.into(),
            to: to.into(),
        }
    }

    pub fn rename(from: impl Into<String>, to: impl Into<String>, flags: u32) -> Op {
        Op::Rename {
            from: from.into(),
            to: to.into(),
            flags,
        }
    }

    pub fn truncate(at: impl Into<At>, size: u64) -> Op {
        Op::setattr(at, SetAttr::default().size(size))
    }

    pub fn chmod(at: impl Into<At>, perm: u32) -> Op {
        Op::setattr(at, SetAttr::default().mode(perm))
    }

    pub fn chown(at: impl Into<At>, uid: u32, gid: u32) -> Op {
        Op::setattr(at, SetAttr::default().uid(uid).gid(gid))
    }

    pub fn utimens(at: impl Into<At>, atime: i64, mtime: i64) -> Op {
        Op::setattr(at, SetAttr::default().atime(atime).mtime(mtime))
    }

    fn setattr(at: impl Into<At>, set: SetAttr) -> Op {
        Op::Setattr { at: at.into(), set }
    }

    /// Sets attribute `name` to the `len` bytes of [`data`]`(seed, len)`.
    pub fn setxattr(at: impl Into<At>, name: &str, len: u64, seed: u64) -> Op {
        Op::SetXattr {
            at: at.into(),
            name: name.into(),
            value: data(seed, len),
            flags: 0,
        }
    }

    pub fn removexattr(at: impl Into<At>, name: &str) -> Op {
        Op::RemoveXattr {
            at: at.into(),
            name: name.into(),
        }
    }

    /// The open handle this operation names, if any: a generator must not
    /// emit it while fewer handles are open.
    pub fn handle(&self) -> Option<usize> {
        let at = match self {
            Op::Link { from: at, .. }
            | Op::Relink { from: at, .. }
            | Op::Stat(at)
            | Op::Readlink(at)
            | Op::Write { at, .. }
            | Op::MappedWrite { at, .. }
            | Op::Read { at, .. }
            | Op::Fallocate { at, .. }
            | Op::Lseek { at, .. }
            | Op::Fsync(at)
            | Op::Setattr { at, .. }
            | Op::SetXattr { at, .. }
            | Op::RemoveXattr { at, .. }
            | Op::GetXattr { at, .. }
            | Op::ListXattr(at)
            | Op::Open(at)
            | Op::Release(at) => at,
            Op::Create { .. }
            | Op::Mkdir { .. }
            | Op::Mknod { .. }
            | Op::Symlink { .. }
            | Op::Unlink(_)
            | Op::Rmdir(_)
            | Op::Rename { .. }
            | Op::Readdir { .. }
            | Op::Statfs
            | Op::Snapshot(_)
            | Op::DeleteSnapshot(_)
            | Op::Mount
            | Op::MountReadOnly
            | Op::MountUnprotected
            | Op::Unmount
            | Op::Crash
            | Op::Remount
            | Op::Mkfs => return None,
        };
        at.handle()
    }
}

/// " mode …" where a new node's permission bits are not the `usual` ones.
fn perm_suffix(f: &mut fmt::Formatter<'_>, perm: u32, usual: u32) -> fmt::Result {
    if perm == usual {
        Ok(())
    } else {
        write!(f, " mode {perm:o}")
    }
}

/// " owner …" where a new node's owner is not [`Owner::USER`].
fn owner_suffix(f: &mut fmt::Formatter<'_>, owner: Owner) -> fmt::Result {
    if owner == Owner::USER {
        Ok(())
    } else {
        write!(f, " owner {}:{}", owner.uid, owner.gid)
    }
}

/// A setattr by the command it amounts to (truncate, chmod, chown,
/// utimens), else by the fields it sets.
fn fmt_setattr(f: &mut fmt::Formatter<'_>, at: &At, s: &SetAttr) -> fmt::Result {
    let fields = [
        ("mode", s.mode.map(|m| format!("{m:o}"))),
        ("uid", s.uid.map(|v| v.to_string())),
        ("gid", s.gid.map(|v| v.to_string())),
        ("size", s.size.map(|v| v.to_string())),
        ("atime", s.atime.map(|v| v.to_string())),
        ("mtime", s.mtime.map(|v| v.to_string())),
        ("ctime", s.ctime.map(|v| v.to_string())),
    ];
    let set: Vec<&str> = fields.iter().filter(|(_, v)| v.is_some()).map(|(n, _)| *n).collect();
    match (set.as_slice(), s) {
        (["size"], SetAttr { size: Some(n), .. }) => write!(f, "truncate {at} to {n}"),
        (["mode"], SetAttr { mode: Some(m), .. }) => write!(f, "chmod {at} {m:o}"),
        (
            ["uid", "gid"],
            SetAttr {
                uid: Some(u),
                gid: Some(g),
                ..
            },
        ) => write!(f, "chown {at} {u}:{g}"),
        (
            ["atime", "mtime"],
            SetAttr {
                atime: Some(a),
                mtime: Some(m),
                ..
            },
        ) => write!(f, "utimens {at} atime {a} mtime {m}"),
        _ => {
            write!(f, "setattr {at}")?;
            for (name, v) in &fields {
                if let Some(v) = v {
                    write!(f, " {name} {v}")?;
                }
            }
            Ok(())
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Create { path, perm, owner } => {
                write!(f, "create {path}")?;
                perm_suffix(f, *perm, FILE_PERM)?;
                owner_suffix(f, *owner)
            }
            Op::Mkdir { path, perm, owner } => {
                write!(f, "mkdir {path}")?;
                perm_suffix(f, *perm, DIR_PERM)?;
                owner_suffix(f, *owner)
            }
            Op::Mknod {
                path,
                mode,
                rdev,
                owner,
            } => {
                write!(f, "mknod {path} mode {mode:o} rdev {rdev}")?;
                owner_suffix(f, *owner)
            }
            Op::Symlink { path, target, owner } => {
                if target.len() > 40 {
                    write!(f, "symlink {path} -> ({} bytes)", target.len())?;
                } else {
                    write!(f, "symlink {path} -> {}", String::from_utf8_lossy(target))?;
                }
                owner_suffix(f, *owner)
            }
            Op::Link { from, to } => write!(f, "link {from} as {to}"),
            Op::Relink { from, to } => write!(f, "relink {from} as {to}"),
            Op::Unlink(p) => write!(f, "unlink {p}"),
            Op::Rmdir(p) => write!(f, "rmdir {p}"),
            Op::Rename { from, to, flags: 0 } => write!(f, "rename {from} -> {to}"),
            Op::Rename { from, to, flags } => write!(f, "rename {from} -> {to} flags {flags}"),
            Op::Stat(at) => write!(f, "stat {at}"),
            Op::Readlink(at) => write!(f, "readlink {at}"),
            Op::Readdir { path, offset, limit } => write!(f, "readdir {path} from {offset} max {limit}"),
            Op::Statfs => write!(f, "statfs"),
            Op::Write { at, off, len, seed } => write!(f, "write {at} off {off} len {len} seed {seed}"),
            Op::MappedWrite { at, stores } => {
                write!(f, "atomic mmap {at}, store")?;
                for (off, len, seed) in stores {
                    write!(f, " {len}@{off}/{seed}")?;
                }
                f.write_str(", msync")
            }
            Op::Read { at, off, len } => write!(f, "read {at} off {off} len {len}"),
            Op::Fallocate { at, mode, off, len } => write!(f, "fallocate {at} mode {mode} off {off} len {len}"),
            Op::Lseek { at, off, whence } => {
                let w = match whence {
                    Whence::Data => "SEEK_DATA",
                    Whence::Hole => "SEEK_HOLE",
                };
                write!(f, "lseek {at} off {off} {w}")
            }
            Op::Fsync(at) => write!(f, "fsync {at}"),
            Op::Setattr { at, set } => fmt_setattr(f, at, set),
            Op::SetXattr { at, name, value, flags } => {
                write!(
                    f,
                    "setxattr {at} {} ({} bytes)",
                    String::from_utf8_lossy(name),
                    value.len()
                )?;
                match flags {
                    0 => Ok(()),
                    _ => write!(f, " flags {flags}"),
                }
            }
            Op::RemoveXattr { at, name } => write!(f, "removexattr {at} {}", String::from_utf8_lossy(name)),
            Op::GetXattr { at, name } => write!(f, "getxattr {at} {}", String::from_utf8_lossy(name)),
            Op::ListXattr(at) => write!(f, "listxattr {at}"),
            Op::Snapshot(name) => write!(f, "snapshot {name}"),
            Op::DeleteSnapshot(name) => write!(f, "delete snapshot {name}"),
            Op::Open(at) => write!(f, "open {at}"),
            Op::Release(at) => write!(f, "release {at}"),
            Op::Mount => write!(f, "mount"),
            Op::MountReadOnly => write!(f, "mount read-only"),
            Op::MountUnprotected => write!(f, "mount meta_protection=off"),
            Op::Unmount => write!(f, "unmount"),
            Op::Crash => write!(f, "crash"),
            Op::Remount => write!(f, "remount"),
            Op::Mkfs => write!(f, "mkfs"),
        }
    }
}

/// The `len` bytes [`Op::Write`] writes with `seed`: zeros for seed 0
/// (written zeros are data, not a hole), else a stream that differs with
/// the seed, so a misplaced or stale page never reads back as the
/// expected one.
pub fn data(seed: u64, len: u64) -> Vec<u8> {
    if seed == 0 {
        return vec![0; len as usize];
    }
    let mut r = SplitMix::new(seed);
    let mut out = Vec::with_capacity(len as usize);
    while (out.len() as u64) < len {
        out.extend_from_slice(&r.next_u64().to_le_bytes());
    }
    out.truncate(len as usize);
    out
}

/// A path's parent directory and final name: "/d/f" → ("/d", "f"); "/f"
/// and "f" → ("/", "f").
pub fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(0) => ("/", &path[1..]),
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("/", path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use novafs::RENAME_EXCHANGE;

    #[test]
    fn the_shorthands_print_as_the_crash_checker_has_always_printed_them() {
        let shown = [
            (Op::create("/a"), "create /a"),
            (Op::mkdir("/d"), "mkdir /d"),
            (Op::mknod("/p", libc::S_IFIFO | 0o600, 0), "mknod /p mode 10600 rdev 0"),
            (Op::symlink("/l", "d/t"), "symlink /l -> d/t"),
            (Op::symlink("/l", "x".repeat(41)), "symlink /l -> (41 bytes)"),
            (Op::write("/f", 1, 2, 3), "write /f off 1 len 2 seed 3"),
            (Op::truncate("/f", 9), "truncate /f to 9"),
            (Op::chmod("/f", 0o600), "chmod /f 600"),
            (Op::chown("/f", 7, 8), "chown /f 7:8"),
            (Op::utimens("/f", 1, 2), "utimens /f atime 1 mtime 2"),
            (Op::rename("/a", "/b", 0), "rename /a -> /b"),
            (Op::rename("/a", "/b", RENAME_EXCHANGE), "rename /a -> /b flags 2"),
            (Op::link("/a", "/b"), "link /a as /b"),
            (Op::Open("/f".into()), "open /f"),
            (Op::Release("/f".into()), "release /f"),
            (Op::Remount, "remount"),
            (Op::setxattr("/f", "user.a", 3, 1), "setxattr /f user.a (3 bytes)"),
            (Op::removexattr("/f", "user.a"), "removexattr /f user.a"),
            (Op::MountUnprotected, "mount meta_protection=off"),
        ];
        for (op, text) in shown {
            assert_eq!(op.to_string(), text);
        }
        // What differs from the shorthands is spelled out.
        let own = Op::Create {
            path: "/a".into(),
            perm: 0o600,
            owner: Owner { uid: 0, gid: 0 },
        };
        assert_eq!(own.to_string(), "create /a mode 600 owner 0:0");
        let set = SetAttr::default().mode(0o700).uid(3);
        let op = Op::Setattr { at: At::Handle(1), set };
        assert_eq!(op.to_string(), "setattr #1 mode 700 uid 3");
        assert_eq!(op.handle(), Some(1));
        assert_eq!(Op::chmod("/f", 0).handle(), None);
    }

    #[test]
    fn write_data_is_zeros_for_seed_zero_and_a_stream_of_the_seed_otherwise() {
        assert_eq!(data(0, 3), vec![0; 3]);
        assert_ne!(data(1, 16), data(2, 16));
        assert_eq!(data(1, 16)[..5], data(1, 5)[..]);
    }

    #[test]
    fn a_path_splits_into_its_directory_and_name() {
        assert_eq!(split("/d/e/f"), ("/d/e", "f"));
        assert_eq!(split("/f"), ("/", "f"));
        assert_eq!(split("f"), ("/", "f"));
    }
}
