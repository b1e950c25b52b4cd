//! The kernel's writeback cache (`-o writeback_cache`): what changes
//! for the handler when the kernel keeps written pages, sizes and times
//! and sends them later (the module docs of `handler` say when).

use novafs::Error;

use super::FuseFs;
use crate::wire::abi::{FUSE_WRITEBACK_CACHE, FUSE_WRITE_CACHE};

impl FuseFs {
    /// Asks the kernel, at INIT, to cache writes and write them back
    /// later (see the module docs for when); a kernel without it leaves
    /// every write durable at return, and INIT logs that.
    pub fn with_writeback_cache(self, on: bool) -> FuseFs {
        FuseFs {
            writeback_cache: on,
            ..self
        }
    }

    /// Whether INIT settled on the kernel's writeback cache.
    pub(crate) fn writeback_cache_granted(&self) -> bool {
        self.settled().is_some_and(|s| s.flags & FUSE_WRITEBACK_CACHE != 0)
    }

    /// The writeback cache writes back whole pages, so an append to an
    /// append-only file (chattr +a) arrives as a write that starts below
    /// its end: it is the append it claims when the bytes below the end
    /// are those already there. Returns how many bytes that leaves out,
    /// and the write left to do.
    pub(super) fn cached_append<'a>(
        &self,
        ino: u64,
        offset: u64,
        data: &'a [u8],
        write_flags: u32,
    ) -> Result<(usize, u64, &'a [u8]), Error> {
        if write_flags & FUSE_WRITE_CACHE == 0 {
            return Ok((0, offset, data));
        }
        let a = self.fs.getattr(ino)?;
        if a.flags & novafs::FLAG_APPEND == 0 || offset >= a.size {
            return Ok((0, offset, data));
        }
        let below = usize::try_from(a.size - offset).map_or(data.len(), |n| n.min(data.len()));
        let mut old = vec![0; below];
        if self.fs.read(ino, offset, &mut old)? != below || old != data[..below] {
            return Err(Error::NotPermitted);
        }
        Ok((below, offset + below as u64, &data[below..]))
    }
}
