//! Which paths are the image's, and where a call that names one goes.
//!
//! A path is the image's when, made absolute (from the working directory
//! or the descriptor it is relative to), it is the prefix or below it.
//! `.` and `..` are taken lexically before that test, as a shell's `cd`
//! does, so that `/prefix/../etc` is the real /etc; inside the image,
//! novafs-posix resolves names and symbolic links itself, with the image's
//! root as `/` (a link can not lead out of the image).

use std::borrow::Cow;
use std::ffi::{c_char, c_int, CStr, CString};

use crate::state::{Mode, Owner, Shim};

/// Where a call naming a path goes.
pub(crate) enum Where<'a> {
    /// To libc, with this directory descriptor and the path the program
    /// gave (None) or this one.
    Kernel(c_int, Option<CString>),
    /// To the image in this process: the handle, the image's directory
    /// descriptor (or AT_FDCWD) and the path in the image.
    Image(&'a Owner, c_int, Cow<'a, CStr>),
    /// The image's, after the owner unmounted it.
    Gone,
}

/// A kernel directory descriptor's name and identity.
pub(crate) struct KernelDir {
    path: Vec<u8>,
    id: (u64, u64),
}

/// `p` with `.`, `..` and repeated slashes taken out; a trailing slash
/// kept (it asks for a directory).
pub(crate) fn normalize(p: &[u8]) -> Vec<u8> {
    let absolute = p.starts_with(b"/");
    let mut parts: Vec<&[u8]> = Vec::new();
    for part in p.split(|&b| b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => {
                if parts.last().is_some_and(|&l| l != b"..") {
                    parts.pop();
                } else if !absolute {
                    parts.push(part);
                }
            }
            _ => parts.push(part),
        }
    }
    let mut out = Vec::with_capacity(p.len());
    if absolute {
        out.push(b'/');
    }
    out.extend(parts.join(&b'/'));
    if p.ends_with(b"/") && !out.ends_with(b"/") && !out.is_empty() {
        out.push(b'/');
    }
    if out.is_empty() {
        out.push(b'.');
    }
    out
}

/// Whether `p` has a `.` or `..` component or a doubled slash.
fn needs_normalizing(p: &[u8]) -> bool {
    p.windows(2).any(|w| w == b"//") || p.split(|&b| b == b'/').any(|part| part == b"." || part == b"..")
}

/// `rest` of an absolute, normalised `abs` below `base` (empty for `base`
/// itself, else starting with `/`).
pub(crate) fn below<'a>(base: &[u8], abs: &'a [u8]) -> Option<&'a [u8]> {
    let rest = abs.strip_prefix(base)?;
    (rest.is_empty() || rest.starts_with(b"/")).then_some(rest)
}

pub(crate) fn join(dir: &[u8], rel: &[u8]) -> Vec<u8> {
    let mut abs = dir.to_vec();
    if !abs.ends_with(b"/") {
        abs.push(b'/');
    }
    abs.extend_from_slice(rel);
    abs
}

/// A path made of a C string's bytes and the shim's own (no NUL in
/// either).
fn c_string(bytes: Vec<u8>) -> CString {
    CString::new(bytes).unwrap_or_default()
}

