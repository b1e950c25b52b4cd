//! `novafs fsck`: offline check. Exit 0 clean, 1 problems found, 2 when the
//! check cannot run (usage, missing image, image in use, not novafs).

use std::path::Path;
use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressStyle};

use crate::image::{explain_fs, open};

pub fn run(path: &Path) -> ExitCode {
    let region = match open(path, true, false) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("novafs: {e:#}");
            return ExitCode::from(2);
        }
    };
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("checking inode tables {bar:30} {pos}/{len} chunks")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let progress = |done: u64, total: u64| {
        bar.set_length(total);
        bar.set_position(done);
    };
    let report = novafs::fsck::check(region, &progress);
    bar.finish_and_clear();
    let report = match report {
        Ok(r) => r,
        Err(novafs::Error::Corrupt(why)) => {
            println!("{}: PROBLEM: {why}", path.display());
            return ExitCode::from(1);
        }
        Err(e) => {
            eprintln!("novafs: {:#}", explain_fs(path, e));
            return ExitCode::from(2);
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
    if report.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
