//! Parses what a transport delivers ([`Incoming`]) into a typed
//! [`Request`]: one [`Op`] variant per operation novafs answers, and
//! [`Op::Unknown`] for the rest (answered ENOSYS).
//!
//! The bytes after the header are the operation's fixed-size argument
//! struct, then its variable part (NUL-terminated names, write data, ...),
//! then any extensions (`total_extlen`). `/dev/fuse` delivers them in one
//! piece and the parser splits off the struct by its size for the opcode
//! and the negotiated protocol ([`Negotiated`]); FUSE over io_uring has the
//! kernel put the first argument in a separate area (`fuse_uring_args_to_ring`
//! in `fs/fuse/dev_uring.c`) and the rest in the payload. Name-only
//! operations (LOOKUP, UNLINK, RMDIR, SYMLINK, REMOVEXATTR) have an empty
//! first argument there (`fuse_set_zero_arg0`): their table size is 0, so
//! both forms read the same.
//!
//! Nothing here trusts a length: a short buffer, a missing NUL or sizes
//! that disagree give a [`ParseError`], never a panic. A name is passed on
//! as the kernel sent it (it never contains '/' or NUL, but that is the
//! core's to check).

use std::fmt;

use zerocopy::{FromBytes, IntoBytes};

use super::abi::*;
use crate::transport::{Args, Incoming};

/// What INIT settled that changes how requests are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Negotiated {
    /// The protocol minor version in use: the smaller of the kernel's and
    /// ours.
    pub minor: u32,
    /// FUSE_SETXATTR_EXT: SETXATTR carries the 16-byte `fuse_setxattr_in`.
    pub setxattr_ext: bool,
}

impl Default for Negotiated {
    /// Before INIT: only INIT itself arrives, which needs neither.
    fn default() -> Negotiated {
        Negotiated {
            minor: FUSE_KERNEL_MINOR_VERSION,
            setxattr_ext: false,
        }
    }
}

/// One request, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Request<'a> {
    pub unique: u64,
    /// The node the operation is on (the parent, for operations on names).
    pub nodeid: u64,
    /// Who asked: the calling process's fs uid, gid and thread group id
    /// (0 for requests the kernel makes on its own, such as FORGET).
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    pub op: Op<'a>,
}

/// A time SETATTR sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SetTime {
    /// The daemon's clock now (utimensat with UTIME_NOW).
    Now,
    /// Nanoseconds since the epoch, negative before it.
    At(i64),
}

/// SETATTR's changes, each present only when its FATTR_* bit is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Setattr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
    /// Nanoseconds since the epoch.
    pub ctime: Option<i64>,
    pub fh: Option<u64>,
    /// FATTR_KILL_SUIDGID (with FUSE_HANDLE_KILLPRIV_V2).
    pub kill_suidgid: bool,
}

impl Setattr {
    /// Sets times and nothing else.
    pub(crate) fn times_only(&self) -> bool {
        let times = self.atime.is_some() || self.mtime.is_some() || self.ctime.is_some();
        times && self.mode.is_none() && self.uid.is_none() && self.gid.is_none() && self.size.is_none()
    }
}

/// The nodes of a BATCH_FORGET, read one at a time (the payload need not
/// be 8-byte aligned, so it cannot be borrowed as a slice of structs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Forgets<'a>(&'a [u8]);

impl Iterator for Forgets<'_> {
    type Item = ForgetOne;

    fn next(&mut self) -> Option<ForgetOne> {
        let (one, rest) = ForgetOne::read_from_prefix(self.0).ok()?;
        self.0 = rest;
        Some(one)
    }
}

