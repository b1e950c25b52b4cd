//! Summaries over rounds: median, min and max, and ratios against a baseline.

/// Median, min and max of one metric over the rounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// Summarise samples; `None` when there are none. An even count takes the
/// mean of the two middle samples.
pub fn summarize(samples: &[f64]) -> Option<Summary> {
    let mut v: Vec<f64> = samples.to_vec();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Some(Summary {
        median,
        min: v[0],
        max: v[n - 1],
    })
}

/// How many times better `value` is than `baseline`: for a cost
/// (µs/op, lower is better) baseline / value, for a rate (higher is better)
/// value / baseline. `None` if the divisor is not positive.
pub fn speedup(value: f64, baseline: f64, lower_is_better: bool) -> Option<f64> {
    let (num, den) = if lower_is_better {
        (baseline, value)
    } else {
        (value, baseline)
    };
    (den > 0.0).then(|| num / den)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_count_is_the_middle_sample() {
        let s = summarize(&[5.0, 1.0, 3.0]).expect("non-empty");
        assert_eq!(
            s,
            Summary {
                median: 3.0,
                min: 1.0,
                max: 5.0
            }
        );
    }

    #[test]
    fn median_of_even_count_is_the_mean_of_the_middle_two() {
        let s = summarize(&[4.0, 1.0, 2.0, 10.0]).expect("non-empty");
        assert_eq!(
            s,
            Summary {
                median: 3.0,
                min: 1.0,
                max: 10.0
            }
        );
    }

    #[test]
    fn no_samples_no_summary() {
        assert_eq!(summarize(&[]), None);
    }

    #[test]
    fn speedup_inverts_for_costs_not_for_rates() {
        assert_eq!(speedup(2.0, 8.0, true), Some(4.0));
        assert_eq!(speedup(8.0, 2.0, false), Some(4.0));
        assert_eq!(speedup(0.0, 2.0, true), None);
    }
}
