//! Who serves the image to this process, set up before `main` and put
//! away at exit.
//!
//! - **Owner**: the first process under the shim mounts the image here
//!   (libnovafs), taking its lock; its calls are library calls.
//! - **Client**: a process started after the owner handed the image to a
//!   novafs daemon (`NOVAFS_MOUNT` names the mount), or while a daemon
//!   serves it already: its paths under the prefix are rewritten to the
//!   mount's, and the kernel does the rest.
//! - **Closed**: the owner unmounted at exit (or could not hand over);
//!   the image's paths and descriptors fail with EIO or EBADF from then on,
//!   never silently reaching something else.

use std::collections::HashMap;
use std::ffi::{c_int, CStr, CString, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::sync::OnceLock;

use capi::Novafs;
use parking_lot::{Mutex, RwLock};

/// The shim's state: the prefix and image it was given, and who serves
/// them now.
pub(crate) struct Shim {
    /// The directory served, absolute, no trailing slash (`/` is refused).
    pub(crate) prefix: Vec<u8>,
    pub(crate) image: CString,
    /// The novafs executable, to start the daemon a handover needs.
    pub(crate) bin: Option<OsString>,
    pub(crate) mode: RwLock<Mode>,
    /// The kernel's working directory, kept at each chdir that reaches it,
    /// so that a relative path leading into the prefix is seen.
    pub(crate) kernel_cwd: Mutex<Vec<u8>>,
    /// Kernel directory descriptors opened by name, by number.
    pub(crate) kernel_dirs: Mutex<HashMap<c_int, crate::route::KernelDir>>,
}

pub(crate) enum Mode {
    Owner(Owner),
    Client(Client),
    Closed,
}

/// A client's mount of the image.
pub(crate) struct Client {
    /// The mount point serving the image (absolute, no trailing slash): the
    /// kernel's paths (getcwd) show it.
    pub(crate) mount: Vec<u8>,
    /// The path this process goes in by: `/proc/self/fd/N`, N the mount's
    /// root handed down from the handover (NOVAFS_MOUNT_FD), else the mount
    /// point. The handover's directory is its owner's alone (0700), so a
    /// process that changed identity since (a server dropping privileges,
    /// `su`) reaches the mount only through that descriptor; the mount then
    /// checks each file's permissions for it, as the owner's library did.
    pub(crate) reach: Vec<u8>,
}

impl Client {
    fn new(mount: &[u8]) -> Client {
        let mount = crate::route::normalize(mount);
        let reach = match inherited_fd("NOVAFS_MOUNT_FD") {
            Some(fd) => format!("/proc/self/fd/{fd}").into_bytes(),
            None => mount.clone(),
        };
        Client { mount, reach }
    }

    /// A client of the mount the handover just made, whose root is `root`
    /// (a descriptor of this process's, handed down to its children).
    pub(crate) fn of_handover(mount: Vec<u8>, root: c_int) -> Client {
        hand_down_fd("NOVAFS_MOUNT_FD", root);
        std::env::set_var("NOVAFS_MOUNT", std::ffi::OsStr::from_bytes(&mount));
        Client::new(&mount)
    }
}

/// The image mounted in this process.
pub(crate) struct Owner {
    fs: Box<Novafs>,
    /// The working directory when it is inside the prefix: its absolute
    /// path as the program named it (the image's cwd is set to it too).
    pub(crate) cwd: Mutex<Option<Vec<u8>>>,
    /// Where each directory descriptor was opened (for fchdir and getcwd).
    pub(crate) dir_paths: Mutex<HashMap<c_int, Vec<u8>>>,
}

// SAFETY: a handle may be used from any thread (libnovafs: "Every call is
// thread-safe"); the Box is only ever read through shared references.
unsafe impl Send for Owner {}
// SAFETY: as above.
unsafe impl Sync for Owner {}

impl Owner {
    /// The handle, for libnovafs's calls.
    pub(crate) fn handle(&self) -> *const Novafs {
        &*self.fs
    }

    pub(crate) fn posix(&self) -> &novafs_posix::Posix {
        self.fs.posix()
    }

    /// Whether `fd` is one of the image's descriptors.
    pub(crate) fn owns(&self, fd: c_int) -> bool {
        fd >= 0 && self.posix().fcntl(fd, libc::F_GETFD, 0).is_ok()
    }

    /// Unmounts cleanly, giving back the handle.
    pub(crate) fn unmount(self) -> c_int {
        // SAFETY: a handle novafs_mount returned, given back once.
        unsafe { capi::novafs_unmount(Box::into_raw(self.fs)) }
    }
}

static SHIM: OnceLock<Shim> = OnceLock::new();

/// The shim's state, or None when it serves nothing (no NOVAFS_PREFIX).
pub(crate) fn shim() -> Option<&'static Shim> {
    SHIM.get()
}

fn env_bytes(name: &str) -> Option<Vec<u8>> {
    std::env::var_os(name).map(OsString::into_vec).filter(|v| !v.is_empty())
}

