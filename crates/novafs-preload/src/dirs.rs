//! Directory streams (opendir, readdir, closedir) on the image's
//! directories. glibc's own `DIR` reads with system calls the shim cannot
//! see, so an image directory gets a stream of the shim's, told apart
//! from glibc's by its address.

use std::collections::{BTreeSet, VecDeque};
use std::ffi::{c_char, c_int};

use novafs_posix::DirEntry;
use parking_lot::Mutex;

use crate::real::next;
use crate::state::{Owner, Shim};
use crate::{as_program, enter, fail, fds, paths::at_path, set_errno};

/// A stream on an image directory.
pub(crate) struct ShimDir {
    fd: c_int,
    /// Entries read ahead: what was left of the listing when the image
    /// moved to a daemon, or a batch of getdents64 after that.
    pending: VecDeque<DirEntry>,
    /// The listing ended with `pending` (it was read to its end at a
    /// handover; the kernel's descriptor would start it over).
    exhausted: bool,
    entry: libc::dirent64,
}

/// The streams of the shim's, by address.
static STREAMS: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

fn ours(dir: *mut libc::DIR) -> Option<&'static mut ShimDir> {
    // SAFETY: an address in STREAMS is a live Box<ShimDir> of this module
    // (removed before it is freed); the program uses a stream from one
    // thread at a time (readdir's contract).
    STREAMS
        .lock()
        .contains(&(dir as usize))
        .then(|| unsafe { &mut *dir.cast::<ShimDir>() })
}

fn stream(fd: c_int) -> *mut libc::DIR {
    // SAFETY: `struct dirent64` is plain integers and bytes: all zeroes is
    // a value.
    let entry = unsafe { std::mem::zeroed() };
    let dir = Box::into_raw(Box::new(ShimDir {
        fd,
        pending: VecDeque::new(),
        exhausted: false,
        entry,
    }));
    STREAMS.lock().insert(dir as usize);
    dir.cast()
}

#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut libc::DIR {
    // SAFETY: libc's contract, passed on.
    let theirs = |p: *const c_char| unsafe { next!(opendir: fn(*const c_char) -> *mut libc::DIR)(p) };
    let image = |s: &'static Shim, o: &Owner, d: c_int, p: &std::ffi::CStr| {
        let abs = || s.absolute_of(&s.mode.read(), p.to_bytes());
        let fd = fds::open_image(
            o,
            d,
            p.to_bytes(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            0,
            abs,
        );
        if fd < 0 {
            return std::ptr::null_mut();
        }
        stream(fd)
    };
    enter(
        |s| at_path(s, libc::AT_FDCWD, path, |o, d, p| image(s, o, d, p), |_, p| theirs(p)),
        || theirs(path),
    )
}

#[no_mangle]
pub unsafe extern "C" fn fdopendir(fd: c_int) -> *mut libc::DIR {
    // SAFETY: libc's contract, passed on.
    let theirs = || unsafe { next!(fdopendir: fn(c_int) -> *mut libc::DIR)(fd) };
    let image = |o: &Owner| match o.posix().kind(fd) {
        Ok(novafs_posix::FileType::Directory) => stream(fd),
        Ok(_) => fail(libc::ENOTDIR),
        Err(e) => fail(e.0),
    };
    enter(|s| fds::on_fd(s, fd, image, theirs), theirs)
}

/// The next entry of one of the shim's streams.
fn next_entry(s: &Shim, dir: &mut ShimDir) -> Option<DirEntry> {
    loop {
        if let Some(e) = dir.pending.pop_front() {
            return Some(e);
        }
        if dir.exhausted {
            return None;
        }
        let fd = dir.fd;
        let image = |o: &Owner| Some(o.posix().readdir(fd));
        match fds::on_fd(s, fd, image, || None) {
            Some(Ok(e)) => return e,
            Some(Err(e)) => {
                set_errno(e.0);
                return None;
            }
            None => {
                if !kernel_batch(dir) {
                    return None;
                }
            }
        }
    }
}

/// Reads a batch of entries from the kernel (after a handover, a stream
/// is on the daemon's mount); false at the end or on an error (errno set).
fn kernel_batch(dir: &mut ShimDir) -> bool {
    let mut buf = vec![0u8; 32 << 10];
    // SAFETY: getdents64 into a buffer of its length.
    let n = unsafe { libc::syscall(libc::SYS_getdents64, dir.fd, buf.as_mut_ptr(), buf.len()) };
    if n <= 0 {
        return false;
    }
    let mut at = 0usize;
    while at + 19 < n as usize {
        let rec = &buf[at..];
        let ino = u64::from_ne_bytes(rec[0..8].try_into().unwrap_or_default());
        let off = i64::from_ne_bytes(rec[8..16].try_into().unwrap_or_default());
        let reclen = u16::from_ne_bytes(rec[16..18].try_into().unwrap_or_default()) as usize;
        let dtype = rec[18];
        let name = &rec[19..reclen.max(19)];
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        dir.pending.push_back(DirEntry {
            ino,
            kind: kind_of(dtype),
            name: name.to_vec(),
            next_offset: off as u64,
        });
        if reclen == 0 {
            break;
        }
        at += reclen;
    }
    true
}

