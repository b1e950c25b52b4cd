//! The targets a benchmark runs on, and their setup and teardown.
//!
//! [`LibraryTarget`] calls `novafs::Fs` directly on a region in /dev/shm;
//! [`PosixTarget`] the same through the POSIX layer libnovafs serves.
//! [`PathTarget`] is any mounted directory: novafs through FUSE (the
//! `novafs` binary next to this one), tmpfs, and ext4, xfs and btrfs on loop
//! devices backed by files in /dev/shm. Every piece of setup is held by a
//! guard whose `Drop` undoes it, so an error part-way leaves no mount, loop
//! device or scratch file behind.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use novafs::{FormatOptions, Fs, Ino, MountOptions, StatFs, ROOT_INO};
use novafs_ops::{Observed, Op, Runner};
use pm::{MapOptions, MmapRegion, Prefault, Region};

use crate::backend::{Backend, Remount};
use crate::requests::Requests;
use crate::tools::{ensure_tool, sh};
use crate::workload::{self, Outcome, Params, Workload};

/// Something the workloads can run on.
pub trait Target {
    fn name(&self) -> &str;
    /// Whether `w` means anything on this target (no recovery on tmpfs,
    /// no fio on the library).
    fn supports(&self, w: Workload) -> bool;
    /// Run `w` once in a fresh directory `tag`.
    fn run(&mut self, w: Workload, p: &Params, tag: &str) -> Result<Outcome>;
}

mod posix;

pub use posix::PosixTarget;

/// Every target the harness knows, in table order.
pub const ALL: [&str; 8] = [
    "novafs-lib",
    posix::NAME,
    "novafs-fuse",
    "tmpfs",
    "ext4-ordered",
    "ext4-journal",
    "xfs",
    "btrfs",
];

/// novafs through its mount with the kernel's writeback cache: asked
/// for by name (`--targets`), not in [`ALL`].
pub const WRITEBACK: &str = "novafs-fuse-wb";

/// The baseline the ratios are taken against.
pub const BASELINE: &str = "ext4-journal";

