//! Snowflake IDs in other forms: base 36, base 62, and `friendly`
//! (`20261126131730192-3-17`: UTC time to the millisecond, worker id, sequence).

use std::str::FromStr;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use leaf_core::{DecodedId, Error, Result, SnowflakeLayout};

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

    /// The ID `text` (in this form, of `layout`) stands for.
    pub fn parse(self, text: &str, layout: &SnowflakeLayout) -> Result<i64> {
        let bad = || Error::InvalidInput(format!("{text:?} is not a snowflake ID in this form"));
        let n = match self {
            SnowflakeForm::Number => text.parse::<u64>().ok(),
            SnowflakeForm::Base36 => Radix::Base36.decode(text),
            SnowflakeForm::Base62 => Radix::Base62.decode(text),
            SnowflakeForm::Friendly => {
                let d = parse_friendly(text).ok_or_else(bad)?;
                return layout.encode(d.timestamp_ms, d.worker_id, d.sequence);
            }
        };
        n.and_then(|n| i64::try_from(n).ok()).ok_or_else(bad)
    }
}

/// `20261126131730192-3-17`.
pub fn friendly(d: &DecodedId) -> Result<String> {
    let ts = i64::try_from(d.timestamp_ms)
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
        .ok_or_else(|| Error::InvalidInput(format!("time {} ms", d.timestamp_ms)))?;
    let t = ts.to_zoned(TimeZone::UTC);
    Ok(format!(
        "{:04}{:02}{:02}{:02}{:02}{:02}{:03}-{}-{}",
        t.year(),
        t.month(),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond(),
        d.worker_id,
        d.sequence
    ))
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
            "hex"
                .parse::<SnowflakeForm>()
                .unwrap_err()
                .to_string()
                .contains("base62")
        );
    }
}
