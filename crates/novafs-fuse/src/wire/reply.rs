//! Builds reply payloads in the buffer a transport lends the handler
//! (`out`, which starts where the payload goes: the transport writes the
//! `fuse_out_header` itself) and returns their length. A buffer too small
//! is the transport's bug ([`TooSmall`]), answered EIO, never a panic.
//!
//! Directory listings ([`DirBuf`]) pack `fuse_dirent` or `fuse_direntplus`
//! records, each padded to 8 bytes, and stop at the first that does not
//! fit in the size the kernel asked for: it asks again from the last
//! offset given.

use std::time::Duration;

use zerocopy::{Immutable, IntoBytes};

use super::abi::*;

/// The reply does not fit in the transport's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TooSmall {
    pub need: usize,
    pub have: usize,
}

impl TooSmall {
    pub(crate) fn errno(&self) -> i32 {
        libc::EIO
    }
}

/// A reply's payload length, or why it could not be built.
pub(crate) type Built = Result<usize, TooSmall>;

/// Writes `v` at the start of `out`.
fn put<T: IntoBytes + Immutable>(out: &mut [u8], v: &T) -> Built {
    let need = size_of_val(v);
    v.write_to_prefix(out).map_err(|_| TooSmall { need, have: out.len() })?;
    Ok(need)
}

/// Writes the byte strings one after another at the start of `out`.
fn put_all(out: &mut [u8], parts: &[&[u8]]) -> Built {
    let need = parts.iter().map(|p| p.len()).sum();
    if out.len() < need {
        return Err(TooSmall { need, have: out.len() });
    }
    let mut at = 0;
    for p in parts {
        out[at..at + p.len()].copy_from_slice(p);
        at += p.len();
    }
    Ok(need)
}

/// A cache timeout as the kernel reads it: seconds and nanoseconds.
pub(crate) fn valid(ttl: Duration) -> (u64, u32) {
    (ttl.as_secs(), ttl.subsec_nanos())
}

/// `fuse_entry_out` for a name with attributes `attr`, both cached for
/// `ttl`.
pub(crate) fn entry_out(attr: Attr, generation: u64, ttl: Duration) -> EntryOut {
    let (secs, nsec) = valid(ttl);
    EntryOut {
        nodeid: attr.ino,
        generation,
        entry_valid: secs,
        attr_valid: secs,
        entry_valid_nsec: nsec,
        attr_valid_nsec: nsec,
        attr,
    }
}

/// LOOKUP, MKNOD, MKDIR, SYMLINK, LINK.
pub(crate) fn entry(out: &mut [u8], e: &EntryOut) -> Built {
    put(out, e)
}

/// GETATTR, SETATTR.
pub(crate) fn attr(out: &mut [u8], attr: Attr, ttl: Duration) -> Built {
    let (secs, nsec) = valid(ttl);
    put(
        out,
        &AttrOut {
            attr_valid: secs,
            attr_valid_nsec: nsec,
            dummy: 0,
            attr,
        },
    )
}

fn open_out(fh: u64, open_flags: u32) -> OpenOut {
    OpenOut {
        fh,
        open_flags,
        backing_id: 0,
    }
}

/// OPEN, OPENDIR: the handle later requests carry and FOPEN_* flags.
pub(crate) fn open(out: &mut [u8], fh: u64, open_flags: u32) -> Built {
    put(out, &open_out(fh, open_flags))
}

/// CREATE: the entry, then the open.
pub(crate) fn create(out: &mut [u8], e: &EntryOut, fh: u64, open_flags: u32) -> Built {
    put_all(out, &[e.as_bytes(), open_out(fh, open_flags).as_bytes()])
}

/// WRITE: how many bytes were written.
pub(crate) fn write(out: &mut [u8], size: u32) -> Built {
    put(out, &WriteOut { size, padding: 0 })
}

/// READ, READLINK, GETXATTR and LISTXATTR with data: the bytes themselves.
pub(crate) fn data(out: &mut [u8], bytes: &[u8]) -> Built {
    put_all(out, &[bytes])
}

/// Where READ's data goes, `size` bytes, for the handler to fill in
/// place (no copy); the reply's length is what it filled.
pub(crate) fn data_buf(out: &mut [u8], size: u32) -> Result<&mut [u8], TooSmall> {
    let have = out.len();
    out.get_mut(..size as usize).ok_or(TooSmall {
        need: size as usize,
        have,
    })
}

