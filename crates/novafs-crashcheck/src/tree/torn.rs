//! The one state relaxed mode (Fortis §4.6, README "Relaxed mode") adds
//! to a crash's legal states: an in-place overwrite torn. Strict
//! workloads never ask for it; the engine asks only when the operation in
//! flight is such an overwrite of a relaxed workload.

use super::{masked, Compare, Content, Node, Tree};

/// An overwrite in flight at a crash: the file's path and the bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overwrite {
    pub path: String,
    pub off: u64,
    pub len: u64,
}

impl Tree {
    /// Whether `self` is what a crash during the in-place overwrite `w`
    /// may leave, `before` and `after` being the states around it. The
    /// written file is the inode `w.path` names in `after`, with all its
    /// links. The rule applies only when that file is a regular file of
    /// the same size in both states, the range inside it (an in-place
    /// overwrite never grows a file) and kept in full by the capture.
    /// Then `self` is legal when:
    ///
    /// 1. the snapshot list, and what each view shows, is `after`'s;
    /// 2. the paths are `after`'s, and every node but the file's equals
    ///    `after`'s (under `cmp`);
    /// 3. each path of the file has `after`'s attributes — size, blocks,
    ///    mode, owner, links, atime, xattrs — all but contents and
    ///    mtime/ctime;
    /// 4. each byte of the file outside `[off, off + len)` is `after`'s,
    ///    each inside is `before`'s or `after`'s (any mix: per word, per
    ///    line, whatever the crash left);
    /// 5. (mtime, ctime) is `before`'s pair or `after`'s (metadata stays
    ///    atomic; not compared when `cmp` leaves times out);
    /// 6. with `before`'s pair (when it differs from `after`'s), every
    ///    byte of the range is `before`'s: the intent that carries the new
    ///    time is durable before the first byte changes, and recovery
    ///    redoes the time whenever it finds the intent (journal/intent.rs,
    ///    R5), so changed bytes always come with the new mtime.
    ///
    /// `before` itself and `after` itself pass; the engine checks them
    /// exactly first. `Err` says why `self` is not such a state.
    pub fn torn_write(&self, before: &Tree, after: &Tree, w: &Overwrite, cmp: Compare) -> Result<(), String> {
        let (Some(b), Some(a)) = (before.nodes.get(&w.path), after.nodes.get(&w.path)) else {
            return Err(format!("{} is not in both states around the write", w.path));
        };
        let end = w.off.saturating_add(w.len);
        if a.kind != "RegularFile" || a.size != b.size || end > a.size {
            return Err(format!(
                "write {} off {} len {} is no overwrite inside the file (size {} before, {} after)",
                w.path, w.off, w.len, b.size, a.size
            ));
        }
        let (Content::Bytes(bb), Content::Bytes(ab)) = (&b.content, &a.content) else {
            return Err(format!("{}: contents not kept in full", w.path));
        };
        if self.snapshots != after.snapshots {
            return Err(format!(
                "snapshots {:?} (expected {:?})",
                self.snapshots, after.snapshots
            ));
        }
        if !self.nodes.keys().eq(after.nodes.keys()) {
            return Err("not the paths of the state after the write".into());
        }
        let range = w.off as usize..end as usize;
        for (p, want) in &after.nodes {
            let got = &self.nodes[p];
            if want.first_name != a.first_name {
                if masked(got, cmp) != masked(want, cmp) {
                    return Err(format!("{p} is not as after the write, and the write is to {}", w.path));
                }
                continue;
            }
            if masked(&but_data(got), cmp) != masked(&but_data(want), cmp) {
                return Err(format!(
                    "{p}: an attribute other than contents and times is not as after the write"
                ));
            }
            let times = |n: &Node| (n.mtime, n.ctime);
            let new_times = times(got) == times(want);
            if cmp.times && !new_times && times(got) != times(b) {
                return Err(format!(
                    "{p}: mtime/ctime {:?} is neither {:?} (before the write) nor {:?} (after)",
                    times(got),
                    times(b),
                    times(want)
                ));
            }
            let Content::Bytes(gb) = &got.content else {
                return Err(format!("{p}: contents not kept in full"));
            };
            if gb.len() != ab.len() {
                return Err(format!("{p}: {} bytes (expected {})", gb.len(), ab.len()));
            }
            for (k, (&g, &n)) in gb.iter().zip(ab).enumerate() {
                let old = bb.get(k).copied();
                let ok = if range.contains(&k) {
                    g == n || Some(g) == old
                } else {
                    g == n
                };
                if !ok {
                    return Err(format!(
                        "{p}: byte {k} is {g:#04x}, neither before's {} nor after's {n:#04x} (the write covers {}..{})",
                        old.map_or("-".into(), |o| format!("{o:#04x}")),
                        range.start,
                        range.end
                    ));
                }
            }
            let ordered = !cmp.times || new_times || times(b) == times(want) || gb[range.clone()] == bb[range.clone()];
            if !ordered {
                let k = range.start
                    + gb[range.clone()]
                        .iter()
                        .zip(&bb[range.clone()])
                        .take_while(|(g, o)| g == o)
                        .count();
                return Err(format!(
                    "{p}: byte {k} of the write is on media but the old mtime/ctime is (the new time is redone whenever a byte may have changed)"
                ));
            }
        }
        Ok(())
    }
}

