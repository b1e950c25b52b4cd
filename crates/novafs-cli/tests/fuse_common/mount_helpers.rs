//! mount(8)'s helpers (/sbin/mount.novafs, /sbin/mount.fuse.novafs) pointed
//! at this build for one test, and what was there put back afterwards.
//!
//! Putting back, rather than giving the test a private mount namespace
//! with its own /sbin: it needs neither unshare nor overlayfs (a container
//! may allow neither), and the test's mounts stay where the test and
//! mount(8) see them. What was there is saved first (a copy of each entry,
//! or a note that it was absent) under an exclusive lock, which also keeps
//! test runs of several processes or checkouts from overlapping. Dropping
//! the guard puts it back, also when the test panics; a run killed before
//! that leaves the saved copy, and the next run restores from it first.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{symlink, MetadataExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg, AT_FDCWD};
use nix::sys::stat::{utimensat, UtimensatFlags};
use nix::sys::time::TimeSpec;

/// Where mount(8) looks for the helpers of types novafs and fuse.novafs.
pub const SBIN_HELPERS: [&str; 2] = ["/sbin/mount.novafs", "/sbin/mount.fuse.novafs"];

/// Files to install, and where to keep what they replace.
pub struct Places {
    pub helpers: Vec<PathBuf>,
    /// Held locked (flock) while the helpers are installed: an existing
    /// file or directory, so that no lock file is left behind.
    pub lock: PathBuf,
    /// Holds what was there: present exactly while it must be put back.
    pub saved: PathBuf,
}

impl Places {
    /// The machine's /sbin helpers, saved under /var/tmp (kept across a
    /// reboot, so that even then the next run puts them back).
    pub fn sbin() -> Places {
        Places {
            helpers: SBIN_HELPERS.iter().map(PathBuf::from).collect(),
            lock: PathBuf::from("/sbin"),
            saved: PathBuf::from("/var/tmp/novafs-test-mount-helpers.saved"),
        }
    }
}

/// The helpers, installed as symbolic links to a binary until dropped.
pub struct Installed {
    places: Places,
    /// False once [`Installed::abandon`] has left the helpers installed.
    restore: bool,
    _lock: Flock<File>,
}

impl Installed {
    pub fn new(places: Places, exe: &Path) -> Installed {
        let file = File::open(&places.lock).unwrap_or_else(|e| panic!("{}: {e}", places.lock.display()));
        let lock = Flock::lock(file, FlockArg::LockExclusive)
            .unwrap_or_else(|(_, e)| panic!("lock {}: {e}", places.lock.display()));
        if places.saved.exists() {
            eprintln!("putting back the mount helpers an interrupted test run left installed");
            restore(&places).expect("put back the helpers an interrupted run left");
        }
        save(&places).expect("save the helpers before replacing them");
        for helper in &places.helpers {
            remove(helper).expect("remove a helper");
            symlink(exe, helper).unwrap_or_else(|e| panic!("install {}: {e}", helper.display()));
        }
        Installed {
            places,
            restore: true,
            _lock: lock,
        }
    }

    /// Leaves the helpers installed and the saved copy in place, as a run
    /// killed midway does (its lock goes with it).
    pub fn abandon(mut self) {
        self.restore = false;
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        if !self.restore {
            return;
        }
        if let Err(e) = restore(&self.places) {
            // A second panic while unwinding would abort before the first
            // one's message is printed.
            if std::thread::panicking() {
                eprintln!("cannot put back the mount helpers: {e}");
            } else {
                panic!("cannot put back the mount helpers: {e}");
            }
        }
    }
}

/// Copies each helper (a link as a link, with its times) into `saved`,
/// or a note that it was absent; the rename makes `saved` appear only
/// when complete.
fn save(places: &Places) -> io::Result<()> {
    let new = places.saved.with_extension("new");
    if new.exists() {
        fs::remove_dir_all(&new)?;
    }
    fs::create_dir(&new)?;
    for helper in &places.helpers {
        let copy = new.join(name(helper));
        match fs::symlink_metadata(helper) {
            Ok(m) if m.file_type().is_symlink() => symlink(fs::read_link(helper)?, &copy)?,
            Ok(m) if m.is_file() => drop(fs::copy(helper, &copy)?),
            Ok(_) => {
                return Err(io::Error::other(format!(
                    "{} is neither a file nor a link",
                    helper.display()
                )))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                File::create(absent(&copy))?;
                continue;
            }
            Err(e) => return Err(e),
        }
        copy_times(helper, &copy)?;
    }
    fs::rename(&new, &places.saved)
}

/// Puts back what `saved` holds, then removes it.
fn restore(places: &Places) -> io::Result<()> {
    for helper in &places.helpers {
        let copy = places.saved.join(name(helper));
        remove(helper)?;
        if absent(&copy).exists() {
            continue;
        }
        if fs::symlink_metadata(&copy)?.file_type().is_symlink() {
            symlink(fs::read_link(&copy)?, helper)?;
        } else {
            fs::copy(&copy, helper)?;
        }
        copy_times(&copy, helper)?;
    }
    fs::remove_dir_all(&places.saved)
}

/// Gives `to` the access and modification times of `from` (of a link
/// itself, not of what it points to).
fn copy_times(from: &Path, to: &Path) -> io::Result<()> {
    let m = fs::symlink_metadata(from)?;
    utimensat(
        AT_FDCWD,
        to,
        &TimeSpec::new(m.atime(), m.atime_nsec()),
        &TimeSpec::new(m.mtime(), m.mtime_nsec()),
        UtimensatFlags::NoFollowSymlink,
    )
    .map_err(io::Error::from)
}

fn name(helper: &Path) -> &std::ffi::OsStr {
    helper.file_name().expect("a helper's file name")
}

/// The note that a helper was absent, beside where its copy would be.
fn absent(copy: &Path) -> PathBuf {
    let mut note = copy.as_os_str().to_owned();
    note.push(".absent");
    PathBuf::from(note)
}

fn remove(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}
