//! `SnowflakeLayout`: how a snowflake ID's 63 usable bits split into timestamp, worker id and
//! sequence, and the epoch the timestamp counts from.

use crate::{Error, Result};

/// Twitter's epoch, Leaf's default: 2010-11-04T01:42:54.657Z.
pub const TWITTER_EPOCH_MS: u64 = 1_288_834_974_657;

/// A validated bit layout. IDs are never negative: the sign bit is never used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnowflakeLayout {
    timestamp_bits: u32,
    worker_bits: u32,
    sequence_bits: u32,
    epoch_ms: u64,
}

/// An ID taken apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodedId {
    /// Unix milliseconds (the epoch added back).
    pub timestamp_ms: u64,
    /// The worker id.
    pub worker_id: u64,
    /// The sequence within the millisecond.
    pub sequence: u64,
}

impl Default for SnowflakeLayout {
    /// Leaf's layout: 41 timestamp bits, 10 worker bits, 12 sequence bits, Twitter's epoch.
    fn default() -> Self {
        SnowflakeLayout {
            timestamp_bits: 41,
            worker_bits: 10,
            sequence_bits: 12,
            epoch_ms: TWITTER_EPOCH_MS,
        }
    }
}

impl SnowflakeLayout {
    /// A layout; `Config` unless each field has at most 63 bits and together at most 63, the
    /// timestamp has at least 1 bit, the sequence at least 1 bit, and `epoch_ms` plus the
    /// timestamp range fits `u64`. Errors name the field (`worker_bits`); a caller reading these
    /// from configuration adds its own key prefix.
    pub fn new(
        timestamp_bits: u32,
        worker_bits: u32,
        sequence_bits: u32,
        epoch_ms: u64,
    ) -> Result<Self> {
        // Each field is bounded before any sum: a `u32` sum of configured values can wrap
        // (63 + 4294967284 + 12 is 15) and pass a total check.
        for (field, bits) in [
            ("timestamp_bits", timestamp_bits),
            ("worker_bits", worker_bits),
            ("sequence_bits", sequence_bits),
        ] {
            if bits > 63 {
                return Err(Error::Config(format!(
                    "{field} is {bits}, at most 63 are allowed"
                )));
            }
        }
        let total = u64::from(timestamp_bits) + u64::from(worker_bits) + u64::from(sequence_bits);
        if total > 63 {
            return Err(Error::Config(format!(
                "timestamp_bits + worker_bits + sequence_bits is {total}, at most 63 are allowed \
                 (the sign bit is never used)"
            )));
        }
        if timestamp_bits == 0 {
            return Err(Error::Config("timestamp_bits must be at least 1".into()));
        }
        if sequence_bits == 0 {
            return Err(Error::Config("sequence_bits must be at least 1".into()));
        }
        if epoch_ms.checked_add(mask(timestamp_bits)).is_none() {
            return Err(Error::Config(format!("epoch_ms {epoch_ms} is too large")));
        }
        Ok(SnowflakeLayout {
            timestamp_bits,
            worker_bits,
            sequence_bits,
            epoch_ms,
        })
    }

    /// Checks the layout against the wall clock: the epoch is in the past and the timestamp
    /// field has not run out.
    pub fn check_now(&self, now_ms: u64) -> Result<()> {
        if self.epoch_ms > now_ms {
            return Err(Error::Config(format!(
                "epoch_ms {} is in the future (now is {now_ms})",
                self.epoch_ms
            )));
        }
        if now_ms > self.max_timestamp_ms() {
            return Err(Error::Exhausted(format!(
                "the snowflake timestamp field ran out at {}",
                format_utc_ms(self.max_timestamp_ms())
            )));
        }
        Ok(())
    }

    /// Bits of the timestamp field.
    pub fn timestamp_bits(&self) -> u32 {
        self.timestamp_bits
    }
    /// Bits of the worker-id field.
    pub fn worker_bits(&self) -> u32 {
        self.worker_bits
    }
    /// Bits of the sequence field.
    pub fn sequence_bits(&self) -> u32 {
        self.sequence_bits
    }
    /// The epoch, Unix milliseconds.
    pub fn epoch_ms(&self) -> u64 {
        self.epoch_ms
    }
    /// The largest worker id.
    pub fn max_worker_id(&self) -> u64 {
        mask(self.worker_bits)
    }
    /// The largest sequence.
    pub fn max_sequence(&self) -> u64 {
        mask(self.sequence_bits)
    }
    /// The last Unix millisecond the timestamp field can hold.
    pub fn max_timestamp_ms(&self) -> u64 {
        self.epoch_ms + mask(self.timestamp_bits)
    }
    /// IDs one worker can issue in one millisecond.
    pub fn ids_per_ms(&self) -> u64 {
        self.max_sequence() + 1
    }

