//! /proc/self/mountinfo: which mounts there are, of what, from where.

use std::fs;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

pub(super) struct MountEntry {
    pub(super) fstype: String,
    pub(super) source: String,
}

/// A mount point where `image` is mounted, if any.
pub(crate) fn mount_point_of(image: &Path) -> Option<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = fs::canonicalize(image).ok()?.to_string_lossy().into_owned();
    info.lines()
        .filter_map(parse_mountinfo_line)
        .find(|(_, entry)| entry.source == want && entry.fstype.starts_with("fuse"))
        .map(|(point, _)| PathBuf::from(std::ffi::OsString::from_vec(point)))
}

/// Whether some mount has `image` as its source.
pub(super) fn image_is_mounted(image: &Path) -> bool {
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        return true;
    };
    let want = image.to_string_lossy();
    info.lines()
        .filter_map(parse_mountinfo_line)
        .any(|(_, entry)| entry.source == want)
}

/// The mount whose mount point is exactly `path` (the last one, if
/// several are stacked).
pub(super) fn find_mount(path: &Path) -> Result<Option<MountEntry>> {
    let info = fs::read_to_string("/proc/self/mountinfo").context("cannot read /proc/self/mountinfo")?;
    let want = path.as_os_str().as_bytes();
    Ok(info.lines().filter_map(parse_mountinfo_line).fold(
        None,
        |found, (point, entry)| {
            if point == want {
                Some(entry)
            } else {
                found
            }
        },
    ))
}

/// Field 5 is the mount point; after the " - " separator come the type
/// and the source. Paths escape space, tab, newline and backslash as \ooo.
fn parse_mountinfo_line(line: &str) -> Option<(Vec<u8>, MountEntry)> {
    let (left, right) = line.split_once(" - ")?;
    let point = unescape(left.split(' ').nth(4)?);
    let mut r = right.split(' ');
    let fstype = r.next()?.to_string();
    let source = String::from_utf8_lossy(&unescape(r.next().unwrap_or(""))).into_owned();
    Some((point, MountEntry { fstype, source }))
}

fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push(d.iter().fold(0u8, |v, c| v.wrapping_mul(8) + (c - b'0')));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_unescape_mount_points() {
        let line = "36 35 0:40 / /tmp/a\\040b rw,relatime shared:1 - fuse /img\\054x rw,user_id=0";
        let (point, m) = parse_mountinfo_line(line).expect("parses");
        assert_eq!(point, b"/tmp/a b");
        assert_eq!(m.fstype, "fuse");
        assert_eq!(m.source, "/img,x");
    }
}
