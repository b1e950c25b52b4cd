//! Permissions under the preload shim: tests/c/perms.c, one program that
//! never forks, becomes several identities in turn (plain users, groups,
//! a real root with an effective user, a file-system uid set apart, root
//! without its overriding capabilities) and records what each may do.
//! It runs on tmpfs (/dev/shm), on a novafs mount (the kernel's checks,
//! default_permissions) and under `novafs exec` (the library's checks,
//! novafs's `access` rules, in the program's own process): the three
//! transcripts must be the same, line by line.
//!
//! Where novafs answers otherwise today, the line pair is listed in
//! exec_perms.known under its cause and fix; the test fails when a new
//! difference appears and when a listed one goes away (then strike it).

mod fuse_common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use fuse_common::{novafs, ok, preload_shim, require_fuse_root, shm_dir, Mount};

/// tests/c/perms.c compiled into `dir` (a missing C compiler fails the
/// test: `.ci/run` installs one).
fn compile(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/perms.c");
    let exe = dir.join("perms");
    let status = Command::new("cc")
        .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("run cc (install a C compiler: build-essential)");
    assert!(status.success(), "cc {} failed", src.display());
    exe
}

/// The transcript `cmd` (a run of perms) printed; it must succeed.
fn transcript(cmd: &mut Command) -> Vec<String> {
    ok(cmd).lines().map(str::to_owned).collect()
}

/// The differences from tmpfs that `run` ("mount" or "shim") has today,
/// as (tmpfs's line, the run's line): exec_perms.known, which names the
/// cause of each section.
fn known(run: &str) -> Vec<(&'static str, &'static str)> {
    const KNOWN: &str = include_str!("exec_perms.known");
    let mut pairs = Vec::new();
    let mut applies = false;
    let mut tmpfs = None;
    for line in KNOWN.lines() {
        if let Some(section) = line.strip_prefix("@ ") {
            applies = section.split(' ').next() == Some(run);
        } else if let Some(l) = line.strip_prefix("- ") {
            tmpfs = Some(l);
        } else if let Some(l) = line.strip_prefix("+ ") {
            let t = tmpfs
                .take()
                .expect("exec_perms.known: a \"- \" line before each \"+ \" line");
            if applies {
                pairs.push((t, l));
            }
        }
    }
    pairs
}

/// What is wrong with `got` (a transcript of `who`) against tmpfs's
/// `want`: lines that differ and are not `known`, and `known` pairs that
/// no longer differ; or, if the line counts differ, that and the first
/// unequal pair.
fn unexpected(who: &str, want: &[String], got: &[String], known: &[(&str, &str)]) -> Vec<String> {
    if want.len() != got.len() {
        let first = want.iter().zip(got).find(|(w, g)| w != g);
        return vec![format!(
            "{who}: {} lines against tmpfs's {}; first unequal: {first:?}",
            got.len(),
            want.len()
        )];
    }
    let found: Vec<(&str, &str)> = want
        .iter()
        .zip(got)
        .filter(|(w, g)| w != g)
        .map(|(w, g)| (w.as_str(), g.as_str()))
        .collect();
    let new = found
        .iter()
        .filter(|d| !known.contains(d))
        .map(|(w, g)| format!("{who} answers otherwise than tmpfs:\n  tmpfs: {w}\n  {who}: {g}"));
    let gone = known
        .iter()
        .filter(|k| !found.contains(k))
        .map(|(w, g)| format!("{who}: known difference gone (strike it):\n  tmpfs: {w}\n  {who}: {g}"));
    new.chain(gone).collect()
}