    /// Puts an ID together. `Exhausted` past the timestamp field's end (never a negative ID),
    /// `InvalidInput` for a timestamp before the epoch or a field out of range.
    #[inline]
    pub fn encode(&self, timestamp_ms: u64, worker_id: u64, sequence: u64) -> Result<i64> {
        if timestamp_ms < self.epoch_ms {
            return Err(Error::InvalidInput(format!(
                "timestamp {timestamp_ms} is before the epoch {}",
                self.epoch_ms
            )));
        }
        if timestamp_ms > self.max_timestamp_ms() {
            return Err(Error::Exhausted(format!(
                "the snowflake timestamp field ran out at {}",
                format_utc_ms(self.max_timestamp_ms())
            )));
        }
        if worker_id > self.max_worker_id() {
            return Err(Error::InvalidInput(format!(
                "worker id {worker_id} is above the layout's maximum {}",
                self.max_worker_id()
            )));
        }
        if sequence > self.max_sequence() {
            return Err(Error::InvalidInput(format!(
                "sequence {sequence} is above the layout's maximum {}",
                self.max_sequence()
            )));
        }
        Ok(self.encode_unchecked(timestamp_ms, worker_id, sequence))
    }

    /// Puts an ID together from fields already known to be in range (the generator's hot path).
    #[inline]
    pub fn encode_unchecked(&self, timestamp_ms: u64, worker_id: u64, sequence: u64) -> i64 {
        let t = timestamp_ms - self.epoch_ms;
        ((t << (self.worker_bits + self.sequence_bits))
            | (worker_id << self.sequence_bits)
            | sequence) as i64
    }

    /// Takes an ID apart; `InvalidInput` for a negative ID or one with bits above the layout.
    pub fn decode(&self, id: i64) -> Result<DecodedId> {
        if id < 0 {
            return Err(Error::InvalidInput(format!(
                "snowflake id {id} is negative"
            )));
        }
        let id = id as u64;
        let total = self.timestamp_bits + self.worker_bits + self.sequence_bits;
        if total < 64 && id >> total != 0 {
            return Err(Error::InvalidInput(format!(
                "snowflake id {id} has bits above the layout's {total}"
            )));
        }
        Ok(DecodedId {
            timestamp_ms: (id >> (self.worker_bits + self.sequence_bits)) + self.epoch_ms,
            worker_id: (id >> self.sequence_bits) & self.max_worker_id(),
            sequence: id & self.max_sequence(),
        })
    }

    /// One line for the start-up log: when the timestamp field runs out and the capacity.
    pub fn describe(&self, now_ms: u64) -> String {
        let end = self.max_timestamp_ms();
        let years = end.saturating_sub(now_ms) as f64 / (365.25 * 86_400_000.0);
        format!(
            "{}+{}+{} bits, epoch {}; timestamps run out at {} ({years:.1} years from now); \
             {} worker ids, {} IDs per ms per worker",
            self.timestamp_bits,
            self.worker_bits,
            self.sequence_bits,
            format_utc_ms(self.epoch_ms),
            format_utc_ms(end),
            self.max_worker_id() + 1,
            self.ids_per_ms(),
        )
    }
}

fn mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// Formats Unix milliseconds as RFC 3339 in UTC with milliseconds: `2010-11-04T01:42:54.657Z`.
pub fn format_utc_ms(ms: u64) -> String {
    let (y, mo, d, h, mi, s, milli) = utc_parts(ms);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{milli:03}Z")
}

