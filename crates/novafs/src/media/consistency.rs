//! The consistency mode (NOVA-Fortis §4.6): what an image records as its
//! mounts' default (the superblock's `consistency` word, FORMAT.md) and
//! what a mount chooses (`MountOptions::consistency`). This module owns
//! the mode's names and codes; what each mode does lives with the write
//! path.

use std::fmt;
use std::str::FromStr;

use crate::error::{corrupt, Result};
use crate::layout::{Superblock, CONSISTENCY_RELAXED, CONSISTENCY_STRICT};

/// How much a write guarantees when the machine stops in the middle of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Consistency {
    /// Every operation is atomic and durable when it returns: file data
    /// is written copy-on-write (NOVA §4.4).
    #[default]
    Strict,
    /// NOVA-Fortis §4.6: overwrites of file data go in place, so a crash
    /// may tear the bytes of the write in flight (only inside its range);
    /// metadata stays atomic through the fine-grained journal, and
    /// checksums and parity stay consistent with the data.
    Relaxed,
}

impl Consistency {
    /// The mode's name: "strict" or "relaxed" (what [`FromStr`] takes).
    pub fn name(self) -> &'static str {
        match self {
            Consistency::Strict => "strict",
            Consistency::Relaxed => "relaxed",
        }
    }

    /// The superblock's code for this mode.
    pub(crate) fn code(self) -> u64 {
        match self {
            Consistency::Strict => CONSISTENCY_STRICT,
            Consistency::Relaxed => CONSISTENCY_RELAXED,
        }
    }

    /// The mode a superblock code names, if any.
    pub(crate) fn from_code(code: u64) -> Option<Consistency> {
        match code {
            CONSISTENCY_STRICT => Some(Consistency::Strict),
            CONSISTENCY_RELAXED => Some(Consistency::Relaxed),
            _ => None,
        }
    }

    /// The default mode `sb` records; a code this novafs does not know is
    /// damage (or a bug): mounting would guess what its writer meant.
    pub(crate) fn of(sb: &Superblock) -> Result<Consistency> {
        Consistency::from_code(sb.consistency).ok_or_else(|| {
            corrupt!(
                Superblock,
                "the superblock records consistency mode {}, which this novafs does not know \
                 (0 = strict, 1 = relaxed); fsck --repair resets it to strict",
                sb.consistency
            )
        })
    }
}

impl fmt::Display for Consistency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Consistency {
    type Err = ParseConsistencyError;

    /// Exactly "strict" or "relaxed".
    fn from_str(s: &str) -> std::result::Result<Consistency, ParseConsistencyError> {
        match s {
            "strict" => Ok(Consistency::Strict),
            "relaxed" => Ok(Consistency::Relaxed),
            _ => Err(ParseConsistencyError(s.to_string())),
        }
    }
}

/// A word that names no consistency mode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown consistency mode '{0}': use strict or relaxed")]
pub struct ParseConsistencyError(String);

impl ParseConsistencyError {
    /// The word that was refused.
    pub fn word(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_nothing_else_does() {
        for mode in [Consistency::Strict, Consistency::Relaxed] {
            assert_eq!(mode.to_string().parse::<Consistency>(), Ok(mode));
            assert_eq!(Consistency::from_code(mode.code()), Some(mode));
        }
        assert_eq!(Consistency::default(), Consistency::Strict);
        for bad in ["Strict", "relaxed ", "", "bogus"] {
            let e = bad.parse::<Consistency>().unwrap_err();
            assert_eq!(e.word(), bad);
            assert_eq!(
                e.to_string(),
                format!("unknown consistency mode '{bad}': use strict or relaxed")
            );
        }
        assert_eq!(Consistency::from_code(2), None);
    }
}
