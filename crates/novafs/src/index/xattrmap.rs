//! An inode's extended attributes in DRAM, rebuilt from its log's xattr
//! entries like every other index (NOVA §4.7: DRAM holds what the log
//! says). Each name maps to its latest entry: a value, inline or in data
//! pages, or a removal. Applying an entry kills the one it supersedes and
//! hands back the pages of a superseded value, to be freed after the
//! commit (rule R3).

use std::collections::BTreeMap;

use crate::alloc::Freed;
use crate::error::{corrupt, Result};
use crate::layout::{
    decode, xattr_payload_off, Bounds, XattrHead, PAGE_SIZE, XATTR_INLINE_MAX, XATTR_NAME_MAX, XATTR_REMOVE, XATTR_SET,
    XATTR_SIZE_MAX,
};
use crate::log::{Entry, Log};

/// Most data pages a value can take.
pub(crate) const MAX_VALUE_PAGES: usize = XATTR_SIZE_MAX.div_ceil(PAGE_SIZE as usize);

/// Where a value lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Value {
    /// In the entry itself (a small value), copied here.
    Inline(Box<[u8]>),
    /// In data pages, `len` bytes in all, whose CRC32C is `crc`.
    Pages { pages: Box<[u64]>, len: u32, crc: u32 },
}

impl Value {
    fn pages(&self) -> &[u64] {
        match self {
            Value::Inline(_) => &[],
            Value::Pages { pages, .. } => pages,
        }
    }
}

/// True when a value of `len` bytes under a `name_len`-byte name fits in
/// its entry.
pub(crate) fn fits_inline(name_len: usize, len: usize) -> bool {
    xattr_payload_off(name_len) + len <= XATTR_INLINE_MAX
}

/// The entry setting attribute `name` to `value`, or removing it (None);
/// it carries the inode's `ctime` after the change.
pub(crate) fn entry(epoch: u64, name: &[u8], value: Option<&Value>, ctime: i64) -> Entry {
    let mut head = XattrHead {
        ctime,
        name_len: name.len() as u8,
        op: XATTR_REMOVE,
        ..XattrHead::default()
    };
    match value {
        None => Entry::xattr(epoch, &head, name, &[]),
        Some(Value::Inline(v)) => {
            head.op = XATTR_SET;
            head.value_len = v.len() as u32;
            Entry::xattr(epoch, &head, name, v)
        }
        Some(Value::Pages { pages, len, crc }) => {
            head.op = XATTR_SET;
            head.value_len = *len;
            head.value_crc = *crc;
            head.npages = pages.len() as u8;
            let list: Vec<u8> = pages.iter().flat_map(|b| b.to_le_bytes()).collect();
            Entry::xattr(epoch, &head, name, &list)
        }
    }
}

#[derive(Debug)]
struct Latest {
    /// The entry that set or removed the name: live until superseded.
    entry: u64,
    /// None after a removal.
    value: Option<Value>,
}

/// The extended attributes of one inode.
#[derive(Debug, Default)]
pub(crate) struct XattrMap {
    names: BTreeMap<Box<[u8]>, Latest>,
    /// Bytes a listing takes: each present name and its NUL.
    list_len: usize,
    /// Names with a value.
    present: usize,
}

impl XattrMap {
    /// Applies the committed xattr entry `bytes` at `off`; returns the
    /// inode's ctime it carries. Pages of the value it supersedes go to
    /// `freed`.
    pub(crate) fn apply(
        &mut self,
        log: &mut Log,
        bounds: Bounds,
        off: u64,
        bytes: &[u8],
        freed: &mut Freed,
    ) -> Result<i64> {
        let h: XattrHead = decode(bytes)?;
        let bad = |what: &str| corrupt!(Xattr, at = off, "xattr entry at {off:#x}: {what}");
        let name_len = usize::from(h.name_len);
        if name_len == 0 || name_len > XATTR_NAME_MAX {
            return Err(bad("bad name length"));
        }
        let start = xattr_payload_off(name_len);
        let name = &bytes[crate::layout::XATTR_HEAD_SIZE..crate::layout::XATTR_HEAD_SIZE + name_len];
        let len = h.value_len as usize;
        let value = match h.op {
            XATTR_REMOVE => None,
            XATTR_SET if len > XATTR_SIZE_MAX => return Err(bad("value larger than 64 KiB")),
            XATTR_SET if h.npages == 0 => {
                let v = bytes
                    .get(start..start + len)
                    .ok_or_else(|| bad("value past the entry"))?;
                Some(Value::Inline(v.into()))
            }
            XATTR_SET => {
                let n = usize::from(h.npages);
                if n > MAX_VALUE_PAGES || len.div_ceil(PAGE_SIZE as usize) != n {
                    return Err(bad("page count does not match the value length"));
                }
                let list = bytes
                    .get(start..start + 8 * n)
                    .ok_or_else(|| bad("page list past the entry"))?;
                let pages: Box<[u64]> = list
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
                    .collect();
                if !pages.iter().all(|&p| bounds.is_page(p)) {
                    return Err(bad("value page outside the data area"));
                }
                Some(Value::Pages {
                    pages,
                    len: h.value_len,
                    crc: h.value_crc,
                })
            }
            _ => return Err(bad("unknown operation")),
        };
        let present = value.is_some();
        let old = self.names.insert(name.into(), Latest { entry: off, value });
        if let Some(old) = old {
            log.kill(old.entry);
            if let Some(v) = old.value {
                self.forget_name(name.len());
                for &page in v.pages() {
                    freed.push_page(page, old.entry);
                }
            }
        }
        if present {
            self.list_len += name.len() + 1;
            self.present += 1;
        }
        Ok(h.ctime)
    }

