//! DAX windows: a file's pages, scattered over the region, mapped into one
//! contiguous range of the process, so that an application loads and
//! stores the persistent memory itself (DAX `mmap()`, NOVA-Fortis §2, §3.3).
//!
//! A [`Window`] reserves the range and maps region pages into it one run at
//! a time (`MAP_SHARED | MAP_FIXED` of the region's file, `MAP_SYNC` when the
//! region has it). Pages are mapped read-only or writable, or not at all
//! (a fresh window, or a page [`Window::zap`]ped). An access a page does
//! not allow is a *fault*, which the window's [`Fault`] handler resolves
//! before the access is retried — the user-space analogue of a file
//! system's `fault` and `page_mkwrite`:
//!
//! - this module's SIGSEGV handler finds the window the address belongs to
//!   (a lock-free table of ranges) and calls the window's handler itself,
//!   on the faulting thread, on a stack of its own taken from a small pool
//!   (the thread's signal stack, if it has one, is a few KiB; the fault
//!   may commit). The handler may take locks, allocate, commit and remap
//!   (`Window::map`); then the signal handler returns and the access
//!   re-executes on the page as it now is. A handler that cannot resolve
//!   the fault (no space, media error) makes the fault fatal, as a failed
//!   DAX fault is (SIGBUS there, SIGSEGV here).
//! - This is safe because of what faults on a window: a load or store of
//!   the program's, never one of the file system's own while it holds a
//!   lock (the library copies a caller's buffer that lies in a window
//!   before it takes any), and never the allocator's (its arenas are not
//!   in a window; a program must not give its global allocator one).
//!   Measured with `novafs bench --mmap`, side by side: a DAX first
//!   store cost 12–21 µs through the service thread (SIGSEGV → pipe →
//!   service → futex) and costs 8–9 µs here; a signal's round trip alone
//!   is 4.4 µs on that host.
//! - When every pool stack is in use (more threads faulting at once than
//!   the pool has stacks), the fault goes to the fault service thread
//!   instead: the handler sends the address and whether the access was a
//!   store down a pipe and waits until the service says it is resolved —
//!   polling a little first, yielding the CPU between looks, then asleep
//!   on a futex; `write`, `sched_yield`, `futex` and `sigaction` are all
//!   it calls, all plain system calls. The service likewise polls its
//!   pipe for a while after each fault before it sleeps.
//!
//! Any other SIGSEGV goes to the action installed before ours.
//!
//! Only regions mapped page by page from a file can have windows
//! ([`Region::map_source`]); devdax maps in 2 MiB units and has none.
//!
//! [`Region::map_source`]: crate::Region::map_source

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use crate::track::Tracker;
use crate::vmas::{self, Backing, Layout};
use crate::PmError;

/// The page size windows map in.
pub const WINDOW_PAGE: usize = 4096;

/// Where a region's pages come from: its file, and whether mappings of it
/// must be synchronous (`MAP_SYNC`, a file on a DAX file system).
#[derive(Clone, Copy, Debug)]
pub struct MapSource<'a> {
    /// The region's file; region offset = file offset.
    pub fd: BorrowedFd<'a>,
    /// Map with `MAP_SYNC` (the region is on a DAX file system).
    pub sync: bool,
}

/// Resolves a fault on page `page` of a window, a store when `write`
/// (remapping it with [`Window::map`], [`Window::map_zero`] or
/// [`Window::protect`]); false makes the fault fatal.
pub trait Fault: Send + Sync {
    /// Called on the faulting thread, inside its SIGSEGV handler (on a
    /// stack of the pool's), or on the fault service thread while the
    /// faulting thread sleeps. Several threads' faults may be resolved at
    /// once.
    fn fault(&self, page: usize, write: bool) -> bool;
}

/// A contiguous range of the process holding region pages.
pub struct Window {
    base: *mut u8,
    pages: usize,
    fd: OwnedFd,
    sync: bool,
    slot: usize,
    /// Records stores to writable pages (`Window::tracking`).
    tracker: Option<Tracker>,
    /// What backs each page; held across each remap so that it and the
    /// kernel agree (`vmas`).
    layout: std::sync::Mutex<Layout>,
}

// SAFETY: the range is owned by this value until Drop; the methods only
// change its mappings, which the kernel serialises.
unsafe impl Send for Window {}
// SAFETY: as above.
unsafe impl Sync for Window {}

