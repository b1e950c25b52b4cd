//! `novafs exec` without the shim itself: what it refuses (one line,
//! exit 2), where it finds the shim, the environment it gives the command,
//! and the command's exit status passed on. A stand-in shim (an empty
//! shared object, built here with cc) stands for libnovafs_preload.so.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use tempfile::TempDir;

const NOVAFS: &str = env!("CARGO_BIN_EXE_novafs");

/// A directory with a fresh image (mode 0600) and a stand-in shim.
struct Setup {
    dir: TempDir,
    image: PathBuf,
    shim: PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let image = dir.path().join("image");
    let made = Command::new(NOVAFS)
        .args(["mkfs", "--size", "64M", "--shards", "2"])
        .arg(&image)
        .output()
        .expect("mkfs");
    assert!(made.status.success(), "{made:?}");
    fs::set_permissions(&image, fs::Permissions::from_mode(0o600)).expect("chmod");
    let shim = shared_object(dir.path(), "shim");
    Setup { dir, image, shim }
}

/// An empty but valid shared object: the loader preloads it and nothing
/// changes.
fn shared_object(dir: &Path, name: &str) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    fs::write(&src, format!("int novafs_test_{name};\n")).expect("write C");
    let so = dir.join(format!("{name}.so"));
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&src)
        .output()
        .expect("cc");
    assert!(out.status.success(), "cc: {}", String::from_utf8_lossy(&out.stderr));
    so
}

impl Setup {
    /// `novafs exec --image IMAGE --at /srv/data -- ARGS` with the stand-in
    /// shim and a clean environment of the variables exec sets.
    fn exec(&self, args: &[&str]) -> Command {
        self.exec_by(Path::new(NOVAFS), &self.image, args)
    }

    /// The same, run by the novafs executable `novafs` on `image`.
    fn exec_by(&self, novafs: &Path, image: &Path, args: &[&str]) -> Command {
        self.exec_with(novafs, image, &[], args)
    }

    /// The same with exec's options `opts` (before `--`).
    fn exec_with(&self, novafs: &Path, image: &Path, opts: &[&str], args: &[&str]) -> Command {
        let mut c = Command::new(novafs);
        c.args(["exec", "--image"])
            .arg(image)
            .args(["--at", "/srv/data"])
            .args(opts)
            .arg("--")
            .args(args)
            .env("NOVAFS_PRELOAD", &self.shim)
            .env("NOVAFS_RUN_DIR", self.dir.path().join("run"));
        for var in [
            "LD_PRELOAD",
            "NOVAFS_IMAGE",
            "NOVAFS_PREFIX",
            "NOVAFS_BIN",
            "NOVAFS_MOUNT",
        ] {
            c.env_remove(var);
        }
        c.stdin(Stdio::null());
        c
    }
}