    fn forget_name(&mut self, name_len: usize) {
        self.list_len -= name_len + 1;
        self.present -= 1;
    }

    /// The value of `name`, if it has one.
    pub(crate) fn get(&self, name: &[u8]) -> Option<&Value> {
        self.names.get(name).and_then(|l| l.value.as_ref())
    }

    /// Every name with a value, in byte order, with its value.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &Value)> {
        self.names
            .iter()
            .filter_map(|(n, l)| l.value.as_ref().map(|v| (&**n, v)))
    }

    /// Bytes `listxattr` returns: every name with its NUL.
    pub(crate) fn list_len(&self) -> usize {
        self.list_len
    }

    /// Names with a value: what a compacted log holds.
    pub(crate) fn len(&self) -> usize {
        self.present
    }

    /// Every data page holding a value.
    pub(crate) fn blocks(&self) -> impl Iterator<Item = u64> + '_ {
        self.names
            .values()
            .filter_map(|l| l.value.as_ref())
            .flat_map(|v| v.pages().iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::Extent;
    use crate::layout::EntryType;
    use crate::log::Committed;

    const BOUNDS: Bounds = Bounds {
        data_start: 1 << 20,
        data_end: 1 << 30,
        replicas: false,
        dead_zone_pages: 0,
        stale: false,
    };

    fn entry(name: &[u8], op: u8, value: &[u8], pages: &[u64]) -> Entry {
        let v = if pages.is_empty() {
            Value::Inline(value.into())
        } else {
            Value::Pages {
                pages: pages.into(),
                len: 5000,
                crc: 0,
            }
        };
        let mut e = super::entry(0, name, (op != XATTR_REMOVE).then_some(&v), 7);
        if op != XATTR_SET && op != XATTR_REMOVE {
            e = Entry::xattr(
                0,
                &XattrHead {
                    op,
                    name_len: name.len() as u8,
                    ..XattrHead::default()
                },
                name,
                &[],
            );
        }
        e
    }

    fn apply_all(m: &mut XattrMap, log: &mut Log, entries: &[Entry]) -> Vec<Extent> {
        let mut freed = Freed::default();
        let offs: Vec<u64> = (0..entries.len() as u64).map(|i| (1 << 20) + i * 1024).collect();
        log.committed(&Committed::for_test(
            offs.clone(),
            (1 << 20) + entries.len() as u64 * 1024,
        ));
        for (e, off) in entries.iter().zip(offs) {
            assert_eq!(e.bytes()[0], EntryType::Xattr as u8);
            assert_eq!(m.apply(log, BOUNDS, off, e.bytes(), &mut freed).unwrap(), 7);
        }
        freed.extents()
    }

    #[test]
    fn latest_entry_wins_and_superseded_pages_are_freed() {
        let mut m = XattrMap::default();
        let mut log = Log::default();
        let big = [(1 << 21), (1 << 21) + 4096];
        let freed = apply_all(
            &mut m,
            &mut log,
            &[
                entry(b"user.a", XATTR_SET, b"one", &[]),
                entry(b"user.b", XATTR_SET, b"", &big),
                entry(b"user.a", XATTR_SET, b"two", &[]),
                entry(b"user.b", XATTR_REMOVE, b"", &[]),
                entry(b"user.c", XATTR_SET, b"", &[]),
            ],
        );
        assert_eq!(m.get(b"user.a"), Some(&Value::Inline((*b"two").into())));
        assert_eq!(m.get(b"user.b"), None);
        assert_eq!(m.get(b"user.c"), Some(&Value::Inline([].into())));
        // The two value pages are contiguous: one run.
        assert_eq!(freed, [Extent { off: big[0], npages: 2 }]);
        assert_eq!(m.list_len(), "user.a\0user.c\0".len());
        assert_eq!(m.len(), 2);
        assert_eq!(m.blocks().count(), 0);
        // Entries 0 and 1 were superseded; the removal of b stays live.
        assert_eq!(log.live_ratio(), (3, 5));
    }

    #[test]
    fn damaged_entries_are_refused() {
        let mut m = XattrMap::default();
        let mut log = Log::default();
        let mut freed = Freed::default();
        let outside = entry(b"user.x", XATTR_SET, b"", &[4096, 8192]);
        assert!(m.apply(&mut log, BOUNDS, 0, outside.bytes(), &mut freed).is_err());
        let mut short = entry(b"user.x", XATTR_SET, b"abc", &[]).bytes().to_vec();
        short[24] = 200; // value_len past the entry
        assert!(m.apply(&mut log, BOUNDS, 0, &short, &mut freed).is_err());
        let unknown = entry(b"user.x", 9, b"", &[]);
        assert!(m.apply(&mut log, BOUNDS, 0, unknown.bytes(), &mut freed).is_err());
        assert_eq!(m.len(), 0);
    }
}
