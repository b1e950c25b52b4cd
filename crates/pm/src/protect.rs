//! Write windows: the scribble defence of NOVA §4.8 and NOVA-Fortis §4.5
//! (the kernel's CR0.WP trick) in user space. A protected mapping is
//! read-only except while one of the region's own store methods runs, so a
//! stray store — from the application in library mode, or from a bug
//! anywhere else in the process — faults instead of corrupting the file
//! system.
//!
//! Two mechanisms:
//! - memory protection keys (x86 PKU): the mapping is tagged with a key
//!   whose write access is disabled in every thread's PKRU register. A
//!   window is one WRPKRU each way (tens of cycles) and opens the region
//!   for the calling thread only; other threads stay protected.
//! - mprotect: the pages a store touches are made writable for its
//!   duration, with a count per page so that concurrent windows on one page
//!   nest. Two system calls (and a TLB shootdown on a multi-threaded
//!   process) per store, and while a window is open any thread may write
//!   those pages: a portable fallback whose cost `novafs bench --protect`
//!   measures.

use std::collections::HashMap;
use std::io;
use std::str::FromStr;
use std::sync::{Mutex, PoisonError};

use crate::latency::{timed, Part};

/// How a mapping is protected from stray stores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WriteProtect {
    /// Always writable.
    Off,
    /// Memory protection keys where the CPU and kernel have them, else off.
    #[default]
    Auto,
    /// Memory protection keys; mapping fails where they are unavailable.
    Pkey,
    /// mprotect windows: available everywhere, two system calls per store.
    Mprotect,
}

impl FromStr for WriteProtect {
    type Err = String;

    fn from_str(s: &str) -> Result<WriteProtect, String> {
        Ok(match s {
            "off" => WriteProtect::Off,
            "auto" => WriteProtect::Auto,
            "pkey" => WriteProtect::Pkey,
            "mprotect" => WriteProtect::Mprotect,
            _ => {
                return Err(format!(
                    "unknown write protection '{s}' (use off, auto, pkey or mprotect)"
                ))
            }
        })
    }
}

/// The protection a mapping ended up with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protection {
    /// Unprotected.
    Off,
    /// Memory protection key windows.
    Pkey,
    /// mprotect windows.
    Mprotect,
}

impl std::fmt::Display for Protection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Protection::Off => "off",
            Protection::Pkey => "memory protection keys",
            Protection::Mprotect => "mprotect",
        })
    }
}

/// One mapping's write windows.
pub(crate) enum Guard {
    Off,
    #[cfg(target_arch = "x86_64")]
    Pkey(pkey::Key),
    Mprotect(Pages),
}