/// `n` without what a torn overwrite may leave either way.
fn but_data(n: &Node) -> Node {
    Node {
        content: Content::None,
        mtime: 0,
        ctime: 0,
        ..n.clone()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn file(bytes: &[u8], mtime: i64, first: &str) -> Node {
        Node {
            kind: "RegularFile".into(),
            perm: 0o644,
            uid: 1000,
            gid: 1000,
            nlink: 1,
            size: bytes.len() as u64,
            blocks: 8,
            rdev: 0,
            atime: 1,
            mtime,
            ctime: mtime,
            first_name: first.into(),
            content: Content::Bytes(bytes.to_vec()),
            target: None,
            xattrs: Vec::new(),
        }
    }

    /// `/f` overwritten at 4..12 (old `a`s, new `b`s), `/g` untouched.
    fn states() -> (Tree, Tree, Overwrite) {
        let mut before = Tree::default();
        before.nodes.insert("/f".into(), file(&[b'a'; 16], 10, "/f"));
        before.nodes.insert("/g".into(), file(b"gg", 5, "/g"));
        let mut after = before.clone();
        let mut new = [b'a'; 16];
        new[4..12].fill(b'b');
        after.nodes.insert("/f".into(), file(&new, 20, "/f"));
        let w = Overwrite {
            path: "/f".into(),
            off: 4,
            len: 8,
        };
        (before, after, w)
    }

    fn with_f(t: &Tree, f: impl FnOnce(&mut Node)) -> Tree {
        let mut t = t.clone();
        f(t.nodes.get_mut("/f").unwrap());
        t
    }

    fn bytes(n: &mut Node) -> &mut Vec<u8> {
        match &mut n.content {
            Content::Bytes(b) => b,
            _ => unreachable!(),
        }
    }

    const CMP: Compare = Compare { times: true };

    #[test]
    fn a_mix_of_old_and_new_bytes_inside_the_range_under_the_new_times_is_legal() {
        let (before, after, w) = states();
        let torn = with_f(&after, |n| {
            bytes(n)[4..8].fill(b'a');
            bytes(n)[10] = b'a';
        });
        assert_eq!(torn.torn_write(&before, &after, &w, CMP), Ok(()));
        assert_eq!(before.torn_write(&before, &after, &w, CMP), Ok(()));
        assert_eq!(after.torn_write(&before, &after, &w, CMP), Ok(()));
    }

    #[test]
    fn a_byte_outside_the_range_changed_is_illegal() {
        let (before, after, w) = states();
        for k in [3, 12] {
            let torn = with_f(&after, |n| bytes(n)[k] = b'b');
            let e = torn.torn_write(&before, &after, &w, CMP).unwrap_err();
            assert!(e.contains(&format!("byte {k} is")), "{e}");
        }
        // Inside the range, a byte that is neither old nor new.
        let torn = with_f(&after, |n| bytes(n)[5] = b'z');
        assert!(torn.torn_write(&before, &after, &w, CMP).is_err());
    }

    #[test]
    fn a_size_change_is_illegal() {
        let (before, after, w) = states();
        let longer = with_f(&after, |n| {
            bytes(n).push(0);
            n.size += 1;
        });
        assert!(longer.torn_write(&before, &after, &w, CMP).is_err());
        let shorter = with_f(&after, |n| {
            bytes(n).pop();
            n.size -= 1;
        });
        assert!(shorter.torn_write(&before, &after, &w, CMP).is_err());
        // Nor does the rule apply to a write that grew the file.
        let grown = with_f(&after, |n| {
            bytes(n).extend_from_slice(b"bb");
            n.size += 2;
        });
        let e = after.torn_write(&before, &grown, &w, CMP).unwrap_err();
        assert!(e.contains("no overwrite inside the file"), "{e}");
    }

    #[test]
    fn times_are_the_old_pair_or_the_new_one_and_old_times_need_every_old_byte() {
        let (before, after, w) = states();
        let mixed_times = with_f(&after, |n| n.ctime = 10);
        assert!(mixed_times.torn_write(&before, &after, &w, CMP).is_err());
        let other_time = with_f(&after, |n| {
            n.mtime = 15;
            n.ctime = 15;
        });
        assert!(other_time.torn_write(&before, &after, &w, CMP).is_err());
        // The new times with no new byte yet: the intent was durable.
        let no_byte_yet = with_f(&before, |n| n.mtime = 20);
        let no_byte_yet = with_f(&no_byte_yet, |n| n.ctime = 20);
        assert_eq!(no_byte_yet.torn_write(&before, &after, &w, CMP), Ok(()));
        let old_mtime = with_f(&before, |n| bytes(n)[7] = b'b');
        let e = old_mtime.torn_write(&before, &after, &w, CMP).unwrap_err();
        assert!(e.contains("byte 7 of the write is on media"), "{e}");
        // Without times, neither is looked at.
        assert_eq!(
            old_mtime.torn_write(&before, &after, &w, Compare { times: false }),
            Ok(())
        );
    }

    #[test]
    fn anything_else_changed_is_illegal() {
        let (before, after, w) = states();
        let mut other = after.clone();
        other.nodes.get_mut("/g").unwrap().perm = 0o600;
        assert!(other.torn_write(&before, &after, &w, CMP).is_err());
        let chmod = with_f(&after, |n| n.perm = 0o600);
        assert!(chmod.torn_write(&before, &after, &w, CMP).is_err());
        let mut extra = after.clone();
        extra.nodes.insert("/h".into(), file(b"", 1, "/h"));
        assert!(extra.torn_write(&before, &after, &w, CMP).is_err());
        let mut snap = after.clone();
        snap.snapshots.push(("s".into(), 1, 2));
        assert!(snap.torn_write(&before, &after, &w, CMP).is_err());
    }

    #[test]
    fn every_link_of_the_written_file_may_show_the_torn_bytes() {
        let (mut before, mut after, w) = states();
        for t in [&mut before, &mut after] {
            let mut f = t.nodes["/f"].clone();
            f.first_name = "/a".into();
            t.nodes.insert("/a".into(), f.clone());
            t.nodes.insert("/f".into(), f);
        }
        let torn = {
            let mut t = after.clone();
            for p in ["/a", "/f"] {
                let n = t.nodes.get_mut(p).unwrap();
                bytes(n)[6] = b'a';
            }
            t
        };
        assert_eq!(torn.torn_write(&before, &after, &w, CMP), Ok(()));
    }
}