/// Set up target `name` with `size_mib` MiB of space under `scratch`.
pub fn setup(name: &str, scratch: &Path, size_mib: u64, novafs_bin: &Path) -> Result<Box<dyn Target>> {
    let work = WorkDir::new(scratch.join(name))?;
    Ok(match name {
        "novafs-lib" => Box::new(LibraryTarget::new(work, size_mib)?),
        posix::NAME => Box::new(PosixTarget::new(work, size_mib)?),
        "novafs-fuse" => Box::new(PathTarget::novafs_fuse(
            work,
            size_mib,
            novafs_bin,
            "novafs-fuse",
            "stats",
        )?),
        // Writes durable at fsync or close, as on the kernel file systems
        // (README, "Writeback cache"); not in the default set.
        WRITEBACK => Box::new(PathTarget::novafs_fuse(
            work,
            size_mib,
            novafs_bin,
            WRITEBACK,
            "stats,writeback_cache",
        )?),
        "tmpfs" => Box::new(PathTarget::tmpfs(work, size_mib)?),
        "ext4-ordered" => Box::new(PathTarget::on_loop(
            work,
            size_mib,
            "ext4-ordered",
            "ext4",
            &["-q", "-F"],
            "data=ordered",
        )?),
        "ext4-journal" => Box::new(PathTarget::on_loop(
            work,
            size_mib,
            "ext4-journal",
            "ext4",
            &["-q", "-F"],
            "data=journal",
        )?),
        "xfs" => Box::new(PathTarget::on_loop(work, size_mib, "xfs", "xfs", &["-q", "-f"], "")?),
        "btrfs" => Box::new(PathTarget::on_loop(
            work,
            size_mib,
            "btrfs",
            "btrfs",
            &["-q", "-f"],
            "",
        )?),
        other => bail!("unknown target {other:?} (known: {})", ALL.join(", ")),
    })
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// A scratch directory, removed with its contents on drop.
pub struct WorkDir(PathBuf);

impl WorkDir {
    pub fn new(path: PathBuf) -> Result<WorkDir> {
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).with_context(|| format!("create {}", path.display()))?;
        Ok(WorkDir(path))
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An attached loop device, detached on drop.
struct LoopDev(String);

impl LoopDev {
    fn attach(image: &Path) -> Result<LoopDev> {
        let dev = sh(Command::new("losetup").arg("-f").arg("--show").arg(image))?;
        Ok(LoopDev(dev))
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.0).output();
    }
}

/// How to mount a kernel file system again: `mount -t fstype [-o options] dev`.
struct KernelSource {
    dev: String,
    fstype: String,
    options: String,
}

/// A mount, unmounted on drop (by `novafs umount` for the FUSE daemon).
enum Mounted {
    /// `source` is `None` for tmpfs, which loses its contents on unmount.
    Kernel { mnt: PathBuf, source: Option<KernelSource> },
    Fuse {
        novafs: PathBuf,
        run_dir: PathBuf,
        image: PathBuf,
        mnt: PathBuf,
        /// `-o` of `novafs mount`.
        options: &'static str,
        /// The daemon serving the mount, from `novafs mount`'s output.
        pid: u32,
    },
}

impl Mounted {
    fn novafs_cmd(novafs: &Path, run_dir: &Path) -> Command {
        let mut c = Command::new(novafs);
        c.env("NOVAFS_RUN_DIR", run_dir);
        c
    }

    /// `novafs mount -o OPTIONS IMAGE MNT`; returns the daemon's pid, which
    /// it prints as "daemon pid N". Every target's options have `stats`,
    /// which times every request (two clock reads each) for the
    /// personalities' request breakdown.
    fn fuse_mount(novafs: &Path, run_dir: &Path, image: &Path, mnt: &Path, options: &str) -> Result<u32> {
        let out = sh(Self::novafs_cmd(novafs, run_dir)
            .args(["mount", "-o", options])
            .arg(image)
            .arg(mnt))?;
        parse_daemon_pid(&out).with_context(|| format!("no daemon pid in `novafs mount` output {out:?}"))
    }

    fn kernel_mount(s: &KernelSource, mnt: &Path) -> Result<()> {
        let mut mount = Command::new("mount");
        mount.args(["-t", &s.fstype]);
        if !s.options.is_empty() {
            mount.arg("-o").arg(&s.options);
        }
        sh(mount.arg(&s.dev).arg(mnt)).map(|_| ())
    }

    fn can_remount(&self) -> bool {
        !matches!(self, Mounted::Kernel { source: None, .. })
    }

    /// Clean unmount, then mount again; the mount's wall time in ms (mount(8)
    /// or `novafs mount` as a process: includes starting it).
    fn remount_clean(&mut self) -> Result<f64> {
        match self {
            Mounted::Kernel { source: None, .. } => bail!("tmpfs loses its contents on unmount"),
            Mounted::Kernel { mnt, source: Some(s) } => {
                sh(Command::new("umount").arg(&*mnt))?;
                let t = Instant::now();
                Self::kernel_mount(s, mnt)?;
                Ok(ms_since(t))
            }
            Mounted::Fuse {
                novafs,
                run_dir,
                image,
                mnt,
                options,
                pid,
            } => {
                sh(Self::novafs_cmd(novafs, run_dir).arg("umount").arg(&*mnt))?;
                let t = Instant::now();
                *pid = Self::fuse_mount(novafs, run_dir, image, mnt, options)?;
                Ok(ms_since(t))
            }
        }
    }

    /// For novafs through FUSE: SIGKILL the daemon (its image is left as a
    /// crash leaves it), detach the dead mount, and time `novafs mount`,
    /// which recovers. Kernel file systems cannot be crashed from here.
    fn remount_crash(&mut self) -> Result<Option<f64>> {
        let Mounted::Fuse {
            novafs,
            run_dir,
            image,
            mnt,
            options,
            pid,
        } = self
        else {
            return Ok(None);
        };
        sh(Command::new("kill").arg("-KILL").arg(pid.to_string()))?;
        // The daemon is not our child: wait until it is gone (or a zombie;
        // nobody may reap it) and its last thread has let go of the image's
        // flock, which `flock -n` tells.
        let gone = |p: u32| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).map_or(true, |s| {
                s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z'))
            })
        };
        let unlocked = |img: &Path| {
            Command::new("flock")
                .arg("-n")
                .arg(img)
                .arg("true")
                .output()
                .is_ok_and(|o| o.status.success())
        };
        let t = Instant::now();
        while !(gone(*pid) && unlocked(image)) {
            if t.elapsed() > Duration::from_secs(10) {
                bail!(
                    "the novafs daemon {pid} did not let go of {} after SIGKILL",
                    image.display()
                );
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        // Detaches the dead mount; it reports that the image was not marked clean.
        sh(Self::novafs_cmd(novafs, run_dir).arg("umount").arg(&*mnt))?;
        let t = Instant::now();
        *pid = Self::fuse_mount(novafs, run_dir, image, mnt, options)?;
        Ok(Some(ms_since(t)))
    }
}

/// The pid in `novafs mount`'s "… (daemon pid N, log …)".
fn parse_daemon_pid(out: &str) -> Option<u32> {
    let rest = &out[out.find("daemon pid ")? + "daemon pid ".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = match self {
            Mounted::Kernel { mnt, .. } => Command::new("umount").arg(&*mnt).output(),
            Mounted::Fuse {
                novafs, run_dir, mnt, ..
            } => Self::novafs_cmd(novafs, run_dir).arg("umount").arg(&*mnt).output(),
        };
    }
}

/// novafs through the library, on a region file in the scratch directory.
/// Its life cycle (mkfs, mount, unmount, crash) goes through novafs's
/// operation vocabulary ([`novafs_ops`]).
pub struct LibraryTarget {
    runner: Runner,
    _work: Option<WorkDir>,
}

impl LibraryTarget {
    /// A fresh file system on a `size_mib` MiB region file in `work`.
    pub fn new(work: WorkDir, size_mib: u64) -> Result<LibraryTarget> {
        let image = work.0.join("novafs.img");
        // Measure the file system, not first-touch page faults.
        let opts = MapOptions {
            prefault: Prefault::Now,
            ..MapOptions::default()
        };
        let region = MmapRegion::create(&image, size_mib << 20, &opts)
            .with_context(|| format!("create region {}", image.display()))?;
        let mut t = LibraryTarget::on_region(Arc::new(region))?;
        t._work = Some(work);
        Ok(t)
    }

    /// A fresh file system on `region` (`novafs bench`'s mapped image, a
    /// heap region in the tests), formatted with the default options.
    pub fn on_region(region: Arc<dyn Region>) -> Result<LibraryTarget> {
        LibraryTarget::on_region_with(region, FormatOptions::default())
    }

    /// A fresh file system on `region`, formatted with `format` (`novafs
    /// bench --compare-replicas` formats one without metadata replicas).
    pub fn on_region_with(region: Arc<dyn Region>, format: FormatOptions) -> Result<LibraryTarget> {
        LibraryTarget::on_region_mounted(region, format, MountOptions::default())
    }

    /// A fresh file system on `region`, formatted with `format` and
    /// mounted with `mount` (`novafs bench --compare-journal` mounts one
    /// with the block-granular journal).
    pub fn on_region_mounted(
        region: Arc<dyn Region>,
        format: FormatOptions,
        mount: MountOptions,
    ) -> Result<LibraryTarget> {
        let mut runner = Runner::new(region, format).mount_with(mount);
        runner.apply(&Op::Mkfs).context("format")?;
        runner.apply(&Op::Mount).context("mount")?;
        Ok(LibraryTarget { runner, _work: None })
    }

    /// The mounted file system.
    pub fn fs(&self) -> Result<&Fs> {
        self.runner.fs().context("library target is not mounted")
    }

    pub fn statfs(&self) -> Result<StatFs> {
        Ok(self.fs()?.statfs())
    }

    /// What log GC reclaimed since the last mount.
    pub fn gc_stats(&self) -> Result<novafs::GcStats> {
        Ok(self.fs()?.gc_stats())
    }

    /// Mount the region again and check that the mount went the way it was
    /// meant to (clean or recovered); its wall time in ms.
    fn mount_timed(&mut self, expect_clean: bool) -> Result<f64> {
        let t = Instant::now();
        let mounted = self.runner.apply(&Op::Mount).context("mount again")?;
        let ms = ms_since(t);
        let Observed::Mounted(report) = mounted else {
            bail!("a mount observed {mounted:?}");
        };
        if report.clean != expect_clean {
            bail!(
                "expected a {} mount, got a {} one",
                which(expect_clean),
                which(report.clean)
            );
        }
        Ok(ms)
    }
}

fn which(clean: bool) -> &'static str {
    if clean {
        "clean"
    } else {
        "recovering"
    }
}

