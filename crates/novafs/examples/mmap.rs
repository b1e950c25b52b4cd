//! DAX mmap (NOVA-Fortis §2, §3.3, §3.4): map a file's pages into this
//! process and store to its persistent memory in place, with no
//! file-system call on the way; see what write(2) and a snapshot do to a
//! mapping, and find the stores again after a remount.
//!
//! `cargo run -p novafs --example mmap [IMAGE]`
//!
//! A mapping needs a region mapped from a file (as this image is; not a
//! devdax device or an in-memory region).

mod common;

use std::path::Path;

use common::{make, open, read_all, Outcome};
use novafs::{ScrubOptions, ROOT_INO};

fn main() -> Outcome {
    common::main_with(run)
}

const PAGE: usize = 4096;

pub fn run(image: &Path) -> Outcome {
    let fs = make(image)?;
    let ino = fs.create(ROOT_INO, b"table.bin", 0o644, 0, 0)?.ino;
    fs.write(ino, 0, &[b'.'; 2 * PAGE])?;

    // Two pages, writable. A program loads and stores through
    // `m.as_ptr()` (raw pointers: unsafe code); `load` and `store` do the
    // same accesses safely. A page is mapped at its first access; an
    // access past the end of the file kills the program, as SIGBUS does.
    let m = fs.mmap(ino, 0, 2, true)?;
    m.store(0, b"stored in place")?;
    // The program's own persist barrier (flush and fence): from here the
    // bytes survive a crash. Until then they may or may not.
    m.persist(0, 15)?;
    // No copy: the file system reads what the program stored.
    let mut buf = [0u8; 15];
    fs.read(ino, 0, &mut buf)?;
    assert_eq!(&buf, b"stored in place");
    println!("stored through the mapping, read back through Fs::read");

    // write(2) over a mapped page (copy-on-write, as every write is): the
    // mapping sees the new bytes at once.
    let mut got = [0u8; 7];
    m.load(PAGE, &mut got)?;
    assert_eq!(&got, b".......");
    fs.write(ino, PAGE as u64, b"written")?;
    m.load(PAGE, &mut got)?;
    assert_eq!(&got, b"written");
    println!("wrote through Fs::write, loaded through the mapping");

    // A snapshot holds the mapped pages as they are; the next store to
    // one copies it first (copy-on-write), so the snapshot keeps the old.
    fs.take_snapshot(b"before")?;
    m.store(0, b"STORED")?;
    m.persist(0, 6)?;
    let before = fs.open_snapshot(b"before")?;
    let old = read_all(&before, before.resolve("/table.bin")?.ino)?;
    assert_eq!(&old[..15], b"stored in place");
    drop(before);
    println!("after a snapshot: the live file has the new store, the snapshot the old bytes");

    // Stored-to pages have no checksums until sealed (the paper's caveat
    // DAXor): sync (msync) gives them back, as closing the mapping does.
    m.sync()?;
    let rep = fs.scrub(ScrubOptions::default(), &|_, _| true)?;
    assert!(rep.damaged.is_empty() && rep.data_repaired == 0, "{rep:?}");
    println!("sealed: scrub checked {} page(s), all match their checksums", rep.pages);
    m.close()?; // munmap

    fs.unmount()?;
    let fs = open(image)?;
    let data = read_all(&fs, fs.resolve("/table.bin")?.ino)?;
    assert_eq!(&data[..15], b"STORED in place");
    assert_eq!(&data[PAGE..PAGE + 7], b"written");
    println!("after a remount: the stores are in the file");
    fs.unmount()?;
    Ok(())
}
