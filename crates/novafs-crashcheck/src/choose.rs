//! Which crash images of a crash point are checked ([`choices`]): all of
//! them when few, else the all-old and all-new images and a seeded sample,
//! torn lines likewise; and how one is described in a failure.

use pm::{Choice, CrashPoint, Torn};

use novafs_rng::SplitMix as Rng;

/// How the images of one crash point are chosen ([`choices`]).
#[derive(Clone, Copy, Debug)]
pub struct Pick {
    /// A crash point with at most this many distinct untorn images has all
    /// of them checked (1024 = every subset of 10 single-version lines).
    pub exhaustive_max: u128,
    /// Otherwise: the all-old and all-new images plus this many random ones.
    pub samples: usize,
    /// A crash point whose untorn and torn images together number at most
    /// this has every torn image checked too: each uncertain line torn at
    /// 8-byte granularity (every mix of the words in which a version
    /// differs from the durable content) with every choice of the others.
    pub torn_exhaustive_max: u128,
    /// Otherwise, at a crash point with at most this many uncertain lines,
    /// for each line the newest version with each single word left old and
    /// with each single word alone new, every other line new (the images
    /// in which a commit may have reached media but one word of what it
    /// publishes did not, which random sampling once missed for a torn
    /// inode record). Up to 16 images per line.
    pub word_tears: usize,
    /// And this many random torn images.
    pub torn: usize,
}

impl Pick {
    /// About `n` images per crash point of a recorded recovery.
    pub(crate) fn recovery(n: usize) -> Pick {
        Pick {
            exhaustive_max: n as u128,
            samples: n.saturating_sub(2),
            torn_exhaustive_max: n as u128,
            word_tears: 0,
            torn: 1,
        }
    }
}

/// The images checked at one crash point ([`Pick`]): all of them when few,
/// else the all-old and all-new images and a seeded sample; torn lines
/// likewise, all of them when few, else single-word tears and a sample.
pub fn choices(cp: &CrashPoint<'_>, pick: &Pick, rng: &mut Rng) -> Vec<Choice> {
    let n = cp.lines.len();
    let mut out = Vec::new();
    let total = cp.image_count();
    if total <= pick.exhaustive_max {
        out.extend(every_choice(cp, None).map(|lines| Choice { lines, torn: None }));
    } else {
        out.push(Choice {
            lines: vec![0; n],
            torn: None,
        });
        out.push(newest(cp));
        for _ in 0..pick.samples {
            out.push(random_choice(cp, rng));
        }
    }
    if n == 0 {
        return out;
    }
    if total.saturating_add(torn_count(cp)) <= pick.torn_exhaustive_max {
        for line in 0..n {
            for version in 1..=cp.lines[line].versions.len() {
                for mask in tears(cp, line, version) {
                    let torn = Some(Torn { line, version, mask });
                    out.extend(every_choice(cp, Some(line)).map(|lines| Choice { lines, torn }));
                }
            }
        }
        return out;
    }
    if n <= pick.word_tears {
        for line in 0..n {
            let version = cp.lines[line].versions.len();
            let diff = differing_words(cp, line, version);
            for w in (0..8).filter(|w| diff & (1 << w) != 0) {
                for mask in [diff & !(1 << w), 1 << w] {
                    if mask != 0 && mask != diff {
                        let mut c = newest(cp);
                        c.torn = Some(Torn { line, version, mask });
                        out.push(c);
                    }
                }
            }
        }
    }
    for _ in 0..pick.torn {
        let mut c = random_choice(cp, rng);
        let line = rng.below(n as u64) as usize;
        let version = 1 + rng.below(cp.lines[line].versions.len() as u64) as usize;
        let diff = differing_words(cp, line, version);
        // A random proper, non-empty part of the differing words; a line
        // with fewer than two has no torn image its choices lack.
        let mask = diff & rng.below(256) as u8;
        if mask != 0 && mask != diff {
            c.torn = Some(Torn { line, version, mask });
            out.push(c);
        }
    }
    out
}

