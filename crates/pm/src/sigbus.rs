//! Error-aware copies out of persistent memory, and the C ABI's
//! fault-safe reading of a path a program passed ([`c_str_len`]).
//!
//! Owns the process's SIGBUS handler and the two machine-code routines it may
//! rescue. A load from a poisoned PM line (a media error) or from a page no
//! longer backed by its file raises SIGBUS; inside [`copy`] or [`load_u64`]
//! that becomes an `Err(fault address)` instead of killing the process
//! (DESIGN.md §1, "media errors"; NOVA-Fortis §4.1 does the same in the kernel
//! with `memcpy_mcsafe`).
//!
//! How: both routines are written in assembly with one faulting instruction
//! each, exported as a symbol together with the address to resume at — the
//! user-space analogue of the kernel's exception tables. The handler checks
//! that the interrupted instruction is one of these; if so it writes the fault
//! address into `rax` (the routine's return value) and moves `rip` to the
//! resume address. Nothing else is changed: no page is remapped, so other
//! threads touching the same page meanwhile still see the real media (and
//! fault on it themselves), and it works on devdax, whose mappings cannot be
//! split page by page. The handler allocates nothing, takes no locks and
//! keeps no per-thread state, so it is async-signal-safe.
//!
//! Any other SIGBUS is passed to the handler that was installed before ours
//! (Rust's runtime installs one to report stack overflows); when there was
//! none, the default action is restored and the faulting access re-executes,
//! so the process dies exactly as it would have without us.
//!
//! Only x86_64 Linux has the rescue; elsewhere the copy and load are plain and
//! a media error still kills the process.

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub use imp::c_str_len;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub(crate) use imp::{chain, copy, install, install_action, load_u64};
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
pub use plain::c_str_len;

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod imp {
    use std::ffi::c_void;
    use std::mem;
    use std::ptr;
    use std::sync::{Once, OnceLock};

    use libc::{c_int, siginfo_t};

    core::arch::global_asm!(
        ".pushsection .text",
        // copy_mc(dst: rdi, src: rsi, len: rdx) -> 0, or the fault address.
        ".p2align 4",
        ".globl novafs_pm_copy_mc",
        ".hidden novafs_pm_copy_mc",
        ".type novafs_pm_copy_mc,@function",
        "novafs_pm_copy_mc:",
        "    mov rcx, rdx",
        "    xor eax, eax",
        ".globl novafs_pm_copy_mc_insn",
        ".hidden novafs_pm_copy_mc_insn",
        "novafs_pm_copy_mc_insn:",
        "    rep movsb",
        ".globl novafs_pm_copy_mc_resume",
        ".hidden novafs_pm_copy_mc_resume",
        "novafs_pm_copy_mc_resume:",
        "    ret",
        ".size novafs_pm_copy_mc, .-novafs_pm_copy_mc",
        // load_mc(src: rdi, out: rsi) -> 0 with *out = *src, or the fault
        // address (out untouched).
        ".p2align 4",
        ".globl novafs_pm_load_mc",
        ".hidden novafs_pm_load_mc",
        ".type novafs_pm_load_mc,@function",
        "novafs_pm_load_mc:",
        "    xor eax, eax",
        ".globl novafs_pm_load_mc_insn",
        ".hidden novafs_pm_load_mc_insn",
        "novafs_pm_load_mc_insn:",
        "    mov rdx, qword ptr [rdi]",
        "    mov qword ptr [rsi], rdx",
        ".globl novafs_pm_load_mc_resume",
        ".hidden novafs_pm_load_mc_resume",
        "novafs_pm_load_mc_resume:",
        "    ret",
        ".size novafs_pm_load_mc, .-novafs_pm_load_mc",
        // strlen_mc(s: rdi) -> the length of the C string, or -1 if
        // reading it faulted (SIGSEGV).
        ".p2align 4",
        ".globl novafs_pm_strlen_mc",
        ".hidden novafs_pm_strlen_mc",
        ".type novafs_pm_strlen_mc,@function",
        "novafs_pm_strlen_mc:",
        "    xor eax, eax",
        ".globl novafs_pm_strlen_mc_insn",
        ".hidden novafs_pm_strlen_mc_insn",
        "novafs_pm_strlen_mc_insn:",
        "    movzx ecx, byte ptr [rdi + rax]",
        "    test ecx, ecx",
        "    jz 3f",
        "    inc rax",
        "    jmp novafs_pm_strlen_mc_insn",
        "3:",
        "    ret",
        ".globl novafs_pm_strlen_mc_resume",
        ".hidden novafs_pm_strlen_mc_resume",
        "novafs_pm_strlen_mc_resume:",
        "    mov rax, -1",
        "    ret",
        ".size novafs_pm_strlen_mc, .-novafs_pm_strlen_mc",
        ".popsection",
    );

    extern "C" {
        fn novafs_pm_copy_mc(dst: *mut u8, src: *const u8, len: usize) -> usize;
        fn novafs_pm_load_mc(src: *const u64, out: *mut u64) -> usize;
        fn novafs_pm_strlen_mc(s: *const u8) -> isize;
        // Labels, not functions: declared as such only to take their address.
        fn novafs_pm_copy_mc_insn();
        fn novafs_pm_copy_mc_resume();
        fn novafs_pm_load_mc_insn();
        fn novafs_pm_load_mc_resume();
        fn novafs_pm_strlen_mc_insn();
        fn novafs_pm_strlen_mc_resume();
    }

    /// Address of an assembly label declared as a function.
    fn label(f: unsafe extern "C" fn()) -> usize {
        f as usize
    }

    static INSTALL: Once = Once::new();
    /// The SIGBUS action in place before ours, to pass foreign faults on to.
    static PREV: OnceLock<libc::sigaction> = OnceLock::new();

    /// Installs the SIGBUS handler (once per process).
    pub(crate) fn install() {
        INSTALL.call_once(|| {
            if install_action(libc::SIGBUS, on_sigbus, &PREV) != 0 {
                // Cannot happen with these arguments; reads stay correct but a
                // media error would kill the process.
                tracing::error!(
                    error = %std::io::Error::last_os_error(),
                    "cannot install the SIGBUS handler: media errors will be fatal"
                );
            }
        });
    }

    /// Makes `handler` the SA_SIGINFO action of `sig`, first recording the
    /// action it replaces in `prev` (so the handler never runs without
    /// knowing where to pass foreign signals: [`chain`]). 0 on success.
    pub(crate) fn install_action(
        sig: c_int,
        handler: extern "C" fn(c_int, *mut siginfo_t, *mut c_void),
        prev: &OnceLock<libc::sigaction>,
    ) -> c_int {
        // SAFETY: sigaction with valid pointers to zero-initialised structs
        // (all-zero is a valid `sigaction`).
        unsafe {
            let mut old: libc::sigaction = mem::zeroed();
            if libc::sigaction(sig, ptr::null(), &mut old) != 0 {
                return -1;
            }
            let _ = prev.set(old);
            let mut act: libc::sigaction = mem::zeroed();
            act.sa_sigaction = handler as usize;
            act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(sig, &act, ptr::null_mut())
        }
    }

    /// Copies `len` bytes from `src` to `dst`; `Err(addr)` if reading `addr`
    /// raised SIGBUS (the bytes copied so far are then unspecified).
    ///
    /// # Safety
    ///
    /// `src` must be mapped for `len` bytes (possibly unbacked or poisoned),
    /// `dst` writable for `len` bytes, and they must not overlap.
    /// [`install`] must have run, or a fault kills the process.
    pub(crate) unsafe fn copy(dst: *mut u8, src: *const u8, len: usize) -> Result<(), usize> {
        // SAFETY: forwarded from the caller; the routine follows the C ABI.
        match unsafe { novafs_pm_copy_mc(dst, src, len) } {
            0 => Ok(()),
            addr => Err(addr),
        }
    }

    /// Aligned 8-byte load (atomic, acquire on x86); `Err(addr)` on SIGBUS.
    ///
    /// # Safety
    ///
    /// `src` must be 8-aligned and mapped. [`install`] must have run.
    pub(crate) unsafe fn load_u64(src: *const u64) -> Result<u64, usize> {
        let mut out = 0u64;
        // SAFETY: forwarded from the caller; `out` is a valid local. One
        // aligned `mov` is single-copy atomic and, on x86, has acquire order;
        // the opaque call keeps the compiler from moving accesses across it.
        match unsafe { novafs_pm_load_mc(src, &mut out) } {
            0 => Ok(out),
            addr => Err(addr),
        }
    }

    static STRINGS: Once = Once::new();
    /// The SIGSEGV action in place before the string rescue's.
    static SEGV_PREV: OnceLock<libc::sigaction> = OnceLock::new();

    /// The length of the C string at `s`, or None when reading it faults:
    /// a pointer a program passed that the kernel would answer EFAULT for
    /// (the C ABI reads paths itself before deciding where they go). The
    /// rescue's SIGSEGV handler is installed at the first call.
    ///
    /// # Safety
    ///
    /// None beyond the pointer being a value: an unmapped or unreadable
    /// `s` gives None. A program's own SIGSEGV handler installed after the
    /// rescue's replaces it; a bad pointer then faults as it would in libc.
    pub unsafe fn c_str_len(s: *const libc::c_char) -> Option<usize> {
        STRINGS.call_once(|| {
            if install_action(libc::SIGSEGV, on_sigsegv, &SEGV_PREV) != 0 {
                tracing::warn!(
                    "cannot install the SIGSEGV rescue: a bad path pointer will crash, not fail with EFAULT"
                );
            }
        });
        // SAFETY: the routine reads bytes until a NUL and is rescued by
        // `on_sigsegv` at its one load.
        usize::try_from(unsafe { novafs_pm_strlen_mc(s.cast()) }).ok()
    }

    extern "C" fn on_sigsegv(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
        // SAFETY: as in `on_sigbus`: only saved registers are edited.
        unsafe {
            let gregs = &mut (*ctx.cast::<libc::ucontext_t>()).uc_mcontext.gregs;
            if gregs[libc::REG_RIP as usize] as usize == label(novafs_pm_strlen_mc_insn) && (*info).si_code > 0 {
                gregs[libc::REG_RAX as usize] = -1;
                gregs[libc::REG_RIP as usize] = label(novafs_pm_strlen_mc_resume) as i64;
                return;
            }
            chain(SEGV_PREV.get(), sig, info, ctx);
        }
    }

    extern "C" fn on_sigbus(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
        // SAFETY: installed with SA_SIGINFO, so the kernel passes a valid
        // siginfo and ucontext for this thread; we only edit saved registers,
        // which the kernel reloads on return.
        unsafe {
            let gregs = &mut (*ctx.cast::<libc::ucontext_t>()).uc_mcontext.gregs;
            let rip = gregs[libc::REG_RIP as usize] as usize;
            let resume = if rip == label(novafs_pm_copy_mc_insn) {
                label(novafs_pm_copy_mc_resume)
            } else if rip == label(novafs_pm_load_mc_insn) {
                label(novafs_pm_load_mc_resume)
            } else {
                0
            };
            // si_code > 0: raised by the kernel for a fault, not sent by kill().
            if resume != 0 && (*info).si_code > 0 {
                // 0 means success to the routines: never report address 0.
                let addr = ((*info).si_addr() as usize).max(1);
                gregs[libc::REG_RAX as usize] = addr as i64;
                gregs[libc::REG_RIP as usize] = resume as i64;
                return;
            }
            chain(PREV.get(), sig, info, ctx);
        }
    }

    /// Hands a signal that is not ours to `prev`, the action installed
    /// before ours (this SIGBUS handler's, and the DAX windows' SIGSEGV).
    ///
    /// # Safety
    ///
    /// Only from a signal handler, with the kernel's arguments.
    pub(crate) unsafe fn chain(prev: Option<&libc::sigaction>, sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
        match prev {
            Some(prev) if prev.sa_sigaction != libc::SIG_DFL && prev.sa_sigaction != libc::SIG_IGN => {
                // SAFETY: `sa_sigaction` holds a handler of the type named by
                // SA_SIGINFO, as sigaction(2) defines.
                unsafe {
                    if prev.sa_flags & libc::SA_SIGINFO != 0 {
                        let handler: extern "C" fn(c_int, *mut siginfo_t, *mut c_void) =
                            mem::transmute(prev.sa_sigaction);
                        handler(sig, info, ctx);
                    } else {
                        let handler: extern "C" fn(c_int) = mem::transmute(prev.sa_sigaction);
                        handler(sig);
                    }
                }
            }
            _ => {
                // Default action: returning re-executes the faulting access,
                // which now terminates the process with `sig` as usual.
                // SAFETY: sigaction is async-signal-safe; the struct is valid.
                unsafe {
                    let mut dfl: libc::sigaction = mem::zeroed();
                    dfl.sa_sigaction = libc::SIG_DFL;
                    libc::sigaction(sig, &dfl, ptr::null_mut());
                }
            }
        }
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod plain {
    use std::sync::atomic::{AtomicU64, Ordering};

    /// No rescue on this target: nothing to install.
    pub(crate) fn install() {}

    /// Plain strlen: a bad pointer faults.
    ///
    /// # Safety
    ///
    /// `s` must point to a readable C string.
    pub unsafe fn c_str_len(s: *const libc::c_char) -> Option<usize> {
        // SAFETY: forwarded from the caller.
        Some(unsafe { libc::strlen(s) })
    }

    /// Plain copy: a fault kills the process.
    ///
    /// # Safety
    ///
    /// `src` readable and `dst` writable for `len` bytes, not overlapping.
    pub(crate) unsafe fn copy(dst: *mut u8, src: *const u8, len: usize) -> Result<(), usize> {
        // SAFETY: forwarded from the caller.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        Ok(())
    }

    /// Plain acquire load: a fault kills the process.
    ///
    /// # Safety
    ///
    /// `src` must be 8-aligned and mapped.
    pub(crate) unsafe fn load_u64(src: *const u64) -> Result<u64, usize> {
        // SAFETY: forwarded from the caller; AtomicU64 has u64's layout.
        Ok(unsafe { &*src.cast::<AtomicU64>() }.load(Ordering::Acquire))
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
pub(crate) use plain::{copy, install, load_u64};

#[cfg(all(test, target_arch = "x86_64", target_os = "linux"))]
mod tests {
    use super::*;
    use std::fs::File;
    use std::os::unix::io::AsRawFd;
    use std::ptr;

    const PAGE: usize = 4096;

    /// A shared mapping of `pages` pages of a tmpfs file that is only one
    /// page long: every page after the first is unbacked and raises SIGBUS.
    struct Unbacked {
        base: *mut u8,
        len: usize,
        _file: File,
    }

    impl Unbacked {
        fn new(pages: usize) -> Unbacked {
            let file = tempfile::tempfile_in("/dev/shm").unwrap();
            file.set_len(PAGE as u64).unwrap();
            let len = pages * PAGE;
            // SAFETY: fresh shared mapping of our own file; checked below.
            let base = unsafe {
                libc::mmap(
                    ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    file.as_raw_fd(),
                    0,
                )
            };
            assert_ne!(base, libc::MAP_FAILED);
            Unbacked {
                base: base.cast(),
                len,
                _file: file,
            }
        }
    }

    impl Drop for Unbacked {
        fn drop(&mut self) {
            // SAFETY: unmapping our own mapping.
            unsafe { libc::munmap(self.base.cast(), self.len) };
        }
    }

    #[test]
    fn guarded_copy_and_load_work_on_good_memory() {
        install();
        let src: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        for len in [0usize, 1, 7, 64, 4096, 10_000] {
            let mut dst = vec![0u8; len];
            // SAFETY: both buffers hold `len` bytes.
            unsafe { copy(dst.as_mut_ptr(), src.as_ptr(), len) }.unwrap();
            assert_eq!(dst, src[..len]);
        }
        let word = 0x0123_4567_89ab_cdefu64;
        // SAFETY: an aligned local.
        assert_eq!(unsafe { load_u64(&word) }, Ok(word));
    }

    #[test]
    fn fault_in_guarded_copy_reports_first_unreadable_byte() {
        install();
        let map = Unbacked::new(3);
        let mut buf = vec![0u8; 2 * PAGE];
        // SAFETY: the source range is mapped (partly unbacked), `buf` is big.
        unsafe {
            copy(buf.as_mut_ptr(), map.base, PAGE).unwrap();
            let err = copy(buf.as_mut_ptr(), map.base.add(100), 2 * PAGE).unwrap_err();
            assert_eq!(err, map.base as usize + PAGE);
            let err = copy(buf.as_mut_ptr(), map.base.add(2 * PAGE + 8), 16).unwrap_err();
            assert_eq!(err, map.base as usize + 2 * PAGE + 8);
            let err = load_u64(map.base.add(PAGE + 64).cast()).unwrap_err();
            assert_eq!(err, map.base as usize + PAGE + 64);
            assert_eq!(load_u64(map.base.cast()), Ok(0));
        }
    }

    #[test]
    fn concurrent_faults_on_one_page_all_fail() {
        install();
        let map = Unbacked::new(2);
        let bad = map.base as usize + PAGE;
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    let mut buf = [0u8; 256];
                    for _ in 0..200 {
                        // SAFETY: the source is mapped (unbacked), `buf` local.
                        let r = unsafe { copy(buf.as_mut_ptr(), bad as *const u8, 256) };
                        assert_eq!(r, Err(bad));
                    }
                });
            }
        });
    }

    /// Outside a guarded copy SIGBUS must still kill the process. Run in a
    /// child process: the test binary re-executes itself with only this test.
    #[test]
    fn unguarded_fault_still_kills_the_process() {
        use std::os::unix::process::ExitStatusExt;

        const CHILD: &str = "PM_SIGBUS_TEST_CHILD";
        if std::env::var_os(CHILD).is_some() {
            // SAFETY: prctl with integer arguments; no core file for a crash
            // we cause on purpose.
            unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0) };
            install();
            let map = Unbacked::new(2);
            // SAFETY: mapped but unbacked: this read raises SIGBUS.
            let v = unsafe { ptr::read_volatile(map.base.add(PAGE)) };
            println!("survived a SIGBUS, read {v}");
            return;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "sigbus::tests::unguarded_fault_still_kills_the_process",
                "--test-threads=1",
                "--nocapture",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGBUS),
            "child: {:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout)
        );
    }
}
