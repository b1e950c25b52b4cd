//! novafs in-process through its POSIX layer (`novafs-posix`, what
//! libnovafs and the preload shim serve): every open resolves its path
//! and checks permissions as a kernel would, every descriptor is a real
//! open file description. Beside [`LibraryTarget`](super::LibraryTarget),
//! which calls `Fs` with inode numbers, it shows what that layer costs; beside
//! novafs-fuse, what leaving the kernel out of the path gains.

use std::sync::Arc;

use anyhow::{bail, Context, Result};
use novafs::{Cred, FormatOptions, Fs, MountOptions};
use novafs_posix::{At, Posix, Target as Named};
use pm::{MapOptions, MmapRegion, Prefault, Region};

use super::{Target, WorkDir};
use crate::backend::Backend;
use crate::workload::{self, Outcome, Params, Workload};

/// The target's name in tables.
pub(super) const NAME: &str = "novafs-posix";

pub struct PosixTarget {
    posix: Arc<Posix>,
    _work: WorkDir,
}

/// An open descriptor, closed when dropped (the workloads' closefile).
pub struct PosixFile {
    posix: Arc<Posix>,
    fd: i32,
}

impl Drop for PosixFile {
    fn drop(&mut self) {
        let _ = self.posix.close(self.fd);
    }
}

impl PosixTarget {
    /// A fresh file system on a `size_mib` MiB region file in `work`,
    /// used as root with umask 022.
    pub(super) fn new(work: WorkDir, size_mib: u64) -> Result<PosixTarget> {
        let image = work.0.join("novafs.img");
        // Measure the file system, not first-touch page faults.
        let opts = MapOptions {
            prefault: Prefault::Now,
            ..MapOptions::default()
        };
        let region: Arc<dyn Region> = Arc::new(
            MmapRegion::create(&image, size_mib << 20, &opts)
                .with_context(|| format!("create region {}", image.display()))?,
        );
        Fs::format(region.clone(), &FormatOptions::default()).context("format")?;
        let fs = Fs::open(region, MountOptions::default()).context("mount")?;
        let cred = Cred::of_process().context("read this process's credentials")?;
        Ok(PosixTarget {
            posix: Arc::new(Posix::new(Arc::new(fs), cred, 0o022)),
            _work: work,
        })
    }

    fn open_at(&self, dir: &str, name: &str, flags: i32) -> Result<PosixFile> {
        let path = format!("{dir}/{name}");
        let fd = self
            .posix
            .open(At::Cwd, path.as_bytes(), flags, 0o644)
            .with_context(|| format!("open {path}"))?;
        Ok(PosixFile {
            posix: self.posix.clone(),
            fd,
        })
    }
}

impl Backend for PosixTarget {
    type Dir = String;
    type File = PosixFile;

    fn mkdir(&self, name: &str) -> Result<String> {
        let path = format!("/{name}");
        self.posix.mkdir(At::Cwd, path.as_bytes(), 0o755)?;
        Ok(path)
    }
    fn rmdir(&self, name: &str) -> Result<()> {
        Ok(self
            .posix
            .unlink(At::Cwd, format!("/{name}").as_bytes(), libc::AT_REMOVEDIR)?)
    }
    fn create(&self, dir: &String, name: &str) -> Result<PosixFile> {
        self.open_at(dir, name, libc::O_CREAT | libc::O_EXCL | libc::O_RDWR)
    }
    fn open(&self, dir: &String, name: &str) -> Result<PosixFile> {
        self.open_at(dir, name, libc::O_RDWR)
    }
    fn write_at(&self, file: &PosixFile, off: u64, buf: &[u8]) -> Result<()> {
        let n = self.posix.pwrite(file.fd, buf, i64::try_from(off)?)?;
        if n != buf.len() {
            bail!("short write: {n} of {} bytes", buf.len());
        }
        Ok(())
    }
    fn read_at(&self, file: &PosixFile, off: u64, buf: &mut [u8]) -> Result<()> {
        let n = self.posix.pread(file.fd, buf, i64::try_from(off)?)?;
        if n != buf.len() {
            bail!("short read: {n} of {} bytes", buf.len());
        }
        Ok(())
    }
    fn fsync(&self, file: &PosixFile) -> Result<()> {
        Ok(self.posix.fsync(file.fd)?)
    }
    fn unlink(&self, dir: &String, name: &str) -> Result<()> {
        Ok(self.posix.unlink(At::Cwd, format!("{dir}/{name}").as_bytes(), 0)?)
    }
    fn len(&self, file: &PosixFile) -> Result<u64> {
        Ok(self.posix.stat(Named::Fd(file.fd))?.size)
    }
    fn stat(&self, dir: &String, name: &str) -> Result<u64> {
        let path = format!("{dir}/{name}");
        let named = Named::Path {
            at: At::Cwd,
            path: path.as_bytes(),
            follow: true,
        };
        Ok(self.posix.stat(named)?.size)
    }
}

impl Target for PosixTarget {
    fn name(&self) -> &str {
        NAME
    }
    fn supports(&self, w: Workload) -> bool {
        !matches!(w, Workload::Fio | Workload::Recovery(_))
    }
    fn run(&mut self, w: Workload, p: &Params, tag: &str) -> Result<Outcome> {
        workload::run(self, w, p, tag)
    }
}