fn kind_of(dtype: u8) -> novafs_posix::FileType {
    use novafs_posix::FileType as T;
    match dtype {
        libc::DT_DIR => T::Directory,
        libc::DT_LNK => T::Symlink,
        libc::DT_CHR => T::CharDevice,
        libc::DT_BLK => T::BlockDevice,
        libc::DT_FIFO => T::NamedPipe,
        libc::DT_SOCK => T::Socket,
        _ => T::RegularFile,
    }
}

fn dtype(kind: novafs_posix::FileType) -> u8 {
    use novafs_posix::FileType as T;
    match kind {
        T::RegularFile => libc::DT_REG,
        T::Directory => libc::DT_DIR,
        T::Symlink => libc::DT_LNK,
        T::CharDevice => libc::DT_CHR,
        T::BlockDevice => libc::DT_BLK,
        T::NamedPipe => libc::DT_FIFO,
        T::Socket => libc::DT_SOCK,
    }
}

#[no_mangle]
pub unsafe extern "C" fn readdir64(dirp: *mut libc::DIR) -> *mut libc::dirent64 {
    // SAFETY: libc's contract, passed on.
    let theirs = || unsafe { next!(readdir64: fn(*mut libc::DIR) -> *mut libc::dirent64)(dirp) };
    let image = |s: &'static Shim| {
        let Some(dir) = ours(dirp) else { return theirs() };
        let Some(e) = next_entry(s, dir) else {
            return std::ptr::null_mut();
        };
        let d = &mut dir.entry;
        d.d_ino = e.ino;
        d.d_off = e.next_offset as i64;
        d.d_reclen = std::mem::size_of::<libc::dirent64>() as u16;
        d.d_type = dtype(e.kind);
        let n = e.name.len().min(d.d_name.len() - 1);
        for (to, &from) in d.d_name.iter_mut().zip(&e.name[..n]) {
            *to = from as c_char;
        }
        d.d_name[n] = 0;
        d
    };
    enter(image, theirs)
}

/// On this platform `struct dirent` is `struct dirent64`.
#[no_mangle]
pub unsafe extern "C" fn readdir(dirp: *mut libc::DIR) -> *mut libc::dirent64 {
    // SAFETY: the same call.
    unsafe { readdir64(dirp) }
}

#[no_mangle]
pub unsafe extern "C" fn closedir(dirp: *mut libc::DIR) -> c_int {
    // SAFETY: libc's contract, passed on.
    let theirs = || unsafe { next!(closedir: fn(*mut libc::DIR) -> c_int)(dirp) };
    let image = |_: &'static Shim| {
        if !STREAMS.lock().remove(&(dirp as usize)) {
            return theirs();
        }
        // SAFETY: a stream of ours, just taken out of STREAMS.
        let dir = unsafe { Box::from_raw(dirp.cast::<ShimDir>()) };
        // SAFETY: closing the stream's descriptor, as closedir does.
        as_program(|| unsafe { fds::close(dir.fd) })
    };
    enter(image, theirs)
}

#[no_mangle]
pub unsafe extern "C" fn dirfd(dirp: *mut libc::DIR) -> c_int {
    // SAFETY: libc's contract, passed on.
    let theirs = || unsafe { next!(dirfd: fn(*mut libc::DIR) -> c_int)(dirp) };
    enter(|_| ours(dirp).map_or_else(theirs, |d| d.fd), theirs)
}

#[no_mangle]
pub unsafe extern "C" fn rewinddir(dirp: *mut libc::DIR) {
    // SAFETY: libc's contract, passed on.
    let theirs = || unsafe { next!(rewinddir: fn(*mut libc::DIR) -> ())(dirp) };
    let image = |_: &'static Shim| {
        let Some(dir) = ours(dirp) else { return theirs() };
        dir.pending.clear();
        dir.exhausted = false;
        // SAFETY: lseek of the stream's own descriptor, as rewinddir does.
        as_program(|| unsafe { fds::lseek(dir.fd, 0, libc::SEEK_SET) });
    };
    enter(image, theirs);
}

/// At a handover: every stream on an image directory reads the rest of
/// its listing now (its descriptor is about to become the daemon's, whose
/// offsets are its own).
pub(crate) fn drain_all(o: &Owner) {
    for addr in STREAMS.lock().iter() {
        // SAFETY: a live stream of ours (see `ours`); the handover runs with
        // no other call of the shim in flight.
        let dir = unsafe { &mut *(*addr as *mut ShimDir) };
        if !o.owns(dir.fd) {
            continue;
        }
        while let Ok(Some(e)) = o.posix().readdir(dir.fd) {
            dir.pending.push_back(e);
        }
        dir.exhausted = true;
    }
}