impl Window {
    /// Reserves `pages` pages, none mapped yet (any access faults), whose
    /// faults go to `handler`.
    pub fn new(src: MapSource<'_>, pages: usize, handler: Arc<dyn Fault>) -> Result<Window, PmError> {
        let fd = src.fd.try_clone_to_owned().map_err(os)?;
        let len = pages
            .checked_mul(WINDOW_PAGE)
            .filter(|&l| l > 0)
            .ok_or(PmError::OutOfBounds {
                off: 0,
                len: pages as u64,
                size: 0,
            })?;
        imp::start_service().map_err(os)?;
        let base = anonymous(std::ptr::null_mut(), len, libc::PROT_NONE)?;
        let Some(slot) = imp::register(base as usize, len, handler) else {
            // SAFETY: the reservation made just above.
            unsafe { libc::munmap(base.cast(), len) };
            return Err(os(io::Error::from_raw_os_error(libc::ENOMEM)));
        };
        Ok(Window {
            base,
            pages,
            fd,
            sync: src.sync,
            slot,
            tracker: None,
            layout: std::sync::Mutex::new(Layout::new(pages)),
        })
    }

    /// As [`Window::new`], and the kernel records every store to the
    /// pages it maps writable, with no fault ([`Window::written`] lists
    /// them): an error where the kernel cannot (before Linux 6.7, or
    /// userfaultfd refused).
    pub fn tracking(src: MapSource<'_>, pages: usize, handler: Arc<dyn Fault>) -> Result<Window, PmError> {
        let tracker = Tracker::new()?;
        let mut w = Window::new(src, pages, handler)?;
        w.tracker = Some(tracker);
        Ok(w)
    }

    /// Whether the kernel records this window's stores.
    pub fn tracks(&self) -> bool {
        self.tracker.is_some()
    }

    /// The window pages among `page..page + npages` (all mapped writable
    /// when tracking) stored to since they were mapped or last listed; a
    /// store after this call is listed next time. Empty without tracking.
    pub fn written(&self, page: usize, npages: usize) -> Result<Vec<usize>, PmError> {
        let at = self.check(page, npages)? as usize;
        let Some(t) = &self.tracker else {
            return Ok(Vec::new());
        };
        let mut runs = Vec::new();
        t.written(at, npages * WINDOW_PAGE, &mut runs).map_err(os)?;
        let base = self.base as usize;
        Ok(runs
            .into_iter()
            .flat_map(|(lo, hi)| (lo - base) / WINDOW_PAGE..(hi - base) / WINDOW_PAGE)
            .collect())
    }

    /// The first byte of the window.
    pub fn as_ptr(&self) -> *mut u8 {
        self.base
    }

    /// Its length in pages.
    pub fn pages(&self) -> usize {
        self.pages
    }

    /// How many faults on it its handler has resolved.
    pub fn faults(&self) -> u64 {
        imp::faults(self.slot)
    }

    fn check(&self, page: usize, npages: usize) -> Result<*mut libc::c_void, PmError> {
        if npages == 0 || page.checked_add(npages).is_none_or(|end| end > self.pages) {
            return Err(PmError::OutOfBounds {
                off: page as u64,
                len: npages as u64,
                size: self.pages as u64,
            });
        }
        // SAFETY: inside the reservation, checked above.
        Ok(unsafe { self.base.add(page * WINDOW_PAGE) }.cast())
    }

    /// Maps `npages` region pages from byte `region_off` at window page
    /// `page`, replacing whatever was there.
    pub fn map(&self, page: usize, region_off: u64, npages: usize, writable: bool) -> Result<(), PmError> {
        let at = self.check(page, npages)?;
        let prot = libc::PROT_READ | if writable { libc::PROT_WRITE } else { 0 };
        let flags = libc::MAP_FIXED
            | if self.sync {
                libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC
            } else {
                libc::MAP_SHARED
            };
        let mut layout = self.layout();
        // SAFETY: MAP_FIXED inside our own reservation: only this window's
        // pages are replaced.
        let got = unsafe {
            libc::mmap(
                at,
                npages * WINDOW_PAGE,
                prot,
                flags,
                self.fd.as_raw_fd(),
                region_off as libc::off_t,
            )
        };
        if got == libc::MAP_FAILED {
            return Err(os(io::Error::last_os_error()));
        }
        layout.set(page..page + npages, |i, _| Backing::File {
            off: region_off + (i * WINDOW_PAGE) as u64,
            writable,
        });
        match &self.tracker {
            Some(t) if writable => t.track(at as usize, npages * WINDOW_PAGE).map_err(os),
            _ => Ok(()),
        }
    }

