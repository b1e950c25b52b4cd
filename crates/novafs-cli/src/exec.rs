//! `novafs exec --image IMAGE --at PREFIX -- COMMAND [ARGS...]`: runs a
//! command with the preload shim (`libnovafs_preload.so`) serving the
//! paths under PREFIX from IMAGE, with no kernel in the data path
//! (PRELOAD.md). This command only checks the image, finds the shim, sets
//! the environment the shim reads and waits for the command; the shim
//! does the rest.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus};
use std::time::{Duration, Instant};
use std::{env, fs, io, thread};

use anyhow::{anyhow, bail, Context, Result};
use clap::builder::{OsStringValueParser, TypedValueParser};
use nix::sys::signal::{SigSet, Signal};

use crate::image::{explain_fs, open};
use crate::mount::{mount_point_of, state_dir};

/// What `novafs exec --help` adds after the options.
pub const AFTER_HELP: &str = "\
The files of IMAGE appear under PREFIX (which need not exist) to COMMAND and \
every process it starts: the first of them to touch PREFIX mounts IMAGE in \
its own process (library speed), and before it forks or runs another program \
it hands the image over to a novafs daemon on a private mount that they all \
share, which goes away with the last of them. If IMAGE is mounted already, \
they use that mount.

Trust: a process under the shim maps the whole image, so whoever can write \
IMAGE can change every file in it; IMAGE must not be group- or world-writable.

The shim is $NOVAFS_PRELOAD, else libnovafs_preload.so beside the novafs \
executable, else in ../lib from it. Exit status: COMMAND's (128+N if killed by \
signal N); 2 when novafs refuses to run it, 126 when it cannot be executed, 127 \
when it is not found.";

#[derive(clap::Args)]
pub struct Args {
    /// The novafs image whose files COMMAND sees.
    #[arg(long)]
    image: PathBuf,
    /// The directory under which the image's files appear.
    // Taken even empty, to be refused in one line as every bad PREFIX is.
    #[arg(long, value_name = "PREFIX", value_parser = OsStringValueParser::new().map(PathBuf::from))]
    at: PathBuf,
    /// What COMMAND's MAP_SHARED mappings of the image's files are:
    /// atomic (the default: stores reach the file at msync or munmap, all
    /// at once, NOVA §4.5) or dax (the file's own pages: stores durable
    /// once flushed, without atomicity). Sets NOVAFS_MMAP.
    #[arg(long, value_name = "KIND", value_parser = ["atomic", "dax"])]
    mmap: Option<String>,
    /// The program (searched in PATH) and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    command: Vec<OsString>,
}

/// The shim's file name, as `cargo build -p novafs-preload` makes it.
const SHIM: &str = "libnovafs_preload.so";

pub fn run(args: &Args) -> ExitCode {
    let cmd = match prepare(args) {
        Ok(cmd) => cmd,
        Err(e) => {
            eprintln!("novafs: {e:#}");
            return ExitCode::from(2);
        }
    };
    // The shim mounts the image in the command's process; if the command
    // forked, a daemon serves it until its last process is gone.
    let ours = cmd.get_envs().all(|(k, v)| k != "NOVAFS_MOUNT" || v.is_none());
    let waited = spawn_and_wait(cmd, &args.command[0]);
    if ours {
        wait_until_released(&args.image);
    }
    match waited {
        Ok(status) => ExitCode::from(exit_code(status)),
        Err((code, e)) => {
            eprintln!("novafs: {e:#}");
            ExitCode::from(code)
        }
    }
}