fn output(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// Refused with exactly `line` on stderr, nothing on stdout, exit 2.
fn refused(cmd: &mut Command, line: &str) {
    let out = output(cmd);
    assert_eq!(String::from_utf8_lossy(&out.stderr), format!("novafs: {line}\n"));
    assert_eq!((out.status.code(), out.stdout.len()), (Some(2), 0));
}

/// What the command printed, once it succeeded.
fn printed(cmd: &mut Command) -> String {
    let out = output(cmd);
    assert!(out.status.success(), "{cmd:?}: {out:?}");
    String::from_utf8(out.stdout).expect("utf-8")
}

const SHOW_ENV: &str =
    r#"echo "$LD_PRELOAD|$NOVAFS_IMAGE|$NOVAFS_PREFIX|$NOVAFS_BIN|${NOVAFS_MOUNT-unset}|$NOVAFS_RUN_DIR""#;

#[test]
fn exec_refuses_a_missing_foreign_or_shared_writable_image() {
    let s = setup();
    let missing = s.dir.path().join("missing");
    let mut c = s.exec_by(Path::new(NOVAFS), &missing, &["true"]);
    let m = missing.display();
    refused(&mut c, &format!("{m} does not exist; create it with `novafs mkfs {m}`"));
    let img = s.image.display();
    for mode in [0o666, 0o620, 0o602, 0o660] {
        fs::set_permissions(&s.image, fs::Permissions::from_mode(mode)).expect("chmod");
        refused(
            &mut s.exec(&["true"]),
            &format!(
                "{img} is group- or world-writable: under the shim every process that can write it can change every file; chmod go-w {img}"
            ),
        );
    }
    // Readable by all is not writable by all.
    fs::set_permissions(&s.image, fs::Permissions::from_mode(0o644)).expect("chmod");
    assert_eq!(printed(&mut s.exec(&["sh", "-c", "echo ran"])), "ran\n");
    let foreign = s.dir.path().join("zeros");
    fs::write(&foreign, vec![0u8; 1 << 20]).expect("write");
    let mut c = s.exec_by(Path::new(NOVAFS), &foreign, &["true"]);
    let out = output(&mut c);
    let err = String::from_utf8_lossy(&out.stderr);
    let f = foreign.display();
    assert!(
        err.starts_with(&format!("novafs: {f} is not a novafs image (")),
        "{err}"
    );
    assert!(
        err.ends_with("); create one with `novafs mkfs`\n") && err.lines().count() == 1,
        "{err}"
    );
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn exec_refuses_an_empty_or_root_prefix() {
    let s = setup();
    for (at, line) in [
        ("", "--at needs a directory: PREFIX is empty".to_string()),
        ("/", "--at /: the prefix cannot be the root directory".to_string()),
        (
            "/srv/..",
            "--at /srv/..: the prefix cannot be the root directory".to_string(),
        ),
    ] {
        let mut c = Command::new(NOVAFS);
        c.args(["exec", "--image"])
            .arg(&s.image)
            .args(["--at", at, "--", "true"])
            .env("NOVAFS_PRELOAD", &s.shim);
        refused(&mut c, &line);
    }
}

#[test]
fn exec_finds_the_shim_by_env_beside_itself_or_in_lib() {
    let s = setup();
    let nowhere = s.dir.path().join("nowhere.so");
    refused(
        s.exec(&["true"]).env("NOVAFS_PRELOAD", &nowhere),
        &format!(
            "NOVAFS_PRELOAD={} is not a file; point it at libnovafs_preload.so (`cargo build --release -p novafs-preload` builds it)",
            nowhere.display()
        ),
    );
    // A copy of novafs in bin/ of an installed-like tree, no shim yet.
    let tree = s.dir.path().join("usr");
    let (bin, lib) = (tree.join("bin"), tree.join("lib"));
    fs::create_dir_all(&bin).expect("mkdir bin");
    fs::create_dir_all(&lib).expect("mkdir lib");
    let exe = bin.join("novafs");
    fs::copy(NOVAFS, &exe).expect("copy novafs");
    let run = |want_shim: Option<&Path>| {
        let mut c = s.exec_by(&exe, &s.image, &["sh", "-c", "echo $LD_PRELOAD"]);
        c.env_remove("NOVAFS_PRELOAD");
        match want_shim {
            Some(shim) => assert_eq!(printed(&mut c), format!("{}\n", shim.display())),
            None => refused(
                &mut c,
                &format!(
                    "cannot find libnovafs_preload.so in {} or {}/../lib; build it with `cargo build --release -p novafs-preload` or set NOVAFS_PRELOAD to it",
                    bin.display(),
                    bin.display()
                ),
            ),
        }
    };
    run(None);
    let in_lib = lib.join("libnovafs_preload.so");
    fs::copy(&s.shim, &in_lib).expect("copy shim");
    run(Some(&in_lib));
    // Beside the executable (a cargo target directory) comes first.
    let beside = bin.join("libnovafs_preload.so");
    fs::copy(&s.shim, &beside).expect("copy shim");
    run(Some(&beside));
}

#[test]
fn exec_gives_the_command_the_shim_and_where_the_image_is_served() {
    let s = setup();
    let shim = fs::canonicalize(&s.shim).expect("shim");
    let image = fs::canonicalize(&s.image).expect("image");
    let bin = fs::canonicalize(NOVAFS).expect("novafs");
    // The daemons' state directory, where a handover's mount goes too.
    let run = s.dir.path().join("run");
    let want = |preload: String, prefix: &str| {
        format!(
            "{preload}|{}|{prefix}|{}|unset|{}\n",
            image.display(),
            bin.display(),
            run.display()
        )
    };
    let shown = printed(&mut s.exec(&["sh", "-c", SHOW_ENV]));
    assert_eq!(shown, want(shim.display().to_string(), "/srv/data"));
    // Another preloaded library stays, after the shim; a mount named by
    // the caller's environment but not serving the image is not passed on.
    let other = shared_object(s.dir.path(), "other");
    let shown = printed(
        s.exec(&["sh", "-c", SHOW_ENV])
            .env("LD_PRELOAD", &other)
            .env("NOVAFS_MOUNT", "/stale"),
    );
    assert_eq!(
        shown,
        want(format!("{}:{}", shim.display(), other.display()), "/srv/data")
    );
    // A relative image and prefix, from the working directory; the prefix
    // lexically normal and need not exist.
    let mut c = Command::new(NOVAFS);
    c.current_dir(s.dir.path())
        .args([
            "exec",
            "--image",
            "image",
            "--at",
            "./a/../b//c/",
            "--",
            "sh",
            "-c",
            SHOW_ENV,
        ])
        .env("NOVAFS_PRELOAD", &s.shim)
        .env("NOVAFS_RUN_DIR", &run)
        .env_remove("LD_PRELOAD")
        .env_remove("NOVAFS_MOUNT");
    let cwd = fs::canonicalize(s.dir.path()).expect("cwd");
    let prefix = std::path::absolute(s.dir.path()).expect("abs").join("b/c");
    assert_eq!(
        printed(&mut c),
        want(shim.display().to_string(), &prefix.display().to_string())
    );
    assert_eq!(cwd, fs::canonicalize(s.dir.path()).expect("cwd"));
    // Arguments after COMMAND are its own, options included.
    assert_eq!(
        printed(&mut s.exec(&["sh", "-c", "echo \"$@\"", "sh", "-v", "--image"])),
        "-v --image\n"
    );
}

#[test]
fn exec_exits_as_the_command_did() {
    let s = setup();
    let status = |args: &[&str]| output(&mut s.exec(args)).status.code();
    assert_eq!(status(&["sh", "-c", "exit 0"]), Some(0));
    assert_eq!(status(&["sh", "-c", "exit 7"]), Some(7));
    assert_eq!(status(&["sh", "-c", "exit 255"]), Some(255));
    // Killed by a signal: 128 + its number, as a shell reports it.
    assert_eq!(status(&["sh", "-c", "kill -TERM $$"]), Some(143));
    assert_eq!(status(&["sh", "-c", "kill -KILL $$"]), Some(137));
    let missing = s.dir.path().join("no-such-program");
    let out = output(&mut s.exec(&[missing.to_str().expect("utf-8")]));
    assert_eq!(
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned()),
        (Some(127), format!("novafs: {}: command not found\n", missing.display()))
    );
    let not_executable = s.dir.path().join("shim.c");
    let out = output(&mut s.exec(&[not_executable.to_str().expect("utf-8")]));
    assert_eq!(out.status.code(), Some(126), "{out:?}");
}

/// Ctrl-C reaches the command (the same process group); `novafs exec`
/// holds it back and reports how the command ended.
#[test]
fn exec_outlives_sigint_and_sigquit_and_reports_the_command() {
    let s = setup();
    let mut child = s
        .exec(&["sh", "-c", "read line; exit 3"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("spawn");
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    // Once the command runs (its shell replaced novafs's child process).
    let start = std::time::Instant::now();
    while !fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .any(|e| fs::read_to_string(e.path().join("stat")).is_ok_and(|st| st.contains(&format!(") S {pid} "))))
    {
        assert!(start.elapsed() < Duration::from_secs(10), "the command never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    for sig in [nix::sys::signal::SIGINT, nix::sys::signal::SIGQUIT] {
        nix::sys::signal::kill(pid, sig).expect("signal novafs exec");
    }
    std::thread::sleep(Duration::from_millis(100));
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"go\n").expect("write");
    drop(stdin);
    assert_eq!(child.wait().expect("wait").code(), Some(3));
}

/// `--mmap KIND` reaches the shim as NOVAFS_MMAP; without it the shim's
/// default (atomic) holds; another kind is refused before anything runs.
#[test]
fn exec_passes_the_mmap_kind_on() {
    let s = setup();
    let show = |kind: Option<&str>| {
        let opts = kind.map_or(vec![], |k| vec!["--mmap", k]);
        let mut c = s.exec_with(
            Path::new(NOVAFS),
            &s.image,
            &opts,
            &["sh", "-c", "echo ${NOVAFS_MMAP-unset}"],
        );
        output(c.env_remove("NOVAFS_MMAP"))
    };
    for (kind, want) in [(None, "unset\n"), (Some("dax"), "dax\n"), (Some("atomic"), "atomic\n")] {
        let out = show(kind);
        assert!(out.status.success(), "{kind:?}: {out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), want);
    }
    let out = show(Some("private"));
    assert_eq!((out.status.code(), out.stdout.len()), (Some(2), 0));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("invalid value 'private' for '--mmap <KIND>'"),
        "{out:?}"
    );
}