impl Remount for LibraryTarget {
    fn remount_clean(&mut self) -> Result<f64> {
        self.runner.apply(&Op::Unmount).context("unmount")?;
        self.mount_timed(true)
    }
    fn remount_crash(&mut self) -> Result<Option<f64>> {
        self.runner.apply(&Op::Crash).context("crash")?;
        self.mount_timed(false).map(Some)
    }
}

impl Drop for LibraryTarget {
    fn drop(&mut self) {
        // Unmounted already if a remount failed half-way: nothing to do.
        let _ = self.runner.apply(&Op::Unmount);
    }
}

/// Timed loops call `Fs` directly, not through [`novafs_ops`]: the
/// vocabulary names nodes by path and books handles, which would add a
/// path resolution to every operation measured.
impl Backend for LibraryTarget {
    type Dir = Ino;
    type File = Ino;

    fn mkdir(&self, name: &str) -> Result<Ino> {
        Ok(self.fs()?.mkdir(ROOT_INO, name.as_bytes(), 0o755, 0, 0)?.ino)
    }
    fn rmdir(&self, name: &str) -> Result<()> {
        Ok(self.fs()?.rmdir(ROOT_INO, name.as_bytes())?)
    }
    fn create(&self, dir: &Ino, name: &str) -> Result<Ino> {
        Ok(self.fs()?.create(*dir, name.as_bytes(), 0o644, 0, 0)?.ino)
    }
    fn open(&self, dir: &Ino, name: &str) -> Result<Ino> {
        Ok(self.fs()?.lookup(*dir, name.as_bytes())?.ino)
    }
    fn write_at(&self, file: &Ino, off: u64, buf: &[u8]) -> Result<()> {
        let n = self.fs()?.write(*file, off, buf)?;
        if n != buf.len() {
            bail!("short write: {n} of {} bytes", buf.len());
        }
        Ok(())
    }
    fn read_at(&self, file: &Ino, off: u64, buf: &mut [u8]) -> Result<()> {
        let n = self.fs()?.read(*file, off, buf)?;
        if n != buf.len() {
            bail!("short read: {n} of {} bytes", buf.len());
        }
        Ok(())
    }
    fn fsync(&self, file: &Ino) -> Result<()> {
        Ok(self.fs()?.fsync(*file)?)
    }
    fn unlink(&self, dir: &Ino, name: &str) -> Result<()> {
        Ok(self.fs()?.unlink(*dir, name.as_bytes())?)
    }
    fn len(&self, file: &Ino) -> Result<u64> {
        Ok(self.fs()?.getattr(*file)?.size)
    }
    fn stat(&self, dir: &Ino, name: &str) -> Result<u64> {
        Ok(self.fs()?.lookup(*dir, name.as_bytes())?.size)
    }
    fn journal_stats(&self) -> Option<novafs::JournalStats> {
        self.fs().ok().map(Fs::journal_stats)
    }
    fn batch_stats(&self) -> Option<novafs::BatchStats> {
        self.fs().ok().map(Fs::batch_stats)
    }
}

