//! A certificate's `notAfter`, read from its DER: the few fields before it are skipped, so no
//! X.509 crate is needed for the one date the server reports
//! (`leaf_tls_certificate_expiry_timestamp_seconds`) and checks at load.

use rustls_pki_types::CertificateDer;

/// One DER element: its tag, its contents, and what follows it.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The `notAfter` of `cert`, in seconds since the epoch; `None` when it cannot be read.
pub(super) fn not_after(cert: &CertificateDer<'_>) -> Option<i64> {
    const SEQUENCE: u8 = 0x30;
    let (tag, certificate, _) = element(cert.as_ref())?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, mut tbs, _) = element(certificate)?;
    if tag != SEQUENCE {
        return None;
    }
    // version [0] (optional), serialNumber, signature, issuer, then validity.
    let (tag, _, rest) = element(tbs)?;
    if tag == 0xa0 {
        tbs = rest;
        tbs = element(tbs)?.2;
    } else {
        tbs = rest;
    }
    let tbs = element(tbs)?.2; // signature
    let tbs = element(tbs)?.2; // issuer
    let (tag, validity, _) = element(tbs)?;
    if tag != SEQUENCE {
        return None;
    }
    let (_, _, rest) = element(validity)?; // notBefore
    let (tag, time, _) = element(rest)?;
    parse_time(tag, std::str::from_utf8(time).ok()?)
}

/// UTCTime (`YYMMDDHHMMSSZ`) or GeneralizedTime (`YYYYMMDDHHMMSSZ`), as DER writes them.
fn parse_time(tag: u8, text: &str) -> Option<i64> {
    let digits = text.strip_suffix('Z')?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (year, rest) = match (tag, digits.len()) {
        (0x17, 12) => {
            let yy: i64 = digits[..2].parse().ok()?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &digits[2..])
        }
        (0x18, 14) => (digits[..4].parse().ok()?, &digits[4..]),
        _ => return None,
    };
    let field = |i: usize| rest[i..i + 2].parse::<i64>().ok();
    let (month, day, hour, minute, second) =
        (field(0)?, field(2)?, field(4)?, field(6)?, field(8)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Now, in seconds since the epoch.
pub(super) fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// `secs` since the epoch as `YYYY-MM-DDTHH:MM:SSZ`, for logs and errors.
pub(super) fn show(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // The inverse of `days_from_civil`.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_of_both_forms() {
        assert_eq!(parse_time(0x17, "700101000000Z"), Some(0));
        assert_eq!(parse_time(0x17, "491231235959Z"), Some(2_524_607_999));
        assert_eq!(parse_time(0x18, "20261127124804Z"), Some(1_795_783_684));
        assert_eq!(parse_time(0x18, "99991231235959Z"), Some(253_402_300_799));
        for bad in [
            "2026112712480Z",
            "20261327124804Z",
            "2026112712480aZ",
            "20261127124804",
        ] {
            assert_eq!(parse_time(0x18, bad), None, "{bad}");
        }
        assert_eq!(show(1_795_783_684), "2026-11-27T12:48:04Z");
        assert_eq!(show(0), "1970-01-01T00:00:00Z");
    }

    #[test]
    fn a_certificates_not_after_is_read_from_its_der() {
        let key = rcgen::KeyPair::generate().unwrap();
        // UTCTime before 2050, GeneralizedTime from 2050 on.
        for (y, m, d, shown) in [
            (2031, 6, 30, "2031-06-30T00:00:00Z"),
            (2051, 1, 2, "2051-01-02T00:00:00Z"),
        ] {
            let mut params = rcgen::CertificateParams::new(vec!["leaf.test".into()]).unwrap();
            params.not_after = rcgen::date_time_ymd(y, m, d);
            let cert = params.self_signed(&key).unwrap();
            assert_eq!(show(not_after(cert.der()).unwrap()), shown);
        }
        assert_eq!(
            not_after(&CertificateDer::from(vec![0x30, 0x03, 1, 2, 3])),
            None
        );
        assert_eq!(not_after(&CertificateDer::from(Vec::new())), None);
    }
}
