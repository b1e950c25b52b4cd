//! libc's directory walkers: scandir, nftw and ftw, and glob. Inside glibc
//! they open, read and stat through internal calls the shim cannot see, so
//! over the prefix they would list the kernel's (empty or missing)
//! directory. Here they are built on the shim's own opendir, readdir and
//! stat, which go to the image, to a client's mount, or to libc.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::mem::size_of;

use crate::dirs::{closedir, fdopendir, opendir, readdir64};
use crate::paths::{lstat, openat, stat};
use crate::real::next;
use crate::route::{below, normalize};
use crate::state::Shim;
use crate::{enter, errno_is, set_errno};

type Filter = Option<unsafe extern "C" fn(*const libc::dirent64) -> c_int>;
type Compare = Option<unsafe extern "C" fn(*mut *const libc::dirent64, *mut *const libc::dirent64) -> c_int>;
type QsortCompare = unsafe extern "C" fn(*const c_void, *const c_void) -> c_int;

/// The errno of the last call.
fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Reads `dir` to its end and closes it: the entries `filter` keeps, each
/// copied with malloc, sorted by `compare`, in a malloc'd array at `*list`
/// (scandir(3)'s answer). -1 with errno on a failure, nothing allocated.
///
/// # Safety
///
/// `dir` is an open stream, `list` writable; the callbacks are the
/// caller's, as scandir takes them.
unsafe fn collect(dir: *mut libc::DIR, list: *mut *mut *mut libc::dirent64, filter: Filter, compare: Compare) -> c_int {
    let mut kept: Vec<*mut libc::dirent64> = Vec::new();
    let free_all = |kept: &[*mut libc::dirent64]| {
        // SAFETY: each was malloc'd below and is freed once.
        kept.iter().for_each(|&e| unsafe { libc::free(e.cast()) })
    };
    let failed = loop {
        set_errno(0);
        // SAFETY: an open stream.
        let e = unsafe { readdir64(dir) };
        if e.is_null() {
            break errno();
        }
        // SAFETY: the entry readdir just returned; the caller's filter.
        if filter.is_some_and(|f| unsafe { f(e) } == 0) {
            continue;
        }
        // SAFETY: `d_reclen` bytes of the entry are readable (glibc's
        // scandir copies as many).
        let copy = unsafe {
            let len = usize::from((*e).d_reclen).max(size_of::<libc::dirent64>());
            let copy = libc::malloc(len).cast::<libc::dirent64>();
            if !copy.is_null() {
                std::ptr::copy_nonoverlapping(e.cast::<u8>(), copy.cast::<u8>(), usize::from((*e).d_reclen));
            }
            copy
        };
        if copy.is_null() {
            break libc::ENOMEM;
        }
        kept.push(copy);
    };
    // SAFETY: the stream, closed once.
    unsafe { closedir(dir) };
    if failed != 0 {
        free_all(&kept);
        set_errno(failed);
        return -1;
    }
    if let Some(compare) = compare {
        // SAFETY: qsort passes pointers to elements (`*const *mut dirent64`)
        // where the comparison takes `*mut *const dirent64`: the same
        // pointers, the same ABI.
        unsafe {
            let compare: QsortCompare = std::mem::transmute(compare);
            libc::qsort(
                kept.as_mut_ptr().cast(),
                kept.len(),
                size_of::<*mut libc::dirent64>(),
                Some(compare),
            );
        }
    }
    // SAFETY: an array for the pointers, handed to the caller to free.
    let array: *mut *mut libc::dirent64 =
        unsafe { libc::malloc(kept.len().max(1) * size_of::<*mut libc::dirent64>()) }.cast();
    if array.is_null() {
        free_all(&kept);
        set_errno(libc::ENOMEM);
        return -1;
    }
    // SAFETY: room for every pointer, just allocated; `list` is writable.
    unsafe {
        std::ptr::copy_nonoverlapping(kept.as_ptr(), array, kept.len());
        *list = array;
    }
    c_int::try_from(kept.len()).unwrap_or(c_int::MAX)
}

