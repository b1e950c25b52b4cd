//! Time as the file system keeps it: signed nanoseconds since the Unix
//! epoch, and their civil UTC reading for people.

use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock time in nanoseconds since the Unix epoch.
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// A UTC date and time of day.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    pub month: i64,
    pub day: i64,
    pub hour: i64,
    pub minute: i64,
    pub second: i64,
}

/// `ns` nanoseconds since the Unix epoch as "YYYY-MM-DD HH:MM:SS UTC".
pub fn utc(ns: i64) -> String {
    let c = civil(ns.div_euclid(1_000_000_000));
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    )
}

/// The UTC reading of `secs` seconds since the Unix epoch (Howard Hinnant's
/// days-to-civil algorithm; proleptic Gregorian calendar).
pub fn civil(secs: i64) -> Civil {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    Civil {
        year,
        month,
        day,
        hour: rem / 3600,
        minute: rem % 3600 / 60,
        second: rem % 60,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_match_known_days() {
        let c = |s| {
            let c = civil(s);
            (c.year, c.month, c.day, c.hour, c.minute, c.second)
        };
        assert_eq!(c(0), (1970, 1, 1, 0, 0, 0));
        assert_eq!(c(1_795_327_688), (2026, 11, 22, 6, 8, 8));
        assert_eq!(c(951_782_400), (2000, 2, 29, 0, 0, 0));
        assert_eq!(c(-1), (1969, 12, 31, 23, 59, 59));
    }
}
