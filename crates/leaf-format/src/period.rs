//! Periods: a counter that restarts each day, month or year, in a time zone.

use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use jiff::civil::Date;
use jiff::tz::TimeZone;
use leaf_core::{Error, Result};

/// How often a counter restarts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reset {
    /// Every day, at midnight in the tag's zone.
    Day,
    /// Every month.
    Month,
    /// Every year.
    Year,
}

impl Reset {
    /// The word of the configuration and the API (`day`, `month`, `year`).
    pub fn as_str(self) -> &'static str {
        match self {
            Reset::Day => "day",
            Reset::Month => "month",
            Reset::Year => "year",
        }
    }

    /// How many characters a period key of this reset has (`20261126`, `202611`, `2026`).
    pub fn key_len(self) -> usize {
        match self {
            Reset::Day => 8,
            Reset::Month => 6,
            Reset::Year => 4,
        }
    }
}

impl fmt::Display for Reset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Reset {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "day" => Ok(Reset::Day),
            "month" => Ok(Reset::Month),
            "year" => Ok(Reset::Year),
            other => Err(Error::InvalidInput(format!(
                "reset {other:?} is not one of day, month, year"
            ))),
        }
    }
}

/// A tag's time zone: an IANA name (`Asia/Shanghai`), from the bundled database.
#[derive(Clone, Debug, PartialEq)]
pub struct Zone {
    name: String,
    tz: TimeZone,
}

impl Zone {
    /// The zone `name`; `InvalidInput` naming it when the database has none.
    pub fn new(name: &str) -> Result<Self> {
        let tz = TimeZone::get(name)
            .map_err(|_| Error::InvalidInput(format!("time zone {name:?} is not an IANA zone")))?;
        Ok(Zone {
            name: name.to_owned(),
            tz,
        })
    }

    /// UTC.
    pub fn utc() -> Self {
        Zone {
            name: "UTC".into(),
            tz: TimeZone::UTC,
        }
    }

    /// Its IANA name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The civil date at `unix_ms` in this zone.
    pub fn date_at(&self, unix_ms: i64) -> Result<Date> {
        let ts = Timestamp::from_millisecond(unix_ms)
            .map_err(|e| Error::InvalidInput(format!("time {unix_ms} ms: {e}")))?;
        Ok(ts.to_zoned(self.tz.clone()).date())
    }
}

/// One period of a counter: the day, month or year a value was issued in, in its tag's zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Period {
    reset: Reset,
    /// The period's first day.
    first_day: Date,
}

impl Period {
    /// The period of `reset` that holds `date`.
    pub fn of(reset: Reset, date: Date) -> Self {
        let first_day = match reset {
            Reset::Day => date,
            Reset::Month => date.first_of_month(),
            Reset::Year => date.first_of_year(),
        };
        Period { reset, first_day }
    }

    /// The period of `reset` at `unix_ms` in `zone`: what a value issued then belongs to.
    pub fn at(reset: Reset, zone: &Zone, unix_ms: i64) -> Result<Self> {
        Ok(Period::of(reset, zone.date_at(unix_ms)?))
    }

    /// The period after this one.
    pub fn next(self) -> Self {
        let next = match self.reset {
            Reset::Day => self.first_day.tomorrow(),
            Reset::Month => self.first_day.last_of_month().tomorrow(),
            Reset::Year => self.first_day.last_of_year().tomorrow(),
        };
        // Only at the end of the calendar (9999-12-31) is there none: stay.
        Period {
            reset: self.reset,
            first_day: next.unwrap_or(self.first_day),
        }
    }

    /// When it starts in `zone`, Unix milliseconds: the first instant of its first day there.
    pub fn start_ms(self, zone: &Zone) -> Result<i64> {
        let start = self.first_day.to_zoned(zone.tz.clone()).map_err(|e| {
            Error::InvalidInput(format!("the start of {self} in {}: {e}", zone.name))
        })?;
        Ok(start.timestamp().as_millisecond())
    }

    /// How it restarts.
    pub fn reset(self) -> Reset {
        self.reset
    }

    /// Its first day.
    pub fn first_day(self) -> Date {
        self.first_day
    }

    /// Its key: `20261126`, `202611` or `2026`; the suffix of the row that counts it.
    pub fn key(self) -> String {
        let d = self.first_day;
        match self.reset {
            Reset::Day => format!("{:04}{:02}{:02}", d.year(), d.month(), d.day()),
            Reset::Month => format!("{:04}{:02}", d.year(), d.month()),
            Reset::Year => format!("{:04}", d.year()),
        }
    }

