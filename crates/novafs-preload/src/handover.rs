//! The handover: before the owner's first fork, exec or spawn, the image
//! moves from this process to a novafs daemon, so that the processes to
//! come and this one reach it through one mount and never write it with
//! two sets of DRAM indexes (PRELOAD.md "Processes").
//!
//! 1. Every image descriptor is noted (inode, offset, status flags,
//!    close-on-exec), and each directory stream reads the rest of its
//!    listing.
//! 2. The image is unmounted cleanly here, and `novafs mount -o
//!    inode_names,until_unused=CLIENTS` mounts it on a private mount point.
//!    Every shim process holds CLIENTS locked shared while it lives, so
//!    the daemon unmounts itself once the last one is gone.
//! 3. Each descriptor is opened again through the mount by inode number
//!    (`.novafs-ino.N` in its root), moved to its offset and put over its
//!    placeholder (dup3): the program keeps its numbers, offsets and flags.
//!    A file unlinked while open is named in the root for the while
//!    (`carry_unlinked`), so that the clean unmount keeps it, and the name
//!    goes once it is open again.
//! 4. A working directory inside the prefix becomes the kernel's, on the
//!    mount; the environment names the mount for the children to come.

use std::ffi::{c_int, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use novafs_posix::ROOT_INO;

use crate::real::next;
use crate::route::below;
use crate::state::{hold_clients_lock, Client, Mode, Owner, Shim};
use crate::{dirs, fds, inside};

/// One image descriptor, to open again through the mount.
struct Noted {
    fd: c_int,
    /// Its open file description ([`novafs_posix::Posix::description`]):
    /// descriptors that share one are opened once and share the kernel's.
    description: usize,
    ino: u64,
    offset: i64,
    flags: c_int,
    cloexec: bool,
    dir: bool,
    /// The file has no name left (unlinked while open).
    unlinked: bool,
}

/// Hands the image over if this process owns it. Err(errno) when it
/// could not: the image is then closed to this process (its descriptors
/// fail), never left for two processes.
pub(crate) fn handover(s: &Shim) -> Result<(), c_int> {
    if !matches!(*s.mode.read(), Mode::Owner(_)) {
        return Ok(());
    }
    inside(|| {
        let mut mode = s.mode.write();
        let Mode::Owner(owner) = &*mode else { return Ok(()) };
        if owner.posix().has_mappings() {
            // The mapped pages belong to this process's mount of the image.
            tracing::warn!("novafs preload: cannot hand the image over while files of it are mapped");
            return Err(libc::EBUSY);
        }
        let place = place().map_err(|e| {
            tracing::error!("novafs preload: no place for the handover's mount: {e}");
            libc::EIO
        })?;
        let noted = note(owner);
        let carried = carry_unlinked(owner, &noted);
        let cwd = owner.cwd.lock().clone();
        let Mode::Owner(owner) = std::mem::replace(&mut *mode, Mode::Closed) else {
            return Ok(());
        };
        fds::forget_own();
        let unmounted = owner.unmount();
        if unmounted < 0 {
            tracing::error!("novafs preload: unmount for the handover failed: errno {}", -unmounted);
        }
        // Held before the daemon starts, which unmounts once it is free.
        std::env::set_var("NOVAFS_CLIENTS", place.join("clients"));
        hold_clients_lock();
        if let Err(why) = start_daemon(s, &place) {
            let msg = format!(
                "novafs preload: cannot hand {} over to a daemon: {why}\n",
                s.image.to_string_lossy()
            );
            // SAFETY: writes a buffer of its own length to stderr.
            unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
            noted.iter().for_each(|n| fds::poison(n.fd));
            return Err(libc::EIO);
        }
        let mount = place.join("mnt").into_os_string().into_encoded_bytes();
        let Some(root) = open_root(&mount) else {
            noted.iter().for_each(|n| fds::poison(n.fd));
            return Err(libc::EIO);
        };
        let mut done = std::collections::HashSet::new();
        for n in &noted {
            if done.insert(n.description) {
                let sharing: Vec<&Noted> = noted.iter().filter(|m| m.description == n.description).collect();
                reopen(&mount, &sharing);
            }
        }
        // Reopened by number: the carrying names can go again.
        for name in carried {
            let path = CString::new([&mount[..], b"/", &name[..]].concat()).unwrap_or_default();
            // SAFETY: unlink(2) of a C string (inside the shim: libc's).
            if unsafe { libc::unlink(path.as_ptr()) } != 0 {
                tracing::warn!(
                    "novafs preload: cannot remove {} after the handover: {}",
                    path.to_string_lossy(),
                    std::io::Error::last_os_error()
                );
            }
        }
        if let Some(rest) = cwd.as_deref().and_then(|c| below(&s.prefix, c)) {
            let there = CString::new([&mount[..], rest].concat()).unwrap_or_default();
            // SAFETY: chdir(2) to a C string.
            if unsafe { next!(chdir: fn(*const libc::c_char) -> c_int)(there.as_ptr()) } == 0 {
                *s.kernel_cwd.lock() = there.into_bytes();
            }
        }
        *mode = Mode::Client(Client::of_handover(mount, root));
        Ok(())
    })
}

/// Gives each file the program holds open after unlinking it a name in
/// the image's root (`Posix::relink`), so that the clean unmount keeps it
/// for the mount to reopen; returns the names, to remove once it has. A
/// crash in between leaves the file under that name (`.novafs-handover-`
/// with the process and inode numbers), never loses it silently.
fn carry_unlinked(o: &Owner, noted: &[Noted]) -> Vec<Vec<u8>> {
    let px = o.posix();
    let mut names: Vec<(u64, Vec<u8>)> = Vec::new();
    for n in noted.iter().filter(|n| n.unlinked) {
        if names.iter().any(|(ino, _)| *ino == n.ino) {
            continue;
        }
        let name = format!(".novafs-handover-{}-{}", std::process::id(), n.ino).into_bytes();
        match px.relink(n.fd, novafs_posix::At::Cwd, &[&b"/"[..], &name].concat()) {
            Ok(()) => names.push((n.ino, name)),
            Err(e) => tracing::warn!(
                "novafs preload: descriptor {} (inode {}, unlinked) cannot be carried over: errno {}",
                n.fd,
                n.ino,
                e.0
            ),
        }
    }
    names.into_iter().map(|(_, name)| name).collect()
}

fn note(o: &Owner) -> Vec<Noted> {
    dirs::drain_all(o);
    let px = o.posix();
    px.descriptors()
        .into_iter()
        .filter_map(|fd| {
            let attr = px.stat(novafs_posix::Target::Fd(fd)).ok()?;
            let dir = attr.kind == novafs_posix::FileType::Directory;
            Some(Noted {
                fd,
                description: px.description(fd).ok()?,
                ino: attr.ino,
                offset: if dir {
                    0
                } else {
                    px.lseek(fd, 0, libc::SEEK_CUR).map_or(0, |o| o as i64)
                },
                flags: px.fcntl(fd, libc::F_GETFL, 0).unwrap_or(libc::O_RDONLY),
                cloexec: px.fcntl(fd, libc::F_GETFD, 0).is_ok_and(|f| f & libc::FD_CLOEXEC != 0),
                dir,
                unlinked: attr.nlink == 0 && !dir,
            })
        })
        .collect()
}

/// A new private directory for the mount point and the clients' lock
/// file, under the directory novafs daemons keep their state in
/// (`NOVAFS_RUN_DIR`, which `novafs exec` sets; else one of the user's
/// own in the temporary directory).
fn place() -> std::io::Result<PathBuf> {
    let base = std::env::var_os("NOVAFS_RUN_DIR").map_or_else(
        || {
            // SAFETY: geteuid(2) cannot fail.
            std::env::temp_dir().join(format!("novafs-{}", unsafe { libc::geteuid() }))
        },
        PathBuf::from,
    );
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = base.join(format!("exec-{}-{stamp}", std::process::id()));
    std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
        .create(dir.join("mnt"))?;
    std::fs::File::create(dir.join("clients"))?;
    Ok(dir)
}

/// `novafs mount -o inode_names,until_unused=CLIENTS IMAGE MNT`, with
/// none of the program's descriptors and none of the shim's environment.
fn start_daemon(s: &Shim, place: &std::path::Path) -> Result<(), String> {
    let bin = s.bin.clone().unwrap_or_else(|| "novafs".into());
    let mut cmd = Command::new(&bin);
    // allow_other: the program's processes may change identity (a server
    // dropping privileges); each file's permissions are checked for them
    // (default_permissions), as the library did for the owner. The mount
    // point stays private: only the descriptor handed down leads in.
    let allow_other = if may_allow_other() { "allow_other," } else { "" };
    cmd.arg("mount")
        .arg("-o")
        .arg(format!(
            "{allow_other}inode_names,until_unused={}",
            place.join("clients").display()
        ))
        .arg("--")
        .arg(OsStr::from_bytes(s.image.to_bytes()))
        .arg(place.join("mnt"))
        .env_remove("LD_PRELOAD")
        .stdin(Stdio::null());
    for (key, _) in std::env::vars_os() {
        if key.as_bytes().starts_with(b"NOVAFS_") && key != "NOVAFS_RUN_DIR" {
            cmd.env_remove(key);
        }
    }
    // SAFETY: close_range(2) between fork and exec touches no memory; it
    // keeps the program's descriptors (a pipe's write end, say) out of the
    // daemon, which would otherwise hold them open for its whole life.
    unsafe {
        cmd.pre_exec(|| {
            // Close-on-exec rather than closed: std's pipe that reports a
            // failed exec must live until the exec.
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC);
            Ok(())
        });
    }
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", bin.to_string_lossy()))?;
    // Its exit status may never reach this process: a program's SIGCHLD
    // handler can reap any child (rsync's does). The mount itself says
    // whether it worked; what `novafs mount` printed says why not.
    let said = child.wait_with_output().map(|o| o.stderr).unwrap_or_default();
    if is_mount_point(&place.join("mnt")) {
        return Ok(());
    }
    Err(String::from_utf8_lossy(&said).trim().to_string())
}

