//! Reading, writing, seeking, syncing and listing through descriptors.
//! Every write is atomic and durable when it returns (strict mode), so
//! fsync only checks the descriptor.

use std::io::{IoSlice, IoSliceMut};
use std::sync::Arc;

use novafs::{DirEntry, FileType, SEEK_DATA, SEEK_HOLE};

use crate::errno::{Errno, Result};
use crate::fd::{Fd, Open};
use crate::Posix;

impl Posix {
    /// A descriptor open for reading a regular file.
    fn reader(&self, fd: Fd) -> Result<Arc<Open>> {
        let open = self.files.get(fd)?;
        if !open.readable {
            return Err(Errno(libc::EBADF));
        }
        if open.kind == FileType::Directory {
            return Err(Errno(libc::EISDIR));
        }
        Ok(open)
    }

    /// A descriptor open for writing.
    fn writer(&self, fd: Fd) -> Result<Arc<Open>> {
        let open = self.files.get(fd)?;
        if !open.writable {
            return Err(Errno(libc::EBADF));
        }
        Ok(open)
    }

    /// What a write, truncation or fallocate by a caller without
    /// CAP_FSETID does to a set-ID file (as the kernel's
    /// `file_remove_privs`): its set-user-ID bit goes, and set-group-ID
    /// where group execution makes it one.
    pub(crate) fn clear_set_id(&self, ino: novafs::Ino) -> Result<()> {
        let attr = self.fs.getattr(ino)?;
        if attr.perm & (libc::S_ISUID | libc::S_ISGID) == 0 {
            return Ok(());
        }
        let cred = self.cred();
        if cred.caps.contains(novafs::Caps::FSETID) {
            return Ok(());
        }
        let mode = cred.kill_set_id(&attr, false);
        if mode != attr.perm {
            self.fs.setattr(ino, &novafs::SetAttr::default().mode(Some(mode)))?;
        }
        Ok(())
    }

    /// read(2): from the offset, which moves past what was read.
    pub fn read(&self, fd: Fd, buf: &mut [u8]) -> Result<usize> {
        let open = self.reader(fd)?;
        let mut pos = open.pos.lock();
        let n = self.fs.read(open.ino, *pos, buf)?;
        *pos += n as u64;
        Ok(n)
    }

    /// pread(2): at `off`; the offset stays.
    pub fn pread(&self, fd: Fd, buf: &mut [u8], off: i64) -> Result<usize> {
        let open = self.reader(fd)?;
        let off = u64::try_from(off).map_err(|_| Errno(libc::EINVAL))?;
        Ok(self.fs.read(open.ino, off, buf)?)
    }