/// The image in which every uncertain line holds its newest version.
fn newest(cp: &CrashPoint<'_>) -> Choice {
    Choice {
        lines: cp.lines.iter().map(|l| l.versions.len()).collect(),
        torn: None,
    }
}

/// Every combination of line choices, with line `fixed` (if any) left at 0
/// (a torn line overrides its choice).
fn every_choice<'a>(cp: &'a CrashPoint<'_>, fixed: Option<usize>) -> impl Iterator<Item = Vec<usize>> + 'a {
    let n = cp.lines.len();
    let mut digits = Some(vec![0usize; n]);
    std::iter::from_fn(move || {
        let cur = digits.take()?;
        let mut next = cur.clone();
        for (i, d) in next.iter_mut().enumerate() {
            if Some(i) == fixed {
                continue;
            }
            *d += 1;
            if *d < cp.lines[i].choices() {
                digits = Some(next);
                return Some(cur);
            }
            *d = 0;
        }
        Some(cur)
    })
}

/// Bit `w` set: word `w` of `version` of line `line` differs from the
/// durable content (only those words can tear into a new image).
fn differing_words(cp: &CrashPoint<'_>, line: usize, version: usize) -> u8 {
    let l = &cp.lines[line];
    let at = l.off as usize;
    let v = &l.versions[version - 1];
    (0..8).fold(0u8, |m, w| {
        let o = at + w * 8;
        let durable = cp.durable.get(o..o + 8).unwrap_or(&[0; 8]);
        if durable != &v[w * 8..w * 8 + 8] {
            m | 1 << w
        } else {
            m
        }
    })
}

/// Every torn mask of `version` of `line` that makes an image no untorn
/// choice makes: the proper, non-empty parts of its differing words.
fn tears(cp: &CrashPoint<'_>, line: usize, version: usize) -> Vec<u8> {
    let diff = differing_words(cp, line, version);
    let mut out = Vec::new();
    let mut sub = diff.wrapping_sub(1) & diff;
    while sub != 0 {
        out.push(sub);
        sub = sub.wrapping_sub(1) & diff;
    }
    out
}

/// How many torn images exhaustive enumeration would check (saturating).
fn torn_count(cp: &CrashPoint<'_>) -> u128 {
    let total = cp.image_count();
    (0..cp.lines.len()).fold(0u128, |acc, line| {
        let others = total / cp.lines[line].choices() as u128;
        let masks: u128 = (1..=cp.lines[line].versions.len())
            .map(|v| tears(cp, line, v).len() as u128)
            .sum();
        acc.saturating_add(masks.saturating_mul(others))
    })
}

/// Each line independently: new with a density drawn per image, so both
/// nearly-empty and nearly-full subsets are sampled.
fn random_choice(cp: &CrashPoint<'_>, rng: &mut Rng) -> Choice {
    let density = rng.below(101);
    Choice {
        lines: cp
            .lines
            .iter()
            .map(|l| {
                if rng.below(100) < density {
                    1 + rng.below(l.versions.len() as u64) as usize
                } else {
                    0
                }
            })
            .collect(),
        torn: None,
    }
}

