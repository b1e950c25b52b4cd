//! Snapshots (NOVA-Fortis §3): take two while a file changes, read each
//! through a read-only view beside the live file system, delete one and
//! get its space back, and find the rest again after a remount.
//!
//! `cargo run -p novafs --example snapshots [IMAGE]`

mod common;

use std::path::Path;

use common::{make, open, read_all, Outcome};
use novafs::{Error, Fs, ROOT_INO};

fn main() -> Outcome {
    common::main_with(run)
}

/// Four pages of `byte`.
fn draft(byte: u8) -> Vec<u8> {
    vec![byte; 4 * 4096]
}

/// The contents of /report.txt as `fs` (the live file system or a view)
/// shows it.
fn report(fs: &Fs) -> novafs::Result<Vec<u8>> {
    read_all(fs, fs.resolve("/report.txt")?.ino)
}

/// The pages snapshot `name` alone keeps: what deleting it gives back.
fn held_pages(fs: &Fs, name: &[u8]) -> u64 {
    fs.snapshots()
        .iter()
        .find(|s| s.name == name)
        .map_or(0, |s| s.held_pages)
}

pub fn run(image: &Path) -> Outcome {
    let fs = make(image)?;
    let ino = fs.create(ROOT_INO, b"report.txt", 0o644, 0, 0)?.ino;
    fs.write(ino, 0, &draft(b'1'))?;

    // Taking a snapshot costs the same whatever the file system holds: it
    // waits only for the operations in flight and starts a new epoch.
    let v1 = fs.take_snapshot(b"v1")?;
    fs.write(ino, 0, &draft(b'2'))?;
    let v2 = fs.take_snapshot(b"v2")?;
    // The live file goes; the snapshots keep it, and its old pages.
    fs.unlink(ROOT_INO, b"report.txt")?;
    assert!(matches!(fs.resolve("/report.txt"), Err(Error::NotFound)));
    println!(
        "took v1 (epoch {}) and v2 (epoch {}), then deleted /report.txt",
        v1.epoch, v2.epoch
    );
    for s in fs.snapshots() {
        println!(
            "  snapshot {}: epoch {}, keeps {} page(s) only it needs",
            String::from_utf8_lossy(&s.name),
            s.epoch,
            s.held_pages
        );
    }
    println!("pages only snapshots hold: {}", fs.statfs().snapshot_blocks);

    // A view of each snapshot: an `Fs` that reads as the file system was.
    let view1 = fs.open_snapshot(b"v1")?;
    let view2 = fs.open_snapshot(b"v2")?;
    assert_eq!(report(&view1)?, draft(b'1'));
    assert_eq!(report(&view2)?, draft(b'2'));
    println!("v1 reads draft 1, v2 reads draft 2");
    // Views are read-only, and hold their snapshot: it cannot be deleted
    // while one is open.
    assert!(matches!(
        view1.create(ROOT_INO, b"x", 0o644, 0, 0),
        Err(Error::ReadOnly)
    ));
    assert!(matches!(fs.delete_snapshot(b"v1"), Err(Error::Busy(_))));
    drop(view1);
    drop(view2);

    // Deleting v1 frees what only v1 needed (draft 1's pages), in the
    // background; wait_reclaimed waits for that.
    let free_before = fs.statfs().blocks_free;
    let held = held_pages(&fs, b"v1");
    fs.delete_snapshot(b"v1")?;
    fs.wait_reclaimed();
    let free_after = fs.statfs().blocks_free;
    assert_eq!(free_after, free_before + held);
    println!("deleted v1: {} page(s) freed", free_after - free_before);
    fs.unmount()?;

    // The list and what v2 keeps survive the remount.
    let fs = open(image)?;
    let names: Vec<Vec<u8>> = fs.snapshots().into_iter().map(|s| s.name).collect();
    assert_eq!(names, [b"v2".to_vec()]);
    assert_eq!(report(&fs.open_snapshot(b"v2")?)?, draft(b'2'));
    println!("after a remount: v2 still reads draft 2");
    let free_before = fs.statfs().blocks_free;
    let held = held_pages(&fs, b"v2");
    fs.delete_snapshot(b"v2")?;
    fs.wait_reclaimed();
    assert_eq!(fs.statfs().blocks_free, free_before + held);
    assert_eq!(fs.statfs().snapshot_blocks, 0);
    println!("deleted v2: {held} page(s) freed, none held for snapshots any more");
    fs.unmount()?;
    Ok(())
}
