//! Snowflake IDs in other forms: base 36, base 62, and `friendly`
//! (`20261126131730192-3-17`: UTC time to the millisecond, worker id, sequence).

use std::str::FromStr;

use jiff::tz::TimeZone;
use leaf_core::{DecodedId, Error, Result, SnowflakeLayout, utc_parts};

use crate::radix::Radix;

/// How a snowflake ID is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnowflakeForm {
    /// The number (the default).
    Number,
    /// Base 36.
    Base36,
    /// Base 62.
    Base62,
    /// `yyyyMMddHHmmssSSS-worker-sequence`, the time in UTC.
    Friendly,
}

impl FromStr for SnowflakeForm {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "number" => Ok(SnowflakeForm::Number),
            "base36" => Ok(SnowflakeForm::Base36),
            "base62" => Ok(SnowflakeForm::Base62),
            "friendly" => Ok(SnowflakeForm::Friendly),
            other => Err(Error::InvalidInput(format!(
                "format {other:?} is not one of number, base36, base62, friendly"
            ))),
        }
    }
}

impl SnowflakeForm {
    /// `id` (of `layout`) in this form.
    pub fn render(self, id: i64, layout: &SnowflakeLayout) -> Result<String> {
        let n = u64::try_from(id)
            .map_err(|_| Error::InvalidInput(format!("{id} is not a snowflake ID")))?;
        Ok(match self {
            SnowflakeForm::Number => n.to_string(),
            SnowflakeForm::Base36 => Radix::Base36.encode(n),
            SnowflakeForm::Base62 => Radix::Base62.encode(n),
            SnowflakeForm::Friendly => friendly(&layout.decode(id)?)?,
        })
    }

    /// The ID `text` (in this form, of `layout`) stands for. Only the text this form prints is
    /// read (no leading zero, sign or space), so that decoding validates an ID.
    pub fn parse(self, text: &str, layout: &SnowflakeLayout) -> Result<i64> {
        let bad = || Error::InvalidInput(format!("{text:?} is not a snowflake ID in this form"));
        let n = match self {
            SnowflakeForm::Number => text.parse::<u64>().ok(),
            SnowflakeForm::Base36 => Radix::Base36.decode(text),
            SnowflakeForm::Base62 => Radix::Base62.decode(text),
            SnowflakeForm::Friendly => {
                let d = parse_friendly(text).ok_or_else(bad)?;
                u64::try_from(layout.encode(d.timestamp_ms, d.worker_id, d.sequence)?).ok()
            }
        };
        let id = n.and_then(|n| i64::try_from(n).ok()).ok_or_else(bad)?;
        // Fields are read leniently above (`u64`'s parse takes a `+`, digits take zeros).
        if self.render(id, layout).ok().as_deref() != Some(text) {
            return Err(bad());
        }
        Ok(id)
    }
}

/// The last moment a `friendly` ID can write: jiff's last timestamp (9999-12-30 22:00:00.999
/// UTC), so that every `friendly` ID reads back.
const MAX_FRIENDLY_MS: u64 = 253_402_207_200_999;

/// `20261126131730192-3-17`.
pub fn friendly(d: &DecodedId) -> Result<String> {
    if d.timestamp_ms > MAX_FRIENDLY_MS {
        return Err(Error::InvalidInput(format!("time {} ms", d.timestamp_ms)));
    }
    // Written backwards into one buffer on the stack, two digits at a time: through jiff and
    // `format!` this form took about 250 ns, digit by digit 130, against 25 to 35 for the plain
    // number's `to_string` (the crate's bench, `snowflake/friendly`; issue 27 asks under 100).
    let (year, mo, day, h, mi, s, ms) = utc_parts(d.timestamp_ms);
    let mut buf = [0u8; 17 + 2 * 21];
    let mut at = buf.len();
    for n in [d.sequence, d.worker_id] {
        at = put_decimal(&mut buf, at, n, 1) - 1;
        buf[at] = b'-';
    }
    for (n, width) in [(ms, 3), (s, 2), (mi, 2), (h, 2), (day, 2), (mo, 2)] {
        at = put_decimal(&mut buf, at, u64::from(n), width);
    }
    at = put_decimal(&mut buf, at, year.unsigned_abs(), 4);
    // Only ASCII digits and dashes were written.
    Ok(std::str::from_utf8(&buf[at..])
        .unwrap_or_default()
        .to_owned())
}

