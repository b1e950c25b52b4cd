//! README's set-up (`scripts/run.sh`) and CI (`.ci/run`) must install
//! every program the tests start. A machine where earlier runs installed
//! things by hand would hide a missing one, so this reads the tests'
//! sources for the programs they run and checks that both scripts install
//! each one's Debian package, unless Debian's essential set always has it.

use std::fs;
use std::path::{Path, PathBuf};

/// The Debian package of each program the tests run.
const PACKAGE_OF: &[(&str, &str)] = &[
    ("cc", "gcc"),
    ("chmod", "coreutils"),
    ("cmp", "diffutils"),
    ("cp", "coreutils"),
    ("diff", "diffutils"),
    ("fallocate", "util-linux"),
    ("fio", "fio"),
    ("fusermount3", "fuse3"),
    ("getfacl", "acl"),
    ("getfattr", "attr"),
    ("git", "git"),
    ("ls", "coreutils"),
    ("mkfifo", "coreutils"),
    ("mount", "mount"),
    ("postmark", "postmark"),
    ("python3", "python3"),
    ("rmdir", "coreutils"),
    ("rsync", "rsync"),
    ("setfacl", "acl"),
    ("setfattr", "attr"),
    ("setpriv", "util-linux"),
    ("sh", "dash"),
    ("sqlite3", "sqlite3"),
    ("stat", "coreutils"),
    ("sync", "coreutils"),
    ("tar", "tar"),
    ("touch", "coreutils"),
    ("true", "coreutils"),
    ("umount", "mount"),
    ("unshare", "util-linux"),
];

/// Packages every Debian system has (Essential: yes).
const ESSENTIAL: &[&str] = &["coreutils", "dash", "diffutils", "tar", "util-linux"];

/// Programs the tests run other than by name through `Command::new`:
/// through a path (`setpriv`, `python3`), inside `sh -c` scripts, from a
/// list of arguments (`fallocate`), or as the command of `novafs exec`
/// (`fio`, `postmark`).
const INDIRECT: &[&str] = &[
    "setpriv",
    "ls",
    "rmdir",
    "stat",
    "touch",
    "fallocate",
    "mount",
    "fio",
    "postmark",
    "python3",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every program the crates' tests start by name (a string literal given
/// to `Command::new`), and the indirect ones.
fn programs_the_tests_run() -> Vec<String> {
    let mut files = Vec::new();
    for krate in fs::read_dir(root().join("crates")).expect("crates/").flatten() {
        rust_files(&krate.path().join("tests"), &mut files);
    }
    let mut programs: Vec<String> = INDIRECT.iter().map(|p| p.to_string()).collect();
    for file in files {
        let text = fs::read_to_string(&file).expect("read a test source");
        for piece in text.split("Command::new(\"").skip(1) {
            if let Some(end) = piece.find('"') {
                programs.push(piece[..end].to_string());
            }
        }
    }
    programs.sort();
    programs.dedup();
    programs
}

/// The packages of the `apt-get install` lines of a script.
fn installed_by(script: &str) -> Vec<String> {
    let text = fs::read_to_string(root().join(script)).expect("read the script");
    text.lines()
        .filter(|l| l.contains("apt-get install"))
        .flat_map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .filter(|w| !w.starts_with('-') && !w.starts_with('>') && w != "apt-get" && w != "install")
        .collect()
}

#[test]
fn the_set_up_and_ci_install_every_program_the_tests_run() {
    let programs = programs_the_tests_run();
    assert!(
        programs.iter().any(|p| p == "rsync"),
        "the scan finds programs: {programs:?}"
    );
    for script in ["scripts/run.sh", ".ci/run"] {
        let installed = installed_by(script);
        for program in &programs {
            let package = PACKAGE_OF
                .iter()
                .find(|(p, _)| p == program)
                .map(|(_, package)| *package)
                .unwrap_or_else(|| {
                    panic!("the tests run '{program}': add its Debian package to PACKAGE_OF and to the set-up")
                });
            assert!(
                ESSENTIAL.contains(&package) || installed.iter().any(|i| i == package),
                "the tests run '{program}' (package {package}), which {script} does not install: {installed:?}"
            );
        }
    }
}
