//! Who sent a request, as far as the set-group-ID rule needs to know.
//!
//! Linux drops set-group-ID from any mode a caller outside the node's
//! group and without CAP_FSETID sets (`setattr_copy`). For chmod the
//! kernel's FUSE client already strips it, but not for the mode it sends
//! when it clears set-user-ID after a write, truncate or fallocate by such
//! a caller (that SETATTR is forced past the checks): on ext4 the file
//! loses both bits there, so here the daemon applies the rule to every
//! mode it sets (xfstests generic/683 and 684). The rule and the reading
//! of /proc are the core's ([`Cred`]).

use novafs::{Caps, Cred};

/// The credentials of process `pid` from /proc; if it is gone (or /proc
/// is not mounted), what the request itself says: `uid` 0 is privileged
/// and `gid` is the only group.
pub(crate) fn caller(pid: u32, uid: u32, gid: u32) -> Cred {
    Cred::of_task(pid).unwrap_or_else(|_| {
        let caps = if uid == 0 { Caps::ALL } else { Caps::NONE };
        Cred::new(uid, gid, &[]).caps(caps)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_gone_is_judged_by_the_request() {
        // Past pid_max: no such process.
        let root = caller(u32::MAX, 0, 0);
        assert!(root.caps.contains(Caps::FSETID) && root.keeps_set_group_id(1));
        let user = caller(u32::MAX, 1000, 100);
        assert!(user.keeps_set_group_id(100) && !user.keeps_set_group_id(0));
    }

    #[test]
    fn this_process_is_read_from_proc() {
        // The fallback would give group u32::MAX alone.
        let me = caller(std::process::id(), u32::MAX, u32::MAX);
        assert!(me.in_group(nix::unistd::getegid().as_raw()), "{me:?}");
    }
}