/// `00` to `99`.
const PAIRS: [u8; 200] = {
    let mut t = [0u8; 200];
    let mut i = 0;
    while i < 100 {
        t[2 * i] = b'0' + (i / 10) as u8;
        t[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    t
};

/// Writes `n` in decimal, zero-padded to `width`, to end before `buf[end]`; where it starts.
fn put_decimal(buf: &mut [u8], mut end: usize, mut n: u64, width: usize) -> usize {
    let stop = end.saturating_sub(width);
    let mut pair = |end: &mut usize, n: u64| {
        let i = n as usize * 2;
        *end -= 2;
        buf[*end..*end + 2].copy_from_slice(&PAIRS[i..i + 2]);
    };
    while n >= 100 {
        pair(&mut end, n % 100);
        n /= 100;
    }
    if n >= 10 {
        pair(&mut end, n);
    } else {
        end -= 1;
        buf[end] = b'0' + n as u8;
    }
    while end > stop {
        end -= 1;
        buf[end] = b'0';
    }
    end
}

/// The parts of a `friendly` ID.
pub fn parse_friendly(text: &str) -> Option<DecodedId> {
    let mut parts = text.split('-');
    let (time, worker, seq) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || time.len() != 17 || !time.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n = |r: std::ops::Range<usize>| time[r].parse::<i16>().ok();
    let dt = jiff::civil::DateTime::new(
        n(0..4)?,
        n(4..6)? as i8,
        n(6..8)? as i8,
        n(8..10)? as i8,
        n(10..12)? as i8,
        n(12..14)? as i8,
        i32::from(n(14..17)?) * 1_000_000,
    )
    .ok()?;
    let ms = dt
        .to_zoned(TimeZone::UTC)
        .ok()?
        .timestamp()
        .as_millisecond();
    Some(DecodedId {
        timestamp_ms: u64::try_from(ms).ok()?,
        worker_id: worker.parse().ok()?,
        sequence: seq.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_table() {
        let check = |n: u64, width: usize, expect: &str| {
            let mut buf = [b'x'; 24];
            let at = put_decimal(&mut buf, 23, n, width);
            assert_eq!(&buf[at..23], expect.as_bytes(), "{n} width {width}");
            assert!(at == 0 || buf[at - 1] == b'x', "{n} wrote before its start");
        };
        check(0, 1, "0");
        check(0, 3, "000");
        check(7, 2, "07");
        check(42, 3, "042");
        check(100, 1, "100");
        check(105, 2, "105");
        check(1005, 4, "1005");
        check(4095, 1, "4095");
        check(u64::MAX, 1, "18446744073709551615");
    }

    /// `friendly` against jiff's reading of the same moment, at the edges of days, months, leap
    /// years and centuries, and the last moment it can write.
    #[test]
    fn friendly_times_are_jiffs() {
        let check = |ms: u64, expect: &str| {
            let d = DecodedId {
                timestamp_ms: ms,
                worker_id: 1023,
                sequence: 4095,
            };
            let text = friendly(&d).unwrap();
            assert_eq!(text, format!("{expect}-1023-4095"), "{ms}");
            assert_eq!(parse_friendly(&text), Some(d), "{text}");
        };
        check(0, "19700101000000000");
        check(1_288_834_974_657, "20101104014254657");
        check(951_782_399_999, "20000228235959999");
        check(951_782_400_000, "20000229000000000");
        check(4_107_542_400_000, "21000301000000000");
        check(1_798_761_599_999, "20261231235959999");
        check(MAX_FRIENDLY_MS, "99991230220000999");
        assert_eq!(
            Some(MAX_FRIENDLY_MS),
            u64::try_from(jiff::Timestamp::MAX.as_millisecond()).ok()
        );
        assert!(
            friendly(&DecodedId {
                timestamp_ms: MAX_FRIENDLY_MS + 1,
                worker_id: 0,
                sequence: 0,
            })
            .is_err()
        );
    }

    /// Issue 32: a form reads only the text it prints, so that decoding validates an ID.
    #[test]
    fn only_the_text_a_form_prints_is_read() {
        let layout = SnowflakeLayout::default();
        let id = layout.encode(1_795_699_050_192, 3, 17).unwrap();
        let check = |form: SnowflakeForm, text: &str, ok: bool| {
            let got = form.parse(text, &layout);
            assert_eq!(got.is_ok(), ok, "{form:?} {text}: {got:?}");
            if let Ok(n) = got {
                assert_eq!((n, form.render(n, &layout).unwrap().as_str()), (id, text));
            }
        };
        let canonical = |form: SnowflakeForm| form.render(id, &layout).unwrap();
        for form in [
            SnowflakeForm::Number,
            SnowflakeForm::Base36,
            SnowflakeForm::Base62,
            SnowflakeForm::Friendly,
        ] {
            let text = canonical(form);
            check(form, &text, true);
            check(form, &format!("0{text}"), false);
            check(form, &format!("+{text}"), false);
            check(form, &format!(" {text}"), false);
        }
        check(SnowflakeForm::Friendly, "20261126131730192-+3-17", false);
        check(SnowflakeForm::Friendly, "20261126131730192-3-+17", false);
        check(SnowflakeForm::Friendly, "20261126131730192-03-17", false);
        check(SnowflakeForm::Friendly, "20261126131730192-3-017", false);
    }

    #[test]
    fn every_form_round_trips() {
        let layout = SnowflakeLayout::default();
        let id = layout.encode(1_795_699_050_192, 3, 17).unwrap();
        for form in [
            SnowflakeForm::Number,
            SnowflakeForm::Base36,
            SnowflakeForm::Base62,
            SnowflakeForm::Friendly,
        ] {
            let text = form.render(id, &layout).unwrap();
            assert_eq!(form.parse(&text, &layout).unwrap(), id, "{form:?} {text}");
        }
        assert_eq!(
            SnowflakeForm::Friendly.render(id, &layout).unwrap(),
            "20261126131730192-3-17"
        );
        assert!(
            SnowflakeForm::Friendly
                .parse("20261126131730192-3", &layout)
                .is_err()
        );
        assert!(SnowflakeForm::Base62.parse("!", &layout).is_err());
        assert!(
            SnowflakeForm::Friendly
                .parse("20261126131730192-1024-0", &layout)
                .is_err(),
            "a worker id above the layout's"
        );
        assert!(
            "hex"
                .parse::<SnowflakeForm>()
                .unwrap_err()
                .to_string()
                .contains("base62")
        );
    }
}