/// The mount's root as an O_PATH descriptor above the program's, the way
/// in for this process and its children ([`Client::reach`]).
fn open_root(mount: &[u8]) -> Option<c_int> {
    use std::os::unix::fs::OpenOptionsExt;
    let root = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(OsStr::from_bytes(mount));
    match root {
        Ok(root) => Some(std::os::fd::IntoRawFd::into_raw_fd(pm::above_program_descriptors(root))),
        Err(e) => {
            tracing::error!("novafs preload: cannot open the handover's mount: {e}");
            None
        }
    }
}

/// Whether this process may mount with allow_other: as root, or as a
/// user where /etc/fuse.conf says `user_allow_other`.
fn may_allow_other() -> bool {
    // SAFETY: geteuid(2) cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    root || std::fs::read_to_string("/etc/fuse.conf")
        .is_ok_and(|conf| conf.lines().any(|l| l.trim() == "user_allow_other"))
}

/// Whether `dir` is a mount point (another device than its parent's).
fn is_mount_point(dir: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let dev = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.dev());
    matches!((dev(dir), dir.parent().map(dev)), (Ok(a), Some(Ok(b))) if a != b)
}

/// Opens a noted open file description again through the mount and puts
/// it over the numbers of the descriptors `sharing` it (one at least), so
/// that they go on sharing one offset: a log on both 1 and 2 (`2>&1`) is
/// not written over by either.
fn reopen(mount: &[u8], sharing: &[&Noted]) {
    let n = sharing[0];
    // The root is the mount point itself (the kernel refuses it by number).
    let by_number = if n.ino == ROOT_INO {
        String::new()
    } else {
        format!("/.novafs-ino.{}", n.ino)
    };
    let path = CString::new([mount, by_number.as_bytes()].concat()).unwrap_or_default();
    let flags = if n.dir {
        libc::O_RDONLY | libc::O_DIRECTORY
    } else {
        n.flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC)
    } | libc::O_CLOEXEC;
    // SAFETY: open(2) of a C string, lseek, dup3 and close of numbers.
    unsafe {
        let kfd = next!(open: fn(*const libc::c_char, c_int, libc::c_uint) -> c_int)(path.as_ptr(), flags, 0);
        if kfd < 0 {
            let why = std::io::Error::last_os_error();
            for m in sharing {
                tracing::warn!(
                    "novafs preload: descriptor {} (inode {}) cannot be opened through the mount ({why}); it fails from now on",
                    m.fd,
                    m.ino,
                );
                fds::poison(m.fd);
            }
            return;
        }
        if n.offset > 0 {
            libc::lseek(kfd, n.offset, libc::SEEK_SET);
        }
        for m in sharing {
            libc::dup3(kfd, m.fd, if m.cloexec { libc::O_CLOEXEC } else { 0 });
        }
        next!(close: fn(c_int) -> c_int)(kfd);
    }
}
