//! The shim from a program's side: tests/c/shim.c runs a fixed sequence of
//! calls (files, offsets, dup and fcntl, record locks, poll, stdio,
//! directory streams, the working directory, names, mkstemp, xattrs, mmap)
//! once on tmpfs and once under the shim, where the process owns the
//! image in-process, and the two transcripts must be equal. Then the
//! image is checked: what the program left is in it.
//!
//! No fork happens, so no daemon and no FUSE are needed: this is the
//! owner's path, the fast one. A missing C compiler fails the test (it is
//! one of the packages `.ci/run` installs), never skips it.

use std::ffi::CString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

include!("../../../build-support/cdylib.rs");

/// libnovafs_preload.so, built with this test's profile.
fn shim() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let lib = cdylib_dir("novafs-preload").join("libnovafs_preload.so");
        assert!(lib.exists(), "no {}", lib.display());
        lib
    })
}

fn compile(src: &str, out: &Path) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(src);
    let status = Command::new("cc")
        .args(["-std=gnu11", "-O1", "-Wall", "-Werror", "-o"])
        .arg(out)
        .arg(&src)
        .status()
        .expect("run cc (install a C compiler: build-essential)");
    assert!(status.success(), "cc {} failed", src.display());
}

/// A fresh image of `size` bytes, readable and writable by its owner only
/// (the shim refuses any other).
fn image(dir: &Path, size: u64) -> PathBuf {
    let path = dir.join("image");
    let c = CString::new(path.to_str().expect("utf-8 path")).expect("no NUL");
    // SAFETY: a NUL-terminated path.
    let r = unsafe { capi::novafs_format(c.as_ptr(), size) };
    assert_eq!(r, 0, "novafs_format: {}", std::io::Error::from_raw_os_error(-r));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    path
}

fn under_shim(cmd: &mut Command, image: &Path, prefix: &Path) -> Output {
    cmd.env("LD_PRELOAD", shim())
        .env("NOVAFS_IMAGE", image)
        .env("NOVAFS_PREFIX", prefix)
        .env_remove("NOVAFS_MOUNT")
        .output()
        .expect("run under the shim")
}

fn stdout(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {:?}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("novafs-shim-test")
        .tempdir_in("/dev/shm")
        .expect("tempdir in /dev/shm")
}

#[test]
fn a_program_sees_the_same_calls_under_the_shim_as_on_tmpfs() {
    let work = scratch();
    let prog = work.path().join("shim-calls");
    compile("tests/c/shim.c", &prog);

    let on_tmpfs = work.path().join("tmpfs");
    std::fs::create_dir(&on_tmpfs).expect("mkdir");
    let want = stdout(&Command::new(&prog).arg(&on_tmpfs).output().expect("run"), "on tmpfs");

    let img = image(work.path(), 64 << 20);
    // The prefix need not exist: nothing of it reaches the kernel.
    let prefix = work.path().join("served");
    let got = stdout(
        &under_shim(Command::new(&prog).arg(&prefix), &img, &prefix),
        "under the shim",
    );
    assert!(!prefix.exists(), "the prefix reached the kernel");
    let (w, g): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
    for (i, (a, b)) in w.iter().zip(&g).enumerate() {
        assert_eq!(a, b, "line {} differs (tmpfs | shim)\n{want}\n----\n{got}", i + 1);
    }
    assert_eq!(w.len(), g.len(), "transcripts differ in length\n{want}\n----\n{got}");
    assert!(w.len() > 100, "the program stopped early:\n{want}");
    // And it is all in the image.
    assert_eq!(read_from_image(&img, "/s"), b"line 1\nline 2\nline 3\n");
    assert_eq!(read_from_image(&img, "/moved"), vec![0u8; 100]);
    assert_eq!(&read_from_image(&img, "/m")[4096..4103], b"mapped!");
}

/// A whole file of the image, read through libnovafs.
fn read_from_image(img: &Path, path: &str) -> Vec<u8> {
    let c = |s: &str| CString::new(s).expect("no NUL");
    let (img, path) = (c(img.to_str().expect("utf-8")), c(path));
    let mut err = 0;
    // SAFETY: NUL-terminated strings, a valid output; the handle is
    // unmounted below and not used after.
    unsafe {
        let fs = capi::novafs_mount(img.as_ptr(), capi::NOVAFS_RDONLY, &mut err);
        assert!(!fs.is_null(), "novafs_mount: errno {err}");
        let fd = capi::novafs_open(fs, path.as_ptr(), libc::O_RDONLY, 0);
        assert!(fd >= 0, "open: errno {}", -fd);
        let mut data = vec![0u8; 1 << 16];
        let n = capi::novafs_read(fs, fd, data.as_mut_ptr().cast(), data.len());
        assert!(n >= 0, "read: errno {}", -n);
        data.truncate(n as usize);
        assert_eq!(capi::novafs_close(fs, fd), 0);
        assert_eq!(capi::novafs_unmount(fs), 0);
        data
    }
}

#[test]
fn an_image_others_can_write_is_refused_before_main() {
    let work = scratch();
    let img = image(work.path(), 64 << 20);
    std::fs::set_permissions(&img, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let out = under_shim(&mut Command::new("true"), &img, &work.path().join("served"));
    assert_eq!(out.status.code(), Some(125));
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(
        msg.contains("is group- or world-writable") && msg.contains("chmod go-w"),
        "{msg}"
    );
}