impl Shim {
    /// Where a call naming `path` relative to `dirfd` goes, in `mode`.
    pub(crate) fn route<'a>(&self, mode: &'a Mode, dirfd: c_int, path: &'a CStr) -> Where<'a> {
        let p = path.to_bytes();
        let as_is = || Where::Kernel(dirfd, None);
        match mode {
            Mode::Owner(owner) => {
                if p.starts_with(b"/") {
                    return self.absolute(mode, p).unwrap_or_else(as_is);
                }
                if dirfd != libc::AT_FDCWD {
                    return if owner.owns(dirfd) {
                        Where::Image(owner, dirfd, Cow::Borrowed(path))
                    } else {
                        self.relative_to_kernel_dir(mode, dirfd, p).unwrap_or_else(as_is)
                    };
                }
                let cwd = owner.cwd.lock();
                match &*cwd {
                    Some(_) if !needs_normalizing(p) => Where::Image(owner, libc::AT_FDCWD, Cow::Borrowed(path)),
                    Some(abs) => {
                        let abs = join(abs, p);
                        drop(cwd);
                        self.absolute(mode, &abs)
                            .unwrap_or_else(|| Where::Kernel(dirfd, Some(c_string(normalize(&abs)))))
                    }
                    None => {
                        drop(cwd);
                        self.relative_to_kernel_cwd(mode, p).unwrap_or_else(as_is)
                    }
                }
            }
            Mode::Client(_) if p.starts_with(b"/") => self.absolute(mode, p).unwrap_or_else(as_is),
            Mode::Client(_) if dirfd == libc::AT_FDCWD => self.relative_to_kernel_cwd(mode, p).unwrap_or_else(as_is),
            Mode::Client(_) => self.relative_to_kernel_dir(mode, dirfd, p).unwrap_or_else(as_is),
            Mode::Closed => {
                let abs = if p.starts_with(b"/") {
                    p.to_vec()
                } else {
                    join(&self.kernel_cwd.lock(), p)
                };
                if below(&self.prefix, &normalize(&abs)).is_some() {
                    Where::Gone
                } else {
                    as_is()
                }
            }
        }
    }

    /// A relative path from the kernel's working directory: the image's
    /// only when that directory is above the prefix (or the path climbs
    /// out with `..` and back in).
    fn relative_to_kernel_cwd<'a>(&self, mode: &'a Mode, p: &[u8]) -> Option<Where<'a>> {
        let cwd = self.kernel_cwd.lock();
        let above = below(&cwd, &self.prefix).is_some() || cwd.as_slice() == b"/";
        if !above && !needs_normalizing(p) {
            return None;
        }
        let abs = join(&cwd, p);
        drop(cwd);
        self.absolute(mode, &abs)
    }

    /// A relative path from a kernel directory descriptor the program
    /// opened by name above the prefix (`openat(open("/"), "prefix/a")`,
    /// as rsync walks a destination): the image's when it leads in.
    fn relative_to_kernel_dir<'a>(&self, mode: &'a Mode, dirfd: c_int, p: &[u8]) -> Option<Where<'a>> {
        let abs = {
            let dirs = self.kernel_dirs.lock();
            let dir = dirs.get(&dirfd)?;
            let abs = normalize(&join(&dir.path, p));
            below(&self.prefix, &abs)?;
            // The number may have been closed behind the shim's back and
            // reused: the same directory still, or not this way.
            // SAFETY: fstat(2) into a struct it fills.
            let mut st = unsafe { std::mem::zeroed::<libc::stat>() };
            // SAFETY: as above.
            if unsafe { libc::fstat(dirfd, &mut st) } != 0 || (st.st_dev, st.st_ino) != dir.id {
                return None;
            }
            abs
        };
        self.absolute(mode, &abs)
    }

    /// Notes where a kernel directory descriptor was opened (for
    /// `relative_to_kernel_dir`): `path` from `dirfd`.
    pub(crate) fn note_kernel_dir(&self, fd: c_int, dirfd: c_int, path: &[u8]) {
        let base = if path.starts_with(b"/") {
            Vec::new()
        } else if dirfd == libc::AT_FDCWD {
            self.kernel_cwd.lock().clone()
        } else {
            match self.kernel_dirs.lock().get(&dirfd) {
                Some(d) => d.path.clone(),
                None => return,
            }
        };
        // SAFETY: fstat(2) into a struct it fills.
        let mut st = unsafe { std::mem::zeroed::<libc::stat>() };
        // SAFETY: as above.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            return;
        }
        let path = normalize(&join(&base, path));
        self.kernel_dirs.lock().insert(
            fd,
            KernelDir {
                path,
                id: (st.st_dev, st.st_ino),
            },
        );
    }

    /// An absolute path under the prefix: the image's path (owner) or the
    /// mount's (client). None when it is not under the prefix.
    fn absolute<'a>(&self, mode: &'a Mode, raw: &[u8]) -> Option<Where<'a>> {
        let p = raw;
        let norm;
        let p = if needs_normalizing(p) {
            norm = normalize(p);
            &norm[..]
        } else {
            p
        };
        let Some(rest) = below(&self.prefix, p) else {
            // Through the prefix and out of it (`/prefix/../etc`): the
            // kernel has no prefix directory to climb out of.
            let through = raw.starts_with(&self.prefix) && raw.get(self.prefix.len()) == Some(&b'/');
            return through.then(|| Where::Kernel(libc::AT_FDCWD, Some(c_string(p.to_vec()))));
        };
        Some(match mode {
            Mode::Owner(owner) => {
                let inside = if rest.is_empty() { b"/".to_vec() } else { rest.to_vec() };
                Where::Image(owner, libc::AT_FDCWD, Cow::Owned(c_string(inside)))
            }
            // The root itself with a slash: `/proc/self/fd/N` alone is a
            // symbolic link to lstat and readlink, the prefix a directory.
            Mode::Client(c) => {
                let rest = if rest.is_empty() { &b"/"[..] } else { rest };
                Where::Kernel(libc::AT_FDCWD, Some(c_string([&c.reach[..], rest].concat())))
            }
            Mode::Closed => Where::Gone,
        })
    }

    /// The absolute path a program would see for `path` (relative to the
    /// working directory): for chdir and realpath.
    pub(crate) fn absolute_of(&self, mode: &Mode, path: &[u8]) -> Vec<u8> {
        if path.starts_with(b"/") {
            return normalize(path);
        }
        let cwd = match mode {
            Mode::Owner(owner) => owner.cwd.lock().clone(),
            _ => None,
        };
        let cwd = cwd.unwrap_or_else(|| self.kernel_cwd.lock().clone());
        normalize(&join(&cwd, path))
    }

    /// A path the kernel gave a client (getcwd, realpath), as the program
    /// should see it: the mount's part under the prefix.
    pub(crate) fn shown_path(&self, mode: &Mode, p: &[u8]) -> Vec<u8> {
        if let Mode::Client(c) = mode {
            if let Some(rest) = below(&c.mount, p) {
                return [&self.prefix[..], rest].concat();
            }
        }
        p.to_vec()
    }
}