/// Stops the process before `main`: the shim cannot do what it was asked,
/// and running the program on the bare prefix directory would lose its
/// writes.
fn refuse(why: &str) -> ! {
    let msg = format!("novafs preload: {why}\n");
    // SAFETY: writes a buffer of its own length to stderr, then ends the
    // process without running it.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::_exit(125);
    }
}

/// Sets the shim up from its environment: NOVAFS_PREFIX (the directory to
/// serve), NOVAFS_IMAGE, NOVAFS_MOUNT (a client of that mount),
/// NOVAFS_CLIENTS (the lock file every client holds shared, so that the
/// daemon of a handover outlives them all), NOVAFS_BIN.
extern "C" fn start() {
    crate::inside(|| {
        let Some(prefix) = env_bytes("NOVAFS_PREFIX") else {
            return;
        };
        let prefix = crate::route::normalize(&prefix);
        if !prefix.starts_with(b"/") || prefix == b"/" {
            refuse("NOVAFS_PREFIX must be an absolute directory other than /");
        }
        let Some(image) = env_bytes("NOVAFS_IMAGE").and_then(|i| CString::new(i).ok()) else {
            refuse("NOVAFS_PREFIX is set but NOVAFS_IMAGE is not (use novafs exec --image IMAGE --at PREFIX)")
        };
        let mode = match env_bytes("NOVAFS_MOUNT") {
            Some(mount) => {
                hold_clients_lock();
                Mode::Client(Client::new(&mount))
            }
            None => Mode::Owner(mount_here(&image)),
        };
        let _ = SHIM.set(Shim {
            prefix,
            image,
            bin: std::env::var_os("NOVAFS_BIN").or_else(novafs_beside_the_shim),
            mode: RwLock::new(mode),
            kernel_cwd: Mutex::new(kernel_cwd()),
            kernel_dirs: Mutex::new(HashMap::new()),
        });
    });
}

/// Mounts the image in this process, or stops it with the reason.
fn mount_here(image: &CStr) -> Owner {
    let shown = image.to_string_lossy();
    let meta = std::fs::metadata(std::ffi::OsStr::from_bytes(image.to_bytes()))
        .unwrap_or_else(|e| refuse(&format!("{shown}: {e}")));
    // README "Trust model": whoever can write the image can change every
    // file in it, whatever their modes.
    if std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o022 != 0 && meta.is_file() {
        refuse(&format!(
            "{shown} is group- or world-writable: under the shim every process that can write it can change every file in it; chmod go-w {shown}"
        ));
    }
    let mut err = 0;
    // NOVAFS_PREFAULT=now: the page tables built before main (a benchmark
    // that should not count first-touch faults of an emulated image).
    let mut flags = match std::env::var("NOVAFS_PREFAULT").as_deref() {
        Ok("now") => capi::NOVAFS_PREFAULT,
        _ => 0,
    };
    // NOVAFS_MMAP: what a MAP_SHARED mapping is (PRELOAD.md "mmap").
    match std::env::var("NOVAFS_MMAP").as_deref() {
        Ok("atomic") | Err(_) => flags |= capi::NOVAFS_MMAP_ATOMIC,
        Ok("dax") => {}
        Ok(other) => refuse(&format!("NOVAFS_MMAP={other}: use atomic or dax")),
    }
    // SAFETY: a NUL-terminated path and a valid output pointer.
    let fs = unsafe { capi::novafs_mount(image.as_ptr(), flags, &mut err) };
    if fs.is_null() {
        let why = std::io::Error::from_raw_os_error(err);
        if err == libc::EBUSY || err == libc::EWOULDBLOCK {
            refuse(&format!(
                "{shown} is in use by another process and this one is not its client (start programs on it with novafs exec, which goes through its mount): {why}"
            ));
        }
        refuse(&format!("cannot mount {shown}: {why}"));
    }
    // SAFETY: a handle novafs_mount just returned, owned from here on.
    let fs = unsafe { Box::from_raw(fs) };
    keep_image_descriptors(image);
    crate::fds::open_null();
    Owner {
        fs,
        cwd: Mutex::new(None),
        dir_paths: Mutex::new(HashMap::new()),
    }
}

/// The novafs executable where it is installed with this library: beside
/// it (a cargo target directory) or in `../bin` from it (/usr/local/lib).
fn novafs_beside_the_shim() -> Option<OsString> {
    // SAFETY: dladdr(3) of a function of this library, into a struct it
    // fills; its file name is a C string the loader keeps.
    let lib = unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(start as *const libc::c_void, &mut info) == 0 || info.dli_fname.is_null() {
            return None;
        }
        std::path::PathBuf::from(std::ffi::OsStr::from_bytes(CStr::from_ptr(info.dli_fname).to_bytes()))
    };
    let dir = lib.parent()?;
    [dir.join("novafs"), dir.join("../bin/novafs")]
        .into_iter()
        .find(|p| p.is_file())
        .map(|p| p.into_os_string())
}

