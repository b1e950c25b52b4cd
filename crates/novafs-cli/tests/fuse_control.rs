//! The daemon's control channel serves requests concurrently: snapshots
//! are taken while `novafs scrub MOUNTPOINT` runs, not after it.

mod fuse_common;

use std::fs;
use std::process::Stdio;
use std::time::{Duration, Instant};

use fuse_common::{bounded, ok, require_fuse, wait_until, Mount};

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn snapshots_are_taken_while_a_scrub_runs() {
    require_fuse();
    let m = Mount::new("64M", &[]);
    // 4 MiB of file data: at 1 MiB/s the scrub lasts about 4 s.
    for i in 0..4u8 {
        fs::write(m.path(&format!("f{i}")), vec![i + 1; 1 << 20]).expect("write");
    }
    let mut scrub = m
        .novafs(&["scrub", "--rate", "1M"])
        .arg(&m.mnt)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start novafs scrub");
    // The daemon's log says when the scrub has started.
    let run_dir = m.dir.path().join("run");
    let scrubbing = || {
        fs::read_dir(&run_dir).into_iter().flatten().flatten().any(|e| {
            e.path().extension().is_some_and(|x| x == "log")
                && fs::read_to_string(e.path()).is_ok_and(|l| l.contains("scrub started from the control channel"))
        })
    };
    wait_until("the scrub to start", Duration::from_secs(5), scrubbing);
    for n in 1..=3 {
        let start = Instant::now();
        ok(m.novafs(&["snapshot", "create"]).arg(&m.mnt).arg(format!("s{n}")));
        let took = start.elapsed();
        assert!(
            took < Duration::from_secs(2),
            "snapshot s{n} took {took:?} beside the scrub"
        );
    }
    let list = ok(m.novafs(&["snapshot", "list"]).arg(&m.mnt));
    assert!(
        scrub.try_wait().expect("scrub status").is_none(),
        "the scrub ended before the snapshots were taken: it was not slow enough to tell"
    );
    for n in 1..=3 {
        assert!(list.contains(&format!("s{n}")), "{list}");
    }
    let out = scrub.wait_with_output().expect("scrub output");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("nothing left damaged"), "{text}");
    m.finish();
}

/// The daemon stops its control channel at unmount without needing the
/// socket's file: with the file gone (a cleaned-up state directory), the
/// unmount still returns and leaves the image clean.
#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn unmount_works_when_the_control_socket_file_is_gone() {
    require_fuse();
    let mut m = Mount::new("64M", &[]);
    fs::write(m.path("f"), b"kept").expect("write");
    let run = m.dir.path().join("run");
    let mut removed = 0;
    for e in fs::read_dir(&run).expect("the daemon's state directory") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "ctl") {
            fs::remove_file(&p).expect("remove the socket");
            removed += 1;
        }
    }
    assert_eq!(removed, 1, "one control socket in {}", run.display());
    let out = bounded(
        m.novafs(&["umount"]).arg(&m.mnt),
        "novafs umount with its control socket's file gone",
    );
    let status = out.status;
    assert!(status.success(), "novafs umount: {status}");
    m.mounted = false;
    let report = m.fsck();
    assert!(report.contains("cleanly unmounted"), "{report}");
}
