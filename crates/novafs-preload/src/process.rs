//! New processes and programs: fork, exec and spawn. Before the first of
//! them the owner hands the image over (handover.rs); a program exec'd
//! gets the shim and its settings even when the caller built a fresh
//! environment; a client's paths under the prefix are rewritten.

use std::ffi::{c_char, c_int, CStr, CString};

use crate::handover::handover;
use crate::real::next;
use crate::route::{c_path, Where};
use crate::state::Shim;
use crate::{enter, fail, Failure};

/// The settings a program under the shim needs in its environment.
const KEEP: [&str; 8] = [
    "LD_PRELOAD",
    "NOVAFS_IMAGE",
    "NOVAFS_PREFIX",
    "NOVAFS_MOUNT",
    "NOVAFS_MOUNT_FD",
    "NOVAFS_CLIENTS",
    "NOVAFS_CLIENTS_FD",
    "NOVAFS_BIN",
];

/// Hands over, then runs `start`; a failed handover fails the call.
fn after_handover<R: Failure>(s: &Shim, start: impl FnOnce() -> R) -> R {
    match handover(s) {
        Ok(()) => start(),
        Err(e) => fail(e),
    }
}

/// `envp` with the shim's settings added where the caller left them out:
/// the strings and the NULL-terminated array pointing into them.
struct Env {
    _strings: Vec<CString>,
    ptrs: Vec<*const c_char>,
}

fn with_settings(envp: *const *const c_char) -> Option<Env> {
    let mut given: Vec<&[u8]> = Vec::new();
    if !envp.is_null() {
        let mut i = 0;
        // SAFETY: a NULL-terminated array of C strings (exec's contract).
        while let Some(p) = unsafe { (*envp.add(i)).as_ref() } {
            given.push(unsafe { CStr::from_ptr(p) }.to_bytes());
            i += 1;
        }
    }
    let missing: Vec<CString> = KEEP
        .iter()
        .filter(|k| {
            !given
                .iter()
                .any(|g| g.starts_with(k.as_bytes()) && g.get(k.len()) == Some(&b'='))
        })
        .filter_map(|k| std::env::var_os(k).map(|v| (k, v)))
        .filter_map(|(k, v)| CString::new([k.as_bytes(), b"=", v.as_encoded_bytes()].concat()).ok())
        .collect();
    if missing.is_empty() {
        return None;
    }
    let mut strings: Vec<CString> = given.iter().filter_map(|g| CString::new(*g).ok()).collect();
    strings.extend(missing);
    let mut ptrs: Vec<*const c_char> = strings.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    Some(Env {
        _strings: strings,
        ptrs,
    })
}

/// The program path a client's exec should get (under the prefix: the
/// mount's), or None to keep the caller's.
fn program_path(s: &Shim, path: *const c_char) -> Option<CString> {
    // SAFETY: exec's path argument.
    let p = unsafe { c_path(path) }?;
    let mode = s.mode.read();
    match s.route(&mode, libc::AT_FDCWD, p) {
        Where::Kernel(_, new) => new,
        _ => None,
    }
}

/// The program and environment an exec or spawn of `file` (looked for in
/// PATH when `search` and it has no slash) should get: a client's path
/// under the prefix becomes the mount's, and the shim's settings go into
/// an environment that left them out. Calls `start` with them.
fn with_program<R>(
    s: &Shim,
    file: *const c_char,
    search: bool,
    envp: *const *const c_char,
    start: impl FnOnce(*const c_char, *const *const c_char) -> R,
) -> R {
    // SAFETY: the file argument.
    let has_slash = unsafe { c_path(file) }.is_some_and(|f| f.to_bytes().contains(&b'/'));
    let program = if has_slash || !search {
        program_path(s, file)
    } else {
        None
    };
    let env = with_settings(envp);
    start(
        program.as_ref().map_or(file, |p| p.as_ptr()),
        env.as_ref().map_or(envp, |e| e.ptrs.as_ptr()),
    )
}

fn environ() -> *const *const c_char {
    extern "C" {
        static environ: *const *const c_char;
    }
    // SAFETY: libc's environment pointer, read once.
    unsafe { environ }
}