/// An operation with its arguments. `fh` is the handle OPEN, OPENDIR or
/// CREATE answered; names are as sent, without their NUL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Op<'a> {
    Init {
        major: u32,
        minor: u32,
        max_readahead: u32,
        flags: u64,
    },
    Destroy,
    Lookup {
        name: &'a [u8],
    },
    Forget {
        nlookup: u64,
    },
    BatchForget {
        nodes: Forgets<'a>,
    },
    Getattr {
        fh: Option<u64>,
    },
    Setattr(Setattr),
    Readlink,
    Symlink {
        name: &'a [u8],
        target: &'a [u8],
    },
    Mknod {
        name: &'a [u8],
        mode: u32,
        rdev: u32,
        umask: u32,
    },
    Mkdir {
        name: &'a [u8],
        mode: u32,
        umask: u32,
    },
    Unlink {
        name: &'a [u8],
    },
    Rmdir {
        name: &'a [u8],
    },
    /// RENAME (flags 0) and RENAME2 (renameat2's flags).
    Rename {
        name: &'a [u8],
        newdir: u64,
        newname: &'a [u8],
        flags: u32,
    },
    Link {
        oldnodeid: u64,
        newname: &'a [u8],
    },
    Open {
        flags: u32,
        open_flags: u32,
    },
    Read {
        fh: u64,
        offset: u64,
        size: u32,
        flags: u32,
    },
    Write {
        fh: u64,
        offset: u64,
        data: &'a [u8],
        write_flags: u32,
        flags: u32,
    },
    Statfs,
    Release {
        fh: u64,
        flags: u32,
        release_flags: u32,
        lock_owner: u64,
    },
    Fsync {
        fh: u64,
        datasync: bool,
    },
    Setxattr {
        name: &'a [u8],
        value: &'a [u8],
        flags: u32,
        setxattr_flags: u32,
    },
    Getxattr {
        name: &'a [u8],
        size: u32,
    },
    Listxattr {
        size: u32,
    },
    Removexattr {
        name: &'a [u8],
    },
    Flush {
        fh: u64,
        lock_owner: u64,
    },
    Opendir {
        flags: u32,
        open_flags: u32,
    },
    Readdir {
        fh: u64,
        offset: u64,
        size: u32,
    },
    Readdirplus {
        fh: u64,
        offset: u64,
        size: u32,
    },
    Releasedir {
        fh: u64,
        flags: u32,
    },
    Fsyncdir {
        fh: u64,
        datasync: bool,
    },
    Access {
        mask: u32,
    },
    Create {
        name: &'a [u8],
        flags: u32,
        mode: u32,
        umask: u32,
        open_flags: u32,
    },
    Interrupt {
        unique: u64,
    },
    Ioctl {
        fh: u64,
        flags: u32,
        cmd: u32,
        arg: u64,
        data: &'a [u8],
        out_size: u32,
    },
    Fallocate {
        fh: u64,
        offset: u64,
        length: u64,
        mode: u32,
    },
    /// `offset` is a loff_t: negative is out of range.
    Lseek {
        fh: u64,
        offset: i64,
        whence: u32,
    },
    /// An operation novafs does not implement: answered ENOSYS.
    Unknown(u32),
}

/// Why a request could not be parsed: the kernel and we disagree about
/// the protocol. Answered EIO.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ParseError {
    /// Fewer bytes than the header's `len` or the operation needs.
    Short { opcode: u32, need: usize, have: usize },
    /// A name without its terminating NUL.
    Unterminated { opcode: u32 },
    /// A size field that does not match the bytes that came with it.
    SizeMismatch { opcode: u32, said: usize, came: usize },
}

impl ParseError {
    pub(crate) fn errno(&self) -> i32 {
        libc::EIO
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ParseError::Short { opcode, need, have } => {
                write!(f, "FUSE opcode {opcode}: {have} bytes of arguments, {need} needed")
            }
            ParseError::Unterminated { opcode } => write!(f, "FUSE opcode {opcode}: name without NUL"),
            ParseError::SizeMismatch { opcode, said, came } => {
                write!(f, "FUSE opcode {opcode}: size {said} given, {came} bytes sent")
            }
        }
    }
}

impl std::error::Error for ParseError {}