impl Target for LibraryTarget {
    fn name(&self) -> &str {
        "novafs-lib"
    }
    fn supports(&self, w: Workload) -> bool {
        w != Workload::Fio
    }
    fn run(&mut self, w: Workload, p: &Params, tag: &str) -> Result<Outcome> {
        match w {
            Workload::Recovery(s) => workload::recovery(self, s, p, tag).map(Outcome::values),
            _ => workload::run(self, w, p, tag),
        }
    }
}

/// A mounted directory, through std::fs and fsync(2).
pub struct PathTarget {
    name: &'static str,
    root: PathBuf,
    // Dropped in this order: unmount, detach the loop device, remove files.
    mount: Mounted,
    _loop: Option<LoopDev>,
    _work: WorkDir,
}

impl PathTarget {
    /// novafs through its mount: `name` is the target's, `options` the
    /// mount's (`stats` and any other).
    fn novafs_fuse(
        work: WorkDir,
        size_mib: u64,
        novafs: &Path,
        name: &'static str,
        options: &'static str,
    ) -> Result<PathTarget> {
        if !novafs.is_file() {
            bail!(
                "{} not found: build it with `cargo build --release -p novafs-cli`",
                novafs.display()
            );
        }
        if !Path::new("/dev/fuse").exists() {
            bail!("/dev/fuse is missing");
        }
        let image = work.0.join("novafs.img");
        let mnt = work.0.join("mnt");
        let run_dir = work.0.join("run");
        std::fs::create_dir_all(&mnt)?;
        sh(Command::new(novafs)
            .env("NOVAFS_RUN_DIR", &run_dir)
            .arg("mkfs")
            .arg("--size")
            .arg(format!("{size_mib}M"))
            .arg(&image))?;
        let pid = Mounted::fuse_mount(novafs, &run_dir, &image, &mnt, options)?;
        let mount = Mounted::Fuse {
            novafs: novafs.to_path_buf(),
            run_dir,
            image,
            mnt: mnt.clone(),
            options,
            pid,
        };
        Ok(PathTarget {
            name,
            root: mnt,
            mount,
            _loop: None,
            _work: work,
        })
    }

