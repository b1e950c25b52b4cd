//! The command line on good and bad input: one line saying what is wrong
//! and what to do, the documented exit codes, and images left untouched.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

mod cli_common;
use cli_common::{novafs, path, scratch, stderr};

#[test]
fn mkfs_then_fsck_and_info_on_a_new_image() {
    let dir = scratch();
    let img = path(&dir, "a.img");
    let o = novafs(&["mkfs", "--size", "64M", "--shards", "2", &img]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::metadata(&img).unwrap().len(), 64 << 20);
    let o = novafs(&["fsck", &img]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stdout));
    assert!(String::from_utf8_lossy(&o.stdout).contains("clean"));
    let o = novafs(&["info", &img]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("state:        clean"), "{out}");
    assert!(out.contains("shards:       2"), "{out}");
    assert!(out.contains("emulated"), "{out}");
}

#[test]
fn mkfs_refuses_to_overwrite_without_force() {
    let dir = scratch();
    let img = path(&dir, "b.img");
    std::fs::write(&img, vec![7u8; 1 << 20]).unwrap();
    let o = novafs(&["mkfs", "--size", "64M", &img]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--force"), "{}", stderr(&o));
    assert_eq!(stderr(&o).lines().count(), 1);
    assert_eq!(std::fs::read(&img).unwrap(), vec![7u8; 1 << 20], "image untouched");
    let o = novafs(&["mkfs", "--size", "64M", "--force", &img]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn mkfs_rejects_bad_sizes_with_a_hint() {
    let dir = scratch();
    let img = path(&dir, "c.img");
    let o = novafs(&["mkfs", "--size", "1M", &img]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("too small"), "{}", stderr(&o));
    assert!(!Path::new(&img).exists(), "nothing created");
    let o = novafs(&["mkfs", "--size", "12345", &img]);
    assert_ne!(o.status.code(), Some(0));
    assert!(stderr(&o).contains("multiple of 4 KiB"), "{}", stderr(&o));
}

#[test]
fn mkfs_formats_with_or_without_metadata_replicas_and_info_says_which() {
    let dir = scratch();
    let cases: [(&[&str], &str); 3] = [
        (&[], "metadata:     replicas on (dead zone 1 MiB)"),
        (&["--dead-zone", "64K"], "metadata:     replicas on (dead zone 64 KiB)"),
        (
            &["--no-meta-replicas"],
            "metadata:     no replicas (formatted without replicas)",
        ),
    ];
    for (i, (flags, line)) in cases.into_iter().enumerate() {
        let img = path(&dir, &format!("m{i}.img"));
        let mut args = vec!["mkfs", "--size", "64M", "--shards", "2"];
        args.extend_from_slice(flags);
        args.push(&img);
        let o = novafs(&args);
        assert!(o.status.success(), "{flags:?}: {}", stderr(&o));
        let o = novafs(&["info", &img]);
        assert!(o.status.success(), "{}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(
            out.lines().filter(|l| l.starts_with("metadata:")).collect::<Vec<_>>(),
            [line],
            "{out}"
        );
        let o = novafs(&["fsck", &img]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{flags:?}: {}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
    // A dead zone that is not whole pages: one line from the parser.
    let img = path(&dir, "z.img");
    let o = novafs(&["mkfs", "--dead-zone", "3K", &img]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("'3K' must be a positive multiple of 4 KiB"),
        "{}",
        stderr(&o)
    );
    assert!(!Path::new(&img).exists(), "nothing created");
    // Replicas need room; the refusal says how much, and what fits instead.
    let o = novafs(&["mkfs", "--size", "8M", "--shards", "2", &img]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("too small") && stderr(&o).contains("use --size 13M or more, or add --no-meta-replicas"),
        "{}",
        stderr(&o)
    );
    assert!(!Path::new(&img).exists(), "nothing created");
    let o = novafs(&["mkfs", "--size", "8M", "--shards", "2", "--no-meta-replicas", &img]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn fsck_exit_codes_for_missing_foreign_and_damaged_images() {
    let dir = scratch();
    let missing = path(&dir, "missing.img");
    let o = novafs(&["fsck", &missing]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
    let foreign = path(&dir, "foreign.img");
    std::fs::write(&foreign, vec![0x55u8; 8 << 20]).unwrap();
    let o = novafs(&["fsck", &foreign]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("not a novafs image"), "{}", stderr(&o));
    // Damage the root directory's log: fsck finds it, exit 1.
    let img = path(&dir, "d.img");
    assert!(novafs(&["mkfs", "--size", "64M", "--shards", "1", &img])
        .status
        .success());
    let mut bytes = std::fs::read(&img).unwrap();
    let at = bytes.windows(2).position(|w| w == b"..").expect("root's '..' dentry");
    bytes[at] = b'X';
    std::fs::write(&img, &bytes).unwrap();
    let o = novafs(&["fsck", &img]);
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stdout));
    assert!(String::from_utf8_lossy(&o.stdout).contains("PROBLEM"));
}

#[test]
fn fsck_repair_fixes_what_it_can_and_says_what_it_did() {
    let dir = scratch();
    let img = path(&dir, "r.img");
    assert!(novafs(&["mkfs", "--size", "64M", "--shards", "1", &img])
        .status
        .success());
    // A damaged primary superblock and a saved allocator state whose length
    // is absurd (a length that once made fsck try to allocate 498 GB): the
    // check says so, repair fixes both.
    let mut bytes = std::fs::read(&img).unwrap();
    bytes[16..48].fill(0xFF);
    // The recovery inode's tail word in page 2 and in its replica, the
    // page at data_end (read from the superblock replica: the primary's
    // bytes are damaged above).
    let at = (64 << 20) - 4096 + std::mem::offset_of!(novafs::probe::layout::Superblock, data_end);
    let data_end = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
    for tail in [2 * 4096 + 16, data_end + 16] {
        bytes[tail..tail + 8].copy_from_slice(&498_216_206_440u64.to_le_bytes());
    }
    std::fs::write(&img, &bytes).unwrap();
    let o = novafs(&["fsck", &img]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("saved allocator state"), "{out}");
    let o = novafs(&["fsck", "--repair", &img]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("repaired: primary superblock rewritten from its replica"),
        "{out}"
    );
    assert!(out.trim_end().ends_with("clean"), "{out}");
    let o = novafs(&["fsck", &img]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(!out.contains("note:"), "{out}");
}

#[test]
fn tune_turns_meta_protection_on_and_off_and_refuses_what_it_cannot_do() {
    let dir = scratch();
    let img = path(&dir, "t.img");
    let metadata_line = |img: &str| {
        let o = novafs(&["info", img]);
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        out.lines().find(|l| l.starts_with("metadata:")).unwrap().to_string()
    };
    let tmp_left = || {
        std::fs::read_dir(dir.path())
            .unwrap()
            .any(|e| e.unwrap().file_name().to_string_lossy().ends_with(".tune-tmp"))
    };
    assert!(
        novafs(&["mkfs", "--size", "64M", "--shards", "2", "--no-meta-replicas", &img])
            .status
            .success()
    );
    let steps: [(&[&str], &str, &str); 4] = [
        (
            &["--enable", "meta-protection", "--dead-zone", "256K"],
            "now has meta-protection (dead zone 256 KiB)",
            "replicas on (dead zone 256 KiB)",
        ),
        (
            &["--enable", "meta-protection"],
            "already has meta-protection (dead zone 256 KiB), data-checksums, parity; nothing to do",
            "replicas on (dead zone 256 KiB)",
        ),
        (
            &["--disable", "meta-protection"],
            "now has no meta-protection",
            "no replicas",
        ),
        (
            &["--enable", "meta-protection"],
            "now has meta-protection (dead zone 1 MiB)",
            "replicas on (dead zone 1 MiB)",
        ),
    ];
    for (flags, said, shown) in steps {
        let mut args = vec!["tune"];
        args.extend_from_slice(flags);
        args.push(&img);
        let o = novafs(&args);
        assert!(o.status.success(), "{flags:?}: {}", stderr(&o));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains(said),
            "{flags:?}: {}",
            String::from_utf8_lossy(&o.stdout)
        );
        assert!(
            metadata_line(&img).contains(shown),
            "{flags:?}: {}",
            metadata_line(&img)
        );
        assert_eq!(novafs(&["fsck", &img]).status.code(), Some(0), "{flags:?}");
        assert!(!tmp_left());
    }
    // Refusals: one line each, the image untouched, nothing left beside it.
    let before = std::fs::read(&img).unwrap();
    let held = pm::MmapRegion::open(Path::new(&img), &pm::MapOptions::default()).unwrap();
    let o = novafs(&["tune", "--disable", "meta-protection", &img]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("in use"), "{}", stderr(&o));
    drop(held);
    let o = novafs(&["tune", "--disable", "meta-protection", "--dead-zone", "64K", &img]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = novafs(&["tune", &img]);
    assert_eq!(o.status.code(), Some(2), "a change is required: {}", stderr(&o));
    assert_eq!(std::fs::read(&img).unwrap(), before, "image untouched");
    let small = path(&dir, "small.img");
    assert!(
        novafs(&["mkfs", "--size", "8M", "--shards", "2", "--no-meta-replicas", &small])
            .status
            .success()
    );
    let before = std::fs::read(&small).unwrap();
    let o = novafs(&["tune", "--enable", "meta-protection", &small]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("too small"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&small).unwrap(), before, "image untouched");
    assert!(!tmp_left());
    // Data protection: each feature alone, info says which.
    let data_line = |img: &str| {
        let o = novafs(&["info", img]);
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        out.lines().find(|l| l.starts_with("data:")).unwrap().to_string()
    };
    assert_eq!(
        data_line(&img),
        "data:         strip checksums on (two copies), parity on"
    );
    for (flags, shown) in [
        (
            ["--disable", "parity"],
            "data:         strip checksums on (two copies), no parity",
        ),
        (
            ["--disable", "data-checksums"],
            "data:         no strip checksums, no parity",
        ),
        (["--enable", "parity"], "data:         no strip checksums, parity on"),
        (
            ["--enable", "data-checksums"],
            "data:         strip checksums on (two copies), parity on",
        ),
    ] {
        let o = novafs(&["tune", flags[0], flags[1], &img]);
        assert!(o.status.success(), "{flags:?}: {}", stderr(&o));
        assert_eq!(data_line(&img), shown, "{flags:?}");
        assert_eq!(novafs(&["fsck", &img]).status.code(), Some(0), "{flags:?}");
    }
    let o = novafs(&["tune", "--enable", "meta-protection", &path(&dir, "missing.img")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
}

/// The consistency mode: mkfs records it, info shows it (and a relaxed
/// mount in use or crashed), tune changes it in place; a bad mode is one
/// line, and nothing is written.
#[test]
fn mkfs_and_tune_set_the_default_mode_and_info_shows_it() {
    let dir = scratch();
    let img = path(&dir, "mode.img");
    let mode_line = |img: &str| {
        let o = novafs(&["info", img]);
        assert!(o.status.success(), "{}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        let lines: Vec<String> = out
            .lines()
            .filter(|l| l.starts_with("mode:"))
            .map(String::from)
            .collect();
        assert_eq!(lines.len(), 1, "{out}");
        lines[0].clone()
    };
    let o = novafs(&["mkfs", "--size", "64M", "--shards", "2", "--mode", "bogus", &img]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "novafs: invalid value 'bogus' for '--mode <MODE>': unknown consistency mode 'bogus': use strict or relaxed"
    );
    assert!(!Path::new(&img).exists(), "nothing created");
    let o = novafs(&["mkfs", "--size", "64M", "--shards", "2", "--mode", "relaxed", &img]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(", relaxed mode, "),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert_eq!(mode_line(&img), "mode:         relaxed (default for mounts)");
    assert_eq!(novafs(&["fsck", &img]).status.code(), Some(0));
    // tune: in place, both ways, and nothing to do the second time.
    let steps = [
        ("strict", "now mounts strict by default (was relaxed)", "strict"),
        ("strict", "already mounts strict by default; nothing to do", "strict"),
        ("relaxed", "now mounts relaxed by default (was strict)", "relaxed"),
    ];
    for (mode, said, shown) in steps {
        let o = novafs(&["tune", "--mode", mode, &img]);
        assert!(o.status.success(), "{mode}: {}", stderr(&o));
        assert_eq!(
            String::from_utf8_lossy(&o.stdout).trim(),
            format!("novafs: {img} {said}")
        );
        assert_eq!(mode_line(&img), format!("mode:         {shown} (default for mounts)"));
        assert_eq!(novafs(&["fsck", &img]).status.code(), Some(0), "{mode}");
    }
    // Refusals: a bad mode, --dead-zone beside it, an image in use.
    let before = std::fs::read(&img).unwrap();
    let o = novafs(&["tune", "--mode", "bogus", &img]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "novafs: invalid value 'bogus' for '--mode <MODE>': unknown consistency mode 'bogus': use strict or relaxed"
    );
    let o = novafs(&["tune", "--mode", "strict", "--dead-zone", "64K", &img]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = novafs(&["tune", "--mode", "strict", "--enable", "parity", &img]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let held = pm::MmapRegion::open(Path::new(&img), &pm::MapOptions::default()).unwrap();
    let o = novafs(&["tune", "--mode", "strict", &img]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("in use"), "{}", stderr(&o));
    drop(held);
    assert_eq!(std::fs::read(&img).unwrap(), before, "image untouched");
    // A relaxed mount that crashed (mapped without the image lock, which
    // then needs no releasing): info says so, tune waits for a mount.
    let unlocked = pm::MapOptions {
        lock: false,
        ..pm::MapOptions::default()
    };
    let region = pm::MmapRegion::open(Path::new(&img), &unlocked).unwrap();
    let fs = novafs::Fs::open(std::sync::Arc::new(region), novafs::MountOptions::default()).unwrap();
    assert_eq!(fs.consistency(), novafs::Consistency::Relaxed);
    drop(fs);
    assert_eq!(
        mode_line(&img),
        "mode:         relaxed (default for mounts); a relaxed mount is in use or crashed \
         (the next mount reseals its data-write intents)"
    );
    let o = novafs(&["tune", "--mode", "strict", &img]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        format!(
            "novafs: {img}: the image is mounted, or was not cleanly unmounted: unmount it \
             (or mount and unmount it, or run fsck --repair) first"
        )
    );
}

#[test]
fn fsck_refuses_an_image_in_use() {
    let dir = scratch();
    let img = path(&dir, "e.img");
    assert!(novafs(&["mkfs", "--size", "64M", &img]).status.success());
    let before = std::fs::read(&img).unwrap();
    let held = pm::MmapRegion::open(Path::new(&img), &pm::MapOptions::default()).unwrap();
    let o = novafs(&["fsck", &img]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("in use"), "{}", stderr(&o));
    drop(held);
    assert_eq!(std::fs::read(&img).unwrap(), before, "image untouched");
}

/// `novafs mount --help` describes every `-o` option mount takes: those
/// its refusal of an unknown option lists (the parser's own list), the
/// access-time options among them.
#[test]
fn mount_help_lists_every_option_mount_takes() {
    let o = novafs(&[
        "mount",
        "-o",
        "no-such-option",
        "/nonexistent/image",
        "/nonexistent/mnt",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    let known = err
        .split_once("; known options: ")
        .unwrap_or_else(|| panic!("{err}"))
        .1
        .replace(" (and fstab's ", ", ")
        .replace(')', "");
    let o = novafs(&["mount", "--help"]);
    assert!(o.status.success());
    let help = String::from_utf8_lossy(&o.stdout).to_string();
    let words: Vec<&str> = help
        .split_whitespace()
        .map(|w| w.trim_start_matches('(').trim_end_matches([',', ';', '.', ')']))
        .collect();
    let listed: Vec<&str> = known.split(", ").collect();
    assert!(listed.len() > 30, "{known}");
    for option in listed
        .iter()
        .chain(&["relatime", "atime", "noatime", "strictatime", "nodiratime", "lazytime"])
    {
        assert!(words.contains(option), "--help omits {option}:\n{help}");
    }
}

/// Runs `script` with sh in a private mount namespace, in a fresh tmpfs of
/// `size` (a file system whose free space is known exactly, gone with the
/// namespace), with $NOVAFS the binary; returns its stdout and stderr,
/// interleaved.
fn in_small_fs(size: &str, script: &str) -> String {
    let dir = scratch();
    let o = Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "sh", "-c"])
        .arg(format!(
            "mount -t tmpfs -o size={size} tmpfs \"$0\" && cd \"$0\" && {{ {script}\n}} 2>&1"
        ))
        .arg(dir.path())
        .env("NOVAFS", env!("CARGO_BIN_EXE_novafs"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    String::from_utf8_lossy(&o.stdout).to_string()
}

/// mkfs of more than the file system holds says, in one line, how much it
/// holds and what to do, before it creates anything; an existing file is
/// left as it was.
#[test]
fn mkfs_larger_than_its_file_system_says_how_much_room_there_is() {
    let out = in_small_fs(
        "96M",
        r#""$NOVAFS" mkfs --size 100T img; echo "exit $?"; ls -A
        printf data > old; "$NOVAFS" mkfs --force --size 100T old; echo "exit $?"; ls -A; stat -c '%n %s' old
        rm old; "$NOVAFS" mkfs --size 128M img; echo "exit $?"; ls -A
        "$NOVAFS" mkfs --size 64M no/such/dir/img; echo "exit $?""#,
    );
    assert_eq!(
        out,
        "novafs: cannot make a 100.0 TiB image img: its file system has 96.0 MiB free; \
         use --size 96M or less, or put the image on a larger file system\n\
         exit 1\n\
         novafs: cannot make a 100.0 TiB image old: its file system has 96.0 MiB free; \
         use --size 96M or less, or put the image on a larger file system\n\
         exit 1\n\
         old\n\
         old 4\n\
         novafs: cannot make a 128.0 MiB image img: its file system has 96.0 MiB free; \
         use --size 96M or less, or put the image on a larger file system\n\
         exit 1\n\
         novafs: directory no/such/dir does not exist; create it first\n\
         exit 1\n"
    );
}

/// A mkfs that fails after creating its file removes the file (here the
/// file size limit stops it), names the path once, and gives a file that
/// was there before its old length back.
#[test]
fn a_failed_mkfs_removes_the_file_it_created() {
    // RLIMIT_FSIZE below 64 MiB whether sh counts 512- or 1024-byte
    // blocks; SIGXFSZ ignored, so that the write fails with EFBIG.
    let out = in_small_fs(
        "256M",
        r#"trap '' XFSZ; ulimit -f 32768
        "$NOVAFS" mkfs --size 64M img; echo "exit $?"; ls -A
        : > empty; "$NOVAFS" mkfs --size 64M empty; echo "exit $?"; ls -A; stat -c '%n %s' empty"#,
    );
    assert_eq!(
        out,
        "novafs: img: File too large (os error 27)\n\
         exit 1\n\
         novafs: empty: File too large (os error 27)\n\
         exit 1\n\
         empty\n\
         empty 0\n"
    );
}

/// tune checks first that the copy it builds beside the image fits, and
/// leaves nothing behind when it does not; a copy a killed tune left is
/// removed (and said so) before the room is counted.
#[test]
fn tune_checks_the_room_for_its_copy_and_removes_a_stale_one() {
    let out = in_small_fs(
        "96M",
        r#""$NOVAFS" mkfs --size 64M img > /dev/null
        "$NOVAFS" tune --disable parity img; echo "exit $?"; ls -A"#,
    );
    assert_eq!(
        out,
        "novafs: cannot rebuild img: the copy made beside it needs 64.0 MiB and its file system has \
         32.0 MiB free; free some space there\n\
         exit 1\n\
         img\n"
    );
    // 64 MiB of image and 64 MiB of stale copy leave 32 MiB of 160: only
    // without the stale copy does the new one fit.
    let out = in_small_fs(
        "160M",
        r#""$NOVAFS" mkfs --size 64M img > /dev/null; fallocate -l 64M img.tune-tmp
        "$NOVAFS" tune --disable parity img; echo "exit $?"; ls -A"#,
    );
    assert_eq!(
        out,
        "novafs: removed img.tune-tmp, left by an interrupted tune or rollback\n\
         novafs: img now has meta-protection (dead zone 1 MiB), data-checksums, no parity \
         (1 inodes, 0 names, 0 bytes of file data copied)\n\
         exit 0\n\
         img\n"
    );
}