impl Guard {
    /// Protects the `len` bytes mapped at `base` as `mode` asks.
    pub(crate) fn new(base: *mut u8, len: u64, mode: WriteProtect) -> io::Result<Guard> {
        match mode {
            WriteProtect::Off => Ok(Guard::Off),
            WriteProtect::Auto => Ok(Guard::pkey(base, len).unwrap_or_else(|e| {
                tracing::debug!(error = %e, "no memory protection keys: mapping left writable");
                Guard::Off
            })),
            WriteProtect::Pkey => Guard::pkey(base, len),
            WriteProtect::Mprotect => {
                mprotect(base as usize, len, libc::PROT_READ)?;
                Ok(Guard::Mprotect(Pages {
                    base: base as usize,
                    open: Mutex::new(HashMap::new()),
                }))
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn pkey(base: *mut u8, len: u64) -> io::Result<Guard> {
        pkey::Key::protect(base, len).map(Guard::Pkey)
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn pkey(_base: *mut u8, _len: u64) -> io::Result<Guard> {
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }

    pub(crate) fn protection(&self) -> Protection {
        match self {
            Guard::Off => Protection::Off,
            #[cfg(target_arch = "x86_64")]
            Guard::Pkey(_) => Protection::Pkey,
            Guard::Mprotect(_) => Protection::Mprotect,
        }
    }

    /// Before a load: with keys, this thread's PKRU must let it read.
    pub(crate) fn before_read(&self) {
        #[cfg(target_arch = "x86_64")]
        if let Guard::Pkey(k) = self {
            k.enter_thread();
        }
    }

    /// Runs `store` with the bytes `[off, off + len)` of the mapping
    /// writable, and closes the window again even if it panics.
    pub(crate) fn window<R>(&self, off: u64, len: u64, store: impl FnOnce() -> R) -> io::Result<R> {
        match self {
            Guard::Off => Ok(store()),
            _ if len == 0 => Ok(store()),
            // The windows' opening and closing are their own part of the
            // latency breakdown; the store inside is its caller's.
            #[cfg(target_arch = "x86_64")]
            Guard::Pkey(k) => {
                let open = timed(Part::WriteProtect, || k.open());
                let stored = store();
                timed(Part::WriteProtect, || drop(open));
                Ok(stored)
            }
            Guard::Mprotect(p) => {
                let open = timed(Part::WriteProtect, || p.open(off, len))?;
                let stored = store();
                timed(Part::WriteProtect, || drop(open));
                Ok(stored)
            }
        }
    }
}

/// Page size of the windows.
const PAGE: u64 = 4096;

fn mprotect(addr: usize, len: u64, prot: libc::c_int) -> io::Result<()> {
    // SAFETY: callers pass page-aligned ranges inside a mapping this crate
    // owns; changing its protection affects no other memory.
    if unsafe { libc::mprotect(addr as *mut libc::c_void, len as usize, prot) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// mprotect windows: open windows per page of the mapping.
pub(crate) struct Pages {
    base: usize,
    open: Mutex<HashMap<u64, u32>>,
}

/// An open mprotect window; closing it re-protects pages no other window
/// holds.
struct PagesOpen<'a> {
    pages: &'a Pages,
    first: u64,
    last: u64,
}

impl Pages {
    fn open(&self, off: u64, len: u64) -> io::Result<PagesOpen<'_>> {
        let (first, last) = (off / PAGE, (off + len - 1) / PAGE);
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        self.set(first, last, libc::PROT_READ | libc::PROT_WRITE, |p| {
            let n = open.entry(p).or_insert(0);
            *n += 1;
            *n == 1
        })?;
        Ok(PagesOpen {
            pages: self,
            first,
            last,
        })
    }

    /// Applies `prot` to each run of pages in `first..=last` for which
    /// `change` says the page's protection changes.
    fn set(&self, first: u64, last: u64, prot: libc::c_int, mut change: impl FnMut(u64) -> bool) -> io::Result<()> {
        let mut run: Option<u64> = None;
        for p in first..=last + 1 {
            let flip = p <= last && change(p);
            match (run, flip) {
                (None, true) => run = Some(p),
                (Some(start), false) => {
                    mprotect(self.base + (start * PAGE) as usize, (p - start) * PAGE, prot)?;
                    run = None;
                }
                _ => {}
            }
        }
        Ok(())
    }
}

impl Drop for PagesOpen<'_> {
    fn drop(&mut self) {
        let pages = self.pages;
        let mut open = pages.open.lock().unwrap_or_else(PoisonError::into_inner);
        let closed = pages.set(self.first, self.last, libc::PROT_READ, |p| match open.get_mut(&p) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            _ => {
                open.remove(&p);
                true
            }
        });
        if let Err(e) = closed {
            // The pages stay writable: weaker protection, never a wrong result.
            tracing::warn!(error = %e, "could not close a write window");
        }
    }
}

/// Called first in a signal handler that may load from or store to a
/// protected mapping (a DAX window's fault, which commits). The kernel
/// starts a handler with its default PKRU, which denies every key, so
/// this thread must set its access again before the handler's first load;
/// when the handler returns, the kernel restores the interrupted PKRU and
/// dropping the result restores what this thread knew of it.
pub(crate) fn signal_handler_entered() -> HandlerPkru {
    #[cfg(target_arch = "x86_64")]
    return HandlerPkru(pkey::forget_ready());
    #[cfg(not(target_arch = "x86_64"))]
    HandlerPkru(0)
}

/// What [`signal_handler_entered`] puts back.
pub(crate) struct HandlerPkru(#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] u16);

impl Drop for HandlerPkru {
    fn drop(&mut self) {
        #[cfg(target_arch = "x86_64")]
        pkey::restore_ready(self.0);
    }
}

#[cfg(target_arch = "x86_64")]
mod pkey {
    use std::cell::Cell;
    use std::io;

    /// A protection key tagging one mapping.
    pub(crate) struct Key(u32);

    fn access_disable(key: u32) -> u32 {
        1 << (2 * key)
    }

    fn write_disable(key: u32) -> u32 {
        1 << (2 * key + 1)
    }

    thread_local! {
        /// Keys this thread's PKRU already lets it read (keys are < 16).
        static READY: Cell<u16> = const { Cell::new(0) };
    }

    /// Forgets which keys this thread may read (see
    /// `signal_handler_entered`); returns what it knew.
    pub(super) fn forget_ready() -> u16 {
        READY.with(|r| r.replace(0))
    }

    pub(super) fn restore_ready(ready: u16) {
        READY.with(|r| r.set(ready));
    }

    fn rdpkru() -> u32 {
        let eax: u32;
        // SAFETY: RDPKRU only reads this thread's PKRU (ECX must be 0). It
        // runs only once pkey_alloc has succeeded, so the CPU has PKU and
        // the kernel enabled it (OSPKE): it cannot fault.
        unsafe {
            std::arch::asm!("rdpkru", in("ecx") 0u32, out("eax") eax, out("edx") _,
                options(nomem, nostack, preserves_flags));
        }
        eax
    }

    fn wrpkru(v: u32) {
        // SAFETY: WRPKRU sets this thread's access rights (ECX and EDX must
        // be 0); available as for RDPKRU. Not `nomem`: it changes which
        // accesses fault, so no memory access may move across it.
        unsafe {
            std::arch::asm!("wrpkru", in("eax") v, in("ecx") 0u32, in("edx") 0u32,
                options(nostack, preserves_flags));
        }
    }

    impl Key {
        /// Allocates a key and tags `[base, base + len)` with it.
        pub(crate) fn protect(base: *mut u8, len: u64) -> io::Result<Key> {
            // SAFETY: pkey_alloc takes two integers and returns a key or -1.
            let key = unsafe { libc::syscall(libc::SYS_pkey_alloc, 0, 0) };
            if key < 0 {
                return Err(io::Error::last_os_error());
            }
            let key = Key(key as u32);
            // SAFETY: tags our own mapping; its protection stays read-write,
            // the key decides who may write.
            let tagged = unsafe {
                libc::syscall(
                    libc::SYS_pkey_mprotect,
                    base,
                    len as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    key.0,
                )
            };
            if tagged != 0 {
                return Err(io::Error::last_os_error());
            }
            key.enter_thread();
            Ok(key)
        }

        /// Lets this thread read the mapping and not write it: threads that
        /// existed before the key was allocated start with no access to it.
        pub(crate) fn enter_thread(&self) {
            let bit = 1u16 << self.0;
            READY.with(|r| {
                if r.get() & bit == 0 {
                    wrpkru((rdpkru() & !access_disable(self.0)) | write_disable(self.0));
                    r.set(r.get() | bit);
                }
            });
        }

        /// Opens this thread's write window until the result is dropped.
        pub(crate) fn open(&self) -> Open<'_> {
            self.enter_thread();
            wrpkru(rdpkru() & !write_disable(self.0));
            Open(self)
        }
    }

    /// This thread's open write window.
    pub(crate) struct Open<'a>(&'a Key);

    impl Drop for Open<'_> {
        fn drop(&mut self) {
            wrpkru(rdpkru() | write_disable(self.0 .0));
        }
    }

    impl Drop for Key {
        fn drop(&mut self) {
            // SAFETY: frees the key this value allocated; the mapping it
            // tagged is unmapped before (the region drops its mapping first).
            unsafe { libc::syscall(libc::SYS_pkey_free, self.0) };
        }
    }
}
