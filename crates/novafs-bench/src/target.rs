//! The targets a benchmark runs on, and their setup and teardown.
//!
//! [`LibraryTarget`] calls `novafs::Fs` directly on a region in /dev/shm.
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

use anyhow::{bail, Context, Result};
use novafs::{FormatOptions, Fs, Ino, MountOptions, ROOT_INO};
use pm::{MapOptions, MmapRegion, Region};

use crate::workload::{self, Backend, Params, Workload};

/// Something the workloads can run on.
pub trait Target {
    fn name(&self) -> &str;
    /// Run `w` once in a fresh directory `tag`; one value per metric.
    fn run(&self, w: Workload, p: &Params, tag: &str) -> Result<Vec<f64>>;
}

/// Every target the harness knows, in table order.
pub const ALL: [&str; 7] = [
    "novafs-lib",
    "novafs-fuse",
    "tmpfs",
    "ext4-ordered",
    "ext4-journal",
    "xfs",
    "btrfs",
];

/// The baseline the ratios are taken against.
pub const BASELINE: &str = "ext4-journal";

/// Set up target `name` with `size_mib` MiB of space under `scratch`.
pub fn setup(name: &str, scratch: &Path, size_mib: u64, novafs_bin: &Path) -> Result<Box<dyn Target>> {
    let work = WorkDir::new(scratch.join(name))?;
    Ok(match name {
        "novafs-lib" => Box::new(LibraryTarget::new(work, size_mib)?),
        "novafs-fuse" => Box::new(PathTarget::novafs_fuse(work, size_mib, novafs_bin)?),
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

/// Run a command, failing with its stderr if it does not succeed.
fn sh(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("run {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The full path of `tool` on $PATH (or the sbin directories), if any.
fn find_tool(tool: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"])
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.is_file());
    found
}

/// A scratch directory, removed with its contents on drop.
struct WorkDir(PathBuf);

impl WorkDir {
    fn new(path: PathBuf) -> Result<WorkDir> {
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

/// A mount, unmounted on drop (by `novafs umount` for the FUSE daemon).
enum Mounted {
    Kernel(PathBuf),
    Fuse {
        novafs: PathBuf,
        run_dir: PathBuf,
        mnt: PathBuf,
    },
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = match self {
            Mounted::Kernel(mnt) => Command::new("umount").arg(&*mnt).output(),
            Mounted::Fuse { novafs, run_dir, mnt } => Command::new(&*novafs)
                .env("NOVAFS_RUN_DIR", &*run_dir)
                .arg("umount")
                .arg(&*mnt)
                .output(),
        };
    }
}

/// novafs through the library, on a region file in the scratch directory.
pub struct LibraryTarget {
    fs: Option<Fs>,
    _work: WorkDir,
}

impl LibraryTarget {
    fn new(work: WorkDir, size_mib: u64) -> Result<LibraryTarget> {
        let image = work.0.join("novafs.img");
        let region = MmapRegion::create(&image, size_mib << 20, &MapOptions::default())
            .with_context(|| format!("create region {}", image.display()))?;
        let region: Arc<dyn Region> = Arc::new(region);
        Fs::format(region.clone(), &FormatOptions::default()).context("format")?;
        let fs = Fs::open(region, MountOptions::default()).context("mount")?;
        Ok(LibraryTarget {
            fs: Some(fs),
            _work: work,
        })
    }

    fn fs(&self) -> Result<&Fs> {
        self.fs.as_ref().context("library target already unmounted")
    }
}

impl Drop for LibraryTarget {
    fn drop(&mut self) {
        if let Some(fs) = self.fs.take() {
            let _ = fs.unmount();
        }
    }
}

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
}

impl Target for LibraryTarget {
    fn name(&self) -> &str {
        "novafs-lib"
    }
    fn run(&self, w: Workload, p: &Params, tag: &str) -> Result<Vec<f64>> {
        workload::run(self, w, p, tag)
    }
}

/// A mounted directory, through std::fs and fsync(2).
pub struct PathTarget {
    name: &'static str,
    root: PathBuf,
    // Dropped in this order: unmount, detach the loop device, remove files.
    _mount: Mounted,
    _loop: Option<LoopDev>,
    _work: WorkDir,
}

impl PathTarget {
    fn novafs_fuse(work: WorkDir, size_mib: u64, novafs: &Path) -> Result<PathTarget> {
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
        sh(Command::new(novafs)
            .env("NOVAFS_RUN_DIR", &run_dir)
            .arg("mount")
            .arg(&image)
            .arg(&mnt))?;
        let mount = Mounted::Fuse {
            novafs: novafs.to_path_buf(),
            run_dir,
            mnt: mnt.clone(),
        };
        Ok(PathTarget {
            name: "novafs-fuse",
            root: mnt,
            _mount: mount,
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
            _mount: Mounted::Kernel(mnt),
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
        let mkfs = find_tool(&mkfs_name).with_context(|| format!("{mkfs_name} is not installed"))?;
        let image = work.0.join(format!("{fstype}.img"));
        let mnt = work.0.join("mnt");
        std::fs::create_dir_all(&mnt)?;
        File::create(&image)?.set_len(size_mib << 20)?;
        sh(Command::new(mkfs).args(mkfs_args).arg(&image))?;
        let dev = LoopDev::attach(&image)?;
        let mut mount = Command::new("mount");
        mount.args(["-t", fstype]);
        if !options.is_empty() {
            mount.arg("-o").arg(options);
        }
        sh(mount.arg(&dev.0).arg(&mnt))?;
        Ok(PathTarget {
            name,
            root: mnt.clone(),
            _mount: Mounted::Kernel(mnt),
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
}

impl Target for PathTarget {
    fn name(&self) -> &str {
        self.name
    }
    fn run(&self, w: Workload, p: &Params, tag: &str) -> Result<Vec<f64>> {
        let out = workload::run(self, w, p, tag)?;
        // Write back what this run left dirty so the next target is not charged for it.
        sh(&mut Command::new("sync"))?;
        Ok(out)
    }
}
