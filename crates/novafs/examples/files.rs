//! Files and directories: make a small tree, write, read, list, link,
//! rename, truncate and remove, then unmount and check that all of it is
//! still there when the image is opened again.
//!
//! `cargo run -p novafs --example files [IMAGE]`

mod common;

use std::path::Path;

use common::{make, open, read_all, Outcome};
use novafs::{FileType, SetAttr, ROOT_INO};

fn main() -> Outcome {
    common::main_with(run)
}

pub fn run(image: &Path) -> Outcome {
    let fs = make(image)?;
    println!("made and mounted {}", image.display());

    // /notes/today.txt, owned by uid and gid 1000. Every call that returns
    // Ok is durable at once (strict mode): no fsync is needed.
    let notes = fs.mkdir(ROOT_INO, b"notes", 0o755, 1000, 1000)?;
    let today = fs.create(notes.ino, b"today.txt", 0o644, 1000, 1000)?;
    fs.write(today.ino, 0, b"buy milk\n")?;
    // Append: write at the end of the file.
    let end = fs.getattr(today.ino)?.size;
    fs.write(today.ino, end, b"call the plumber\n")?;
    // A write past the end leaves a hole, which reads as zeros.
    fs.write(today.ino, 4096 * 3, b"far away")?;
    let data = read_all(&fs, today.ino)?;
    assert_eq!(&data[..26], b"buy milk\ncall the plumber\n");
    assert!(data[26..4096 * 3].iter().all(|&b| b == 0));
    println!("/notes/today.txt: {} bytes, a hole in the middle", data.len());

    // Truncate (setattr with a size), as truncate(2) does.
    let set = SetAttr::default().size(9);
    fs.setattr(today.ino, &set)?;
    assert_eq!(read_all(&fs, today.ino)?, b"buy milk\n");

    // A hard link, a symbolic link, and a rename into another directory.
    fs.link(today.ino, ROOT_INO, b"pinned.txt")?;
    fs.symlink(ROOT_INO, b"latest", b"notes/today.txt", 1000, 1000)?;
    let archive = fs.mkdir(ROOT_INO, b"archive", 0o755, 1000, 1000)?;
    let old = fs.create(notes.ino, b"yesterday.txt", 0o644, 1000, 1000)?;
    fs.write(old.ino, 0, b"done\n")?;
    fs.rename(notes.ino, b"yesterday.txt", archive.ino, b"2024-01-01.txt", 0)?;
    assert_eq!(fs.resolve("/archive/2024-01-01.txt")?.ino, old.ino);
    assert_eq!(fs.getattr(today.ino)?.nlink, 2);
    assert_eq!(fs.readlink(fs.resolve("/latest")?.ino)?, b"notes/today.txt");

    // Remove: unlink a file, rmdir an empty directory.
    let scratch = fs.mkdir(ROOT_INO, b"scratch", 0o755, 1000, 1000)?;
    fs.create(scratch.ino, b"tmp", 0o600, 1000, 1000)?;
    fs.unlink(scratch.ino, b"tmp")?;
    fs.rmdir(ROOT_INO, b"scratch")?;
    assert!(matches!(fs.resolve("/scratch"), Err(novafs::Error::NotFound)));

    let listing = list(&fs, ROOT_INO)?;
    println!("/: {}", listing.join(" "));
    assert_eq!(listing, ["archive/", "latest@", "notes/", "pinned.txt"]);
    fs.unmount()?;
    println!("unmounted");

    // Open the image again: everything above is there.
    let fs = open(image)?;
    assert!(fs.mount_report().clean, "the unmount was clean: no recovery scan");
    assert_eq!(list(&fs, ROOT_INO)?, listing);
    let today = fs.resolve("/notes/today.txt")?;
    assert_eq!(read_all(&fs, today.ino)?, b"buy milk\n");
    assert_eq!(fs.resolve("/pinned.txt")?.ino, today.ino);
    assert_eq!(read_all(&fs, fs.resolve("/archive/2024-01-01.txt")?.ino)?, b"done\n");
    let st = fs.statfs();
    println!(
        "after a remount: the same tree; {} of {} blocks of {} bytes free, {} inodes free",
        st.blocks_free, st.blocks, st.block_size, st.files_free
    );
    fs.unmount()?;
    Ok(())
}

/// The names in directory `dir`, sorted, marked as `ls -F` marks them.
fn list(fs: &novafs::Fs, dir: novafs::Ino) -> novafs::Result<Vec<String>> {
    let mut names = Vec::new();
    // readdir calls back once per entry, from `offset` on (0: the start),
    // until the callback returns true ("buffer full").
    fs.readdir(dir, 0, |e| {
        if e.name != b"." && e.name != b".." {
            let mark = match e.kind {
                FileType::Directory => "/",
                FileType::Symlink => "@",
                _ => "",
            };
            names.push(format!("{}{mark}", String::from_utf8_lossy(&e.name)));
        }
        false
    })?;
    names.sort();
    Ok(names)
}