    /// Maps zeros, read-only and private, at window pages `page..`: a hole
    /// of the file, read before anything is stored there (a store faults).
    pub fn map_zero(&self, page: usize, npages: usize) -> Result<(), PmError> {
        self.anonymous_pages(page, npages, libc::PROT_READ, Backing::Zero)
    }

    /// Unmaps window pages `page..`: their next access faults, and the
    /// handler maps whatever the file holds there then.
    pub fn zap(&self, page: usize, npages: usize) -> Result<(), PmError> {
        self.anonymous_pages(page, npages, libc::PROT_NONE, Backing::None)
    }

    /// Maps anonymous memory of protection `prot` at window pages
    /// `page..`, recorded as `backing`.
    fn anonymous_pages(&self, page: usize, npages: usize, prot: libc::c_int, backing: Backing) -> Result<(), PmError> {
        let at = self.check(page, npages)?;
        let mut layout = self.layout();
        anonymous(at.cast(), npages * WINDOW_PAGE, prot)?;
        layout.set(page..page + npages, |_, _| backing);
        Ok(())
    }

    /// Copies `out.len()` bytes from byte `off` of the window; an access
    /// that faults waits for the handler, as a load by the program would.
    pub fn load(&self, off: usize, out: &mut [u8]) -> Result<(), PmError> {
        let at = self.byte_range(off, out.len())?;
        // SAFETY: inside the reservation (checked); a page not mapped
        // faults and is resolved or kills the process, as a program's own
        // load through the window would.
        unsafe { std::ptr::copy_nonoverlapping(at, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Copies `bytes` to byte `off` of the window, as the program's own
    /// stores would (each page's first store may fault and wait).
    pub fn store(&self, off: usize, bytes: &[u8]) -> Result<(), PmError> {
        let at = self.byte_range(off, bytes.len())?;
        // SAFETY: as in `load`.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), at, bytes.len()) };
        Ok(())
    }

    /// Makes bytes `off..off + len` of the window persistent: flushed and
    /// fenced (the persist barrier a DAX program issues itself).
    pub fn persist(&self, off: usize, len: usize) -> Result<(), PmError> {
        let at = self.byte_range(off, len)?;
        let p = crate::flush::Persist::new(false);
        // SAFETY: inside the reservation (checked); a page not mapped
        // faults as a load would, and is mapped before the flush retries.
        unsafe { p.flush_range(at, len) };
        p.fence();
        Ok(())
    }

    fn byte_range(&self, off: usize, len: usize) -> Result<*mut u8, PmError> {
        if off.checked_add(len).is_none_or(|end| end > self.pages * WINDOW_PAGE) {
            return Err(PmError::OutOfBounds {
                off: off as u64,
                len: len as u64,
                size: (self.pages * WINDOW_PAGE) as u64,
            });
        }
        // SAFETY: inside the reservation, checked above.
        Ok(unsafe { self.base.add(off) })
    }

    /// Makes mapped pages read-only (their next store faults) or writable.
    pub fn protect(&self, page: usize, npages: usize, writable: bool) -> Result<(), PmError> {
        let at = self.check(page, npages)?;
        let prot = libc::PROT_READ | if writable { libc::PROT_WRITE } else { 0 };
        let mut layout = self.layout();
        // SAFETY: inside our own reservation.
        if unsafe { libc::mprotect(at, npages * WINDOW_PAGE, prot) } != 0 {
            return Err(os(io::Error::last_os_error()));
        }
        layout.set(page..page + npages, |_, b| match b {
            Backing::File { off, .. } => Backing::File { off, writable },
            other => other,
        });
        Ok(())
    }

    /// Whether the windows of the process hold so many kernel mappings,
    /// and this one more than a few, that its owner should unmap some of
    /// its pages before it maps more (`vmas`: past the kernel's limit every
    /// mmap of the process fails).
    pub fn crowded(&self) -> bool {
        vmas::crowded() && self.mappings() > vmas::few()
    }

    /// The kernel mappings (VMAs) this window holds now.
    pub fn mappings(&self) -> usize {
        self.layout().vmas()
    }

    pub(crate) fn layout(&self) -> std::sync::MutexGuard<'_, Layout> {
        // A poisoned lock: a panic between a remap and its record, caught
        // by the fault handler; the count may be off by that remap.
        self.layout.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        imp::unregister(self.slot);
        // SAFETY: our own reservation, unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.pages * WINDOW_PAGE) };
    }
}

/// A file in memory with no name (`memfd_create`), for pages a window maps
/// that are not the region's: the replica pages of an atomic mapping
/// (NOVA §4.5), which the program stores to and a commit copies from.
pub fn anonymous_file(name: &std::ffi::CStr) -> io::Result<std::fs::File> {
    // SAFETY: a C string for the name; the descriptor returned is new and
    // owned by the File from here on.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    Ok(std::fs::File::from(unsafe {
        <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd)
    }))
}

