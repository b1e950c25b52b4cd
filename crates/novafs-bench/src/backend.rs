//! What the workloads run on: the few file operations they need
//! ([`Backend`], [`Remount`]), written once per target, and the helpers
//! every workload shares. Below both the paper's workloads (`workload`) and
//! the filebench personalities (`personality`), which import it.

use std::time::Instant;

use anyhow::Result;

use crate::requests::Requests;

/// The file operations a workload needs. `Dir` and `File` are the backend's
/// own handles: inode numbers for the library, paths and open files for a
/// mounted file system.
pub trait Backend: Sync {
    type Dir: Sync;
    type File: Send + Sync;
    /// Make `name` under the target's root.
    fn mkdir(&self, name: &str) -> Result<Self::Dir>;
    fn rmdir(&self, name: &str) -> Result<()>;
    /// Create `name` (it must not exist) and return it open for writing.
    fn create(&self, dir: &Self::Dir, name: &str) -> Result<Self::File>;
    /// Open an existing file for reading and writing.
    fn open(&self, dir: &Self::Dir, name: &str) -> Result<Self::File>;
    fn write_at(&self, file: &Self::File, off: u64, buf: &[u8]) -> Result<()>;
    fn read_at(&self, file: &Self::File, off: u64, buf: &mut [u8]) -> Result<()>;
    fn fsync(&self, file: &Self::File) -> Result<()>;
    fn unlink(&self, dir: &Self::Dir, name: &str) -> Result<()>;
    /// The size of an open file (fstat).
    fn len(&self, file: &Self::File) -> Result<u64>;
    /// The size of `name` (stat by name, as filebench's statfile does).
    fn stat(&self, dir: &Self::Dir, name: &str) -> Result<u64>;
    /// The requests the daemon serving the target has counted since it
    /// started; `None` where no daemon serves it (the library, kernel file
    /// systems).
    fn requests(&self) -> Result<Option<Requests>> {
        Ok(None)
    }
    /// What novafs's metadata journal has written and fenced so far;
    /// `None` where the target does not count it (all but the library).
    fn journal_stats(&self) -> Option<novafs::JournalStats> {
        None
    }
    /// What made a batching relaxed mount's running transaction commit
    /// so far; `None` where the target does not count it.
    fn batch_stats(&self) -> Option<novafs::BatchStats> {
        None
    }
}

/// A target whose file system can be unmounted and mounted again with its
/// contents, for the recovery workload (e).
pub trait Remount: Backend {
    /// Unmount cleanly, then mount again; the mount's wall time, ms.
    fn remount_clean(&mut self) -> Result<f64>;
    /// Crash (no unmount), then mount again; the mount's wall time, ms.
    /// `None` where a crash cannot be produced (kernel file systems).
    fn remount_crash(&mut self) -> Result<Option<f64>>;
}

/// Write `size` bytes from offset 0 in writes of `buf.len()` bytes.
pub fn write_whole<B: Backend>(b: &B, f: &B::File, size: u64, buf: &[u8]) -> Result<()> {
    let io = buf.len().max(1) as u64;
    let mut off = 0;
    while off < size {
        let n = io.min(size - off) as usize;
        b.write_at(f, off, &buf[..n])?;
        off += n as u64;
    }
    Ok(())
}

/// Read the whole file (its current size) in reads of `buf.len()` bytes;
/// returns the bytes read.
pub fn read_whole<B: Backend>(b: &B, f: &B::File, buf: &mut [u8]) -> Result<u64> {
    let size = b.len(f)?;
    let io = buf.len().max(1) as u64;
    let mut off = 0;
    while off < size {
        let n = io.min(size - off) as usize;
        b.read_at(f, off, &mut buf[..n])?;
        off += n as u64;
    }
    Ok(size)
}

/// Run `body(thread index)` on `threads` threads at once; the wall time of
/// the slowest bounds the measurement.
pub fn parallel<F>(threads: usize, body: F) -> Result<f64>
where
    F: Fn(usize) -> Result<()> + Sync,
{
    let t = Instant::now();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                s.spawn({
                    let body = &body;
                    move || body(i)
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().map_err(|_| anyhow::anyhow!("benchmark thread panicked"))?)
    })?;
    Ok(t.elapsed().as_secs_f64())
}
