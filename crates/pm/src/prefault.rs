//! When a mapping's page tables are built.
//!
//! A store to a page the process has not touched yet costs a page fault.
//! `MAP_POPULATE` ([`Prefault::Now`]) pays all of them at map time, which
//! makes a mount take as long as the image is large (about 1.6 to 2 s at
//! 4 GiB on /dev/shm, 22 s at 12 GiB when the pages are not resident).
//! [`Prefault::OnFirstUse`] pays each when it comes: measured through the
//! mount right after mounting a 4 GiB image (300 creates, each with a
//! 64 KiB write), the first operations cost the same as with every page
//! mapped beforehand (50 to 93 ms in all against 60 to 73 ms), and the
//! mount takes 16 to 23 ms.
//!
//! [`Prefault::Background`] maps at once and lets a low-priority thread
//! build the page tables behind the mount, a chunk at a time, with
//! `madvise(MADV_POPULATE_READ)` (Linux 5.14). It is not the default: on
//! two CPUs the same 300 operations took 295 to 532 ms with a p99 of
//! 8.6 ms while it ran (the populating thread holds the mapping's lock
//! for a chunk and competes for the CPUs), and the mount itself slowed to
//! 77 to 168 ms.
//!
//! READ rather than WRITE: on a shared mapping of tmpfs or devdax a read
//! fault installs a writable entry already (neither needs write
//! notification), it works under write protection (a read-only mapping
//! refuses MADV_POPULATE_WRITE) and it never dirties a page-cache page.
//! On tmpfs the image's memory is the space `MmapRegion::create` reserved,
//! so populating adds page tables only (8 bytes per 4 KiB page).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// When to fault in a mapping's pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Prefault {
    /// All of them before the map call returns (`MAP_POPULATE`).
    Now,
    /// From a background thread after the map call returns.
    Background,
    /// Each on its first access.
    #[default]
    OnFirstUse,
}

/// How much one `madvise` call populates: small enough that stopping (at
/// unmap) waits at most about a millisecond.
const CHUNK: usize = 2 << 20;

/// The background thread of [`Prefault::Background`]; dropping it stops
/// and joins the thread, so it must be dropped before the mapping goes.
pub(crate) struct Prefaulter {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Prefaulter {
    /// Starts populating `len` bytes at `base`.
    pub(crate) fn start(base: *mut u8, len: u64) -> Prefaulter {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        // The address travels as an integer: the thread only passes it to
        // madvise, and the owner joins it before unmapping.
        let base = base as usize;
        let thread = std::thread::Builder::new()
            .name("pm-prefault".into())
            .spawn(move || populate(base, len as usize, &flag))
            .map_err(|e| tracing::warn!("no background prefault: {e}"))
            .ok();
        Prefaulter { stop, thread }
    }
}

impl Drop for Prefaulter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn populate(base: usize, len: usize, stop: &AtomicBool) {
    lower_priority();
    let started = std::time::Instant::now();
    let mut off = 0;
    while off < len && !stop.load(Ordering::Relaxed) {
        let n = CHUNK.min(len - off);
        // SAFETY: `[base + off, +n)` lies inside the mapping, which the
        // owner keeps until it has joined this thread; populating changes
        // no byte of it.
        let rc = unsafe { libc::madvise((base + off) as *mut libc::c_void, n, libc::MADV_POPULATE_READ) };
        if rc != 0 {
            // EINVAL: a kernel before 5.14, or a mapping that cannot be
            // populated this way; pages then fault in on first use.
            tracing::debug!("background prefault stopped: {}", io::Error::last_os_error());
            return;
        }
        off += n;
    }
    tracing::debug!(bytes = off, elapsed = ?started.elapsed(), "background prefault done");
}

/// Nice 19 for this thread only (Linux applies setpriority to a thread
/// id), so populating yields to the requests it is there to speed up.
fn lower_priority() {
    // SAFETY: gettid and setpriority take no pointers.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19) };
    if rc != 0 {
        tracing::debug!("prefault thread keeps its priority: {}", io::Error::last_os_error());
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;
    use std::time::{Duration, Instant};

    use super::*;

    /// Resident bytes of the mapping that starts at `base`, from smaps.
    fn resident(base: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let start = format!("{base:x}-");
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&start));
        lines
            .find_map(|l| l.strip_prefix("Rss:"))
            .map(|kb| kb.trim().trim_end_matches("kB").trim().parse::<u64>().unwrap() << 10)
            .unwrap()
    }

    #[test]
    fn the_background_thread_maps_every_page_without_a_touch() {
        const LEN: usize = 32 << 20;
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let file = std::fs::File::create_new(dir.path().join("img")).unwrap();
        file.set_len(LEN as u64).unwrap();
        // SAFETY: a new shared mapping of our own file; unmapped below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        let base = base.cast::<u8>();
        assert_eq!(resident(base as usize), 0, "nothing touched yet");
        let prefaulter = Prefaulter::start(base, LEN as u64);
        let deadline = Instant::now() + Duration::from_secs(30);
        while resident(base as usize) < LEN as u64 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(resident(base as usize), LEN as u64);
        drop(prefaulter);
        // SAFETY: the mapping made above; the prefault thread has ended.
        assert_eq!(unsafe { libc::munmap(base.cast(), LEN) }, 0);
    }
}