#[no_mangle]
pub unsafe extern "C" fn scandir(
    path: *const c_char,
    list: *mut *mut *mut libc::dirent64,
    filter: Filter,
    compare: Compare,
) -> c_int {
    // SAFETY: the same call, from the working directory.
    unsafe { scandirat(libc::AT_FDCWD, path, list, filter, compare) }
}

/// On this platform `struct dirent` is `struct dirent64`.
#[no_mangle]
pub unsafe extern "C" fn scandir64(
    path: *const c_char,
    list: *mut *mut *mut libc::dirent64,
    filter: Filter,
    compare: Compare,
) -> c_int {
    // SAFETY: the same call.
    unsafe { scandir(path, list, filter, compare) }
}

#[no_mangle]
pub unsafe extern "C" fn scandirat(
    dirfd: c_int,
    path: *const c_char,
    list: *mut *mut *mut libc::dirent64,
    filter: Filter,
    compare: Compare,
) -> c_int {
    // SAFETY: the shim's openat and fdopendir, then the caller's
    // arguments passed on.
    unsafe {
        let fd = openat(dirfd, path, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC, 0);
        if fd < 0 {
            return -1;
        }
        let dir = fdopendir(fd);
        if dir.is_null() {
            crate::fds::close(fd);
            return -1;
        }
        collect(dir, list, filter, compare)
    }
}

#[no_mangle]
pub unsafe extern "C" fn scandirat64(
    dirfd: c_int,
    path: *const c_char,
    list: *mut *mut *mut libc::dirent64,
    filter: Filter,
    compare: Compare,
) -> c_int {
    // SAFETY: the same call.
    unsafe { scandirat(dirfd, path, list, filter, compare) }
}

/// nftw(3)'s `struct FTW`.
#[repr(C)]
pub struct Ftw {
    base: c_int,
    level: c_int,
}

const FTW_F: c_int = 0;
const FTW_D: c_int = 1;
const FTW_DNR: c_int = 2;
const FTW_NS: c_int = 3;
const FTW_SL: c_int = 4;
const FTW_DP: c_int = 5;
const FTW_SLN: c_int = 6;
const FTW_PHYS: c_int = 1;
const FTW_MOUNT: c_int = 2;
const FTW_CHDIR: c_int = 4;
const FTW_DEPTH: c_int = 8;
const FTW_ACTIONRETVAL: c_int = 16;
const FTW_STOP: c_int = 1;
const FTW_SKIP_SUBTREE: c_int = 2;
const FTW_SKIP_SIBLINGS: c_int = 3;

type NftwFn = unsafe extern "C" fn(*const c_char, *const libc::stat, c_int, *mut Ftw) -> c_int;
type FtwFn = unsafe extern "C" fn(*const c_char, *const libc::stat, c_int) -> c_int;

/// What a callback's answer does to the walk.
enum Next {
    Go,
    SkipSubtree,
    SkipSiblings,
    Stop(c_int),
}

/// One walk: its flags, the callback, and the file system it started on.
struct Walk<'a> {
    flags: c_int,
    visit: &'a mut dyn FnMut(&CStr, &libc::stat, c_int, Ftw) -> c_int,
    dev: u64,
    /// With FTW_CHDIR the working directory moves, so a relative path is
    /// named to the shim from where the walk started (this, with a slash).
    anchor: Vec<u8>,
}