/// How the kernel lays out an operation's first argument.
enum Fixed {
    /// This many bytes under the negotiated protocol (older minors send
    /// shorter forms); 0 for operations with none or with only names.
    Size(usize),
    /// INIT: as long as the kernel's version makes it.
    Init,
    /// An operation novafs does not answer: its arguments are not read, so
    /// whatever layout it has, it gets ENOSYS.
    Unknown,
}

fn fixed_size(opcode: u32, neg: &Negotiated) -> Fixed {
    let old = |minor: u32, compat: usize, full: usize| if neg.minor < minor { compat } else { full };
    Fixed::Size(match opcode {
        FUSE_INIT => return Fixed::Init,
        FUSE_GETATTR => old(9, 0, size_of::<GetattrIn>()),
        FUSE_SETATTR => size_of::<SetattrIn>(),
        FUSE_MKNOD => old(12, FUSE_COMPAT_MKNOD_IN_SIZE, size_of::<MknodIn>()),
        FUSE_MKDIR => size_of::<MkdirIn>(),
        FUSE_CREATE => old(12, size_of::<OpenIn>(), size_of::<CreateIn>()),
        FUSE_RENAME => size_of::<RenameIn>(),
        FUSE_RENAME2 => size_of::<Rename2In>(),
        FUSE_LINK => size_of::<LinkIn>(),
        FUSE_OPEN | FUSE_OPENDIR => size_of::<OpenIn>(),
        FUSE_READ | FUSE_READDIR | FUSE_READDIRPLUS => old(9, FUSE_COMPAT_WRITE_IN_SIZE, size_of::<ReadIn>()),
        FUSE_WRITE => old(9, FUSE_COMPAT_WRITE_IN_SIZE, size_of::<WriteIn>()),
        FUSE_RELEASE | FUSE_RELEASEDIR => old(8, 16, size_of::<ReleaseIn>()),
        FUSE_FLUSH => size_of::<FlushIn>(),
        FUSE_FSYNC | FUSE_FSYNCDIR => size_of::<FsyncIn>(),
        FUSE_SETXATTR if neg.setxattr_ext => size_of::<SetxattrIn>(),
        FUSE_SETXATTR => FUSE_COMPAT_SETXATTR_IN_SIZE,
        FUSE_GETXATTR | FUSE_LISTXATTR => size_of::<GetxattrIn>(),
        FUSE_ACCESS => size_of::<AccessIn>(),
        FUSE_FORGET => size_of::<ForgetIn>(),
        FUSE_BATCH_FORGET => size_of::<BatchForgetIn>(),
        FUSE_INTERRUPT => size_of::<InterruptIn>(),
        FUSE_IOCTL => size_of::<IoctlIn>(),
        FUSE_FALLOCATE => size_of::<FallocateIn>(),
        FUSE_LSEEK => size_of::<LseekIn>(),
        FUSE_LOOKUP | FUSE_UNLINK | FUSE_RMDIR | FUSE_SYMLINK | FUSE_REMOVEXATTR => 0,
        FUSE_READLINK | FUSE_STATFS | FUSE_DESTROY => 0,
        _ => return Fixed::Unknown,
    })
}

/// `T` from the first `len` bytes of `b`, zero-filled past them (an
/// older, shorter form of the struct), or from all its bytes.
fn fixed<T: FromBytes + IntoBytes>(b: &[u8]) -> T {
    let mut t = T::new_zeroed();
    let dst = t.as_mut_bytes();
    let n = dst.len().min(b.len());
    dst[..n].copy_from_slice(&b[..n]);
    t
}

/// Splits a NUL-terminated name off the front of `b`.
fn name(opcode: u32, b: &[u8]) -> Result<(&[u8], &[u8]), ParseError> {
    let nul = b
        .iter()
        .position(|&c| c == 0)
        .ok_or(ParseError::Unterminated { opcode })?;
    Ok((&b[..nul], &b[nul + 1..]))
}