    /// readv(2): the buffers in turn, from the offset.
    pub fn readv(&self, fd: Fd, bufs: &mut [IoSliceMut<'_>]) -> Result<usize> {
        let open = self.reader(fd)?;
        let mut pos = open.pos.lock();
        let mut total = 0;
        for buf in bufs.iter_mut() {
            let n = self.fs.read(open.ino, *pos, buf)?;
            *pos += n as u64;
            total += n;
            if n < buf.len() {
                break;
            }
        }
        Ok(total)
    }

    /// write(2): at the offset, or at the end with O_APPEND (the end
    /// taken under the file's lock: appends never overlap); the offset
    /// moves past what was written.
    pub fn write(&self, fd: Fd, data: &[u8]) -> Result<usize> {
        let open = self.writer(fd)?;
        let mut pos = open.pos.lock();
        let (at, n) = if open.appending() {
            self.fs.append(open.ino, data)?
        } else {
            (*pos, self.fs.write(open.ino, *pos, data)?)
        };
        *pos = at + n as u64;
        drop(pos);
        self.clear_set_id(open.ino)?;
        Ok(n)
    }

    /// pwrite(2): at `off`, the offset left alone; with O_APPEND at the
    /// end all the same, as Linux does.
    pub fn pwrite(&self, fd: Fd, data: &[u8], off: i64) -> Result<usize> {
        let open = self.writer(fd)?;
        let off = u64::try_from(off).map_err(|_| Errno(libc::EINVAL))?;
        let n = if open.appending() {
            self.fs.append(open.ino, data)?.1
        } else {
            self.fs.write(open.ino, off, data)?
        };
        self.clear_set_id(open.ino)?;
        Ok(n)
    }

    /// writev(2): one write of all the buffers, so it is atomic as one.
    pub fn writev(&self, fd: Fd, bufs: &[IoSlice<'_>]) -> Result<usize> {
        match bufs {
            [one] => self.write(fd, one),
            _ => self.write(fd, &bufs.iter().flat_map(|b| b.iter().copied()).collect::<Vec<u8>>()),
        }
    }

    /// lseek(2), with SEEK_DATA and SEEK_HOLE. On a directory only a
    /// return to its start is allowed, which starts its listing again.
    pub fn lseek(&self, fd: Fd, off: i64, whence: i32) -> Result<u64> {
        let open = self.files.get(fd)?;
        if open.path_only {
            return Err(Errno(libc::EBADF));
        }
        let mut pos = open.pos.lock();
        if open.kind == FileType::Directory {
            if (whence, off) != (libc::SEEK_SET, 0) {
                return Err(Errno(libc::EINVAL));
            }
            open.listing.lock().rewind();
            *pos = 0;
            return Ok(0);
        }
        let invalid = Errno(libc::EINVAL);
        let to = match whence {
            libc::SEEK_SET => off,
            libc::SEEK_CUR => i64::try_from(*pos)
                .map_err(|_| invalid)?
                .checked_add(off)
                .ok_or(invalid)?,
            libc::SEEK_END => {
                let size = self.fs.getattr(open.ino)?.size;
                i64::try_from(size)
                    .map_err(|_| invalid)?
                    .checked_add(off)
                    .ok_or(invalid)?
            }
            libc::SEEK_DATA | libc::SEEK_HOLE => {
                let from = u64::try_from(off).map_err(|_| Errno(libc::ENXIO))?;
                let how = if whence == libc::SEEK_DATA {
                    SEEK_DATA
                } else {
                    SEEK_HOLE
                };
                let to = self.fs.lseek(open.ino, from, how)?;
                *pos = to;
                return Ok(to);
            }
            _ => return Err(invalid),
        };
        *pos = u64::try_from(to).map_err(|_| invalid)?;
        Ok(*pos)
    }

    /// fallocate(2).
    pub fn fallocate(&self, fd: Fd, mode: i32, off: i64, len: i64) -> Result<()> {
        let open = self.writer(fd)?;
        let (off, len) = match (u64::try_from(off), u64::try_from(len)) {
            (Ok(off), Ok(len)) if len > 0 => (off, len),
            _ => return Err(Errno(libc::EINVAL)),
        };
        let mode = u32::try_from(mode).map_err(|_| Errno(libc::EOPNOTSUPP))?;
        self.fs.fallocate(open.ino, mode, off, len)?;
        self.clear_set_id(open.ino)
    }

    /// fsync(2) and fdatasync(2): what returned is durable already.
    pub fn fsync(&self, fd: Fd) -> Result<()> {
        let open = self.files.get(fd)?;
        if open.path_only {
            return Err(Errno(libc::EBADF));
        }
        Ok(self.fs.fsync(open.ino)?)
    }

    /// readdir(3) on a descriptor open on a directory: the next entry
    /// (`.` and `..` first), None at the end.
    pub fn readdir(&self, fd: Fd) -> Result<Option<DirEntry>> {
        let open = self.files.get(fd)?;
        if open.path_only {
            return Err(Errno(libc::EBADF));
        }
        if open.kind != FileType::Directory {
            return Err(Errno(libc::ENOTDIR));
        }
        let ino = open.ino;
        let mut listing = open.listing.lock();
        let next = listing.next(
            || self.fs.listing_end(ino),
            |from, end, emit| self.fs.readdir_to(ino, from, end, emit),
        )?;
        Ok(next)
    }
}
