//! novafs — NOVA (FAST '16) with NOVA-Fortis reliability and fine-grained
//! metadata journaling, in user space over one persistent-memory region.
//!
//! Modules follow the paper's sections: [`layout`] (the on-media format),
//! [`alloc`] (§4.1 space management), [`log`] (per-inode logs), [`journal`]
//! (§4.2 lite journal, fine-grained journaling §III), [`inode`], [`dir`]
//! (§4.3), [`file`] (§4.4), [`gc`] (§4.6), [`recovery`] (§4.7), [`fsck`],
//! and [`fs`], the public thread-safe API.

#![forbid(unsafe_code)]

pub mod alloc;
mod ctx;
pub mod dir;
pub mod error;
pub mod file;
pub mod fs;
pub mod fsck;
pub mod gc;
mod hash;
pub mod inode;
pub mod journal;
pub mod layout;
pub mod log;
pub mod op;
pub mod recovery;
pub mod time;

pub use error::{Error, Result};
pub use fs::{DirEntry, Fs, MountOptions, SetAttr, StatFs, RENAME_EXCHANGE, RENAME_NOREPLACE, SEEK_DATA, SEEK_HOLE};
pub use inode::{Attr, FileType, Ino, ROOT_INO};
pub use recovery::{FormatOptions, MountReport};