/// Exactly `said` bytes of `b`: a size field must match what came.
fn sized(opcode: u32, b: &[u8], said: u32) -> Result<&[u8], ParseError> {
    if b.len() == said as usize {
        Ok(b)
    } else {
        Err(ParseError::SizeMismatch {
            opcode,
            said: said as usize,
            came: b.len(),
        })
    }
}

/// Nanoseconds since the epoch of a kernel time: seconds (as i64 bits,
/// rounded down) and nanoseconds in 0..1e9 counted forwards, so
/// 1960-05-01 12:00:00.123456789 is itself. Out of range saturates.
pub(crate) fn nanos(secs: u64, nsec: u32) -> i64 {
    (secs as i64)
        .checked_mul(1_000_000_000)
        .and_then(|s| s.checked_add(i64::from(nsec)))
        .unwrap_or(if (secs as i64) < 0 { i64::MIN } else { i64::MAX })
}

fn setattr(a: &SetattrIn) -> Setattr {
    let has = |bit: u32| a.valid & bit != 0;
    let time = |bit: u32, now: u32, secs: u64, nsec: u32| {
        if has(now) {
            Some(SetTime::Now)
        } else {
            has(bit).then(|| SetTime::At(nanos(secs, nsec)))
        }
    };
    Setattr {
        mode: has(FATTR_MODE).then_some(a.mode),
        uid: has(FATTR_UID).then_some(a.uid),
        gid: has(FATTR_GID).then_some(a.gid),
        size: has(FATTR_SIZE).then_some(a.size),
        atime: time(FATTR_ATIME, FATTR_ATIME_NOW, a.atime, a.atimensec),
        mtime: time(FATTR_MTIME, FATTR_MTIME_NOW, a.mtime, a.mtimensec),
        ctime: has(FATTR_CTIME).then(|| nanos(a.ctime, a.ctimensec)),
        fh: has(FATTR_FH).then_some(a.fh),
        kill_suidgid: has(FATTR_KILL_SUIDGID),
    }
}

/// Parses one request. `neg` is what INIT settled ([`Negotiated::default`]
/// before it).
pub(crate) fn parse<'a>(inc: &Incoming<'a>, neg: &Negotiated) -> Result<Request<'a>, ParseError> {
    let h = inc.header;
    let opcode = h.opcode;
    let short = |need: usize, have: usize| ParseError::Short { opcode, need, have };
    // The arguments' length by the header; a transport may hand over more
    // (its whole buffer), never less.
    let args_len = (h.len as usize).checked_sub(size_of::<InHeader>()).ok_or(short(0, 0))?;
    let ext_len = usize::from(h.total_extlen) * 8;
    // What the parser reads: the arguments without the extensions.
    let body_len = args_len.checked_sub(ext_len).ok_or(short(ext_len, args_len))?;
    let request = |op| Request {
        unique: h.unique,
        nodeid: h.nodeid,
        uid: h.uid,
        gid: h.gid,
        pid: h.pid,
        op,
    };
    let size = match fixed_size(opcode, neg) {
        Fixed::Size(n) => Some(n),
        Fixed::Init => None,
        Fixed::Unknown => return Ok(request(Op::Unknown(opcode))),
    };
    let (fixed_part, rest) = match inc.args {
        Args::Whole(b) => {
            let b = b.get(..args_len).ok_or(short(args_len, b.len()))?;
            let b = b.get(..body_len).ok_or(short(body_len, b.len()))?;
            // INIT: whatever the kernel's version sent (16 bytes before
            // 7.36, 64 after).
            let n = size.unwrap_or(b.len().min(size_of::<InitIn>()));
            if b.len() < n {
                return Err(short(n, b.len()));
            }
            b.split_at(n)
        }
        Args::Split { op, payload } => {
            // The op area may be longer than the struct (io_uring's is 128
            // bytes); the header's length counts the struct as sent.
            let n = size.unwrap_or(op.len().min(size_of::<InitIn>()));
            let op = op.get(..n).ok_or(short(n, op.len()))?;
            let payload_len = args_len.checked_sub(n).ok_or(short(n, args_len))?;
            let p = payload.get(..payload_len).ok_or(short(payload_len, payload.len()))?;
            let rest_len = body_len.checked_sub(n).ok_or(short(n, body_len))?;
            let p = p.get(..rest_len).ok_or(short(rest_len, p.len()))?;
            (op, p)
        }
    };
    Ok(request(op(opcode, fixed_part, rest)?))
}