#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn the_shim_checks_permissions_as_the_kernel_does() {
    require_fuse_root();
    let bin = tempfile::tempdir().expect("tempdir");
    let perms = compile(bin.path());
    // Other users must reach each run's directory: /dev/shm's scratch
    // directories are 0700.
    let open_up = |p: &Path| fs::set_permissions(p, fs::Permissions::from_mode(0o755)).expect("chmod");

    let tmpfs = shm_dir();
    open_up(tmpfs.path());
    let want = transcript(Command::new(&perms).arg(tmpfs.path().join("perms")));
    assert!(want.len() > 3000, "perms recorded too little: {} lines", want.len());

    let m = Mount::new("64M", &["allow_other"]);
    open_up(m.dir.path());
    let mounted = transcript(Command::new(&perms).arg(m.path("perms")));
    let mount_dir = m.dir.path().to_path_buf();
    m.finish();
    // The shim's image: mode 0600 (the shim refuses one others may
    // write), served at a prefix that does not exist in the kernel, so a
    // run the shim did not serve fails at its first mkdir.
    let dir = shm_dir();
    let image = dir.path().join("image");
    ok(novafs(["mkfs", "--size", "64M"]).arg(&image));
    fs::set_permissions(&image, fs::Permissions::from_mode(0o600)).expect("chmod");
    let prefix = dir.path().join("srv");
    // A handover (the program forked after all) would make its mount here.
    let run_dir = dir.path().join("run");
    let exec = |run_dir: &Path, args: &[&std::ffi::OsStr]| {
        let mut c = novafs(["exec", "--image"]);
        c.arg(&image)
            .arg("--at")
            .arg(&prefix)
            .arg("--")
            .args(args)
            .env("NOVAFS_PRELOAD", preload_shim())
            .env("NOVAFS_RUN_DIR", run_dir)
            .env_remove("LD_PRELOAD");
        c
    };
    let shimmed = transcript(&mut exec(
        &run_dir,
        &[perms.as_os_str(), prefix.join("perms").as_os_str()],
    ));
    assert!(!prefix.exists(), "the run reached the kernel's {}", prefix.display());
    // novafs exec makes the directory; a handover would put its mount in it.
    let handed_over = fs::read_dir(&run_dir).map_or(0, |d| d.count());
    assert_eq!(handed_over, 0, "the shim handed the image over to a daemon");
    let report = ok(novafs(["fsck"]).arg(&image));
    assert!(report.contains("cleanly unmounted"), "{report}");

    // The same program as a client of a handover: the shell that owns the
    // image forks (`true`), then becomes perms, which changes identity
    // and reaches the handover's private mount through the descriptor
    // handed down; the mount checks each file for it (its known
    // differences are the mount's).
    let handover_dir = dir.path().join("run-handover");
    let script = "true; exec \"$0\" \"$1\"";
    let client = transcript(&mut exec(
        &handover_dir,
        &[
            "sh".as_ref(),
            "-c".as_ref(),
            script.as_ref(),
            perms.as_os_str(),
            prefix.join("client").as_os_str(),
        ],
    ));
    let left: Vec<_> = fs::read_dir(&handover_dir)
        .expect("run dir")
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with("exec-"))
        .collect();
    assert!(left.is_empty(), "the handover left {left:?} behind");

    let problems = [
        unexpected("the mount", &want, &mounted, &known("mount")),
        unexpected("the shim", &want, &shimmed, &known("shim")),
        unexpected("a client of a handover", &want, &client, &known("mount")),
    ]
    .concat();

    // The image holds what the run made (the shim, not the kernel,
    // served it), and nothing is left mounted.
    let shim_dir = dir.path().to_path_buf();
    let mut img = Mount {
        mnt: dir.path().join("mnt"),
        image,
        dir,
        pid: 0,
        mounted: false,
    };
    fs::create_dir(&img.mnt).expect("mkdir mnt");
    img.mount(&[]);
    let made = fs::symlink_metadata(img.path("perms/u1000/d777/c")).expect("a file the run made");
    assert_eq!(made.mode() & 0o7777, 0o666);
    img.finish();
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    for place in [tmpfs.path(), &mount_dir, &shim_dir] {
        let p = place.to_string_lossy().into_owned();
        let left = mountinfo
            .lines()
            .find(|l| l.split(' ').nth(4).is_some_and(|m| m.starts_with(&p)));
        assert!(left.is_none(), "left mounted: {left:?}");
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
