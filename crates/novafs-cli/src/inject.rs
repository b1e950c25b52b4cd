//! `novafs inject`: damages one structure of an unmounted image on purpose
//! (NOVA-Fortis §4: media errors and scribbles), to see what detection and
//! repair make of it. The library
//! (`novafs::inject`) finds the structure; this command changes its bytes
//! or, with `--poison`, lists them as a media error in `IMAGE.badblocks`.
//! Exit 0 when done, 2 when it cannot run.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::anyhow;
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use novafs::inject::{self, Spec, Target, Which};
use pm::BadBlocks;

use crate::image::{explain, explain_fs, open};

/// `--target`'s values: the library's names, each with its line of help.
fn target_parser() -> impl TypedValueParser<Value = Target> {
    let values = Target::ALL.map(|t| PossibleValue::new(t.name()).help(t.about()));
    PossibleValuesParser::new(values).try_map(|name: String| Target::parse(&name).ok_or("unknown target"))
}

/// Which copies `--which` names.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum WhichArg {
    Primary,
    Replica,
    Both,
}

impl From<WhichArg> for Which {
    fn from(w: WhichArg) -> Which {
        match w {
            WhichArg::Primary => Which::Primary,
            WhichArg::Replica => Which::Replica,
            WhichArg::Both => Which::Both,
        }
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// The image (a file or devdax device; not mounted).
    image: PathBuf,
    /// The structure to damage; the per-inode ones (inode, log-page,
    /// log-entry, data-page, data-checksums, parity) belong to inode --ino.
    /// --live aims log-page at bytes that are read.
    #[arg(long, value_parser = target_parser())]
    target: Target,
    /// Which copy: the superblock has a replica; inode records, log pages and
    /// entries and page 2 of the fixed area have one on images made with
    /// metadata replicas (mkfs's default); data checksums have two copies;
    /// the journal, data pages and parity have none.
    #[arg(long, value_enum, default_value = "primary")]
    which: WhichArg,
    /// Inode of the inode, log-page, log-entry, data-page, data-checksums and parity targets [default: 1, the root].
    #[arg(long)]
    ino: Option<u64>,
    /// Seed of the random choices: the same seed damages the same bytes.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Mark the bytes as a media error instead of changing them: appended to
    /// IMAGE.badblocks, which every later mapping of the image loads.
    #[arg(long)]
    poison: bool,
    /// How many bytes (one run, clipped to the structure).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..))]
    bytes: u64,
    /// With --target log-page: damage only bytes a mount reads (inside the
    /// committed entries, or the end mark and link that lead to the next
    /// page), never past the log's tail. The run is clipped to one of them.
    #[arg(long)]
    live: bool,
}

/// Shown after `novafs inject --help`.
pub const AFTER_HELP: &str = "Prints one line per damaged copy: the structure, its inode if any, and the \
region offsets changed. Poison is emulated with the sidecar file IMAGE.badblocks (one `offset length` pair \
per line); reads of a listed byte fail with EIO, writes do not clear it, `rm IMAGE.badblocks` clears it.";

pub fn run(args: &Args) -> ExitCode {
    match inject_into(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("novafs: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn inject_into(args: &Args) -> anyhow::Result<()> {
    let path = &args.image;
    let target = args.target;
    if args.live && target != Target::LogPage {
        return Err(anyhow!(
            "--live applies to the log-page target only (every byte of {target} is read)"
        ));
    }
    if args.ino.is_some() && !target.per_inode() {
        return Err(anyhow!(
            "--ino applies to the inode, log-page, log-entry and data-page targets, not {target}"
        ));
    }
    let spec = Spec::new(target)
        .which(args.which.into())
        .ino(args.ino.unwrap_or(novafs::ROOT_INO))
        .seed(args.seed)
        .bytes(args.bytes)
        .live(args.live);
    // Locked: a mounted (or checked) image is refused.
    let region = open(path, true)?;
    let fail = |e| explain_inject(path, &spec, e);
    if args.poison {
        let damage = inject::plan(&*region, &spec).map_err(fail)?;
        let sidecar = BadBlocks::sidecar(path);
        for d in &damage {
            BadBlocks::append(path, d.off, d.len).map_err(|e| explain(path, e))?;
            println!(
                "{}: poisoned {d}; listed in {} (rm it to clear)",
                path.display(),
                sidecar.display()
            );
        }
    } else {
        for d in inject::corrupt(&*region, &spec).map_err(fail)? {
            println!("{}: changed {d}", path.display());
        }
    }
    Ok(())
}

/// One line for what kept the injection from running.
fn explain_inject(path: &Path, spec: &Spec, e: novafs::Error) -> anyhow::Error {
    let p = path.display();
    let ino = spec.ino;
    match e {
        novafs::Error::NotFound if spec.target.per_inode() => {
            anyhow!("{p}: inode {ino} is not in use; pass --ino of a live inode (`ls -i` on a mount shows them)")
        }
        novafs::Error::NotSupported(why) => anyhow!("{p}: {why}; use --which primary"),
        novafs::Error::Invalid(why) if spec.target.per_inode() => {
            anyhow!("{p}: inode {ino}: {why}; pass --ino of another inode")
        }
        novafs::Error::Invalid(why) => anyhow!("{p}: {why}"),
        other => explain_fs(path, other),
    }
}