    fn tmpfs(work: WorkDir, size_mib: u64) -> Result<PathTarget> {
        let mnt = work.0.join("mnt");
        std::fs::create_dir_all(&mnt)?;
        sh(Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={size_mib}M"))
            .arg("tmpfs")
            .arg(&mnt))?;
        Ok(PathTarget {
            name: "tmpfs",
            root: mnt.clone(),
            mount: Mounted::Kernel { mnt, source: None },
            _loop: None,
            _work: work,
        })
    }

    fn on_loop(
        work: WorkDir,
        size_mib: u64,
        name: &'static str,
        fstype: &str,
        mkfs_args: &[&str],
        options: &str,
    ) -> Result<PathTarget> {
        let mkfs_name = format!("mkfs.{fstype}");
        let package = match fstype {
            "ext4" => "e2fsprogs",
            "xfs" => "xfsprogs",
            "btrfs" => "btrfs-progs",
            other => other,
        };
        let mkfs = ensure_tool(&mkfs_name, package)?;
        let image = work.0.join(format!("{fstype}.img"));
        let mnt = work.0.join("mnt");
        std::fs::create_dir_all(&mnt)?;
        File::create(&image)?.set_len(size_mib << 20)?;
        sh(Command::new(mkfs).args(mkfs_args).arg(&image))?;
        let dev = LoopDev::attach(&image)?;
        let source = KernelSource {
            dev: dev.0.clone(),
            fstype: fstype.to_string(),
            options: options.to_string(),
        };
        Mounted::kernel_mount(&source, &mnt)?;
        Ok(PathTarget {
            name,
            root: mnt.clone(),
            mount: Mounted::Kernel {
                mnt,
                source: Some(source),
            },
            _loop: Some(dev),
            _work: work,
        })
    }
}

impl Backend for PathTarget {
    type Dir = PathBuf;
    type File = File;

