//! Cron expressions: five fields (minute, hour, day of month, month, day of week) with
//! `*`, lists, ranges, steps and names, or `@hourly` / `@daily` / `@weekly` / `@monthly`
//! / `@yearly`, evaluated in a [`Zone`]: a fixed UTC offset or a named zone.
//!
//! Day of month and day of week follow Vixie cron: when both are restricted, a day
//! matching either fires. Named zones (`Europe/Paris`) come from the tz database bundled
//! into the binary (jiff), never from the host's files, so the same flow fires at the
//! same instants on every node and in the simulator.
//!
//! Daylight saving in a named zone: a wall-clock time that does not exist (the hour
//! skipped in spring) fires once, shifted forward by the gap (02:30 becomes 03:30); a
//! wall-clock time that happens twice (the hour repeated in autumn) fires once, at its
//! first occurrence, unless the expression fires every hour of the day (`*/15 * * * *`):
//! such a schedule follows real time and fires in both passes, as cronie does.

use jiff::Timestamp;
use jiff::tz::{AmbiguousOffset, TimeZone};
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
/// More than any zone's clock has ever jumped at once for daylight saving (the largest
/// are 2 h), in ms.
const DST_SHIFT_MAX_MS: i64 = 3 * 60 * MS_PER_MINUTE as i64;

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

    /// The first firing strictly after `after_ms` (ms since the epoch) in `zone`;
    /// `None` if it never fires.
    pub fn next_in(&self, after_ms: u64, zone: &Zone) -> Option<u64> {
        let tz = match zone {
            Zone::Fixed(offset) => return self.next_after(after_ms, *offset),
            Zone::Named { tz, .. } => tz,
        };
        let after = i64::try_from(after_ms).ok()?;
        // Search wall-clock minutes (written as if they were UTC) and map each match back
        // to instants. Clocks move back by less than DST_SHIFT_MAX_MS, so the search starts
        // that far behind `after`'s wall clock (the repeated hour's second pass lies there)
        // and, once an instant is found, looks that far past it for an earlier one.
        let from = as_utc_ms(tz.to_datetime(Timestamp::from_millisecond(after).ok()?))?;
        let mut wall = from - DST_SHIFT_MAX_MS;
        let limit = from + (SEARCH_DAYS_MAX + 1) * 1440 * MS_PER_MINUTE as i64;
        let mut best: Option<i64> = None;
        let every_hour = self.hours == (1 << 24) - 1;
        loop {
            wall = i64::try_from(self.next_after(u64::try_from(wall).ok()?, 0)?).ok()?;
            if wall > limit || best.is_some_and(|b| wall > b + DST_SHIFT_MAX_MS * 2) {
                break;
            }
            let civil = TimeZone::UTC.to_datetime(Timestamp::from_millisecond(wall).ok()?);
            let ambiguous = tz.to_ambiguous_timestamp(civil);
            // A schedule that fires every hour follows real time, so the repeated hour
            // fires in both passes; a fixed time of day fires once, at its first pass.
            let fold = matches!(ambiguous.offset(), AmbiguousOffset::Fold { .. });
            let instants = if every_hour && fold {
                [ambiguous.earlier().ok(), ambiguous.later().ok()]
            } else {
                [ambiguous.compatible().ok(), None]
            };
            for instant in instants.into_iter().flatten() {
                let instant = instant.as_millisecond();
                if instant > after && best.is_none_or(|b| instant < b) {
                    best = Some(instant);
                }
            }
        }
        best.and_then(|b| u64::try_from(b).ok())
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

/// A civil date-time read as if it were UTC, in ms since the epoch.
fn as_utc_ms(civil: jiff::civil::DateTime) -> Option<i64> {
    Some(TimeZone::UTC.to_timestamp(civil).ok()?.as_millisecond())
}

/// Where a cron expression's wall clock is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Zone {
    /// A fixed offset, minutes east of UTC (`UTC` is 0).
    Fixed(i32),
    /// A zone of the tz database, with its daylight-saving rules.
    Named {
        /// The name as written (`Europe/Paris`).
        name: String,
        /// Its rules.
        tz: TimeZone,
    },
}

