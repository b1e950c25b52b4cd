//! Scrub (NOVA-Fortis §4.2, §4.3): read everything redundancy protects
//! while the file system stays in use, repair what the checksums, parity
//! and replicas can, and report what they cannot.
//!
//! The example damages its own image (the fault injection `novafs
//! inject` uses, on the image while it is unmounted): first a few bytes
//! of one data page, which parity rebuilds, then a whole page, which it
//! cannot.
//!
//! `cargo run -p novafs --example scrub [IMAGE]`

mod common;

use std::path::Path;

use common::{make, open, read_all, region, Outcome};
use novafs::inject::{corrupt, Spec, Target};
use novafs::{Fs, Ino, ScrubOptions, ScrubReport, ROOT_INO};

fn main() -> Outcome {
    common::main_with(run)
}

/// Eight pages of a pattern that shows where each byte belongs.
fn contents() -> Vec<u8> {
    (0..8 * 4096u32).map(|i| (i % 251) as u8).collect()
}

fn scrub(fs: &Fs) -> novafs::Result<ScrubReport> {
    // The callback sees (inodes done, inodes in all) and may stop the
    // scrub early by returning false; `ScrubOptions::rate` caps its speed.
    let rep = fs.scrub(ScrubOptions::default(), &|_done, _total| true)?;
    println!(
        "  scrub: {} inode(s), {} data page(s); repaired {} data strip(s), {} metadata range(s), {} replica(s); {} \
         object(s) it could not repair",
        rep.inodes,
        rep.pages,
        rep.data_repaired,
        rep.metadata_repaired,
        rep.replicas_rewritten,
        rep.damaged.len()
    );
    Ok(rep)
}

/// Damages `bytes` bytes of one data page of file `ino` (picked by
/// `seed`) on the unmounted image.
fn damage(image: &Path, ino: Ino, seed: u64, bytes: u64) -> common::Outcome {
    let mut spec = Spec::new(Target::DataPage);
    spec.ino = ino;
    spec.seed = seed;
    spec.bytes = bytes;
    for d in corrupt(&*region(image)?, &spec)? {
        println!("damaged {d}");
    }
    Ok(())
}

pub fn run(image: &Path) -> Outcome {
    let fs = make(image)?;
    let ino = fs.create(ROOT_INO, b"data.bin", 0o644, 0, 0)?.ino;
    fs.write(ino, 0, &contents())?;

    println!("a healthy image:");
    let rep = scrub(&fs)?;
    assert!(rep.damaged.is_empty() && rep.data_repaired == 0 && rep.metadata_repaired == 0);
    fs.unmount()?;

    // Bit rot in one 512-byte strip of a data page: its checksum no longer
    // matches, and the page's parity rebuilds it.
    damage(image, ino, 3, 8)?;
    let fs = open(image)?;
    println!("after damaging a few bytes:");
    let rep = scrub(&fs)?;
    assert!(rep.damaged.is_empty() && rep.data_repaired >= 1, "{rep:?}");
    assert_eq!(read_all(&fs, ino)?, contents());
    println!("  the file reads as written");
    assert_eq!(scrub(&fs)?.data_repaired, 0, "a second scrub finds nothing left");
    // The repairs are counted in the superblock (`novafs info` shows them).
    println!("  health: {}", fs.health());
    fs.unmount()?;

    // A whole page: more bad strips than one parity strip rebuilds. Scrub
    // names the file and reads of those bytes answer EIO until they are
    // written again; the rest of the file still reads.
    damage(image, ino, 5, 4096)?;
    let fs = open(image)?;
    println!("after damaging a whole page:");
    let rep = scrub(&fs)?;
    assert!(!rep.damaged.is_empty(), "{rep:?}");
    for d in &rep.damaged {
        println!("  cannot repair: {d:?}");
    }
    let err = read_all(&fs, ino).err().ok_or("a read of the lost page succeeded")?;
    assert_eq!(err.errno(), libc::EIO);
    println!("  reading the whole file: {err}");

    // What a user does: write the lost bytes again from a backup (here:
    // the whole file from the copy this program keeps).
    fs.write(ino, 0, &contents())?;
    assert_eq!(read_all(&fs, ino)?, contents());
    let rep = scrub(&fs)?;
    assert!(rep.damaged.is_empty(), "{rep:?}");
    println!("rewritten from a copy: the file reads, and scrub finds nothing");
    fs.unmount()?;
    Ok(())
}