/// The C string at `p`, or None for a null pointer or one that cannot be
/// read (the call then goes to libc, and the kernel answers EFAULT, as
/// pjdfstest's */EFAULT cases want).
pub(crate) unsafe fn c_path<'a>(p: *const c_char) -> Option<&'a CStr> {
    if p.is_null() {
        return None;
    }
    // SAFETY: `c_str_len` reads safely whatever `p` is.
    let len = unsafe { pm::c_str_len(p) }?;
    // SAFETY: `len` bytes and their NUL were just read at `p`; the caller's
    // string outlives the call.
    Some(unsafe { CStr::from_bytes_with_nul_unchecked(std::slice::from_raw_parts(p.cast(), len + 1)) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_takes_dots_out_lexically() {
        for (p, want) in [
            (&b"/a/b/../c"[..], &b"/a/c"[..]),
            (b"/a/./b//c/", b"/a/b/c/"),
            (b"/../a", b"/a"),
            (b"a/../../b", b"../b"),
            (b"/p/..", b"/"),
            (b".", b"."),
            (b"a/..", b"."),
        ] {
            assert_eq!(normalize(p), want, "{}", String::from_utf8_lossy(p));
        }
    }

    #[test]
    fn below_needs_a_whole_component() {
        assert_eq!(below(b"/mnt/nv", b"/mnt/nv"), Some(&b""[..]));
        assert_eq!(below(b"/mnt/nv", b"/mnt/nv/a"), Some(&b"/a"[..]));
        assert_eq!(below(b"/mnt/nv", b"/mnt/nvx"), None);
        assert_eq!(below(b"/mnt/nv", b"/mnt"), None);
    }
}
