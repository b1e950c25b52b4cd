//! The `novafs` command: make, check, inspect and benchmark novafs images.
//! Every failure prints one line saying what is wrong and what to do.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod bench_aged;
mod bench_apps;
mod bench_breakdown;
mod bench_fgm;
mod bench_ladder;
mod bench_mmap;
mod bench_nvmm;
mod bench_recovery;
mod bench_snapshots;
mod bench_txninfo;
mod control;
mod crashcheck;
mod exec;
mod fsck;
mod image;
mod info;
mod inject;
mod mkfs;
mod mount;
mod scrub;
mod snapshot;
mod space;
mod tune;

#[derive(Parser)]
#[command(
    name = "novafs",
    version,
    about = "NOVA log-structured file system for persistent memory, in user space"
)]
struct Cli {
    /// Log more (repeat for more detail); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create a file system on IMAGE (a file, created if missing, or a devdax device).
    Mkfs(mkfs::Args),
    /// Check IMAGE offline; exit 0 when clean, 1 when problems are found, 2 when it cannot run.
    Fsck {
        /// Repair what can be repaired (keeping everything that still reads), then check again.
        #[arg(long)]
        repair: bool,
        image: PathBuf,
    },
    /// Show IMAGE's format, geometry, usage and state.
    Info { image: PathBuf },
    /// Mount IMAGE on MOUNTPOINT through FUSE, served by a background daemon once ready.
    Mount(mount::MountArgs),
    /// Run COMMAND with the preload shim serving IMAGE's files under PREFIX in-process (no kernel in the data path).
    #[command(after_help = exec::AFTER_HELP)]
    Exec(exec::Args),
    /// Unmount a novafs mount; returns once the image is marked clean.
    Umount {
        /// Where the file system is mounted.
        mountpoint: PathBuf,
    },
    /// Print the FUSE requests a mount has served, by operation: how many, and with `-o stats` the time spent waiting for each, inside novafs and replying.
    Stats {
        /// Where the file system is mounted.
        mountpoint: PathBuf,
    },
    /// Run the library benchmark (NOVA §5.2 microbenchmark and 4 KiB reads).
    Bench(bench::Args),
    /// Check that every operation is atomic at every crash point (crash-image enumeration).
    Crashcheck(crashcheck::Args),
    /// Damage one structure of an unmounted IMAGE on purpose, or poison it (emulated media error).
    #[command(after_help = inject::AFTER_HELP)]
    Inject(inject::Args),
    /// Read everything redundancy protects and repair what it can: online on a mount point (rate-limited) or offline on an image; exit 0 when nothing is left damaged, 1 when something is, 2 when it cannot run.
    Scrub(scrub::Args),
    /// Turn a protection feature of an unmounted IMAGE on or off (e.g. --enable meta-protection), rebuilding it beside itself; or set its default consistency mode (--mode strict|relaxed).
    Tune(tune::Args),
    /// Snapshots (NOVA-Fortis §3): create, list, delete, mount, rollback.
    #[command(subcommand)]
    Snapshot(snapshot::SnapshotCmd),
}

fn main() -> ExitCode {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // Called as mount(8)'s helper: /sbin/mount.novafs for fstab lines of
    // type novafs, /sbin/mount.fuse.novafs for type fuse.novafs (`mount -t
    // novafs` cannot reach a helper: mount(8) reads a type that starts
    // with "no" as "every type but vafs").
    let called = args.first().map(PathBuf::from);
    let name = called.as_deref().and_then(|p| p.file_name()).and_then(|n| n.to_str());
    // mount(8)'s "mount failure" status.
    let helper_failure = |e: anyhow::Error| {
        eprintln!("{e:#}");
        ExitCode::from(32)
    };
    if matches!(name, Some("mount.novafs" | "mount.fuse.novafs")) {
        match mount::helper_call(&args) {
            Ok(mount::HelperCall::Mount(line)) => args = line,
            Ok(mount::HelperCall::Nothing) => return ExitCode::SUCCESS,
            Ok(mount::HelperCall::Remount { target, options }) => {
                return mount::remount(Path::new(&target), &options)
                    .map_or_else(helper_failure, |()| ExitCode::SUCCESS);
            }
            Err(e) => return helper_failure(e),
        }
    }
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        // A value its parser refused (a size, a mode): one line, as for
        // every other failure, with clap's exit status for bad usage.
        Err(e) if e.kind() == clap::error::ErrorKind::ValueValidation => {
            let text = e.render().to_string();
            let line = text.lines().next().unwrap_or_default();
            eprintln!("novafs: {}", line.trim_start_matches("error: "));
            return ExitCode::from(2);
        }
        Err(e) => e.exit(),
    };
    let level = match (cli.verbose, &cli.cmd) {
        // Crash images are damaged on purpose, thousands of them: the
        // core's warnings about each would bury the checker's report.
        (0, Cmd::Crashcheck(_)) => "error",
        (0, _) => "warn",
        (1, _) => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| level.into());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.cmd {
        Cmd::Mkfs(args) => mkfs::run(&args),
        Cmd::Fsck { repair, image } => return fsck::run(&image, repair),
        Cmd::Info { image } => info::run(&image),
        Cmd::Bench(args) => bench::run(&args),
        Cmd::Crashcheck(args) => return crashcheck::run(&args),
        Cmd::Inject(args) => return inject::run(&args),
        Cmd::Tune(args) => tune::run(&args),
        Cmd::Scrub(args) => return scrub::run(&args),
        Cmd::Mount(args) => return mount::run(&args),
        Cmd::Exec(args) => return exec::run(&args),
        Cmd::Umount { mountpoint } => mount::umount(&mountpoint),
        Cmd::Stats { mountpoint } => print_stats(&mountpoint),
        Cmd::Snapshot(cmd) => match snapshot::run(&cmd) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("novafs: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `novafs stats MOUNTPOINT`: the daemon's request table.
fn print_stats(mountpoint: &Path) -> anyhow::Result<()> {
    let Some(socket) = mount::control_socket(mountpoint)? else {
        anyhow::bail!("{} is not a novafs mount point", mountpoint.display());
    };
    print!("{}", control::stats(&socket)?);
    Ok(())
}
