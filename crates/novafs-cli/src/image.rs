//! Opening images from the command line, with errors that say what to do.

use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, Result};
use pm::{BadBlocks, MapOptions, MmapRegion, PmError, Prefault, Region};

/// Parses "4096", "64K", "512M", "1G", "2GiB", "1T" (binary units).
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size (try 1G or 512M)"))?;
    let shift = match unit
        .trim()
        .to_ascii_lowercase()
        .trim_end_matches("ib")
        .trim_end_matches('b')
    {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return Err(format!("'{s}' has an unknown unit (use K, M, G or T)")),
    };
    let bytes = n.checked_mul(1 << shift).ok_or_else(|| format!("'{s}' is too large"))?;
    if bytes == 0 || bytes % 4096 != 0 {
        return Err(format!("'{s}' must be a positive multiple of 4 KiB"));
    }
    Ok(bytes)
}

/// Explains a region error in one line with the next step.
pub fn explain(path: &Path, e: PmError) -> anyhow::Error {
    let p = path.display();
    match e {
        PmError::Busy { .. } => {
            anyhow!("{p} is in use by another novafs process (mounted or being checked); unmount it first")
        }
        PmError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            anyhow!("{p} does not exist; create it with `novafs mkfs {p}`")
        }
        PmError::Io { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied => {
            anyhow!("{p}: permission denied; run as a user who can read and write it")
        }
        // These name the path themselves: once is enough.
        PmError::Io { source, .. } => anyhow!("{p}: {source}"),
        PmError::Invalid { msg, .. } => anyhow!("{p}: {msg}"),
        other => anyhow!("{p}: {other}"),
    }
}

/// Maps an existing image for a short-lived command, faulting in only the
/// pages it reads; `lock` takes the exclusive image lock.
pub fn open(path: &Path, lock: bool) -> Result<Arc<dyn Region>> {
    let opts = MapOptions {
        lock,
        prefault: Prefault::OnFirstUse,
        ..MapOptions::default()
    };
    let region = MmapRegion::open(path, &opts).map_err(|e| explain(path, e))?;
    Ok(Arc::new(region))
}

/// Explains a core error met while reading an image.
pub fn explain_fs(path: &Path, e: novafs::Error) -> anyhow::Error {
    let p = path.display();
    match e {
        novafs::Error::NotNovafs(why) => {
            anyhow!("{p} is not a novafs image ({why}); create one with `novafs mkfs`")
        }
        novafs::Error::TooNew { found, supported } => {
            anyhow!("{p} uses format version {found}, newer than this novafs ({supported}); upgrade novafs")
        }
        novafs::Error::Corrupt(why) => anyhow!("{p} is damaged: {why}; run `novafs fsck {p}`"),
        novafs::Error::Pm(PmError::Media { off }) if BadBlocks::sidecar(path).exists() => {
            let side = BadBlocks::sidecar(path);
            anyhow!(
                "{p}: media error at region offset {off:#x}, emulated by {}; `rm {}` clears it",
                side.display(),
                side.display()
            )
        }
        other => anyhow!("{p}: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("8192"), Ok(8192));
        assert!(parse_size("100").is_err());
        assert!(parse_size("1X").is_err());
        assert!(parse_size("G").is_err());
    }
}
