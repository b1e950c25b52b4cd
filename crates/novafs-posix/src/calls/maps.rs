//! mmap, munmap and msync: a file's persistent-memory pages mapped into
//! the process (DAX, NOVA-Fortis §3.3), no page cache and no copy; loads
//! and stores reach the file. Or, for MAP_SHARED when the process chose
//! it ([`Posix::set_map_kind`]), atomic mappings (NOVA §4.5): replicas
//! whose stores msync commits all at once. A mapping holds its file open,
//! as on Linux.
//! Only whole mappings are unmapped (a part is EINVAL), and a private
//! writable mapping, which would need copies of the pages, is not served
//! (EOPNOTSUPP): the atomic kind of mmap will decide how it is done.

use novafs::{MapKind, Mapping, PAGE_SIZE};

use crate::errno::{Errno, Result};
use crate::fd::Fd;
use crate::Posix;

/// The process's mappings, by their first byte's address.
pub(crate) type Maps = parking_lot::Mutex<std::collections::BTreeMap<usize, Mapping<'static>>>;

impl Posix {
    /// mmap(2) of `len` bytes of `fd` from `off` (a multiple of the page
    /// size): `write` for PROT_WRITE, `shared` for MAP_SHARED. Returns the
    /// mapping's address.
    pub fn mmap(&self, fd: Fd, off: i64, len: usize, write: bool, shared: bool) -> Result<usize> {
        let open = self.files.get(fd)?;
        if open.path_only {
            return Err(Errno(libc::EBADF));
        }
        if write && !shared {
            return Err(Errno(libc::EOPNOTSUPP));
        }
        if !open.readable || (write && !open.writable) {
            return Err(Errno(libc::EACCES));
        }
        let off = u64::try_from(off).map_err(|_| Errno(libc::EINVAL))?;
        if len == 0 || !off.is_multiple_of(PAGE_SIZE) {
            return Err(Errno(libc::EINVAL));
        }
        let npages = len.div_ceil(PAGE_SIZE as usize);
        // A read-only private mapping never changes the file: DAX pages
        // serve it without copies, whatever the kind chosen for shared ones.
        let kind = if shared { *self.map_kind.lock() } else { MapKind::Dax };
        let mapping = self.fs.mmap_shared(open.ino, (off, npages), write, kind)?;
        let addr = mapping.as_ptr() as usize;
        self.maps.lock().insert(addr, mapping);
        Ok(addr)
    }

    /// munmap(2) of a whole mapping: stores to it since the last msync are
    /// sealed (checksums, parity) and the file's open handle is given back.
    pub fn munmap(&self, addr: usize, len: usize) -> Result<()> {
        let mut maps = self.maps.lock();
        match maps.get(&addr) {
            Some(m) if len.div_ceil(PAGE_SIZE as usize) == m.len() / PAGE_SIZE as usize => {}
            _ => return Err(Errno(libc::EINVAL)),
        }
        let mapping = maps.remove(&addr).ok_or(Errno(libc::EINVAL))?;
        drop(maps);
        Ok(mapping.close()?)
    }

    /// Whether any mapping made through [`Posix::mmap`] is still there.
    pub fn has_mappings(&self) -> bool {
        !self.maps.lock().is_empty()
    }

    /// Whether `addr` is inside a mapping [`Posix::mmap`] made.
    pub fn is_mapped(&self, addr: usize) -> bool {
        let maps = self.maps.lock();
        maps.range(..=addr)
            .next_back()
            .is_some_and(|(start, m)| addr < start + m.len())
    }

    /// msync(2) of the mapping that holds `addr`: the pages stored to are
    /// sealed and persistent when it returns (ENOMEM: no mapping there).
    pub fn msync(&self, addr: usize) -> Result<()> {
        let maps = self.maps.lock();
        let (start, m) = maps.range(..=addr).next_back().ok_or(Errno(libc::ENOMEM))?;
        if addr >= start + m.len() {
            return Err(Errno(libc::ENOMEM));
        }
        Ok(m.sync()?)
    }
}
