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
        match &self.tracker {
            Some(t) if writable => t.track(at as usize, npages * WINDOW_PAGE).map_err(os),
            _ => Ok(()),
        }
    }

    /// Maps zeros, read-only and private, at window pages `page..`: a hole
    /// of the file, read before anything is stored there (a store faults).
    pub fn map_zero(&self, page: usize, npages: usize) -> Result<(), PmError> {
        let at = self.check(page, npages)?;
        anonymous(at.cast(), npages * WINDOW_PAGE, libc::PROT_READ).map(|_| ())
    }

    /// Unmaps window pages `page..`: their next access faults, and the
    /// handler maps whatever the file holds there then.
    pub fn zap(&self, page: usize, npages: usize) -> Result<(), PmError> {
        let at = self.check(page, npages)?;
        anonymous(at.cast(), npages * WINDOW_PAGE, libc::PROT_NONE).map(|_| ())
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
        // SAFETY: inside our own reservation.
        if unsafe { libc::mprotect(at, npages * WINDOW_PAGE, prot) } != 0 {
            return Err(os(io::Error::last_os_error()));
        }
        Ok(())
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
mod tests {
    use super::*;
    use crate::{MapOptions, MmapRegion, Region};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    /// Copies the faulting page to region page 2 + page and maps that
    /// writable: copy-on-write, as a snapshot needs it.
    struct CopyOnWrite {
        region: Arc<MmapRegion>,
        window: Mutex<Option<Arc<Window>>>,
        faults: AtomicUsize,
    }

    impl Fault for CopyOnWrite {
        fn fault(&self, page: usize, write: bool) -> bool {
            assert!(write, "every page of the test is mapped readable");
            self.faults.fetch_add(1, Ordering::SeqCst);
            let w = self.window.lock().unwrap().clone().unwrap();
            let mut buf = [0u8; WINDOW_PAGE];
            let from = (page * WINDOW_PAGE) as u64;
            let to = ((2 + page) * WINDOW_PAGE) as u64;
            self.region.read(from, &mut buf).unwrap();
            self.region.write(to, &buf).unwrap();
            w.map(page, to, 1, true).is_ok()
        }
    }

    #[test]
    fn a_store_to_a_read_only_page_is_resolved_by_the_handler_then_retried() {
        let dir = std::env::temp_dir().join(format!("pm-window-{}", std::process::id()));
        let region = Arc::new(MmapRegion::create(&dir, 16 * WINDOW_PAGE as u64, &MapOptions::default()).unwrap());
        region.write(0, &[7u8; 2 * WINDOW_PAGE]).unwrap();
        let cow = Arc::new(CopyOnWrite {
            region: region.clone(),
            window: Mutex::new(None),
            faults: AtomicUsize::new(0),
        });
        let src = region.map_source().expect("a file region has windows");
        let w = Arc::new(Window::new(src, 2, cow.clone()).unwrap());
        *cow.window.lock().unwrap() = Some(w.clone());
        w.map(0, 0, 2, false).unwrap();
        let p = w.as_ptr();
        // SAFETY: both pages are mapped readable.
        assert_eq!(unsafe { p.add(WINDOW_PAGE + 5).read_volatile() }, 7);
        assert!(overlaps_window(p, 1) && !overlaps_window(std::ptr::null(), 1));
        // SAFETY: page 1 is mapped; the store faults and is retried.
        unsafe { p.add(WINDOW_PAGE + 5).write_volatile(9) };
        assert_eq!(cow.faults.load(Ordering::SeqCst), 1);
        assert_eq!(w.faults(), 1, "the window counts what its handler resolved");
        // SAFETY: as above; page 1 is now writable, no second fault.
        unsafe { p.add(WINDOW_PAGE + 6).write_volatile(10) };
        assert_eq!(cow.faults.load(Ordering::SeqCst), 1);
        let mut old = [0u8; 8];
        region.read(WINDOW_PAGE as u64, &mut old).unwrap();
        assert_eq!(old, [7u8; 8], "the original page is untouched");
        let mut new = [0u8; 8];
        region.read(3 * WINDOW_PAGE as u64 + 4, &mut new).unwrap();
        assert_eq!(new, [7, 9, 10, 7, 7, 7, 7, 7], "the store went to the copy");
        // Read-only again (as a snapshot makes it): the next store faults.
        w.protect(1, 1, false).unwrap();
        // SAFETY: page 1 is mapped read-only; the store faults and retries.
        unsafe { p.add(WINDOW_PAGE + 7).write_volatile(11) };
        assert_eq!(cow.faults.load(Ordering::SeqCst), 2);
        *cow.window.lock().unwrap() = None;
        drop(w);
        let _ = std::fs::remove_file(&dir);
    }

    /// Maps the faulting page writable; the faults resolved on their own
    /// threads wait until `STACKS + 1` faults have arrived, so that every
    /// pool stack is held and at least one fault must go to the service.
    struct Crowd {
        window: Mutex<Option<Arc<Window>>>,
        arrived: AtomicUsize,
        /// (faulting page, the name of the thread that resolved it)
        resolved: Mutex<Vec<(usize, String)>>,
    }

    impl Fault for Crowd {
        fn fault(&self, page: usize, _write: bool) -> bool {
            let me = std::thread::current().name().unwrap_or("").to_string();
            self.arrived.fetch_add(1, Ordering::SeqCst);
            if me != "novafs-pm-faults" {
                let start = Instant::now();
                while self.arrived.load(Ordering::SeqCst) <= imp::STACKS && start.elapsed() < Duration::from_secs(20) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            let w = self.window.lock().unwrap().clone().unwrap();
            self.resolved.lock().unwrap().push((page, me));
            w.map(page, (page * WINDOW_PAGE) as u64, 1, true).is_ok()
        }
    }

    #[test]
    fn faults_resolve_on_the_faulting_thread_and_beyond_the_pool_on_the_service() {
        let n = imp::STACKS + 1;
        let dir = std::env::temp_dir().join(format!("pm-window-pool-{}", std::process::id()));
        let region = Arc::new(MmapRegion::create(&dir, (n * WINDOW_PAGE) as u64, &MapOptions::default()).unwrap());
        let crowd = Arc::new(Crowd {
            window: Mutex::new(None),
            arrived: AtomicUsize::new(0),
            resolved: Mutex::new(Vec::new()),
        });
        let w = Arc::new(Window::new(region.map_source().unwrap(), n, crowd.clone()).unwrap());
        *crowd.window.lock().unwrap() = Some(w.clone());
        let threads: Vec<_> = (0..n)
            .map(|i| {
                let w = w.clone();
                std::thread::Builder::new()
                    .name(format!("faulter-{i}"))
                    .spawn(move || w.store(i * WINDOW_PAGE + 1, &[i as u8 + 1]).unwrap())
                    .unwrap()
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let mut resolved = crowd.resolved.lock().unwrap().clone();
        resolved.sort();
        assert_eq!(resolved.len(), n, "one fault a page: {resolved:?}");
        for (page, by) in &resolved {
            assert!(
                by == &format!("faulter-{page}") || by == "novafs-pm-faults",
                "page {page} resolved by {by}, neither its own thread nor the service"
            );
        }
        assert!(
            resolved.iter().any(|(_, by)| by == "novafs-pm-faults"),
            "with every pool stack held, a fault goes to the service: {resolved:?}"
        );
        assert!(
            resolved.iter().filter(|(_, by)| by.starts_with("faulter-")).count() >= imp::STACKS - 2,
            "faults resolve on their own threads while stacks are free: {resolved:?}"
        );
        for i in 0..n {
            let mut b = [0u8; 2];
            region.read((i * WINDOW_PAGE) as u64, &mut b).unwrap();
            assert_eq!(b, [0, i as u8 + 1], "page {i}'s store landed");
        }
        *crowd.window.lock().unwrap() = None;
        drop(w);
        let _ = std::fs::remove_file(&dir);
    }

    /// Maps each faulting page writable, counting the faults.
    struct MapWritable {
        window: Mutex<Option<Arc<Window>>>,
    }

    impl Fault for MapWritable {
        fn fault(&self, page: usize, _write: bool) -> bool {
            let w = self.window.lock().unwrap().clone().unwrap();
            w.map(page, (page * WINDOW_PAGE) as u64, 1, true).is_ok()
        }
    }

    #[test]
    fn a_tracking_window_lists_the_pages_stored_to_without_a_fault() {
        let file = anonymous_file(c"pm-track-test").unwrap();
        file.set_len(8 * WINDOW_PAGE as u64).unwrap();
        let src = MapSource {
            fd: std::os::fd::AsFd::as_fd(&file),
            sync: false,
        };
        let handler = Arc::new(MapWritable {
            window: Mutex::new(None),
        });
        let w = match Window::tracking(src, 8, handler.clone()) {
            Ok(w) => Arc::new(w),
            // Before Linux 6.7 there is nothing to test; CI's kernel has it.
            Err(e) if std::env::var_os("CI").is_none() => return eprintln!("no write tracking here: {e}"),
            Err(e) => panic!("CI's kernel tracks writes: {e}"),
        };
        *handler.window.lock().unwrap() = Some(w.clone());
        assert!(w.tracks());
        w.map(0, 0, 8, true).unwrap();
        assert_eq!(w.written(0, 8).unwrap(), Vec::<usize>::new(), "nothing stored yet");
        w.store(WINDOW_PAGE + 3, b"one").unwrap();
        w.store(5 * WINDOW_PAGE, b"five").unwrap();
        w.store(6 * WINDOW_PAGE - 1, b"56").unwrap();
        assert_eq!(w.faults(), 0, "the kernel recorded the stores itself");
        assert_eq!(w.written(0, 8).unwrap(), vec![1, 5, 6], "\"56\" spans pages 5 and 6");
        assert_eq!(
            w.written(0, 8).unwrap(),
            Vec::<usize>::new(),
            "listing marks them again"
        );
        w.store(4 * WINDOW_PAGE, b"again").unwrap();
        assert_eq!(w.written(0, 8).unwrap(), vec![4]);
        // A page mapped anew over an old one is tracked from scratch.
        w.map(2, 2 * WINDOW_PAGE as u64, 1, true).unwrap();
        w.store(2 * WINDOW_PAGE, b"two").unwrap();
        assert_eq!(w.written(0, 8).unwrap(), vec![2]);
        let mut b = [0u8; 4];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut b, 5 * WINDOW_PAGE as u64).unwrap();
        assert_eq!(&b, b"five", "the stores reached the file");
        *handler.window.lock().unwrap() = None;
    }
}