    fn mkdir(&self, name: &str) -> Result<PathBuf> {
        let d = self.root.join(name);
        std::fs::create_dir(&d).with_context(|| format!("mkdir {}", d.display()))?;
        Ok(d)
    }
    fn rmdir(&self, name: &str) -> Result<()> {
        let d = self.root.join(name);
        std::fs::remove_dir(&d).with_context(|| format!("rmdir {}", d.display()))
    }
    fn create(&self, dir: &PathBuf, name: &str) -> Result<File> {
        let p = dir.join(name);
        OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&p)
            .with_context(|| format!("create {}", p.display()))
    }
    fn open(&self, dir: &PathBuf, name: &str) -> Result<File> {
        let p = dir.join(name);
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .with_context(|| format!("open {}", p.display()))
    }
    fn write_at(&self, file: &File, off: u64, buf: &[u8]) -> Result<()> {
        Ok(file.write_all_at(buf, off)?)
    }
    fn read_at(&self, file: &File, off: u64, buf: &mut [u8]) -> Result<()> {
        Ok(file.read_exact_at(buf, off)?)
    }
    fn fsync(&self, file: &File) -> Result<()> {
        Ok(file.sync_all()?)
    }
    fn unlink(&self, dir: &PathBuf, name: &str) -> Result<()> {
        let p = dir.join(name);
        std::fs::remove_file(&p).with_context(|| format!("unlink {}", p.display()))
    }
    fn len(&self, file: &File) -> Result<u64> {
        Ok(file.metadata().context("fstat")?.len())
    }
    fn stat(&self, dir: &PathBuf, name: &str) -> Result<u64> {
        let p = dir.join(name);
        Ok(std::fs::metadata(&p)
            .with_context(|| format!("stat {}", p.display()))?
            .len())
    }
    /// `novafs stats MNT` for the FUSE daemon.
    fn requests(&self) -> Result<Option<Requests>> {
        let Mounted::Fuse {
            novafs, run_dir, mnt, ..
        } = &self.mount
        else {
            return Ok(None);
        };
        let table = sh(Mounted::novafs_cmd(novafs, run_dir).arg("stats").arg(mnt))?;
        Requests::parse(&table).map(Some)
    }
}

impl Remount for PathTarget {
    fn remount_clean(&mut self) -> Result<f64> {
        // Everything written back first, so the unmount is not what is timed.
        sh(&mut Command::new("sync"))?;
        self.mount.remount_clean()
    }
    fn remount_crash(&mut self) -> Result<Option<f64>> {
        self.mount.remount_crash()
    }
}