/// Every check, and the command with the shim's environment.
fn prepare(args: &Args) -> Result<Command> {
    let image = check_image(&args.image)?;
    let prefix = normalise_prefix(&args.at)?;
    let exe = env::current_exe().context("cannot find the novafs executable")?;
    let shim = find_shim(&exe)?;
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    let mut preload = shim.clone().into_os_string();
    if let Some(before) = env::var_os("LD_PRELOAD").filter(|p| !p.is_empty()) {
        preload.push(":");
        preload.push(before);
    }
    // Where a handover's daemon keeps its mount point and state: the
    // daemons' own directory.
    let run_dir = state_dir()?;
    cmd.env("LD_PRELOAD", preload)
        .env("NOVAFS_IMAGE", &image)
        .env("NOVAFS_PREFIX", &prefix)
        .env("NOVAFS_BIN", &exe)
        .env("NOVAFS_RUN_DIR", run_dir);
    if let Some(kind) = &args.mmap {
        cmd.env("NOVAFS_MMAP", kind);
    }
    // Served by a daemon already: the shim is a client of its mount. A
    // mount named by our own environment but gone is not passed on.
    for handed_down in ["NOVAFS_MOUNT", "NOVAFS_MOUNT_FD", "NOVAFS_CLIENTS", "NOVAFS_CLIENTS_FD"] {
        cmd.env_remove(handed_down);
    }
    if let Some(at) = mount_point_of(&image) {
        // A handover's daemon (`until_unused`) stays while its clients
        // hold the lock file beside its mount point: so do these.
        let clients = at.parent().map(|d| d.join("clients")).filter(|c| c.is_file());
        if let Some(clients) = clients {
            cmd.env("NOVAFS_CLIENTS", clients);
        }
        cmd.env("NOVAFS_MOUNT", at);
    }
    Ok(cmd)
}

/// The image's absolute path, once it is known to exist, to be a novafs
/// image and to be writable by its owner alone.
fn check_image(image: &Path) -> Result<PathBuf> {
    let p = image.display();
    let meta = fs::metadata(image).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => anyhow!("{p} does not exist; create it with `novafs mkfs {p}`"),
        _ => anyhow!("{p}: {e}"),
    })?;
    // The trust model (README, "C programs: libnovafs").
    if meta.permissions().mode() & 0o022 != 0 {
        bail!(
            "{p} is group- or world-writable: under the shim every process that can write it can change every file; chmod go-w {p}"
        );
    }
    let abs = fs::canonicalize(image).with_context(|| format!("{p}: bad path"))?;
    // Read without the lock: the image may be in use (mounted, or by
    // another process under the shim). Only a file that is no novafs
    // image, or one too new, is refused here; recovery is the mount's.
    match novafs::inspect(open(&abs, false)?) {
        Err(e @ (novafs::Error::NotNovafs(_) | novafs::Error::TooNew { .. })) => Err(explain_fs(image, e)),
        _ => Ok(abs),
    }
}

