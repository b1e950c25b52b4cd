//! What redundancy repaired and what was lost, counted since mkfs and kept
//! in the superblock (Fortis §4.2; the shape of ext4's error counters), so
//! `novafs info` can say it long after the daemon log is gone.
//!
//! A repair is one damaged metadata range rewritten from its good copy. A
//! loss is one object with no good copy (its operations return EIO): each
//! mount, and each `fsck --repair`, that meets a lost object counts it
//! once, however often it is touched.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::lock::{Mutex, Rank};

use crate::layout::{Ino, Superblock};
use crate::time::{now_ns, utc};

#[derive(Debug)]
pub(crate) struct Health {
    repairs: AtomicU64,
    data_repairs: AtomicU64,
    losses: AtomicU64,
    /// The last loss: its inode (0 when no inode owns the object) and time.
    last_loss: Mutex<(Ino, i64)>,
    /// Objects already counted as lost on this mount.
    lost: Mutex<HashSet<Ino>>,
    /// Counted since the superblock was last stamped.
    changed: AtomicBool,
}

/// The counters as the superblock holds them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HealthCounts {
    pub repairs: u64,
    pub data_repairs: u64,
    pub losses: u64,
    pub last_loss_ino: Ino,
    pub last_loss_ns: i64,
}

impl HealthCounts {
    pub(crate) fn of(sb: &Superblock) -> HealthCounts {
        HealthCounts {
            repairs: sb.meta_repairs,
            data_repairs: sb.data_repairs,
            losses: sb.meta_losses,
            last_loss_ino: sb.last_loss_ino,
            last_loss_ns: sb.last_loss_ns,
        }
    }
}

/// One line for people: `novafs info` and `novafs fsck`.
impl std::fmt::Display for HealthCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if *self == HealthCounts::default() {
            return f.write_str("nothing repaired or lost since mkfs");
        }
        write!(
            f,
            "{} metadata range(s) repaired from a replica, {} data strip(s) repaired, {} object(s) lost since mkfs",
            self.repairs, self.data_repairs, self.losses
        )?;
        if self.losses > 0 {
            let owner = match self.last_loss_ino {
                0 => "no inode".to_string(),
                ino => format!("inode {ino}"),
            };
            write!(f, " (last: {owner}, {})", utc(self.last_loss_ns))?;
        }
        Ok(())
    }
}

impl Default for Health {
    /// Nothing repaired or lost yet.
    fn default() -> Health {
        Health {
            repairs: AtomicU64::new(0),
            data_repairs: AtomicU64::new(0),
            losses: AtomicU64::new(0),
            last_loss: Mutex::new(Rank::Health, (0, 0)),
            lost: Mutex::new(Rank::Health, HashSet::new()),
            changed: AtomicBool::new(false),
        }
    }
}

impl Health {
    /// Counting on from what `sb` says happened before this mount.
    pub(crate) fn since(sb: &Superblock) -> Health {
        Health {
            repairs: AtomicU64::new(sb.meta_repairs),
            data_repairs: AtomicU64::new(sb.data_repairs),
            losses: AtomicU64::new(sb.meta_losses),
            last_loss: Mutex::new(Rank::Health, (sb.last_loss_ino, sb.last_loss_ns)),
            ..Health::default()
        }
    }

    /// `n` metadata ranges were rewritten from their good copies.
    pub(crate) fn repaired(&self, n: u64) {
        if n > 0 {
            self.repairs.fetch_add(n, Ordering::Relaxed);
            self.changed.store(true, Ordering::Release);
        }
    }

    /// `n` data strips were rebuilt, or their checksum copies rewritten,
    /// from redundancy (Fortis §4.3).
    pub(crate) fn data_repaired(&self, n: u64) {
        if n > 0 {
            self.data_repairs.fetch_add(n, Ordering::Relaxed);
            self.changed.store(true, Ordering::Release);
        }
    }

    /// Object `ino` has no good copy left. Counted (and logged) once per
    /// mount; returns whether this was the first time.
    pub(crate) fn lost(&self, ino: Ino, why: &dyn std::fmt::Display) -> bool {
        if !self.lost.lock().insert(ino) {
            return false;
        }
        tracing::error!(ino, error = %why, "metadata lost: no good copy; its operations return EIO (run novafs fsck)");
        self.losses.fetch_add(1, Ordering::Relaxed);
        *self.last_loss.lock() = (ino, now_ns());
        self.changed.store(true, Ordering::Release);
        true
    }

    /// Whether anything was counted since the last call.
    pub(crate) fn take_changed(&self) -> bool {
        self.changed.load(Ordering::Acquire) && self.changed.swap(false, Ordering::AcqRel)
    }

    pub(crate) fn counts(&self) -> HealthCounts {
        let (last_loss_ino, last_loss_ns) = *self.last_loss.lock();
        HealthCounts {
            repairs: self.repairs.load(Ordering::Relaxed),
            data_repairs: self.data_repairs.load(Ordering::Relaxed),
            losses: self.losses.load(Ordering::Relaxed),
            last_loss_ino,
            last_loss_ns,
        }
    }

    /// Copies the counters into `sb`, to be written with it.
    pub(crate) fn stamp(&self, sb: &mut Superblock) {
        let c = self.counts();
        sb.meta_repairs = c.repairs;
        sb.data_repairs = c.data_repairs;
        sb.meta_losses = c.losses;
        sb.last_loss_ino = c.last_loss_ino;
        sb.last_loss_ns = c.last_loss_ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::FromZeros;

    #[test]
    fn counts_go_on_from_the_superblock_and_a_loss_counts_once_per_mount() {
        let mut sb = Superblock::new_zeroed();
        sb.meta_repairs = 5;
        sb.meta_losses = 1;
        let h = Health::since(&sb);
        assert!(!h.take_changed());
        h.repaired(2);
        h.repaired(0);
        assert!(h.lost(42, &"bad checksum"));
        assert!(!h.lost(42, &"bad checksum"), "the same object again");
        assert!(h.take_changed());
        assert!(!h.take_changed());
        h.stamp(&mut sb);
        assert_eq!((sb.meta_repairs, sb.meta_losses, sb.last_loss_ino), (7, 2, 42));
        assert!(sb.last_loss_ns > 0);
        let next_mount = Health::since(&sb);
        assert!(next_mount.lost(42, &"still bad"), "a new mount counts it again");
        assert_eq!(next_mount.counts().losses, 3);
    }
}
