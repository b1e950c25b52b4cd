//! Directories (NOVA §4.3): a directory's log holds dentry add and remove
//! entries; DRAM keeps name → entry and readdir-cookie → name indexes. The
//! parent link is the dentry named "..". An add of an existing name
//! replaces it (rename over a target is one entry).

use std::collections::{BTreeMap, HashMap};

use crate::error::{corrupt, Error, Result};
use crate::inode::Ino;
use crate::layout::{DentryHead, EntryType, NAME_MAX};
use crate::log::{Entry, Log};

/// Readdir offsets 1 and 2 are "." and ".."; entries start after them.
pub const FIRST_SEQ: u64 = 3;

/// One live name in a directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dent {
    pub ino: Ino,
    /// Readdir cookie: stable while the entry lives.
    pub seq: u64,
    pub ftype: u8,
    /// The add entry in the directory's log.
    pub entry: u64,
}

#[derive(Debug, Default)]
pub struct DirIndex {
    names: HashMap<Box<[u8]>, Dent>,
    order: BTreeMap<u64, Box<[u8]>>,
    next_seq: u64,
    parent: Ino,
    parent_entry: Option<u64>,
}

/// Rejects names the file system cannot store or that POSIX reserves.
pub fn check_name(name: &[u8]) -> Result<()> {
    if name.len() > NAME_MAX {
        return Err(Error::NameTooLong);
    }
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0) {
        return Err(Error::Invalid("bad file name"));
    }
    Ok(())
}

impl DirIndex {
    pub fn apply_add(&mut self, log: &mut Log, off: u64, name: &[u8], d: &DentryHead) -> Result<()> {
        if name == b".." {
            self.parent = d.ino;
            if let Some(prev) = self.parent_entry.replace(off) {
                log.kill(prev);
            }
            return Ok(());
        }
        check_name(name).map_err(|_| corrupt!("dentry at {off:#x} has an invalid name"))?;
        let dent = Dent {
            ino: d.ino,
            seq: d.seq,
            ftype: d.ftype,
            entry: off,
        };
        if let Some(old) = self.names.insert(name.into(), dent) {
            self.order.remove(&old.seq);
            log.kill(old.entry);
        }
        self.order.insert(d.seq, name.into());
        self.next_seq = self.next_seq.max(d.seq + 1);
        Ok(())
    }

    /// Removes `name`. The add it cancels was invalidated on media in the
    /// same transaction (NOVA §4.6), so the remove entry itself is dead at
    /// once: it only carries the directory's new link count and mtime.
    pub fn apply_remove(&mut self, log: &mut Log, off: u64, name: &[u8]) {
        if let Some(old) = self.names.remove(name) {
            self.order.remove(&old.seq);
            log.kill(old.entry);
        }
        log.kill(off);
    }

    pub fn get(&self, name: &[u8]) -> Option<Dent> {
        self.names.get(name).copied()
    }

    pub fn parent(&self) -> Ino {
        self.parent
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The cookie the next added entry gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq.max(FIRST_SEQ)
    }

    /// Entries with cookies after `after`, in cookie order.
    pub fn entries_after(&self, after: u64) -> impl Iterator<Item = (&[u8], Dent)> + '_ {
        self.order
            .range(after.saturating_add(1)..)
            .filter_map(|(_, n)| self.names.get(n).map(|d| (&**n, *d)))
    }

    /// Every live entry (for GC compaction, the scan and fsck).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Dent)> + '_ {
        self.order
            .values()
            .filter_map(|n| self.names.get(n).map(|d| (&**n, *d)))
    }
}

/// What a dentry entry records besides the name.
pub struct DentrySpec {
    pub ino: Ino,
    pub seq: u64,
    pub ftype: u8,
    /// The directory's link count and mtime after this change.
    pub dir_nlink: u32,
    pub dir_mtime: i64,
}

/// Encodes a dentry add (`add`) or remove entry.
pub fn dentry(epoch: u64, add: bool, name: &[u8], s: &DentrySpec) -> Entry {
    let head = DentryHead {
        ino: s.ino,
        seq: s.seq,
        dir_mtime: s.dir_mtime,
        dir_nlink: s.dir_nlink,
        name_len: name.len() as u8,
        ftype: s.ftype,
        ..DentryHead::default()
    };
    let etype = if add {
        EntryType::DentryAdd
    } else {
        EntryType::DentryRemove
    };
    Entry::dentry(etype, epoch, &head, name)
}