/// PREFIX absolute (from the working directory) and lexically normal:
/// no `.`, no `..`, no trailing slash; it need not exist.
fn normalise_prefix(at: &Path) -> Result<PathBuf> {
    if at.as_os_str().is_empty() {
        bail!("--at needs a directory: PREFIX is empty");
    }
    let abs = std::path::absolute(at).with_context(|| format!("--at {}: cannot make it absolute", at.display()))?;
    let mut norm = PathBuf::from("/");
    for c in abs.components() {
        match c {
            Component::Normal(name) => norm.push(name),
            Component::ParentDir => {
                norm.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    if norm == Path::new("/") {
        bail!("--at {}: the prefix cannot be the root directory", at.display());
    }
    Ok(norm)
}

/// `$NOVAFS_PRELOAD`, else the shim beside the executable (a cargo
/// target directory), else in `../lib` from it (the installed layout).
fn find_shim(exe: &Path) -> Result<PathBuf> {
    let found = if let Some(p) = env::var_os("NOVAFS_PRELOAD").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        if !p.is_file() {
            bail!(
                "NOVAFS_PRELOAD={} is not a file; point it at libnovafs_preload.so (`cargo build --release -p novafs-preload` builds it)",
                p.display()
            );
        }
        p
    } else {
        let dir = exe.parent().unwrap_or(Path::new("/"));
        let places = [dir.join(SHIM), dir.join("../lib").join(SHIM)];
        match places.iter().find(|p| p.is_file()) {
            Some(p) => p.clone(),
            None => bail!(
                "cannot find {SHIM} in {} or {}; build it with `cargo build --release -p novafs-preload` or set NOVAFS_PRELOAD to it",
                dir.display(),
                dir.join("../lib").display()
            ),
        }
    };
    let shim = fs::canonicalize(&found).with_context(|| format!("{}: bad path", found.display()))?;
    // The loader splits LD_PRELOAD at colons and spaces.
    if shim.to_string_lossy().contains([':', ' ']) {
        bail!(
            "{}: LD_PRELOAD cannot name a path with a colon or a space",
            shim.display()
        );
    }
    Ok(shim)
}

/// Runs the command and waits for it. SIGINT and SIGQUIT from the
/// terminal reach the command (same process group) and are held back
/// here, as `time` and `env`-like wrappers do: blocked, never delivered
/// (the child starts with an empty mask: std resets it).
fn spawn_and_wait(mut cmd: Command, name: &OsString) -> std::result::Result<ExitStatus, (u8, anyhow::Error)> {
    let mut held = SigSet::empty();
    held.add(Signal::SIGINT);
    held.add(Signal::SIGQUIT);
    if let Err(e) = held.thread_block() {
        tracing::warn!("cannot hold back SIGINT and SIGQUIT: {e}");
    }
    let shown = Path::new(name).display();
    let mut child = cmd.spawn().map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => (127, anyhow!("{shown}: command not found")),
        _ => (126, anyhow!("{shown}: {e}")),
    })?;
    child.wait().map_err(|e| (1, anyhow!("waiting for {shown}: {e}")))
}

/// How long `novafs exec` waits, after the command, for the image to be
/// let go (a handover's daemon unmounting once the command's processes
/// are gone), so that a `novafs fsck` or mount right after finds it free.
/// Processes the command left running keep it longer: then it returns.
const RELEASE_WAIT: Duration = Duration::from_secs(5);

fn wait_until_released(image: &Path) {
    let Ok(meta) = fs::metadata(image) else { return };
    let start = Instant::now();
    while start.elapsed() < RELEASE_WAIT && flocked(&meta) {
        thread::sleep(Duration::from_millis(10));
    }
}

/// Whether a process holds a flock on the file `meta` describes, as
/// /proc/locks lists them ("1: FLOCK ADVISORY WRITE PID MAJ:MIN:INO 0 EOF"),
/// without taking one (which could fail someone else's mount).
fn flocked(meta: &fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    let id = format!(
        "{:02x}:{:02x}:{}",
        libc::major(meta.dev()),
        libc::minor(meta.dev()),
        meta.ino()
    );
    fs::read_to_string("/proc/locks").is_ok_and(|locks| {
        locks.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.get(1) == Some(&"FLOCK") && f.get(5) == Some(&id.as_str())
        })
    })
}

/// The exit status a shell would report: the code, or 128 + the signal.
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(sig)) => (128 + sig) as u8,
        (None, None) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_made_absolute_and_lexically_normal() {
        let cwd = env::current_dir().expect("cwd");
        for (given, want) in [
            ("/mnt/data", PathBuf::from("/mnt/data")),
            ("/mnt/data/", PathBuf::from("/mnt/data")),
            ("/mnt/./data//", PathBuf::from("/mnt/data")),
            ("/mnt/x/../data", PathBuf::from("/mnt/data")),
            ("/../mnt", PathBuf::from("/mnt")),
            ("data", cwd.join("data")),
            ("./data/.", cwd.join("data")),
        ] {
            assert_eq!(normalise_prefix(Path::new(given)).ok(), Some(want), "{given}");
        }
        for refused in ["", "/", "/mnt/..", "/./"] {
            assert!(normalise_prefix(Path::new(refused)).is_err(), "{refused}");
        }
    }
}