impl Walk<'_> {
    fn call(&mut self, path: &[u8], st: &libc::stat, kind: c_int, base: usize, level: c_int) -> Next {
        let c = std::ffi::CString::new(path).unwrap_or_default();
        let ftw = Ftw {
            base: c_int::try_from(base).unwrap_or(0),
            level,
        };
        let r = (self.visit)(&c, st, kind, ftw);
        if self.flags & FTW_ACTIONRETVAL == 0 {
            return if r == 0 { Next::Go } else { Next::Stop(r) };
        }
        match r {
            FTW_SKIP_SUBTREE => Next::SkipSubtree,
            FTW_SKIP_SIBLINGS => Next::SkipSiblings,
            FTW_STOP => Next::Stop(r),
            _ => Next::Go,
        }
    }

    /// Visits `path` (its name starting at `base`) and, for a directory,
    /// what is below it.
    fn visit(&mut self, path: &mut Vec<u8>, base: usize, level: c_int) -> Next {
        let named = if path.starts_with(b"/") {
            path.clone()
        } else {
            [&self.anchor[..], &path[..]].concat()
        };
        let c = std::ffi::CString::new(named).unwrap_or_default();
        // SAFETY: a zeroed stat for the shim's calls to fill.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let follow = self.flags & FTW_PHYS == 0;
        // SAFETY: a C string and a stat to fill, through the shim.
        let found = unsafe {
            if follow {
                stat(c.as_ptr(), &mut st)
            } else {
                lstat(c.as_ptr(), &mut st)
            }
        } == 0;
        let kind = if !found {
            // SAFETY: as above.
            let link = follow && unsafe { lstat(c.as_ptr(), &mut st) } == 0;
            if link {
                FTW_SLN
            } else {
                FTW_NS
            }
        } else {
            match st.st_mode & libc::S_IFMT {
                libc::S_IFDIR => FTW_D,
                libc::S_IFLNK => FTW_SL,
                _ => FTW_F,
            }
        };
        if self.flags & FTW_MOUNT != 0 && found && st.st_dev != self.dev {
            return Next::Go;
        }
        if kind != FTW_D {
            return self.call(path, &st, kind, base, level);
        }
        // SAFETY: the shim's opendir of a C string.
        let dir = unsafe { opendir(c.as_ptr()) };
        if dir.is_null() {
            return self.call(path, &st, FTW_DNR, base, level);
        }
        let names = read_names(dir);
        if self.flags & FTW_DEPTH == 0 {
            match self.call(path, &st, FTW_D, base, level) {
                Next::SkipSubtree => return Next::Go,
                Next::Go => {}
                other => return other,
            }
        }
        // SAFETY: chdir(2) of C strings, through the shim.
        let moved = self.flags & FTW_CHDIR != 0 && unsafe { crate::cwd::chdir(c.as_ptr()) } == 0;
        let len = path.len();
        for name in names {
            if !path.ends_with(b"/") {
                path.push(b'/');
            }
            let child_base = path.len();
            path.extend_from_slice(&name);
            let next = self.visit(path, child_base, level + 1);
            path.truncate(len);
            match next {
                Next::Go | Next::SkipSubtree => {}
                Next::SkipSiblings => break,
                Next::Stop(r) => return Next::Stop(r),
            }
        }
        if moved {
            let parent = c
                .as_bytes()
                .iter()
                .rposition(|&b| b == b'/')
                .map_or(&b"."[..], |i| &c.as_bytes()[..i.max(1)]);
            let parent = std::ffi::CString::new(parent).unwrap_or_default();
            // SAFETY: as above: back to the directory above.
            unsafe { crate::cwd::chdir(parent.as_ptr()) };
        }
        if self.flags & FTW_DEPTH != 0 {
            return self.call(path, &st, FTW_DP, base, level);
        }
        Next::Go
    }
}

/// The names in `dir` but `.` and `..`, read before its entries are
/// visited (so that a deep walk holds one stream at a time), then closed.
fn read_names(dir: *mut libc::DIR) -> Vec<Vec<u8>> {
    let mut names = Vec::new();
    loop {
        // SAFETY: an open stream of the shim's or libc's.
        let e = unsafe { readdir64(dir) };
        if e.is_null() {
            break;
        }
        // SAFETY: readdir's entry holds a C string name.
        let name = unsafe { CStr::from_ptr((*e).d_name.as_ptr()) }.to_bytes();
        if name != b"." && name != b".." {
            names.push(name.to_vec());
        }
    }
    // SAFETY: closed once.
    unsafe { closedir(dir) };
    names
}