    /// The period of `reset` whose [`key`](Self::key) is `key`.
    pub fn from_key(reset: Reset, key: &str) -> Result<Self> {
        let bad = || Error::InvalidInput(format!("{key:?} is not a {reset} period"));
        if key.len() != reset.key_len() || !key.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let num = |r: std::ops::Range<usize>| key[r].parse::<i16>().map_err(|_| bad());
        let year = num(0..4)?;
        let (month, day) = match reset {
            Reset::Day => (num(4..6)? as i8, num(6..8)? as i8),
            Reset::Month => (num(4..6)? as i8, 1),
            Reset::Year => (1, 1),
        };
        let date = Date::new(year, month, day).map_err(|_| bad())?;
        Ok(Period::of(reset, date))
    }
}

impl fmt::Display for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(s: &str) -> i64 {
        s.parse::<Timestamp>().unwrap().as_millisecond()
    }

    #[test]
    fn a_day_ends_at_midnight_in_the_tags_zone() {
        let shanghai = Zone::new("Asia/Shanghai").unwrap();
        // 15:59:59.999 UTC is 23:59:59.999 in Shanghai; a millisecond later it is the next day.
        let before = Period::at(Reset::Day, &shanghai, ms("2026-11-26T15:59:59.999Z")).unwrap();
        let after = Period::at(Reset::Day, &shanghai, ms("2026-11-26T16:00:00Z")).unwrap();
        assert_eq!(
            (before.key(), after.key()),
            ("20261126".into(), "20261127".into())
        );
        assert_eq!(before.next(), after);
        let utc = Period::at(Reset::Day, &Zone::utc(), ms("2026-11-26T16:00:00Z")).unwrap();
        assert_eq!(utc.key(), "20261126");
    }

    #[test]
    fn months_and_years_end_where_the_calendar_says() {
        let z = Zone::utc();
        let m = |t| Period::at(Reset::Month, &z, ms(t)).unwrap();
        assert_eq!(m("2026-02-28T23:59:59.999Z").key(), "202602");
        assert_eq!(m("2026-03-01T00:00:00Z").key(), "202603");
        assert_eq!(m("2028-02-29T12:00:00Z").next().key(), "202803");
        let y = |t| Period::at(Reset::Year, &z, ms(t)).unwrap();
        assert_eq!(y("2026-12-31T23:59:59.999Z").key(), "2026");
        assert_eq!(y("2026-12-31T23:59:59.999Z").next().key(), "2027");
        assert_eq!(
            Period::at(Reset::Day, &z, ms("2026-12-31T10:00:00Z"))
                .unwrap()
                .next()
                .key(),
            "20270101"
        );
    }

    #[test]
    fn a_dst_change_does_not_move_midnight() {
        // New York leaves daylight saving time on 2026-11-01 at 02:00 local: that day has 25
        // hours, and its midnight is at 04:00 UTC, the next one at 05:00 UTC.
        let ny = Zone::new("America/New_York").unwrap();
        let d = |t| Period::at(Reset::Day, &ny, ms(t)).unwrap().key();
        assert_eq!(d("2026-11-01T03:59:59.999Z"), "20261031");
        assert_eq!(d("2026-11-01T04:00:00Z"), "20261101");
        assert_eq!(d("2026-11-02T04:59:59.999Z"), "20261101");
        assert_eq!(d("2026-11-02T05:00:00Z"), "20261102");
    }

    #[test]
    fn keys_come_back() {
        for (reset, key) in [
            (Reset::Day, "20261126"),
            (Reset::Month, "202611"),
            (Reset::Year, "2026"),
        ] {
            assert_eq!(Period::from_key(reset, key).unwrap().key(), key);
        }
        for (reset, key) in [
            (Reset::Day, "20261131"),
            (Reset::Day, "2026112"),
            (Reset::Month, "202613"),
            (Reset::Year, "20x6"),
        ] {
            assert!(Period::from_key(reset, key).is_err(), "{key}");
        }
    }

    #[test]
    fn bad_words_are_refused_by_name() {
        let e = Zone::new("Mars/Olympus").unwrap_err();
        assert!(e.to_string().contains("Mars/Olympus"), "{e}");
        let e = "week".parse::<Reset>().unwrap_err();
        assert!(e.to_string().contains("day, month, year"), "{e}");
    }
}
