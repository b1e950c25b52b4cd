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
//!   (a lock-free table of ranges), sends the address and whether the
//!   access was a store down a pipe to the fault service thread, and
//!   waits until the service says the fault is resolved — polling a
//!   little first, yielding the CPU between looks, then asleep on a
//!   futex; `write`, `sched_yield`, `futex` and `sigaction` are all it
//!   calls, all plain system calls. The service likewise polls its pipe
//!   for a while after each fault before it sleeps: faults come in bursts,
//!   and a wake-up from sleep costs several times what resolving a fault
//!   does. Polling yields rather than spins, so that on a busy machine the
//!   other side gets the CPU it waits for;
//! - the service thread calls the handler, which may take locks, allocate,
//!   commit and remap (`Window::map`), then wakes the faulting thread,
//!   whose store re-executes on the page as it now is. A handler that
//!   cannot resolve the fault (no space, media error) makes the fault fatal,
//!   as a failed DAX fault is (SIGBUS there, SIGSEGV here).
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
    /// Called on the fault service thread, the faulting thread asleep.
    fn fault(&self, page: usize, write: bool) -> bool;
}

/// A contiguous range of the process holding region pages.
pub struct Window {
    base: *mut u8,
    pages: usize,
    fd: OwnedFd,
    sync: bool,
    slot: usize,
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
        })
    }

    /// The first byte of the window.
    pub fn as_ptr(&self) -> *mut u8 {
        self.base
    }

    /// Its length in pages.
    pub fn pages(&self) -> usize {
        self.pages
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
        Ok(())
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
    use std::sync::atomic::{AtomicI32, AtomicU32, AtomicUsize, Ordering};
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
    /// Each slot's handler, for the service thread.
    static HANDLERS: Mutex<Vec<Option<Arc<dyn Fault>>>> = Mutex::new(Vec::new());
    /// The write end of the service's pipe; -1 until it runs.
    static PIPE: AtomicI32 = AtomicI32::new(-1);
    static SERVICE: OnceLock<Result<(), i32>> = OnceLock::new();
    static PREV: OnceLock<libc::sigaction> = OnceLock::new();

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
            let handler = find(req.addr).and_then(|slot| {
                let handlers = HANDLERS.lock().unwrap_or_else(|p| p.into_inner());
                let start = RANGES[slot].start.load(Ordering::Acquire);
                handlers[slot].clone().map(|h| (h, (req.addr - start) / WINDOW_PAGE))
            });
            let ok = handler.is_some_and(|(h, page)| h.fault(page, req.write));
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

    /// Page-fault error code bit: the access was a write.
    const PF_WRITE: i64 = 2;

    extern "C" fn on_sigsegv(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
        // SAFETY: the kernel passes a valid siginfo and ucontext to an
        // SA_SIGINFO handler; only async-signal-safe calls follow.
        unsafe {
            let uc = &*ctx.cast::<libc::ucontext_t>();
            let write = uc.uc_mcontext.gregs[libc::REG_ERR as usize] & PF_WRITE != 0;
            let addr = (*info).si_addr() as usize;
            let pipe = PIPE.load(Ordering::Acquire);
            if (*info).si_code > 0 && pipe >= 0 && find(addr).is_some() {
                let errno = *libc::__errno_location();
                let done = AtomicU32::new(0);
                let req = Request {
                    addr,
                    write,
                    done: &done,
                };
                let want = mem::size_of::<Request>();
                if libc::write(pipe, ptr::from_ref(&req).cast(), want) == want as isize {
                    let mut looks = 0;
                    while done.load(Ordering::Acquire) == 0 && looks < HANDLER_LOOKS {
                        libc::sched_yield();
                        looks += 1;
                    }
                    while done.load(Ordering::Acquire) == 0 {
                        libc::syscall(
                            libc::SYS_futex,
                            &done as *const AtomicU32,
                            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                            0,
                            ptr::null::<libc::timespec>(),
                        );
                    }
                    *libc::__errno_location() = errno;
                    if done.load(Ordering::Acquire) == 1 {
                        return; // the store re-executes on the resolved page
                    }
                }
                *libc::__errno_location() = errno;
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
}
