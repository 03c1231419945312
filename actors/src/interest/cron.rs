//! Cron expressions: five fields (minute, hour, day of month, month, day of week) with
//! `*`, lists, ranges, steps and names, or `@hourly` / `@daily` / `@weekly` / `@monthly`
//! / `@yearly`, evaluated in a fixed UTC offset.
//!
//! Day of month and day of week follow Vixie cron: when both are restricted, a day
//! matching either fires. Time zones are fixed offsets (`UTC`, `+02:00`, `-0530`): named
//! zones with daylight-saving rules would need the tz database, which the sans-IO core
//! does not carry.

use serde::{Deserialize, Serialize};

/// A parsed cron expression.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cron {
    minutes: u64,
    hours: u32,
    days: u32,
    months: u16,
    weekdays: u8,
    days_restricted: bool,
    weekdays_restricted: bool,
    source: String,
}

const MS_PER_MINUTE: u64 = 60_000;
/// The search for the next firing gives up after this many days (a `30 2 31 2 *` never
/// fires).
const SEARCH_DAYS_MAX: i64 = 4 * 366;

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

fn field(text: &str, low: u32, high: u32, names: &[&str], what: &str) -> Result<u64, String> {
    let value = |part: &str| -> Result<u32, String> {
        if let Some(index) = names.iter().position(|n| n.eq_ignore_ascii_case(part)) {
            return Ok(index as u32 + low);
        }
        part.parse::<u32>()
            .map_err(|_| format!("`{part}` is not a valid {what}"))
    };
    let mut bits = 0u64;
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => {
                let step: u32 =
                    step.parse().ok().filter(|s| *s > 0).ok_or_else(|| {
                        format!("`{step}` is not a valid step in the {what} field")
                    })?;
                (range, step)
            }
            None => (item, 1),
        };
        let (from, to) = if range == "*" {
            (low, high)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a)?, value(b)?)
        } else {
            let v = value(range)?;
            // `5/15` means from 5 to the end, every 15.
            (v, if item.contains('/') { high } else { v })
        };
        // Sunday may be written 7.
        let (from, to) = if what == "day of week" {
            (from.min(7), to.min(7))
        } else {
            (from, to)
        };
        let top = if what == "day of week" { 7 } else { high };
        if from < low || to > top || from > to {
            return Err(format!(
                "`{range}` is out of range for the {what} field ({low}-{high})"
            ));
        }
        let mut v = from;
        while v <= to {
            bits |= 1
                << (if what == "day of week" && v == 7 {
                    0
                } else {
                    v
                });
            v += step;
        }
    }
    Ok(bits)
}

