//! What every example does first: pick where its image goes, make it, and
//! open it (the crate's quick start shows the same steps inline).
// Each example uses only some of these.
#![allow(dead_code)]

use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use novafs::{FormatOptions, Fs, MountOptions};
use pm::{MapOptions, MmapRegion, Region};

/// The result of an example: any error ends it with a non-zero status.
pub type Outcome = Result<(), Box<dyn Error>>;

/// Runs `example` on the image path given as the first argument (a new
/// file, left behind for `novafs info`, `fsck` or `mount` to look at), or
/// on one in a temporary directory removed at the end.
pub fn main_with(example: fn(&Path) -> Outcome) -> Outcome {
    let tmp = tempfile::tempdir()?;
    let image = match std::env::args_os().nth(1) {
        Some(path) => PathBuf::from(path),
        None => tmp.path().join("novafs.img"),
    };
    example(&image)
}

/// Makes a new image at `image` with room for 64 MiB of files, formatted
/// with the defaults (metadata replicas, data checksums and parity on),
/// and opens it.
pub fn make(image: &Path) -> Result<Fs, Box<dyn Error>> {
    // Never format over something that is there: the path is the user's.
    if image.exists() {
        return Err(format!("{} exists: give a path for a new image", image.display()).into());
    }
    let size = novafs::minimum_size(novafs::default_shards()) + (64 << 20);
    let region: Arc<dyn Region> = Arc::new(MmapRegion::create(image, size, &MapOptions::default())?);
    Fs::format(region.clone(), &FormatOptions::default())?;
    Ok(Fs::open(region, MountOptions::default())?)
}

/// Opens the image at `image` again (after an unmount, or a crash: the
/// mount then recovers).
pub fn open(image: &Path) -> Result<Fs, Box<dyn Error>> {
    Ok(Fs::open(region(image)?, MountOptions::default())?)
}

/// The image's region, for what works on an unmounted image.
pub fn region(image: &Path) -> Result<Arc<dyn Region>, Box<dyn Error>> {
    Ok(Arc::new(MmapRegion::open(image, &MapOptions::default())?))
}

/// The whole contents of file `ino`.
pub fn read_all(fs: &Fs, ino: novafs::Ino) -> Result<Vec<u8>, novafs::Error> {
    let mut buf = vec![0u8; fs.getattr(ino)?.size as usize];
    let n = fs.read(ino, 0, &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}
