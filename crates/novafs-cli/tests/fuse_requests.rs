//! What the mount asks of the daemon, read back with `novafs stats`: the
//! table itself, and the round trips the mount avoids (README, "The
//! mount's requests"): opens and closes cost none, pages written stay
//! cached, and a directory listed again unchanged costs no READDIR, while
//! every change still shows.

mod fuse_common;

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;

use fuse_common::{ok, require_fuse, Mount};

/// Requests served so far by opcode, summed over the table's transports.
fn counts(m: &Mount) -> BTreeMap<String, u64> {
    let table = ok(m.novafs(&["stats"]).arg(&m.mnt));
    let mut by_op = BTreeMap::new();
    for line in table.lines() {
        let mut fields = line.split_whitespace();
        if let (Some(op), Some(Ok(n))) = (fields.next(), fields.next().map(str::parse::<u64>)) {
            *by_op.entry(op.to_string()).or_insert(0) += n;
        }
    }
    assert!(by_op.contains_key("INIT"), "no INIT in the table:\n{table}");
    by_op
}

/// How many requests of each of `ops` running `f` cost.
fn cost(m: &Mount, ops: &[&str], f: impl FnOnce()) -> BTreeMap<String, u64> {
    let before = counts(m);
    f();
    let after = counts(m);
    ops.iter()
        .map(|op| {
            let n = after.get(*op).copied().unwrap_or(0) - before.get(*op).copied().unwrap_or(0);
            (op.to_string(), n)
        })
        .collect()
}

fn names(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    v.sort();
    v
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn the_table_names_each_request_and_times_it_with_stats() {
    require_fuse();
    let mut m = Mount::new("64M", &[]);
    fs::write(m.path("f"), b"x").expect("write");
    let table = ok(m.novafs(&["stats"]).arg(&m.mnt));
    assert!(table.contains("opcode") && table.contains("count"), "{table}");
    let write = table.lines().find(|l| l.starts_with("WRITE ")).expect("a WRITE row");
    assert_eq!(
        write.split_whitespace().nth(2),
        Some("-"),
        "no times without -o stats: {write}"
    );
    m.umount();
    m.mount(&["stats"]);
    fs::write(m.path("g"), b"y").expect("write");
    let table = ok(m.novafs(&["stats"]).arg(&m.mnt));
    let write = table.lines().find(|l| l.starts_with("WRITE ")).expect("a WRITE row");
    let handle: f64 = write
        .split_whitespace()
        .nth(3)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("a time in {write}"));
    assert!(handle > 0.0, "{write}");
    m.umount();
    let left = fs::read_dir(m.dir.path().join("run"))
        .expect("run dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "stats"))
        .count();
    assert_eq!(left, 1, "-o stats leaves its table beside the log at unmount");
    m.mount(&[]);
    m.finish();
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn opens_closes_and_reads_of_written_pages_cost_no_request() {
    require_fuse();
    let m = Mount::new("64M", &[]);
    let data = vec![0x5au8; 64 << 10];
    fs::write(m.path("f"), &data).expect("write");
    let c = cost(&m, &["OPEN", "RELEASE", "FLUSH", "READ"], || {
        for _ in 0..5 {
            let mut back = Vec::new();
            fs::File::open(m.path("f"))
                .expect("open")
                .read_to_end(&mut back)
                .expect("read");
            assert_eq!(back, data);
        }
    });
    assert!(c.values().all(|&n| n == 0), "{c:?}");
    m.finish();
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn a_listing_again_costs_no_readdir_and_still_shows_every_change() {
    require_fuse();
    let m = Mount::new("64M", &[]);
    let d = m.path("d");
    fs::create_dir(&d).expect("mkdir");
    for i in 0..300 {
        fs::write(d.join(format!("f{i:03}")), b"").expect("create");
    }
    let mut want: Vec<String> = (0..300).map(|i| format!("f{i:03}")).collect();
    assert_eq!(names(&d), want);
    let listed = ["READDIR", "READDIRPLUS"];
    let c = cost(&m, &listed, || assert_eq!(names(&d), want));
    assert!(c.values().all(|&n| n == 0), "an unchanged listing again: {c:?}");
    // Each kind of change drops the cached listing.
    fs::write(d.join("new"), b"").expect("create");
    want.push("new".into());
    assert_eq!(names(&d), want, "after a create");
    fs::remove_file(d.join("f007")).expect("unlink");
    want.retain(|n| n != "f007");
    assert_eq!(names(&d), want, "after an unlink");
    fs::rename(d.join("f008"), d.join("renamed")).expect("rename");
    want.retain(|n| n != "f008");
    want.push("renamed".into());
    want.sort();
    assert_eq!(names(&d), want, "after a rename");
    fs::rename(d.join("renamed"), m.path("out")).expect("rename out");
    want.retain(|n| n != "renamed");
    assert_eq!(names(&d), want, "after a rename to another directory");
    fs::create_dir(d.join("sub")).expect("mkdir");
    want.push("sub".into());
    want.sort();
    assert_eq!(names(&d), want, "after a mkdir");
    let c = cost(&m, &listed, || assert_eq!(names(&d), want));
    assert!(c.values().all(|&n| n == 0), "unchanged again: {c:?}");
    m.finish();
}
