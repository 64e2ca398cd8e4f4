//! Base 36 and base 62: short IDs for QR codes and URLs (Leaf issue 27).

/// A base an ID is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Radix {
    /// Decimal digits.
    Decimal,
    /// `0-9a-z`.
    Base36,
    /// `0-9A-Za-z`: digits, then upper case, then lower case (so that the order of equal-width
    /// strings, byte by byte, is the order of the numbers).
    Base62,
}

const DIGITS36: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
const DIGITS62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

impl Radix {
    /// How many digits the base has.
    pub fn base(self) -> u64 {
        match self {
            Radix::Decimal => 10,
            Radix::Base36 => 36,
            Radix::Base62 => 62,
        }
    }

    /// Its name in a template and on the routes (`base36`).
    pub fn name(self) -> &'static str {
        match self {
            Radix::Decimal => "decimal",
            Radix::Base36 => "base36",
            Radix::Base62 => "base62",
        }
    }

    /// Writes `n`'s digits at the end of `buf`; gives where they start. Each base is its own
    /// instance, so that the division is by a constant (a multiplication), not a `div`.
    fn fill(self, n: u64, buf: &mut [u8; 64]) -> usize {
        fn fill_in<const B: u64>(mut n: u64, digits: &[u8], buf: &mut [u8; 64]) -> usize {
            let mut i = buf.len();
            loop {
                i -= 1;
                buf[i] = digits[(n % B) as usize];
                n /= B;
                if n == 0 {
                    return i;
                }
            }
        }
        match self {
            Radix::Decimal => fill_in::<10>(n, b"0123456789", buf),
            Radix::Base36 => fill_in::<36>(n, DIGITS36, buf),
            Radix::Base62 => fill_in::<62>(n, DIGITS62, buf),
        }
    }

    fn value(self, c: u8) -> Option<u64> {
        let v = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'z' if self == Radix::Base36 => c - b'a' + 10,
            b'A'..=b'Z' if self == Radix::Base62 => c - b'A' + 10,
            b'a'..=b'z' if self == Radix::Base62 => c - b'a' + 36,
            _ => return None,
        };
        (u64::from(v) < self.base()).then_some(u64::from(v))
    }

    /// Whether `c` is one of its digits.
    pub fn is_digit(self, c: u8) -> bool {
        self.value(c).is_some()
    }

    /// `n` written in this base, left-padded with zeros to `width`.
    pub fn encode_into(self, n: u64, width: usize, out: &mut String) {
        self.encode_within(n, width, usize::MAX, out);
    }

    /// `n` written in this base, left-padded with zeros to `width`, if it takes at most `max`
    /// digits; `false`, and nothing written, if it takes more.
    pub fn encode_within(self, n: u64, width: usize, max: usize, out: &mut String) -> bool {
        let mut buf = [0u8; 64];
        let i = self.fill(n, &mut buf);
        let len = buf.len() - i;
        if len > max {
            return false;
        }
        if width > len {
            out.extend(std::iter::repeat_n('0', width - len));
        }
        // Only ASCII digits were written.
        out.push_str(std::str::from_utf8(&buf[i..]).unwrap_or_default());
        true
    }

    /// `n` written in this base.
    pub fn encode(self, n: u64) -> String {
        let mut s = String::new();
        self.encode_into(n, 0, &mut s);
        s
    }

    /// How many digits `n` takes.
    pub fn digits(self, mut n: u64) -> usize {
        let mut d = 1;
        while n >= self.base() {
            n /= self.base();
            d += 1;
        }
        d
    }

    /// The number `s` writes; `None` if it is empty, holds another character, or overflows.
    pub fn decode(self, s: &str) -> Option<u64> {
        if s.is_empty() {
            return None;
        }
        s.bytes().try_fold(0u64, |n, c| {
            n.checked_mul(self.base())?.checked_add(self.value(c)?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for radix in [Radix::Decimal, Radix::Base36, Radix::Base62] {
            for n in [
                0,
                1,
                9,
                10,
                35,
                36,
                61,
                62,
                3843,
                1 << 40,
                i64::MAX as u64,
                u64::MAX,
            ] {
                let s = radix.encode(n);
                assert_eq!(radix.decode(&s), Some(n), "{radix:?} {n} {s}");
                assert_eq!(radix.digits(n), s.len(), "{radix:?} {n}");
            }
        }
        assert_eq!(Radix::Base36.encode(35), "z");
        assert_eq!(Radix::Base62.encode(61), "z");
        assert_eq!(Radix::Base62.encode(36), "a");
        assert_eq!(Radix::Base62.encode(10), "A");
    }

    #[test]
    fn equal_widths_sort_as_their_numbers() {
        let mut prev = String::new();
        for n in (0..5000u64).step_by(7) {
            let mut s = String::new();
            Radix::Base62.encode_into(n, 4, &mut s);
            assert!(s > prev, "{s} after {prev}");
            prev = s;
        }
    }

    #[test]
    fn what_is_not_a_number_is_refused() {
        assert_eq!(Radix::Base36.decode("A"), None);
        assert_eq!(Radix::Decimal.decode("1a"), None);
        assert_eq!(Radix::Base62.decode(""), None);
        assert_eq!(Radix::Decimal.decode("99999999999999999999999"), None);
    }
}
