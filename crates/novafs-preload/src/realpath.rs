//! realpath(3) and its kin. libc's own resolves a path with calls the shim
//! cannot see, so a path into the image is resolved here, symbolic links
//! and all, the way the kernel walks it (path_resolution(7)); a client's
//! answer, which names the mount, is given back under the prefix.

use std::ffi::{c_char, CStr, CString};

use novafs_posix::{At, FileType, Target};

use crate::cwd::copy_path_out;
use crate::real::next;
use crate::route::{below, c_path, join};
use crate::state::{Mode, Owner, Shim};
use crate::{enter, fail, paths::at_path};

/// Links followed in one resolution before ELOOP (Linux's MAXSYMLINKS).
const MAX_LINKS: usize = 40;

/// Where an absolute path the program named ends up.
#[derive(Debug, PartialEq)]
enum Resolved {
    /// A file of the image, by the path the program knows it by.
    Image(Vec<u8>),
    /// Out of the prefix (by `..` or a link): the kernel's to finish.
    Kernel(Vec<u8>),
}

/// What the resolution needs of the image: a file's kind, a link's target
/// (both by the image's own absolute path, links not followed).
trait Lookup {
    fn kind(&self, inside: &[u8]) -> Result<FileType, i32>;
    fn target(&self, inside: &[u8]) -> Result<Vec<u8>, i32>;
}

impl Lookup for Owner {
    fn kind(&self, inside: &[u8]) -> Result<FileType, i32> {
        let at = Target::Path {
            at: At::Cwd,
            path: inside,
            follow: false,
        };
        self.posix().stat(at).map(|a| a.kind).map_err(|e| e.0)
    }

    fn target(&self, inside: &[u8]) -> Result<Vec<u8>, i32> {
        self.posix().readlink(At::Cwd, inside).map_err(|e| e.0)
    }
}

/// The components of `p`, last first (to pop in order).
fn stack(p: &[u8]) -> Vec<Vec<u8>> {
    p.split(|&b| b == b'/').rev().map(<[u8]>::to_vec).collect()
}

/// `todo` (a [`stack`]) as a path again, after `dir`.
fn rejoin(dir: &[u8], todo: &[Vec<u8>]) -> Vec<u8> {
    let mut p = dir.to_vec();
    for c in todo.iter().rev().filter(|c| !c.is_empty()) {
        if !p.ends_with(b"/") {
            p.push(b'/');
        }
        p.extend_from_slice(c);
    }
    p
}

/// Resolves `abs` (absolute, not normalised) below `prefix` one component
/// at a time: every component must exist, every one but the last (after
/// its links) be a directory, and `..` is taken after the links before
/// it, as the kernel takes it.
fn resolve(prefix: &[u8], image: &impl Lookup, abs: &[u8]) -> Result<Resolved, i32> {
    let Some(rest) = below(prefix, abs) else {
        return Ok(Resolved::Kernel(abs.to_vec()));
    };
    let mut done = prefix.to_vec();
    let mut todo = stack(rest);
    let mut links = 0;
    while let Some(c) = todo.pop() {
        match &c[..] {
            b"" | b"." => continue,
            b".." if done == prefix => {
                let parent = &prefix[..prefix.iter().rposition(|&b| b == b'/').unwrap_or(0)];
                return Ok(Resolved::Kernel(rejoin(
                    if parent.is_empty() { b"/" } else { parent },
                    &todo,
                )));
            }
            b".." => {
                done.truncate(done.iter().rposition(|&b| b == b'/').unwrap_or(0));
                continue;
            }
            _ => {}
        }
        let before = done.len();
        done.push(b'/');
        done.extend_from_slice(&c);
        let inside = &done[prefix.len()..];
        match image.kind(inside)? {
            FileType::Symlink => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(libc::ELOOP);
                }
                let target = image.target(inside)?;
                done.truncate(before);
                if target.starts_with(b"/") {
                    let again = rejoin(&target, &todo);
                    let Some(rest) = below(prefix, &again) else {
                        return Ok(Resolved::Kernel(again));
                    };
                    done = prefix.to_vec();
                    todo = stack(rest);
                } else {
                    todo.extend(stack(&target));
                }
            }
            FileType::Directory => {}
            _ if todo.is_empty() => {}
            _ => return Err(libc::ENOTDIR),
        }
    }
    Ok(Resolved::Image(done))
}

/// What realpath answers for a path the owner serves: None when the path
/// is not the image's at all.
fn owners_answer(s: &Shim, o: &Owner, named: &[u8], resolved: *mut c_char) -> Option<*mut c_char> {
    let abs = if named.starts_with(b"/") {
        named.to_vec()
    } else {
        let cwd = o.cwd.lock().clone();
        join(&cwd.unwrap_or_else(|| s.kernel_cwd.lock().clone()), named)
    };
    below(&s.prefix, &crate::route::normalize(&abs))?;
    let room = if resolved.is_null() { 0 } else { libc::PATH_MAX as usize };
    Some(match resolve(&s.prefix, o, &abs) {
        Ok(Resolved::Image(p)) => copy_path_out(&p, resolved, room),
        Ok(Resolved::Kernel(p)) => {
            let p = CString::new(p).unwrap_or_default();
            // SAFETY: libc's realpath of a C string, into the caller's buffer.
            unsafe { next!(realpath: fn(*const c_char, *mut c_char) -> *mut c_char)(p.as_ptr(), resolved) }
        }
        Err(e) => fail(e),
    })
}

