//! Credentials and the umask: the image's permission checks are the
//! library's (README "Trust model"), made for the credentials and umask
//! the process has now, so each call that changes them tells libnovafs.

use std::ffi::{c_int, c_uint, c_void};

use crate::enter;
use crate::real::next;
use crate::state::{Mode, Shim};

/// After a successful change of ids: the owner's checks use the new ones.
fn refreshed(s: &Shim, r: c_int) -> c_int {
    if r == 0 {
        if let Mode::Owner(o) = &*s.mode.read() {
            // SAFETY: the owner's handle.
            unsafe { capi::novafs_refresh_credentials(o.handle()) };
        }
    }
    r
}

macro_rules! id_calls {
    ($(fn $name:ident($($a:ident: $t:ty),*);)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
            // SAFETY: libc's contract, passed on.
            let theirs = || unsafe { next!($name: fn($($t),*) -> c_int)($($a),*) };
            enter(|s| refreshed(s, theirs()), theirs)
        }
    )*};
}

id_calls! {
    fn setuid(uid: c_uint);
    fn seteuid(uid: c_uint);
    fn setreuid(ruid: c_uint, euid: c_uint);
    fn setresuid(ruid: c_uint, euid: c_uint, suid: c_uint);
    fn setgid(gid: c_uint);
    fn setegid(gid: c_uint);
    fn setregid(rgid: c_uint, egid: c_uint);
    fn setresgid(rgid: c_uint, egid: c_uint, sgid: c_uint);
    fn setgroups(n: usize, list: *const c_uint);
    fn capset(header: *mut c_void, data: *const c_void);
}

/// setfsuid(2) and setfsgid(2) answer with the old id, not a status: the
/// credentials are read again whatever happened.
macro_rules! fs_id_calls {
    ($($name:ident),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(id: c_uint) -> c_int {
            // SAFETY: libc's contract, passed on.
            let theirs = || unsafe { next!($name: fn(c_uint) -> c_int)(id) };
            enter(|s| {
                let old = theirs();
                refreshed(s, 0);
                old
            }, theirs)
        }
    )*};
}

fs_id_calls!(setfsuid, setfsgid);

/// umask(2): the image's files are made with the new mask too.
#[no_mangle]
pub unsafe extern "C" fn umask(mask: c_uint) -> c_uint {
    // SAFETY: umask(2).
    let theirs = || unsafe { next!(umask: fn(c_uint) -> c_uint)(mask) };
    let ours = |s: &'static Shim| {
        let old = theirs();
        if let Mode::Owner(o) = &*s.mode.read() {
            o.posix().umask(mask);
        }
        old as c_int
    };
    enter(ours, || theirs() as c_int) as c_uint
}