/// Maps anonymous memory at `at` (anywhere when null; else `MAP_FIXED`,
/// inside a window's own reservation).
fn anonymous(at: *mut u8, len: usize, prot: libc::c_int) -> Result<*mut u8, PmError> {
    let fixed = if at.is_null() { 0 } else { libc::MAP_FIXED };
    // SAFETY: a new reservation chosen by the kernel, or MAP_FIXED over a
    // window's own pages (the callers check the range).
    let got = unsafe {
        libc::mmap(
            at.cast(),
            len,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | fixed,
            -1,
            0,
        )
    };
    if got == libc::MAP_FAILED {
        return Err(os(io::Error::last_os_error()));
    }
    Ok(got.cast())
}

fn os(source: io::Error) -> PmError {
    PmError::Io {
        path: "DAX window".into(),
        source,
    }
}

/// True when `[ptr, ptr + len)` overlaps a window: a store into it may
/// wait for the fault service (a caller holding a lock the handler takes
/// must not store there).
pub fn overlaps_window(ptr: *const u8, len: usize) -> bool {
    imp::overlaps(ptr as usize, len)
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod imp {
    use std::ffi::c_void;
    use std::io;
    use std::mem;
    use std::ptr;
    use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex, OnceLock};

    use libc::{c_int, siginfo_t};

    use super::{Fault, WINDOW_PAGE};

    /// Windows that may exist at once.
    const SLOTS: usize = 1024;

    /// One window's range, read by the signal handler without locks.
    struct Range {
        start: AtomicUsize,
        end: AtomicUsize,
    }

    static RANGES: [Range; SLOTS] = [const {
        Range {
            start: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
        }
    }; SLOTS];
    /// One past the highest slot ever used: slots are taken lowest first,
    /// so the lookups below read only these (none before the first
    /// window, which keeps `overlaps` off the file system's read and
    /// write paths).
    static USED: AtomicUsize = AtomicUsize::new(0);
    /// Faults each slot's handler has resolved.
    static FAULTS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
    /// Each slot's handler, for the service thread.
    static HANDLERS: Mutex<Vec<Option<Arc<dyn Fault>>>> = Mutex::new(Vec::new());
    /// The write end of the service's pipe; -1 until it runs.
    static PIPE: AtomicI32 = AtomicI32::new(-1);
    static SERVICE: OnceLock<Result<(), i32>> = OnceLock::new();
    static PREV: OnceLock<libc::sigaction> = OnceLock::new();

    /// Stacks in the pool the signal handler resolves faults on: threads
    /// faulting at once beyond this many go to the service thread.
    pub(super) const STACKS: usize = 8;
    /// Each pool stack's size: a fault may commit (log, allocator,
    /// tracing), far deeper than a signal stack's few KiB. Reserved, not
    /// committed (`MAP_NORESERVE`): only the pages a fault touches count.
    const STACK_BYTES: usize = 1 << 20;
    /// The pool's first byte, 0 when there is none; stack `i` is the
    /// `STACK_BYTES` above a guard page at `i * (STACK_BYTES + page)`.
    static POOL: AtomicUsize = AtomicUsize::new(0);
    /// Which pool stacks a fault is running on.
    static TAKEN: [AtomicBool; STACKS] = [const { AtomicBool::new(false) }; STACKS];

    /// One fault, as sent down the pipe: the address, whether it was a
    /// store, and the word the faulting thread sleeps on (0 pending, 1
    /// resolved, 2 fatal).
    #[repr(C)]
    struct Request {
        addr: usize,
        write: bool,
        done: *const AtomicU32,
    }

    pub(super) fn register(start: usize, len: usize, handler: Arc<dyn Fault>) -> Option<usize> {
        let mut handlers = HANDLERS.lock().unwrap_or_else(|p| p.into_inner());
        if handlers.is_empty() {
            handlers.resize(SLOTS, None);
        }
        let slot = handlers.iter().position(Option::is_none)?;
        handlers[slot] = Some(handler);
        FAULTS[slot].store(0, Ordering::Relaxed);
        RANGES[slot].start.store(start, Ordering::Release);
        RANGES[slot].end.store(start + len, Ordering::Release);
        USED.fetch_max(slot + 1, Ordering::Release);
        Some(slot)
    }

    pub(super) fn unregister(slot: usize) {
        RANGES[slot].end.store(0, Ordering::Release);
        RANGES[slot].start.store(0, Ordering::Release);
        HANDLERS.lock().unwrap_or_else(|p| p.into_inner())[slot] = None;
    }

    pub(super) fn faults(slot: usize) -> u64 {
        FAULTS[slot].load(Ordering::Relaxed)
    }

    /// The slots in use so far. Async-signal-safe.
    fn used() -> &'static [Range] {
        &RANGES[..USED.load(Ordering::Acquire).min(SLOTS)]
    }

    /// The slot whose window holds `addr`. Async-signal-safe.
    fn find(addr: usize) -> Option<usize> {
        used().iter().position(|r| {
            let start = r.start.load(Ordering::Acquire);
            start != 0 && start <= addr && addr < r.end.load(Ordering::Acquire)
        })
    }

    pub(super) fn overlaps(addr: usize, len: usize) -> bool {
        used().iter().any(|r| {
            let start = r.start.load(Ordering::Acquire);
            start != 0 && start < addr.saturating_add(len) && addr < r.end.load(Ordering::Acquire)
        })
    }

    /// Starts the fault service and installs the SIGSEGV handler, once.
    pub(super) fn start_service() -> io::Result<()> {
        let started = SERVICE.get_or_init(|| {
            let mut fds = [0 as c_int; 2];
            // SAFETY: pipe2 fills the two descriptors.
            if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
                return Err(io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO));
            }
            // The service polls its end (`next_request`).
            // SAFETY: fcntl on the descriptor just made.
            if unsafe { libc::fcntl(fds[0], libc::F_SETFL, libc::O_NONBLOCK) } != 0 {
                return Err(io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO));
            }
            let read = fds[0];
            std::thread::Builder::new()
                .name("novafs-pm-faults".into())
                .spawn(move || serve(read))
                .map_err(|e| e.raw_os_error().unwrap_or(libc::EAGAIN))?;
            PIPE.store(fds[1], Ordering::Release);
            match make_pool() {
                Ok(pool) => POOL.store(pool, Ordering::Release),
                Err(e) => tracing::warn!(error = %e, "no stacks for DAX faults: each goes through the service thread"),
            }
            install()
        });
        started.map_err(io::Error::from_raw_os_error)
    }

    fn install() -> Result<(), i32> {
        if crate::sigbus::install_action(libc::SIGSEGV, on_sigsegv, &PREV) == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL))
        }
    }

    /// The fault service: resolves one fault at a time, in arrival order.
    fn serve(read: c_int) {
        loop {
            let mut req = mem::MaybeUninit::<Request>::uninit();
            let want = mem::size_of::<Request>();
            if let Err(e) = next_request(read, req.as_mut_ptr().cast(), want) {
                tracing::error!(error = %e, "the DAX fault pipe broke: faults can no longer be served");
                return;
            }
            // SAFETY: a whole request was read (pipe writes of at most
            // PIPE_BUF bytes are atomic).
            let req = unsafe { req.assume_init() };
            let ok = handle(req.addr, req.write);
            // SAFETY: the faulting thread sleeps on `done` (on its signal
            // stack frame) until this store and wake.
            let done = unsafe { &*req.done };
            done.store(if ok { 1 } else { 2 }, Ordering::Release);
            // SAFETY: futex wake on a valid word.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    req.done,
                    libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                    1,
                )
            };
        }
    }

    /// How long each side polls (yielding between looks) before it
    /// sleeps: faults come in bursts (a program touching its pages), and a
    /// thread woken from sleep costs tens of microseconds, several times
    /// what resolving a fault does. Measured with 8,192 first stores on
    /// this 2-CPU host: 21 µs a fault idle and 12 µs beside a busy process
    /// when yielding, 17 µs and 120 µs when spinning, 54 µs and 13 µs when
    /// sleeping at once.
    const POLL: std::time::Duration = std::time::Duration::from_micros(50);
    /// Looks of the faulting thread (in its signal handler, where no clock
    /// is called) before it sleeps, each after a `sched_yield`.
    const HANDLER_LOOKS: u32 = 200;

    /// Reads the next whole request from the (non-blocking) pipe: polling
    /// for `POLL` after the last one, then sleeping in poll(2).
    fn next_request(read: c_int, buf: *mut u8, want: usize) -> io::Result<()> {
        let mut since = std::time::Instant::now();
        loop {
            // SAFETY: reads at most `want` bytes into the caller's buffer.
            let got = unsafe { libc::read(read, buf.cast(), want) };
            if got == want as isize {
                return Ok(());
            }
            let err = io::Error::last_os_error();
            match (got, err.kind()) {
                (-1, io::ErrorKind::Interrupted) => continue,
                (-1, io::ErrorKind::WouldBlock) if since.elapsed() < POLL => {
                    // SAFETY: no arguments; gives the CPU to a runnable thread.
                    unsafe { libc::sched_yield() };
                }
                (-1, io::ErrorKind::WouldBlock) => {
                    let mut pfd = libc::pollfd {
                        fd: read,
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: one valid pollfd.
                    if unsafe { libc::poll(&mut pfd, 1, -1) } < 0
                        && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted
                    {
                        return Err(io::Error::last_os_error());
                    }
                    since = std::time::Instant::now();
                }
                _ => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "short read")),
            }
        }
    }

    /// Calls the handler of the window holding `addr`; false if there is
    /// none, or it cannot resolve the fault, or it panicked.
    fn handle(addr: usize, write: bool) -> bool {
        let resolve = || {
            let handler = find(addr).and_then(|slot| {
                let handlers = HANDLERS.lock().unwrap_or_else(|p| p.into_inner());
                let start = RANGES[slot].start.load(Ordering::Acquire);
                handlers[slot].clone().map(|h| (slot, h, (addr - start) / WINDOW_PAGE))
            });
            handler.is_some_and(|(slot, h, page)| {
                let ok = h.fault(page, write);
                FAULTS[slot].fetch_add(u64::from(ok), Ordering::Relaxed);
                ok
            })
        };
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(resolve)).unwrap_or(false)
    }

    /// Reserves the pool of fault stacks, each above a guard page.
    fn make_pool() -> io::Result<usize> {
        let len = STACKS * (STACK_BYTES + WINDOW_PAGE);
        // SAFETY: a new private reservation chosen by the kernel.
        let pool = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if pool == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        for i in 0..STACKS {
            // SAFETY: the first page of stack i, inside the reservation.
            let guard = unsafe { pool.cast::<u8>().add(i * (STACK_BYTES + WINDOW_PAGE)) };
            // SAFETY: as above; an overflow then faults instead of
            // running into the stack below.
            if unsafe { libc::mprotect(guard.cast(), WINDOW_PAGE, libc::PROT_NONE) } != 0 {
                let e = io::Error::last_os_error();
                // SAFETY: the reservation made above, not yet shared.
                unsafe { libc::munmap(pool, len) };
                return Err(e);
            }
        }
        Ok(pool as usize)
    }

    /// One fault resolved on a pool stack: the access, and the outcome.
    struct Job {
        addr: usize,
        write: bool,
        ok: bool,
    }

    /// Resolves the fault at `addr` on a free pool stack; None when there
    /// is no pool or every stack is in use. Async-signal-safe up to the
    /// handler, which the module docs say why it may run here.
    fn resolve_here(addr: usize, write: bool) -> Option<bool> {
        let pool = POOL.load(Ordering::Acquire);
        if pool == 0 {
            return None;
        }
        let i = TAKEN.iter().position(|t| {
            t.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        })?;
        let top = pool + (i + 1) * (STACK_BYTES + WINDOW_PAGE);
        let mut job = Job { addr, write, ok: false };
        // SAFETY: `top` is the page-aligned end of stack i, which this
        // thread alone uses until TAKEN[i] is cleared below.
        unsafe { call_on_stack(top as *mut u8, run_job, ptr::from_mut(&mut job).cast()) };
        TAKEN[i].store(false, Ordering::Release);
        Some(job.ok)
    }

    extern "C" fn run_job(job: *mut c_void) {
        // SAFETY: the Job of `resolve_here`, alive on the stack below.
        let job = unsafe { &mut *job.cast::<Job>() };
        job.ok = handle(job.addr, job.write);
    }

    /// Calls `f(arg)` with the stack pointer at `top` (16-byte aligned),
    /// then returns to the stack it was called on.
    ///
    /// # Safety
    ///
    /// `top` must be the end of a stack no other code uses meanwhile,
    /// deep enough for `f`; `f` must not unwind (an `extern "C"` function
    /// aborts instead).
    unsafe fn call_on_stack(top: *mut u8, f: extern "C" fn(*mut c_void), arg: *mut c_void) {
        // SAFETY: r12 is callee-saved, so it holds the old stack pointer
        // across the call; every register the C ABI lets `f` change is
        // declared clobbered.
        unsafe {
            core::arch::asm!(
                "mov r12, rsp",
                "mov rsp, {top}",
                "call {f}",
                "mov rsp, r12",
                top = in(reg) top,
                f = in(reg) f,
                in("rdi") arg,
                out("r12") _,
                clobber_abi("C"),
            );
        }
    }

    /// Sends the fault at `addr` to the service thread and waits for its
    /// answer; None when the service cannot be reached.
    fn hand_off(addr: usize, write: bool) -> Option<bool> {
        let pipe = PIPE.load(Ordering::Acquire);
        if pipe < 0 {
            return None;
        }
        let done = AtomicU32::new(0);
        let req = Request {
            addr,
            write,
            done: &done,
        };
        let want = mem::size_of::<Request>();
        // SAFETY: a whole request from this frame (an atomic pipe write).
        if unsafe { libc::write(pipe, ptr::from_ref(&req).cast(), want) } != want as isize {
            return None;
        }
        let mut looks = 0;
        while done.load(Ordering::Acquire) == 0 && looks < HANDLER_LOOKS {
            // SAFETY: no arguments.
            unsafe { libc::sched_yield() };
            looks += 1;
        }
        while done.load(Ordering::Acquire) == 0 {
            // SAFETY: futex wait on a word of this frame, which the
            // service wakes once it has stored the answer.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    &done as *const AtomicU32,
                    libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                    0,
                    ptr::null::<libc::timespec>(),
                )
            };
        }
        Some(done.load(Ordering::Acquire) == 1)
    }

    /// Page-fault error code bit: the access was a write.
    const PF_WRITE: i64 = 2;

    extern "C" fn on_sigsegv(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
        // SAFETY: the kernel passes a valid siginfo and ucontext to an
        // SA_SIGINFO handler.
        unsafe {
            let uc = &*ctx.cast::<libc::ucontext_t>();
            let write = uc.uc_mcontext.gregs[libc::REG_ERR as usize] & PF_WRITE != 0;
            let addr = (*info).si_addr() as usize;
            if (*info).si_code > 0 && find(addr).is_some() {
                let _pkru = crate::protect::signal_handler_entered();
                let errno = *libc::__errno_location();
                let ok = resolve_here(addr, write).or_else(|| hand_off(addr, write));
                *libc::__errno_location() = errno;
                if ok == Some(true) {
                    return; // the access re-executes on the resolved page
                }
            }
            crate::sigbus::chain(PREV.get(), sig, info, ctx);
        }
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod imp {
    use std::io;
    use std::sync::Arc;

    use super::Fault;

    pub(super) fn register(_: usize, _: usize, _: Arc<dyn Fault>) -> Option<usize> {
        Some(0)
    }
    pub(super) fn unregister(_: usize) {}
    pub(super) fn faults(_: usize) -> u64 {
        0
    }
    pub(super) fn overlaps(_: usize, _: usize) -> bool {
        false
    }
    pub(super) fn start_service() -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP))
    }
}

#[cfg(all(test, target_arch = "x86_64", target_os = "linux"))]
mod tests;