/// Whether `path` names something under the prefix.
fn in_prefix(s: &Shim, path: &CStr) -> bool {
    let mode = s.mode.read();
    below(&s.prefix, &normalize(&s.absolute_of(&mode, path.to_bytes()))).is_some()
}

/// Walks `path` as nftw(3) does with `flags`, calling `visit`: -1 (errno
/// set) when the root cannot be looked at, as glibc answers.
fn nftw_here(path: &CStr, flags: c_int, visit: &mut dyn FnMut(&CStr, &libc::stat, c_int, Ftw) -> c_int) -> c_int {
    // SAFETY: a zeroed stat filled by the shim's calls on a C string.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let phys = flags & FTW_PHYS != 0;
    // SAFETY: as above.
    let found = unsafe {
        if phys {
            lstat(path.as_ptr(), &mut st)
        } else {
            stat(path.as_ptr(), &mut st)
        }
    } == 0;
    // A dangling link at the root is reported (FTW_SLN); nothing else.
    // SAFETY: as above.
    if !found && (phys || !errno_is(libc::ENOENT) || unsafe { lstat(path.as_ptr(), &mut st) } != 0) {
        return -1;
    }
    // SAFETY: the shim's getcwd allocating its answer, freed below.
    let start = (flags & FTW_CHDIR != 0).then(|| unsafe { crate::cwd::getcwd(std::ptr::null_mut(), 0) });
    let start = start.filter(|p| !p.is_null()).map(|p| {
        // SAFETY: getcwd's C string, copied and then freed.
        let owned = unsafe { CStr::from_ptr(p) }.to_owned();
        // SAFETY: as above.
        unsafe { libc::free(p.cast()) };
        owned
    });
    let mut anchor = start.as_ref().map_or_else(Vec::new, |c| c.to_bytes().to_vec());
    if !anchor.is_empty() && !anchor.ends_with(b"/") {
        anchor.push(b'/');
    }
    let bytes = path.to_bytes().to_vec();
    let base = bytes
        .iter()
        .rposition(|&b| b == b'/')
        .filter(|&i| i + 1 < bytes.len())
        .map_or(0, |i| i + 1);
    let mut walk = Walk {
        flags,
        visit,
        dev: st.st_dev,
        anchor,
    };
    let r = match walk.visit(&mut bytes.clone(), base, 0) {
        Next::Stop(r) => r,
        _ => 0,
    };
    if let Some(start) = start {
        // SAFETY: back to where the walk started, through the shim.
        unsafe { crate::cwd::chdir(start.as_ptr()) };
    }
    r
}

/// A walk of the C path `path`: `walk` with the shim's own calls when it
/// names something under the prefix (the callbacks run as the program's
/// calls, so theirs are routed too), libc's walker `theirs` otherwise.
fn route_walk(path: *const c_char, theirs: impl Fn() -> c_int, walk: impl FnOnce(&CStr) -> c_int) -> c_int {
    let ours = |s: &'static Shim| {
        // SAFETY: a path argument.
        match unsafe { crate::route::c_path(path) } {
            Some(p) if in_prefix(s, p) => crate::as_program(|| walk(p)),
            _ => theirs(),
        }
    };
    enter(ours, &theirs)
}