/// STATFS.
pub(crate) fn statfs(out: &mut [u8], st: &Kstatfs) -> Built {
    put(out, st)
}

/// GETXATTR and LISTXATTR asked with size 0: the size the value needs.
pub(crate) fn xattr_size(out: &mut [u8], size: u32) -> Built {
    put(out, &GetxattrOut { size, padding: 0 })
}

/// LSEEK: the offset found.
pub(crate) fn lseek(out: &mut [u8], offset: u64) -> Built {
    put(out, &LseekOut { offset })
}

/// IOCTL: its result and output bytes (no retry: novafs asks for no more
/// than the kernel sent).
pub(crate) fn ioctl(out: &mut [u8], result: i32, data: &[u8]) -> Built {
    let head = IoctlOut {
        result,
        flags: 0,
        in_iovs: 0,
        out_iovs: 0,
    };
    put_all(out, &[head.as_bytes(), data])
}

/// INIT: the kernel of minor version `kernel_minor` reads only as much of
/// `fuse_init_out` as it knows (8 bytes before 7.5, 24 before 7.23).
pub(crate) fn init(out: &mut [u8], init: &InitOut, kernel_minor: u32) -> Built {
    let bytes = init.as_bytes();
    let len = match kernel_minor {
        0..5 => FUSE_COMPAT_INIT_OUT_SIZE,
        5..23 => FUSE_COMPAT_22_INIT_OUT_SIZE,
        _ => bytes.len(),
    };
    put_all(out, &[&bytes[..len]])
}

/// FUSE_NOTIFY_INVAL_INODE's payload: drop `ino`'s cached attributes and
/// its pages in `off..off + len` (`len` <= 0: to the end; `off` < 0: no
/// pages).
pub(crate) fn notify_inval_inode(out: &mut [u8], ino: u64, off: i64, len: i64) -> Built {
    put(out, &NotifyInvalInodeOut { ino, off, len })
}

/// The DT_* type a dirent carries for a file of mode `mode`.
pub(crate) fn dirent_type(mode: u32) -> u32 {
    (mode & libc::S_IFMT) >> 12
}

/// A READDIR or READDIRPLUS reply being filled.
pub(crate) struct DirBuf<'a> {
    out: &'a mut [u8],
    len: usize,
    /// The size the kernel asked for (or the buffer's, if smaller).
    cap: usize,
}

impl<'a> DirBuf<'a> {
    pub(crate) fn new(out: &'a mut [u8], size: u32) -> DirBuf<'a> {
        let cap = out.len().min(size as usize);
        DirBuf { out, len: 0, cap }
    }

    /// The payload length so far.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Adds a READDIR entry: node `ino`, `off` the offset after it, DT_*
    /// type `typ`. True when it did not fit: nothing was added, the
    /// listing stops there.
    pub(crate) fn add(&mut self, ino: u64, off: u64, typ: u32, name: &[u8]) -> bool {
        self.push(&[], ino, off, typ, name)
    }

    /// Adds a READDIRPLUS entry: as [`DirBuf::add`] with the entry a
    /// lookup of the name would answer.
    pub(crate) fn add_plus(&mut self, e: &EntryOut, off: u64, typ: u32, name: &[u8]) -> bool {
        self.push(e.as_bytes(), e.attr.ino, off, typ, name)
    }

    fn push(&mut self, entry: &[u8], ino: u64, off: u64, typ: u32, name: &[u8]) -> bool {
        let Ok(namelen) = u32::try_from(name.len()) else {
            return true;
        };
        let d = Dirent { ino, off, namelen, typ };
        let record = entry.len() + FUSE_NAME_OFFSET + name.len();
        let end = self.len + rec_align(record);
        if end > self.cap {
            return true;
        }
        let at = &mut self.out[self.len..end];
        at[..entry.len()].copy_from_slice(entry);
        at[entry.len()..entry.len() + FUSE_NAME_OFFSET].copy_from_slice(d.as_bytes());
        at[entry.len() + FUSE_NAME_OFFSET..record].copy_from_slice(name);
        at[record..].fill(0);
        self.len = end;
        false
    }
}

#[cfg(test)]
mod tests;