#[no_mangle]
pub unsafe extern "C" fn execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    // SAFETY: libc's contract, passed on.
    let theirs = |p: *const c_char, e: *const *const c_char| unsafe {
        next!(execve: fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int)(p, argv, e)
    };
    enter(
        |s| after_handover(s, || with_program(s, path, false, envp, theirs)),
        || theirs(path, envp),
    )
}

#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: the same call with the process's environment.
    unsafe { execve(path, argv, environ()) }
}

#[no_mangle]
pub unsafe extern "C" fn execvpe(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    // SAFETY: libc's contract, passed on.
    let theirs = |f: *const c_char, e: *const *const c_char| unsafe {
        next!(execvpe: fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int)(f, argv, e)
    };
    enter(
        |s| after_handover(s, || with_program(s, file, true, envp, theirs)),
        || theirs(file, envp),
    )
}

#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: the same call with the process's environment.
    unsafe { execvpe(file, argv, environ()) }
}

#[no_mangle]
pub unsafe extern "C" fn fork() -> libc::pid_t {
    // SAFETY: fork(2).
    let theirs = || unsafe { next!(fork: fn() -> libc::pid_t)() };
    enter(|s| after_handover(s, theirs), theirs)
}

/// vfork(2) as fork(2) (which POSIX allows): the shim's code must not run
/// in a child sharing its parent's memory.
#[no_mangle]
pub unsafe extern "C" fn vfork() -> libc::pid_t {
    // SAFETY: as fork.
    unsafe { fork() }
}

type SpawnFn = unsafe extern "C" fn(
    *mut libc::pid_t,
    *const c_char,
    *const libc::posix_spawn_file_actions_t,
    *const libc::posix_spawnattr_t,
    *const *const c_char,
    *const *const c_char,
) -> c_int;

/// posix_spawn(3)'s arguments after the path.
struct SpawnArgs {
    pid: *mut libc::pid_t,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *const c_char,
}

/// posix_spawn(3) and posix_spawnp(3) (`search`: the file is looked for
/// in PATH when it has no slash); their error is the return value.
fn spawn(real: SpawnFn, search: bool, path: *const c_char, a: SpawnArgs, envp: *const *const c_char) -> c_int {
    // SAFETY: libc's contract, passed on.
    let theirs = |p: *const c_char, e: *const *const c_char| unsafe { real(a.pid, p, a.actions, a.attr, a.argv, e) };
    let ours = |s: &'static Shim| match handover(s) {
        Ok(()) => with_program(s, path, search, envp, theirs),
        Err(e) => e,
    };
    enter(ours, || theirs(path, envp))
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let real = next!(posix_spawn: fn(*mut libc::pid_t, *const c_char, *const libc::posix_spawn_file_actions_t, *const libc::posix_spawnattr_t, *const *const c_char, *const *const c_char) -> c_int);
    spawn(
        real,
        false,
        path,
        SpawnArgs {
            pid,
            actions,
            attr,
            argv,
        },
        envp,
    )
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let real = next!(posix_spawnp: fn(*mut libc::pid_t, *const c_char, *const libc::posix_spawn_file_actions_t, *const libc::posix_spawnattr_t, *const *const c_char, *const *const c_char) -> c_int);
    spawn(
        real,
        true,
        file,
        SpawnArgs {
            pid,
            actions,
            attr,
            argv,
        },
        envp,
    )
}

/// system(3): its shell is a new process.
#[no_mangle]
pub unsafe extern "C" fn system(command: *const c_char) -> c_int {
    // SAFETY: libc's contract, passed on.
    let theirs = || unsafe { next!(system: fn(*const c_char) -> c_int)(command) };
    enter(|s| after_handover(s, theirs), theirs)
}

/// popen(3): its shell is a new process.
#[no_mangle]
pub unsafe extern "C" fn popen(command: *const c_char, kind: *const c_char) -> *mut libc::FILE {
    // SAFETY: libc's contract, passed on.
    let theirs = || unsafe { next!(popen: fn(*const c_char, *const c_char) -> *mut libc::FILE)(command, kind) };
    enter(|s| after_handover(s, theirs), theirs)
}