/// Protects the descriptors open on the image (the library's: they hold
/// its lock) from the program.
fn keep_image_descriptors(image: &CStr) {
    let Ok(image) = std::fs::canonicalize(std::ffi::OsStr::from_bytes(image.to_bytes())) else {
        return;
    };
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    for entry in fds.flatten() {
        let fd = entry.file_name().to_str().and_then(|n| n.parse::<c_int>().ok());
        if let (Some(fd), Ok(target)) = (fd, std::fs::read_link(entry.path())) {
            if target == image {
                crate::fds::keep_own(fd);
            }
        }
    }
}

/// Takes this process's shared lock on NOVAFS_CLIENTS, on a descriptor of
/// its own that stays open across exec. A program exec'd keeps the one its
/// parent handed down (NOVAFS_CLIENTS_FD: the lock belongs to the open
/// file, so the daemon never sees a gap), which it could not open again
/// after a change of identity; failing that it opens its own.
pub(crate) fn hold_clients_lock() {
    if let Some(fd) = inherited_fd("NOVAFS_CLIENTS_FD") {
        crate::fds::keep_own(fd);
        return;
    }
    let Some(path) = env_bytes("NOVAFS_CLIENTS").and_then(|p| CString::new(p).ok()) else {
        return;
    };
    let Ok(file) = std::fs::File::open(std::ffi::OsStr::from_bytes(path.as_bytes())) else {
        return;
    };
    let fd = std::os::fd::IntoRawFd::into_raw_fd(pm::above_program_descriptors(file));
    // SAFETY: flock on the descriptor just opened.
    // Not waiting: a daemon holding it exclusively is going away, and this
    // process finds its mount gone (ENOTCONN), as after a crash.
    if unsafe { libc::flock(fd, libc::LOCK_SH | libc::LOCK_NB) } != 0 {
        tracing::warn!("novafs preload: the image's daemon is leaving");
    }
    hand_down_fd("NOVAFS_CLIENTS_FD", fd);
}

/// Keeps `fd` open across exec and names it in the environment as
/// `N:DEV:INO`, for [`inherited_fd`] in the programs to come; it is the
/// shim's from now on (the program cannot close it).
fn hand_down_fd(var: &str, fd: c_int) {
    // SAFETY: fcntl and fstat of a descriptor of this process, into a
    // zeroed stat.
    let st = unsafe {
        libc::fcntl(fd, libc::F_SETFD, 0);
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(fd, &mut st);
        st
    };
    std::env::set_var(var, format!("{fd}:{}:{}", st.st_dev, st.st_ino));
    crate::fds::keep_own(fd);
}

/// The descriptor `var` names (`N:DEV:INO`, [`hand_down_fd`]) when it is
/// still open on that file here: a program between the two processes may
/// have closed it and opened something else under its number.
fn inherited_fd(var: &str) -> Option<c_int> {
    let text = String::from_utf8(env_bytes(var)?).ok()?;
    let mut parts = text.split(':').map(str::parse::<u64>);
    let (Some(Ok(fd)), Some(Ok(dev)), Some(Ok(ino))) = (parts.next(), parts.next(), parts.next()) else {
        return None;
    };
    let fd = c_int::try_from(fd).ok()?;
    // SAFETY: fstat of a number into a zeroed stat (EBADF when not open).
    let st = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        (libc::fstat(fd, &mut st) == 0).then_some(st)?
    };
    (st.st_dev == dev && st.st_ino == ino).then_some(fd)
}

/// The kernel's working directory now.
pub(crate) fn kernel_cwd() -> Vec<u8> {
    std::env::current_dir()
        .map(|p| p.into_os_string().into_vec())
        .unwrap_or_else(|_| b"/".to_vec())
}

/// At exit: stdio's buffers are written out first (libc flushes them only
/// after the destructors), then the owner unmounts cleanly.
extern "C" fn stop() {
    let Some(shim) = shim() else { return };
    crate::inside(|| {
        // SAFETY: flushes every stdio stream, as exit would.
        unsafe { libc::fflush(std::ptr::null_mut()) };
        let mut mode = shim.mode.write();
        if !matches!(*mode, Mode::Owner(_)) {
            return;
        }
        if let Mode::Owner(owner) = std::mem::replace(&mut *mode, Mode::Closed) {
            crate::fds::poison_all(&owner);
            // On a thread of its own: this one's thread-locals (the core's
            // lock-order checks keep some) are gone by now.
            let r = std::thread::spawn(move || crate::inside(|| owner.unmount()))
                .join()
                .unwrap_or(-libc::EIO);
            if r < 0 {
                tracing::error!("novafs preload: unmount at exit failed: errno {}", -r);
            }
        }
    });
}

#[used]
#[link_section = ".init_array"]
static START: extern "C" fn() = start;

#[used]
#[link_section = ".fini_array"]
static STOP: extern "C" fn() = stop;