/// Unix milliseconds as (year, month, day, hour, minute, second, millisecond) in UTC.
pub fn utc_parts(ms: u64) -> (i64, u32, u32, u32, u32, u32, u32) {
    let secs = (ms / 1000) as i64;
    let milli = (ms % 1000) as u32;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400) as u32;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, rem / 3600, rem % 3600 / 60, rem % 60, milli)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `expect`: `None` for a valid layout, else a field name the error must name.
    fn check(bits: (u32, u32, u32), expect: Option<&str>) {
        let r = SnowflakeLayout::new(bits.0, bits.1, bits.2, TWITTER_EPOCH_MS);
        match (expect, r) {
            (None, Ok(_)) => {}
            (Some(field), Err(Error::Config(m))) => {
                assert!(m.contains(field), "layout {bits:?}: {m} names {field}")
            }
            (expect, r) => panic!("layout {bits:?}: expected {expect:?}, got {r:?}"),
        }
    }

    #[test]
    fn layout_validation_table() {
        check((41, 10, 12), None);
        check((41, 5, 7), None); // 53 bits: JavaScript-safe
        check((42, 9, 12), None);
        check((63, 0, 0), Some("sequence_bits"));
        check((62, 0, 1), None);
        check(
            (41, 10, 13),
            Some("timestamp_bits + worker_bits + sequence_bits"),
        ); // sign bit
        check(
            (50, 10, 12),
            Some("timestamp_bits + worker_bits + sequence_bits"),
        );
        check((0, 10, 12), Some("timestamp_bits"));
        check((41, 10, 0), Some("sequence_bits"));
        // The reproduction: a u32 sum wraps to 15 and the layout issued duplicates.
        check((63, 4_294_967_284, 12), Some("worker_bits"));
        check((u32::MAX, 1, 1), Some("timestamp_bits"));
        check((1, 1, u32::MAX), Some("sequence_bits"));
        check((64, 0, 1), Some("timestamp_bits"));
        check((1, 64, 1), Some("worker_bits"));
        check((1, 0, 64), Some("sequence_bits"));
        check((21, 21, 21), None);
        check(
            (22, 21, 21),
            Some("timestamp_bits + worker_bits + sequence_bits"),
        );
    }

    #[test]
    fn layout_errors_name_fields_not_server_keys() {
        // The server adds its `snowflake.` prefix; the library names its own fields.
        let e = SnowflakeLayout::new(63, 4_294_967_284, 12, TWITTER_EPOCH_MS).unwrap_err();
        assert!(!e.to_string().contains("snowflake."), "{e}");
    }

    #[test]
    fn default_is_leafs() {
        let l = SnowflakeLayout::default();
        assert_eq!(l.max_worker_id(), 1023);
        assert_eq!(l.max_sequence(), 4095);
        assert_eq!(l.epoch_ms(), 1_288_834_974_657);
        assert_eq!(
            format_utc_ms(l.max_timestamp_ms()),
            "2080-07-10T17:30:30.208Z"
        );
    }

    #[test]
    fn epoch_must_be_in_the_past() {
        let l = SnowflakeLayout::new(41, 10, 12, 2_000_000_000_000).unwrap();
        assert!(matches!(
            l.check_now(1_700_000_000_000),
            Err(Error::Config(_))
        ));
        assert!(l.check_now(2_000_000_000_001).is_ok());
    }

    #[test]
    fn encode_decode_round_trip_table() {
        let cases = [
            (SnowflakeLayout::default(), 1_700_000_000_123, 1023, 4095),
            (SnowflakeLayout::default(), TWITTER_EPOCH_MS, 0, 0),
            (
                SnowflakeLayout::new(41, 5, 7, TWITTER_EPOCH_MS).unwrap(),
                1_700_000_000_000,
                31,
                127,
            ),
            (
                SnowflakeLayout::new(40, 0, 23, 1_600_000_000_000).unwrap(),
                1_700_000_000_000,
                0,
                5,
            ),
        ];
        for (l, ts, w, s) in cases {
            let id = l.encode(ts, w, s).unwrap();
            assert!(id >= 0);
            assert_eq!(
                l.decode(id).unwrap(),
                DecodedId {
                    timestamp_ms: ts,
                    worker_id: w,
                    sequence: s
                },
                "{l:?}"
            );
        }
    }

    #[test]
    fn leafs_known_id_decodes() {
        // (1700000000000 - epoch) << 22 | 5 << 12 | 7
        let l = SnowflakeLayout::default();
        let id = ((1_700_000_000_000u64 - TWITTER_EPOCH_MS) << 22 | 5 << 12 | 7) as i64;
        let d = l.decode(id).unwrap();
        assert_eq!(
            (d.timestamp_ms, d.worker_id, d.sequence),
            (1_700_000_000_000, 5, 7)
        );
    }

    #[test]
    fn end_of_timestamp_field_is_exhausted_never_negative() {
        let l = SnowflakeLayout::new(10, 2, 3, 1_000).unwrap();
        let last = l.max_timestamp_ms();
        assert_eq!(last, 1_000 + 1023);
        let id = l.encode(last, 3, 7).unwrap();
        assert!(id > 0);
        assert!(matches!(l.encode(last + 1, 0, 0), Err(Error::Exhausted(_))));
        let full = SnowflakeLayout::default();
        let id = full
            .encode(
                full.max_timestamp_ms(),
                full.max_worker_id(),
                full.max_sequence(),
            )
            .unwrap();
        assert_eq!(id, i64::MAX);
    }

    #[test]
    fn encode_rejects_out_of_range_fields() {
        let l = SnowflakeLayout::default();
        assert!(matches!(
            l.encode(TWITTER_EPOCH_MS - 1, 0, 0),
            Err(Error::InvalidInput(_))
        ));
        assert!(matches!(
            l.encode(TWITTER_EPOCH_MS, 1024, 0),
            Err(Error::InvalidInput(_))
        ));
        assert!(matches!(
            l.encode(TWITTER_EPOCH_MS, 0, 4096),
            Err(Error::InvalidInput(_))
        ));
    }

    #[test]
    fn decode_rejects_negative_and_oversized() {
        let l = SnowflakeLayout::new(41, 5, 7, TWITTER_EPOCH_MS).unwrap();
        assert!(matches!(l.decode(-1), Err(Error::InvalidInput(_))));
        assert!(matches!(l.decode(1 << 53), Err(Error::InvalidInput(_))));
        assert!(l.decode((1 << 53) - 1).is_ok());
    }

    #[test]
    fn utc_formatting() {
        assert_eq!(format_utc_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_utc_ms(TWITTER_EPOCH_MS), "2010-11-04T01:42:54.657Z");
        assert_eq!(format_utc_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(format_utc_ms(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }

    #[test]
    fn describe_names_the_end_and_capacity() {
        let s = SnowflakeLayout::default().describe(1_700_000_000_000);
        assert!(s.contains("2080-07-10"), "{s}");
        assert!(s.contains("1024 worker ids"), "{s}");
        assert!(s.contains("4096 IDs per ms"), "{s}");
    }
}