impl Cron {
    /// Parses an expression; the error says which field is wrong.
    pub fn parse(text: &str) -> Result<Cron, String> {
        let expanded = match text.trim() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other => other,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let [minute, hour, day, month, weekday] = fields.as_slice() else {
            return Err(format!(
                "a cron expression has 5 fields (minute hour day-of-month month day-of-week), `{text}` has {}",
                fields.len()
            ));
        };
        Ok(Cron {
            minutes: field(minute, 0, 59, &[], "minute")?,
            hours: field(hour, 0, 23, &[], "hour")? as u32,
            days: field(day, 1, 31, &[], "day of month")? as u32,
            months: field(month, 1, 12, &MONTHS, "month")? as u16,
            weekdays: field(weekday, 0, 6, &WEEKDAYS, "day of week")? as u8,
            days_restricted: *day != "*",
            weekdays_restricted: *weekday != "*",
            source: text.trim().to_owned(),
        })
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    fn day_matches(&self, day: u32, weekday: u32) -> bool {
        let by_day = self.days & (1 << day) != 0;
        let by_weekday = self.weekdays & (1 << weekday) != 0;
        match (self.days_restricted, self.weekdays_restricted) {
            (true, true) => by_day || by_weekday,
            (true, false) => by_day,
            (false, true) => by_weekday,
            (false, false) => true,
        }
    }

    /// The first firing strictly after `after_ms` (ms since the epoch), in a zone
    /// `offset_minutes` east of UTC; `None` if it never fires.
    pub fn next_after(&self, after_ms: u64, offset_minutes: i32) -> Option<u64> {
        let offset_ms = i64::from(offset_minutes) * MS_PER_MINUTE as i64;
        // Local minutes since the epoch, starting at the next whole minute.
        let local_ms = after_ms as i64 + offset_ms;
        let mut minute = local_ms.div_euclid(MS_PER_MINUTE as i64) + 1;
        let first_day = minute.div_euclid(1440);
        while minute.div_euclid(1440) - first_day <= SEARCH_DAYS_MAX {
            let day_number = minute.div_euclid(1440);
            let (_, month, day) = civil_from_days(day_number);
            let weekday = (day_number + 4).rem_euclid(7) as u32; // 1970-01-01 was a Thursday.
            if self.months & (1 << month) == 0 || !self.day_matches(day, weekday) {
                minute = (day_number + 1) * 1440;
                continue;
            }
            let minute_of_day = minute.rem_euclid(1440);
            let (hour, min) = ((minute_of_day / 60) as u32, (minute_of_day % 60) as u32);
            if self.hours & (1 << hour) == 0 {
                minute = day_number * 1440 + (i64::from(hour) + 1) * 60;
                continue;
            }
            if self.minutes & (1 << min) == 0 {
                minute += 1;
                continue;
            }
            let utc_ms = minute * MS_PER_MINUTE as i64 - offset_ms;
            return u64::try_from(utc_ms).ok();
        }
        None
    }
}

/// Year, month (1-12) and day (1-31) of a day number since 1970-01-01 (proleptic
/// Gregorian; Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Parses a UTC offset: `UTC`, `Z`, `+02:00`, `-05:30`, `+0200`.
pub fn parse_offset(text: &str) -> Result<i32, String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("utc") || text == "Z" {
        return Ok(0);
    }
    let bad = || {
        format!(
            "time zone `{text}` is not UTC or an offset like +02:00 (named zones are not supported)"
        )
    };
    let (sign, rest) = match text.as_bytes().first() {
        Some(b'+') => (1, &text[1..]),
        Some(b'-') => (-1, &text[1..]),
        _ => return Err(bad()),
    };
    let digits: String = rest.chars().filter(|c| *c != ':').collect();
    if digits.len() != 4 || !digits.chars().all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    let hours: i32 = digits[..2].parse().map_err(|_| bad())?;
    let minutes: i32 = digits[2..].parse().map_err(|_| bad())?;
    if hours > 14 || minutes > 59 {
        return Err(bad());
    }
    Ok(sign * (hours * 60 + minutes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-03T10:07:30Z.
    const AT: u64 = 1_796_292_450_000;

    fn utc(ms: u64) -> String {
        let minutes = (ms / 60_000) as i64;
        let (y, m, d) = civil_from_days(minutes.div_euclid(1440));
        let minute_of_day = minutes.rem_euclid(1440);
        format!(
            "{y:04}-{m:02}-{d:02} {:02}:{:02}",
            minute_of_day / 60,
            minute_of_day % 60
        )
    }

    fn next(expr: &str, offset: i32) -> String {
        utc(Cron::parse(expr)
            .expect("valid")
            .next_after(AT, offset)
            .expect("fires"))
    }

    #[test]
    fn next_firings() {
        assert_eq!(utc(AT), "2026-12-03 10:07");
        assert_eq!(next("* * * * *", 0), "2026-12-03 10:08");
        assert_eq!(next("*/15 * * * *", 0), "2026-12-03 10:15");
        assert_eq!(next("0 9 * * *", 0), "2026-12-04 09:00");
        assert_eq!(next("30 2 1 * *", 0), "2027-01-01 02:30");
        assert_eq!(next("0 0 * * mon", 0), "2026-12-07 00:00");
        assert_eq!(next("0 12 25 dec *", 0), "2026-12-25 12:00");
        assert_eq!(next("@hourly", 0), "2026-12-03 11:00");
        assert_eq!(next("5-10/5 * * * *", 0), "2026-12-03 10:10");
        // 09:00 at +02:00 is 07:00 UTC.
        assert_eq!(next("0 9 * * *", 120), "2026-12-04 07:00");
        // Vixie: the 1st of the month OR a Friday (2026-12-04 is a Friday).
        assert_eq!(next("0 0 1 * fri", 0), "2026-12-04 00:00");
        assert_eq!(
            Cron::parse("0 0 31 2 *").expect("valid").next_after(AT, 0),
            None
        );
    }

    #[test]
    fn bad_expressions_say_which_field() {
        assert!(Cron::parse("* * *").unwrap_err().contains("5 fields"));
        assert!(Cron::parse("61 * * * *").unwrap_err().contains("minute"));
        assert!(Cron::parse("* 24 * * *").unwrap_err().contains("hour"));
        assert!(Cron::parse("* * * foo *").unwrap_err().contains("month"));
        assert!(Cron::parse("*/0 * * * *").unwrap_err().contains("step"));
        assert_eq!(parse_offset("+02:00"), Ok(120));
        assert_eq!(parse_offset("-0530"), Ok(-330));
        assert_eq!(parse_offset("UTC"), Ok(0));
        assert!(
            parse_offset("Europe/Paris")
                .unwrap_err()
                .contains("named zones")
        );
    }
}