impl Target for PathTarget {
    fn name(&self) -> &str {
        self.name
    }
    fn supports(&self, w: Workload) -> bool {
        match w {
            Workload::Recovery(_) => self.mount.can_remount(),
            _ => true,
        }
    }
    fn run(&mut self, w: Workload, p: &Params, tag: &str) -> Result<Outcome> {
        let out = match w {
            Workload::Recovery(s) => Outcome::values(workload::recovery(self, s, p, tag)?),
            Workload::Fio => Outcome::values(
                crate::fio::run(&self.root.join(tag), p)?
                    .into_iter()
                    .map(Some)
                    .collect(),
            ),
            _ => workload::run(self, w, p, tag)?,
        };
        // Write back what this run left dirty so the next target is not charged for it.
        sh(&mut Command::new("sync"))?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{PersonalityParams, RecoverySet, SetShape};

    fn params() -> Params {
        let shape = SetShape {
            files: 20,
            file_size: 64 << 10,
            io: 16 << 10,
        };
        Params {
            files: 10,
            appends: 2,
            append_ops: 10,
            file_mib: 1,
            random_ops: 10,
            personality: PersonalityParams {
                files: 10,
                threads: 1,
                secs: 0.01,
            },
            recovery: [shape; 3],
            fio_ms: 10,
            fio_file_mib: 1,
        }
    }

    #[test]
    fn recovery_on_the_library_times_a_clean_and_a_recovering_mount() {
        let mut t = LibraryTarget::on_region(Arc::new(pm::MemRegion::new(64 << 20))).expect("format");
        let v = t
            .run(Workload::Recovery(RecoverySet::Medium), &params(), "rec")
            .expect("recovery run")
            .values;
        assert_eq!(v.len(), 2);
        assert!(v.iter().all(|x| x.is_some_and(|ms| ms > 0.0)), "{v:?}");
        // The set is gone again and the file system still works.
        assert!(t.stat(&ROOT_INO, "rec").is_err());
        assert!(
            t.fs().expect("mounted").mount_report().scanned_inodes > 0,
            "the last mount recovered"
        );
    }

    #[test]
    fn the_micro_benchmark_on_the_library_times_every_phase_and_leaves_no_file() {
        let mut t = LibraryTarget::on_region(Arc::new(pm::MemRegion::new(64 << 20))).expect("format");
        let v = t.run(Workload::Micro, &params(), "micro").expect("micro run").values;
        assert_eq!(v.len(), Workload::Micro.metrics().len());
        assert!(v.iter().all(|x| x.is_some_and(|us| us > 0.0)), "{v:?}");
        assert!(t.stat(&ROOT_INO, "micro").is_err(), "its directory is gone");
        // `novafs bench` runs it in the root; every file goes again.
        let m = crate::workload::micro(&t, &ROOT_INO, 5, 3).expect("micro in the root");
        assert!(m.read > 0.0 && m.unlink > 0.0, "{m:?}");
        // A create and an unlink are one transaction each; appends, reads
        // and overwrites of one file never use the journal.
        let j = m.journal.expect("the library counts its journal");
        assert_eq!(j.map(|p| p.ops), [5, 15, 15, 15, 15, 5]);
        assert_eq!(j.map(|p| p.stats.txns), [5, 0, 0, 0, 0, 5]);
        assert_eq!(j.map(|p| p.fences_per_op()), [3.0, 0.0, 0.0, 0.0, 0.0, 3.0]);
        assert!(j[0].bytes_per_op() > 0.0 && j[1].bytes_per_op() == 0.0, "{j:?}");
        let mut names = 0;
        t.fs()
            .expect("mounted")
            .readdir(ROOT_INO, 0, |_| {
                names += 1;
                false
            })
            .expect("readdir");
        assert_eq!(names, 2, "only . and .. are left");
    }

    #[test]
    fn mount_times_alternate_clean_and_recovering_mounts_and_keep_the_set() {
        let mut t = LibraryTarget::on_region(Arc::new(pm::MemRegion::new(64 << 20))).expect("format");
        let dir = t.mkdir("recovery").expect("mkdir");
        let shape = SetShape {
            files: 4,
            file_size: 64 << 10,
            io: 64 << 10,
        };
        let (names, times) = crate::workload::time_mounts(&mut t, &dir, shape, 3).expect("mounts");
        assert_eq!((times.clean.len(), times.crash.len()), (3, 3));
        assert!(times.crash.iter().all(Option::is_some), "the library can crash");
        assert_eq!(
            t.fs().expect("mounted").mount_report().scanned_inodes,
            6,
            "root, directory, 4 files"
        );
        for n in &names {
            assert_eq!(t.stat(&dir, n).expect("kept"), 64 << 10);
        }
    }

    #[test]
    fn dram_is_measured_on_files_that_are_removed_again() {
        let t = LibraryTarget::on_region(Arc::new(pm::MemRegion::new(96 << 20))).expect("format");
        let before = t.statfs().expect("statfs");
        let d = crate::memory::measure(&t, 100).expect("measure");
        assert!(d.per_file >= 0.0 && d.per_page >= 0.0, "{d:?}");
        assert!(t.stat(&ROOT_INO, "mem").is_err());
        assert_eq!(t.statfs().expect("statfs").files_free, before.files_free);
    }

    #[test]
    fn the_daemon_pid_comes_from_novafs_mount_output() {
        let out = "novafs: mounted /a/img on /a/mnt (daemon pid 4242, log /run/x.log)";
        assert_eq!(parse_daemon_pid(out), Some(4242));
        assert_eq!(parse_daemon_pid("novafs: mounted"), None);
    }
}
