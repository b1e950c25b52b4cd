//! Who sent a request, as far as the set-group-ID rule needs to know.
//!
//! Linux drops set-group-ID from any mode a caller outside the node's
//! group and without CAP_FSETID sets (`setattr_copy`). For chmod the
//! kernel's FUSE client already strips it, but not for the mode it sends
//! when it clears set-user-ID after a write, truncate or fallocate by such
//! a caller (that SETATTR is forced past the checks): on ext4 the file
//! loses both bits there, so here the daemon applies the rule to every
//! mode it sets (xfstests generic/683 and 684).

use std::fs;

/// CAP_FSETID's bit in a capability set (linux/capability.h).
const CAP_FSETID: u32 = 4;

/// The credentials of a request's process that the set-ID rule reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// Holds CAP_FSETID: modifying a file keeps its set-ID bits.
    pub may_keep_setid: bool,
    /// The file-system group ID and the supplementary groups.
    pub groups: Vec<u32>,
}

impl Caller {
    /// The credentials of process `pid` from /proc; if it is gone (or
    /// /proc is not mounted), what the request itself says: `uid` 0 is
    /// privileged and `gid` is the only group.
    pub fn of_process(pid: u32, uid: u32, gid: u32) -> Caller {
        fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| Caller::parse_status(&s))
            .unwrap_or(Caller {
                may_keep_setid: uid == 0,
                groups: vec![gid],
            })
    }

    /// Parses /proc/PID/status: `Gid:` (real, effective, saved, fs),
    /// `Groups:` and `CapEff:` (hexadecimal).
    fn parse_status(status: &str) -> Option<Caller> {
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::split_whitespace)
        };
        let fsgid = field("Gid:")?.nth(3)?.parse().ok()?;
        let mut groups: Vec<u32> = field("Groups:")?.filter_map(|g| g.parse().ok()).collect();
        groups.push(fsgid);
        let caps = u64::from_str_radix(field("CapEff:")?.next()?, 16).ok()?;
        Some(Caller {
            may_keep_setid: caps & (1 << CAP_FSETID) != 0,
            groups,
        })
    }

    /// Whether a mode this caller sets may keep set-group-ID on a node of
    /// group `gid`: only in that group or with CAP_FSETID (Linux's
    /// `setattr_copy`).
    pub fn may_set_group_id(&self, gid: u32) -> bool {
        self.may_keep_setid || self.groups.contains(&gid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(groups: &[u32]) -> Caller {
        Caller {
            may_keep_setid: false,
            groups: groups.to_vec(),
        }
    }

    #[test]
    fn set_group_id_needs_the_group_or_cap_fsetid() {
        assert!(!user(&[65534]).may_set_group_id(0));
        assert!(user(&[65534, 0]).may_set_group_id(0));
        let root = Caller {
            may_keep_setid: true,
            groups: vec![0],
        };
        assert!(root.may_set_group_id(1));
    }

    #[test]
    fn status_gives_fsgid_groups_and_cap_fsetid() {
        let status = "Name:\tx\nUid:\t0\t0\t0\t0\nGid:\t1\t2\t3\t4\nGroups:\t10 20 \nCapEff:\t0000000000000010\n";
        assert_eq!(
            Caller::parse_status(status),
            Some(Caller {
                may_keep_setid: true,
                groups: vec![10, 20, 4],
            })
        );
        let nobody = "Gid:\t65534\t65534\t65534\t65534\nGroups:\t\nCapEff:\t0000000000000000\n";
        assert_eq!(Caller::parse_status(nobody), Some(user(&[65534])));
        assert_eq!(Caller::parse_status("garbage"), None);
    }

    #[test]
    fn this_process_is_read_from_proc() {
        // The fallback would give group u32::MAX alone.
        let me = Caller::of_process(std::process::id(), u32::MAX, u32::MAX);
        assert!(me.groups.contains(&nix::unistd::getegid().as_raw()), "{me:?}");
    }
}