#[no_mangle]
pub unsafe extern "C" fn nftw(path: *const c_char, f: NftwFn, fds: c_int, flags: c_int) -> c_int {
    // SAFETY: libc's contract, passed on.
    let theirs = || unsafe { next!(nftw: fn(*const c_char, NftwFn, c_int, c_int) -> c_int)(path, f, fds, flags) };
    route_walk(path, theirs, |p| {
        // SAFETY: the caller's callback with a path, stat and FTW of this walk.
        nftw_here(p, flags, &mut |p, st, kind, mut ftw| unsafe {
            f(p.as_ptr(), st, kind, &mut ftw)
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn nftw64(path: *const c_char, f: NftwFn, fds: c_int, flags: c_int) -> c_int {
    // SAFETY: the same call.
    unsafe { nftw(path, f, fds, flags) }
}

/// ftw(3): nftw following links, with no FTW_SL, FTW_SLN or FTW_DP.
#[no_mangle]
pub unsafe extern "C" fn ftw(path: *const c_char, f: FtwFn, fds: c_int) -> c_int {
    // SAFETY: libc's contract, passed on.
    let theirs = || unsafe { next!(ftw: fn(*const c_char, FtwFn, c_int) -> c_int)(path, f, fds) };
    route_walk(path, theirs, |p| {
        nftw_here(p, 0, &mut |p, st, kind, _| {
            let kind = if kind == FTW_SLN { FTW_NS } else { kind };
            // SAFETY: the caller's callback.
            unsafe { f(p.as_ptr(), st, kind) }
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn ftw64(path: *const c_char, f: FtwFn, fds: c_int) -> c_int {
    // SAFETY: the same call.
    unsafe { ftw(path, f, fds) }
}

/// Where glibc's glob_t keeps GLOB_ALTDIRFUNC's functions (the libc
/// crate keeps them private): closedir, readdir, opendir, lstat, stat.
const GLOB_ALT_FUNCS: usize = 32;
const _: () = assert!(size_of::<libc::glob_t>() == GLOB_ALT_FUNCS + 5 * size_of::<usize>());

/// glob(3) with the shim's directory functions (GLOB_ALTDIRFUNC), unless
/// the caller gave its own.
#[no_mangle]
pub unsafe extern "C" fn glob(
    pattern: *const c_char,
    flags: c_int,
    errfunc: Option<extern "C" fn(*const c_char, c_int) -> c_int>,
    pglob: *mut libc::glob_t,
) -> c_int {
    type Glob = unsafe extern "C" fn(
        *const c_char,
        c_int,
        Option<extern "C" fn(*const c_char, c_int) -> c_int>,
        *mut libc::glob_t,
    ) -> c_int;
    let glob: Glob = next!(glob: fn(*const c_char, c_int, Option<extern "C" fn(*const c_char, c_int) -> c_int>, *mut libc::glob_t) -> c_int);
    if flags & libc::GLOB_ALTDIRFUNC != 0 || pglob.is_null() {
        // SAFETY: libc's contract, passed on.
        return unsafe { glob(pattern, flags, errfunc, pglob) };
    }
    let funcs: [*const (); 5] = [
        closedir as *const (),
        readdir64 as *const (),
        opendir as *const (),
        lstat as *const (),
        stat as *const (),
    ];
    // SAFETY: the five function pointers glibc reads with GLOB_ALTDIRFUNC,
    // written where its glob_t keeps them (checked size above), then
    // libc's glob with the caller's arguments.
    unsafe {
        let at = pglob.cast::<u8>().add(GLOB_ALT_FUNCS).cast::<*const ()>();
        std::ptr::copy_nonoverlapping(funcs.as_ptr(), at, funcs.len());
        glob(pattern, flags | libc::GLOB_ALTDIRFUNC, errfunc, pglob)
    }
}

#[no_mangle]
pub unsafe extern "C" fn glob64(
    pattern: *const c_char,
    flags: c_int,
    errfunc: Option<extern "C" fn(*const c_char, c_int) -> c_int>,
    pglob: *mut libc::glob_t,
) -> c_int {
    // SAFETY: the same call.
    unsafe { glob(pattern, flags, errfunc, pglob) }
}