impl Zone {
    /// Parses `UTC`, an offset (`+02:00`, `-0530`) or a tz database name
    /// (`Europe/Paris`, `America/New_York`).
    pub fn parse(text: &str) -> Result<Zone, String> {
        if let Ok(minutes) = parse_offset(text) {
            return Ok(Zone::Fixed(minutes));
        }
        let name = text.trim();
        match TimeZone::get(name) {
            Ok(tz) => Ok(Zone::Named {
                name: name.to_owned(),
                tz,
            }),
            Err(_) => Err(format!(
                "time zone `{name}` is not UTC, an offset like +02:00, or a tz database name like Europe/Paris"
            )),
        }
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
    let bad = || format!("time zone `{text}` is not UTC or an offset like +02:00");
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
        assert!(parse_offset("Europe/Paris").is_err());
        assert_eq!(Zone::parse("+02:00"), Ok(Zone::Fixed(120)));
        let err = Zone::parse("Mars/Olympus").unwrap_err();
        assert!(
            err.contains("`Mars/Olympus`") && err.contains("Europe/Paris"),
            "{err}"
        );
    }

    fn zone(name: &str) -> Zone {
        Zone::parse(name).expect("known zone")
    }

    /// ms since the epoch of a UTC wall-clock time.
    fn at(text: &str) -> u64 {
        let civil: jiff::civil::DateTime = text.parse().expect("date-time");
        as_utc_ms(civil).expect("in range") as u64
    }

    fn next_named(expr: &str, after: &str, name: &str) -> String {
        utc(Cron::parse(expr)
            .expect("valid")
            .next_in(at(after), &zone(name))
            .expect("fires"))
    }

    #[test]
    fn named_zones_follow_daylight_saving() {
        // 09:00 in Paris is 08:00 UTC in winter and 07:00 UTC in summer.
        assert_eq!(
            next_named("0 9 * * *", "2026-12-03T10:07", "Europe/Paris"),
            "2026-12-04 08:00"
        );
        assert_eq!(
            next_named("0 9 * * *", "2026-07-01T10:07", "Europe/Paris"),
            "2026-07-02 07:00"
        );
        // The fixed-offset path is unchanged through `next_in`.
        assert_eq!(
            utc(Cron::parse("0 9 * * *")
                .expect("valid")
                .next_in(AT, &Zone::Fixed(120))
                .expect("fires")),
            "2026-12-04 07:00"
        );
        // New York springs forward on 2026-03-08: 02:30 does not exist and fires at 03:30
        // EDT (07:30 UTC), once.
        assert_eq!(
            next_named("30 2 * * *", "2026-03-08T00:00", "America/New_York"),
            "2026-03-08 07:30"
        );
        assert_eq!(
            next_named("30 2 * * *", "2026-03-08T07:30", "America/New_York"),
            "2026-03-09 06:30"
        );
        // It falls back on 2026-11-01: 01:30 happens at 05:30 UTC (EDT) and again at 06:30
        // UTC (EST); it fires at the first only, and the second pass goes on to the next day.
        assert_eq!(
            next_named("30 1 * * *", "2026-11-01T00:00", "America/New_York"),
            "2026-11-01 05:30"
        );
        assert_eq!(
            next_named("30 1 * * *", "2026-11-01T05:30", "America/New_York"),
            "2026-11-02 06:30"
        );
        // Every 15 minutes through the repeated hour follows real time: 05:45 UTC (01:45
        // EDT) is followed by 06:00 UTC (01:00 EST), with no gap and no step back.
        let cron = Cron::parse("*/15 * * * *").expect("valid");
        let ny = zone("America/New_York");
        let mut t = at("2026-11-01T04:50");
        for _ in 0..12 {
            let next = cron.next_in(t, &ny).expect("fires");
            assert!(
                next > t && next - t <= 15 * 60_000,
                "{} -> {}",
                utc(t),
                utc(next)
            );
            t = next;
        }
        // Zones that never fire stay None, not an endless search.
        assert_eq!(
            Cron::parse("0 0 31 2 *")
                .expect("valid")
                .next_in(AT, &zone("Asia/Tokyo")),
            None
        );
    }
}
