//! `novafs fsck [--repair]`: offline check, and repair of what can be
//! repaired. Exit 0 clean (after repair, if asked), 1 problems remain, 2
//! when the check cannot run (usage, missing image, image in use, not
//! novafs).

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};
use pm::Region;

use crate::image::{explain_fs, open};

/// How one check ended: a report, or metadata too damaged to check.
enum Outcome {
    Checked(novafs::fsck::Report),
    Unreadable(String),
}

pub fn run(path: &Path, repair: bool) -> ExitCode {
    let region = match open(path, true) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("novafs: {e:#}");
            return ExitCode::from(2);
        }
    };
    let first = match check(path, &region) {
        Ok(o) => o,
        Err(code) => return code,
    };
    let clean = print(path, &first);
    let noted = matches!(&first, Outcome::Checked(r) if !r.notes.is_empty());
    if !repair || (clean && !noted) {
        return exit(clean);
    }
    match novafs::fsck::repair(region.clone()) {
        Ok(done) => {
            for d in &done {
                println!("{}: repaired: {d}", path.display());
            }
        }
        Err(e) => println!("{}: cannot repair: {e}", path.display()),
    }
    match check(path, &region) {
        Ok(after) => exit(print(path, &after)),
        Err(code) => code,
    }
}

fn exit(clean: bool) -> ExitCode {
    if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Runs the check with a progress bar; Err is the exit code when it could
/// not run at all.
fn check(path: &Path, region: &Arc<dyn Region>) -> Result<Outcome, ExitCode> {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("checking inodes and their data {bar:30} {pos}/{len} table chunks")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let progress = |done: u64, total: u64| {
        bar.set_length(total);
        bar.set_position(done);
    };
    let report = novafs::fsck::check(region.clone(), &progress);
    bar.finish_and_clear();
    match report {
        Ok(r) => Ok(Outcome::Checked(r)),
        Err(novafs::Error::Corrupt(why)) => Ok(Outcome::Unreadable(why.to_string())),
        Err(e) => {
            eprintln!("novafs: {:#}", explain_fs(path, e));
            Err(ExitCode::from(2))
        }
    }
}

/// Prints what a check found; true when the image is clean.
fn print(path: &Path, outcome: &Outcome) -> bool {
    let report = match outcome {
        Outcome::Checked(r) => r,
        Outcome::Unreadable(why) => {
            println!("{}: PROBLEM: {why}", path.display());
            return false;
        }
    };
    for n in &report.notes {
        println!("{}: note: {n}", path.display());
    }
    for p in &report.problems {
        println!("{}: PROBLEM: {p}", path.display());
    }
    println!(
        "{}: {} inodes ({} directories, {} files), {} pages in use, {} free, {}: {}",
        path.display(),
        report.inodes,
        report.directories,
        report.files,
        report.pages_used,
        report.pages_free,
        if report.clean {
            "cleanly unmounted"
        } else {
            "not cleanly unmounted"
        },
        if report.is_clean() {
            "clean".to_string()
        } else {
            format!("{} problem(s)", report.problems.len())
        }
    );
    report.is_clean()
}
