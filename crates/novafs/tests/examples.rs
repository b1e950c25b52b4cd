//! Runs every program in `examples/`, so that none of them stops working
//! unnoticed: `cargo test` builds the examples but does not run them.
//!
//! Each example is compiled into this test as a module and its `run`
//! called on an image in a temporary directory: the same code as `cargo
//! run --example`, without a nested cargo (slow, and a second build in
//! the same target directory) and without depending on where the binary
//! lands. An example checks what it shows and returns an error (or
//! panics) when something is not as it says.
#![allow(clippy::unwrap_used)]
// Each example brings its own `mod common` (examples/common/mod.rs), so
// that file is compiled once per example here, as in their own binaries.
#![allow(clippy::duplicate_mod)]

// The examples' `main` is their command line; the tests call `run`.
#[allow(dead_code)]
#[path = "../examples/files.rs"]
mod files;
#[allow(dead_code)]
#[path = "../examples/mmap.rs"]
mod mmap;
#[allow(dead_code)]
#[path = "../examples/scrub.rs"]
mod scrub;
#[allow(dead_code)]
#[path = "../examples/snapshots.rs"]
mod snapshots;

use std::error::Error;
use std::path::Path;

/// Runs `example` on a new image in a temporary directory.
fn run(example: fn(&Path) -> Result<(), Box<dyn Error>>) {
    let dir = tempfile::tempdir().unwrap();
    if let Err(e) = example(&dir.path().join("novafs.img")) {
        panic!("the example failed: {e}");
    }
}

#[test]
fn files_example_runs() {
    run(files::run);
}

#[test]
fn snapshots_example_runs() {
    run(snapshots::run);
}

#[test]
fn mmap_example_runs() {
    run(mmap::run);
}

#[test]
fn scrub_example_runs() {
    run(scrub::run);
}

/// Every example is run above: a new one must be added here too.
#[test]
fn every_example_is_run() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        .filter_map(|n| n.strip_suffix(".rs").map(str::to_owned))
        .collect();
    names.sort();
    assert_eq!(names, ["files", "mmap", "scrub", "snapshots"]);
}