pub(crate) fn describe_choice(cp: &CrashPoint<'_>, c: &Choice) -> String {
    let mut parts: Vec<String> = cp
        .lines
        .iter()
        .zip(&c.lines)
        .filter(|(_, &k)| k > 0)
        .take(12)
        .map(|(l, &k)| format!("{:#x}:v{k}/{}", l.off, l.versions.len()))
        .collect();
    let shown = parts.len();
    let all = c.lines.iter().filter(|&&k| k > 0).count();
    if all > shown {
        parts.push(format!("... {} more", all - shown));
    }
    let mut s = format!(
        "{} of {} uncertain lines reached media [{}]",
        all,
        cp.lines.len(),
        parts.join(" ")
    );
    if let Some(t) = c.torn {
        s += &format!(
            ", line {:#x} torn (words {:08b} of v{})",
            cp.lines[t.line].off, t.mask, t.version
        );
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pm::{RecordingRegion, Region, Trace};

    /// A trace of lines stored and never flushed: line i gets
    /// `lines[i].0` stores of its first `lines[i].1` words. One crash point,
    /// at its end.
    fn trace(lines: &[(usize, usize)]) -> Trace {
        let r = RecordingRegion::new(vec![0; 4096]);
        for (i, &(versions, words)) in lines.iter().enumerate() {
            for v in 0..versions {
                r.write(i as u64 * 64, &vec![v as u8 + 1; 8 * words]).unwrap();
            }
        }
        r.trace()
    }

    fn pick(exhaustive_max: u128, samples: usize, torn_exhaustive_max: u128, word_tears: usize, torn: usize) -> Pick {
        Pick {
            exhaustive_max,
            samples,
            torn_exhaustive_max,
            word_tears,
            torn,
        }
    }

    fn distinct(cp: &CrashPoint<'_>, list: &[Choice]) -> usize {
        list.iter()
            .map(|c| cp.key(c))
            .collect::<std::collections::HashSet<u64>>()
            .len()
    }

    #[test]
    fn small_points_are_enumerated_exhaustively_without_repeats() {
        let t = trace(&[(1, 1), (2, 1), (1, 1)]);
        let mut seen = 0;
        t.crash_points(|cp| {
            assert_eq!(cp.image_count(), 12);
            let list = choices(cp, &pick(64, 5, 1000, 8, 3), &mut Rng::new(1));
            assert_eq!(list.len(), 12, "one-word stores cannot tear");
            assert_eq!(distinct(cp, &list), 12, "every image differs");
            seen += 1;
            true
        });
        assert_eq!(seen, 1);
    }

    #[test]
    fn few_torn_images_are_all_enumerated() {
        // Line 0: one store of 3 words (6 torn mixes); line 1: one word.
        let t = trace(&[(1, 3), (1, 1)]);
        t.crash_points(|cp| {
            let list = choices(cp, &pick(64, 5, 16, 0, 0), &mut Rng::new(1));
            assert_eq!(list.len(), 4 + 6 * 2);
            assert_eq!(distinct(cp, &list), 16, "every image differs");
            let torn = |line| list.iter().filter(|c| c.torn.is_some_and(|t| t.line == line)).count();
            assert_eq!((torn(0), torn(1)), (12, 0));
            // One image over the limit: torn lines are sampled instead.
            let sampled = choices(cp, &pick(64, 5, 15, 0, 0), &mut Rng::new(1));
            assert_eq!(sampled.len(), 4);
            true
        });
    }

    #[test]
    fn large_points_are_sampled_with_the_extremes_word_tears_and_torn_lines() {
        let t = trace(&[(1, 8); 20]);
        t.crash_points(|cp| {
            let list = choices(cp, &pick(64, 5, 64, 0, 3), &mut Rng::new(7));
            assert!(list[0].lines.iter().all(|&k| k == 0));
            assert!(list[1].lines.iter().all(|&k| k == 1));
            let torn: Vec<Torn> = list.iter().filter_map(|c| c.torn).collect();
            assert_eq!(list.len(), 2 + 5 + torn.len());
            assert!((1..=3).contains(&torn.len()));
            assert!(torn.iter().all(|t| t.mask != 0 && t.mask != 0xff));
            // Same seed, same images: reproducers stay valid.
            assert_eq!(list, choices(cp, &pick(64, 5, 64, 0, 3), &mut Rng::new(7)));

            // Word tears: per line, each word alone old and alone new, the
            // other lines new.
            let list = choices(cp, &pick(64, 5, 64, 20, 0), &mut Rng::new(7));
            let words: Vec<&Choice> = list.iter().filter(|c| c.torn.is_some()).collect();
            assert_eq!(words.len(), 20 * 16);
            assert!(words.iter().all(|c| c.lines.iter().all(|&k| k == 1)));
            let one_old = words.iter().filter(|c| c.torn.unwrap().mask.count_ones() == 7).count();
            assert_eq!(one_old, 20 * 8);
            true
        });
    }
}