#[no_mangle]
pub unsafe extern "C" fn realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char {
    // SAFETY: libc's contract, passed on.
    let theirs =
        |p: *const c_char| unsafe { next!(realpath: fn(*const c_char, *mut c_char) -> *mut c_char)(p, resolved) };
    let ours = |s: &'static Shim| {
        // SAFETY: a path argument.
        let Some(named) = (unsafe { c_path(path) }) else {
            return theirs(path);
        };
        if let Mode::Owner(o) = &*s.mode.read() {
            if let Some(answer) = owners_answer(s, o, named.to_bytes(), resolved) {
                return answer;
            }
        }
        at_path(
            s,
            libc::AT_FDCWD,
            path,
            |_, _, _| fail(libc::EIO),
            |_, p| {
                let out = theirs(p);
                if out.is_null() {
                    return out;
                }
                // A client's answer names the mount: back to the prefix.
                // SAFETY: realpath returned a C string.
                let got = unsafe { CStr::from_ptr(out) }.to_bytes().to_vec();
                let mode = s.mode.read();
                let shown = s.shown_path(&mode, &got);
                if shown == got {
                    return out;
                }
                if resolved.is_null() {
                    // SAFETY: the buffer realpath allocated.
                    unsafe { libc::free(out.cast()) };
                }
                copy_path_out(
                    &shown,
                    resolved,
                    if resolved.is_null() { 0 } else { libc::PATH_MAX as usize },
                )
            },
        )
    };
    enter(ours, || theirs(path))
}

#[no_mangle]
pub unsafe extern "C" fn __realpath_chk(path: *const c_char, resolved: *mut c_char, _room: usize) -> *mut c_char {
    // SAFETY: the same contract, passed on.
    unsafe { realpath(path, resolved) }
}

#[no_mangle]
pub unsafe extern "C" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    // SAFETY: realpath allocating its buffer.
    unsafe { realpath(path, std::ptr::null_mut()) }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// An image of paths: directories, files, and links with their targets.
    struct Tree(HashMap<&'static [u8], Option<&'static [u8]>>, Vec<&'static [u8]>);

    impl Lookup for Tree {
        fn kind(&self, inside: &[u8]) -> Result<FileType, i32> {
            match self.0.get(inside) {
                Some(Some(_)) => Ok(FileType::Symlink),
                Some(None) if self.1.contains(&inside) => Ok(FileType::RegularFile),
                Some(None) => Ok(FileType::Directory),
                None => Err(libc::ENOENT),
            }
        }

        fn target(&self, inside: &[u8]) -> Result<Vec<u8>, i32> {
            Ok(self.0[inside].ok_or(libc::EINVAL)?.to_vec())
        }
    }

    fn tree() -> Tree {
        let entries: [(&[u8], Option<&[u8]>); 9] = [
            (b"/d", None),
            (b"/d/e", None),
            (b"/d/f", None),
            (b"/up", Some(b"d/e/..")),
            (b"/d/e/back", Some(b"../../d")),
            (b"/abs", Some(b"/srv/d/e")),
            (b"/out", Some(b"/etc")),
            (b"/loop", Some(b"loop")),
            (b"/dangling", Some(b"nowhere")),
        ];
        Tree(entries.into_iter().collect(), vec![b"/d/f"])
    }

    #[test]
    fn links_and_dots_resolve_as_the_kernel_walks_them() {
        let t = tree();
        let image = |p: &[u8]| Resolved::Image(p.to_vec());
        let kernel = |p: &[u8]| Resolved::Kernel(p.to_vec());
        for (path, want) in [
            (&b"/srv"[..], Ok(image(b"/srv"))),
            (b"/srv/", Ok(image(b"/srv"))),
            (b"/srv/d/./e/", Ok(image(b"/srv/d/e"))),
            (b"/srv/up", Ok(image(b"/srv/d"))),
            (b"/srv/up/f", Ok(image(b"/srv/d/f"))),
            (b"/srv/d/e/back/e", Ok(image(b"/srv/d/e"))),
            (b"/srv/abs/../f", Ok(image(b"/srv/d/f"))),
            (b"/srv/out/passwd", Ok(kernel(b"/etc/passwd"))),
            (b"/srv/d/../../tmp/x", Ok(kernel(b"/tmp/x"))),
            (b"/srv/..", Ok(kernel(b"/"))),
            (b"/srv/d/f/", Err(libc::ENOTDIR)),
            (b"/srv/d/f/x", Err(libc::ENOTDIR)),
            (b"/srv/d/nothing", Err(libc::ENOENT)),
            (b"/srv/dangling", Err(libc::ENOENT)),
            (b"/srv/loop", Err(libc::ELOOP)),
            (b"/etc/passwd", Ok(kernel(b"/etc/passwd"))),
        ] {
            assert_eq!(resolve(b"/srv", &t, path), want, "{}", String::from_utf8_lossy(path));
        }
    }
}