/// The operation from its fixed argument `f` (exactly as long as the
/// kernel sent it) and the bytes after it.
fn op<'a>(opcode: u32, f: &'a [u8], rest: &'a [u8]) -> Result<Op<'a>, ParseError> {
    let name_of = |b: &'a [u8]| name(opcode, b);
    Ok(match opcode {
        FUSE_INIT => {
            if f.len() < FUSE_COMPAT_INIT_IN_SIZE {
                return Err(ParseError::Short {
                    opcode,
                    need: FUSE_COMPAT_INIT_IN_SIZE,
                    have: f.len(),
                });
            }
            let a: InitIn = fixed(f);
            let flags = u64::from(a.flags);
            let high = if flags & FUSE_INIT_EXT != 0 {
                u64::from(a.flags2) << 32
            } else {
                0
            };
            Op::Init {
                major: a.major,
                minor: a.minor,
                max_readahead: a.max_readahead,
                flags: flags | high,
            }
        }
        FUSE_DESTROY => Op::Destroy,
        FUSE_LOOKUP => Op::Lookup { name: name_of(rest)?.0 },
        FUSE_FORGET => Op::Forget {
            nlookup: fixed::<ForgetIn>(f).nlookup,
        },
        FUSE_BATCH_FORGET => {
            let count = fixed::<BatchForgetIn>(f).count;
            let bytes = (count as usize).saturating_mul(size_of::<ForgetOne>());
            sized(opcode, rest, u32::try_from(bytes).unwrap_or(u32::MAX))?;
            Op::BatchForget { nodes: Forgets(rest) }
        }
        FUSE_GETATTR => {
            let a: GetattrIn = fixed(f);
            Op::Getattr {
                fh: (a.getattr_flags & FUSE_GETATTR_FH != 0).then_some(a.fh),
            }
        }
        FUSE_SETATTR => Op::Setattr(setattr(&fixed(f))),
        FUSE_READLINK => Op::Readlink,
        FUSE_SYMLINK => {
            let (name, rest) = name_of(rest)?;
            Op::Symlink {
                name,
                target: name_of(rest)?.0,
            }
        }
        FUSE_MKNOD => {
            let a: MknodIn = fixed(f);
            Op::Mknod {
                name: name_of(rest)?.0,
                mode: a.mode,
                rdev: a.rdev,
                umask: a.umask,
            }
        }
        FUSE_MKDIR => {
            let a: MkdirIn = fixed(f);
            Op::Mkdir {
                name: name_of(rest)?.0,
                mode: a.mode,
                umask: a.umask,
            }
        }
        FUSE_UNLINK => Op::Unlink { name: name_of(rest)?.0 },
        FUSE_RMDIR => Op::Rmdir { name: name_of(rest)?.0 },
        FUSE_RENAME | FUSE_RENAME2 => {
            let a: Rename2In = fixed(f);
            let (name, rest) = name_of(rest)?;
            Op::Rename {
                name,
                newdir: a.newdir,
                newname: name_of(rest)?.0,
                flags: a.flags,
            }
        }
        FUSE_LINK => Op::Link {
            oldnodeid: fixed::<LinkIn>(f).oldnodeid,
            newname: name_of(rest)?.0,
        },
        FUSE_OPEN | FUSE_OPENDIR => {
            let a: OpenIn = fixed(f);
            let (flags, open_flags) = (a.flags, a.open_flags);
            if opcode == FUSE_OPEN {
                Op::Open { flags, open_flags }
            } else {
                Op::Opendir { flags, open_flags }
            }
        }
        FUSE_READ => {
            let a: ReadIn = fixed(f);
            Op::Read {
                fh: a.fh,
                offset: a.offset,
                size: a.size,
                flags: a.flags,
            }
        }
        FUSE_READDIR | FUSE_READDIRPLUS => {
            let a: ReadIn = fixed(f);
            let (fh, offset, size) = (a.fh, a.offset, a.size);
            if opcode == FUSE_READDIR {
                Op::Readdir { fh, offset, size }
            } else {
                Op::Readdirplus { fh, offset, size }
            }
        }
        FUSE_WRITE => {
            let a: WriteIn = fixed(f);
            Op::Write {
                fh: a.fh,
                offset: a.offset,
                data: sized(opcode, rest, a.size)?,
                write_flags: a.write_flags,
                flags: a.flags,
            }
        }
        FUSE_STATFS => Op::Statfs,
        FUSE_RELEASE => {
            let a: ReleaseIn = fixed(f);
            Op::Release {
                fh: a.fh,
                flags: a.flags,
                release_flags: a.release_flags,
                lock_owner: a.lock_owner,
            }
        }
        FUSE_RELEASEDIR => {
            let a: ReleaseIn = fixed(f);
            Op::Releasedir {
                fh: a.fh,
                flags: a.flags,
            }
        }
        FUSE_FSYNC | FUSE_FSYNCDIR => {
            let a: FsyncIn = fixed(f);
            let (fh, datasync) = (a.fh, a.fsync_flags & FUSE_FSYNC_FDATASYNC != 0);
            if opcode == FUSE_FSYNC {
                Op::Fsync { fh, datasync }
            } else {
                Op::Fsyncdir { fh, datasync }
            }
        }
        FUSE_SETXATTR => {
            // The compat form is the extended one's first half.
            let a: SetxattrIn = fixed(f);
            let (name, value) = name_of(rest)?;
            Op::Setxattr {
                name,
                value: sized(opcode, value, a.size)?,
                flags: a.flags,
                setxattr_flags: a.setxattr_flags,
            }
        }
        FUSE_GETXATTR => Op::Getxattr {
            name: name_of(rest)?.0,
            size: fixed::<GetxattrIn>(f).size,
        },
        FUSE_LISTXATTR => Op::Listxattr {
            size: fixed::<GetxattrIn>(f).size,
        },
        FUSE_REMOVEXATTR => Op::Removexattr { name: name_of(rest)?.0 },
        FUSE_FLUSH => {
            let a: FlushIn = fixed(f);
            Op::Flush {
                fh: a.fh,
                lock_owner: a.lock_owner,
            }
        }
        FUSE_ACCESS => Op::Access {
            mask: fixed::<AccessIn>(f).mask,
        },
        FUSE_CREATE => {
            let a: CreateIn = fixed(f);
            Op::Create {
                name: name_of(rest)?.0,
                flags: a.flags,
                mode: a.mode,
                umask: a.umask,
                open_flags: a.open_flags,
            }
        }
        FUSE_INTERRUPT => Op::Interrupt {
            unique: fixed::<InterruptIn>(f).unique,
        },
        FUSE_IOCTL => {
            let a: IoctlIn = fixed(f);
            Op::Ioctl {
                fh: a.fh,
                flags: a.flags,
                cmd: a.cmd,
                arg: a.arg,
                data: sized(opcode, rest, a.in_size)?,
                out_size: a.out_size,
            }
        }
        FUSE_FALLOCATE => {
            let a: FallocateIn = fixed(f);
            Op::Fallocate {
                fh: a.fh,
                offset: a.offset,
                length: a.length,
                mode: a.mode,
            }
        }
        FUSE_LSEEK => {
            let a: LseekIn = fixed(f);
            Op::Lseek {
                fh: a.fh,
                offset: a.offset as i64,
                whence: a.whence,
            }
        }
        // Not reached: `parse` answers unknown operations before reading.
        other => Op::Unknown(other),
    })
}

#[cfg(test)]
mod tests;
