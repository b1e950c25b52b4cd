//! The C ABI from C: tests/c/abi.c and examples/hello.c, compiled with the
//! system's C compiler against include/novafs.h and libnovafs.so, then run
//! on a fresh image. A missing C compiler fails the test (it is one of the
//! packages `.ci/run` installs), never skips it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

include!("../../../build-support/cdylib.rs");

/// The directory of libnovafs.so, built with this test's profile (it
/// reuses what the test run compiled).
fn lib_dir() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| cdylib_dir("novafs-capi"))
}

/// Compiles `src` into `out`, linked with libnovafs.
fn compile(src: &Path, out: &Path) {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = lib_dir();
    assert!(
        lib.join("libnovafs.so").exists(),
        "{} has no libnovafs.so",
        lib.display()
    );
    let status = Command::new("cc")
        .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-pthread", "-o"])
        .arg(out)
        .arg(src)
        .arg("-I")
        .arg(crate_dir.join("include"))
        .arg("-L")
        .arg(lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lnovafs")
        .status()
        .expect("run cc (install a C compiler: build-essential)");
    assert!(status.success(), "cc {} failed", src.display());
}

fn run(exe: &Path, arg: &Path) -> String {
    let out = Command::new(exe).arg(arg).output().expect("run the C program");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{} failed:\n{stdout}{stderr}", exe.display());
    stdout.into_owned()
}

#[test]
fn the_c_abi_does_what_posix_says() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = dir.path().join("abi");
    compile(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/abi.c"), &exe);
    let out = run(&exe, &dir.path().join("abi.img"));
    assert!(out.contains("checks passed"), "{out}");
}

#[test]
fn the_c_example_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = dir.path().join("hello");
    compile(&Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hello.c"), &exe);
    let image = dir.path().join("hello.img");
    let first = run(&exe, &image);
    assert!(first.contains("read back 35 bytes: hello from C"), "{first}");
    assert!(first.contains("snapshot \"hello\": taken"), "{first}");
    // The second run mounts the same image: the name is taken now.
    let second = run(&exe, &image);
    assert!(second.contains("snapshot \"hello\": File exists"), "{second}");
}

#[test]
fn a_program_killed_while_writing_loses_nothing_it_was_told() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let dir = tempfile::tempdir().expect("tempdir");
    let exe = dir.path().join("crash");
    compile(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/crash.c"), &exe);
    let image = dir.path().join("crash.img");
    // The image, made by the C ABI test's own formatter: the example makes
    // one on its first run.
    let hello = dir.path().join("hello");
    compile(&Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hello.c"), &hello);
    run(&hello, &image);
    // Several kills at different moments, each followed by a check and
    // the next writer on the recovered image.
    for kill_after in [1u64, 37, 250, 1000] {
        let mut child = Command::new(&exe)
            .arg(&image)
            .arg("write")
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the writer");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut told = 0u64;
        while told < kill_after {
            let line = lines.next().expect("the writer's count").expect("a line");
            told = line.trim().parse().expect("a count");
        }
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        // What it printed after `told` may have come too: read the rest.
        for line in lines.map_while(Result::ok) {
            told = line.trim().parse().unwrap_or(told);
        }
        let out = Command::new(&exe)
            .arg(&image)
            .arg("check")
            .arg(told.to_string())
            .output()
            .expect("run the check");
        assert!(
            out.status.success(),
            "after a kill at {told} records: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
