//! Templates: how a counter's value is printed (`ORD{date:%Y%m%d}{seq:06}`), and read back.
//!
//! A template is literal text with two kinds of fields: `{seq}` (the value: `{seq}`,
//! `{seq:06}` zero-padded to a fixed width, `{seq:base36}`, `{seq:base62}`, and a base with a
//! width, `{seq:base36:08}`) and `{date:...}` (the period, in `%Y`, `%m`, `%d`, `%j` and
//! any character that is not a digit; `%y` is refused: its two digits repeat every hundred
//! years). `{{` and `}}` are literal braces. A template is refused
//! when it cannot be read back: exactly one `{seq}`; a `{seq}` without a width is followed by the
//! end or by a literal that does not start with one of its digits; a date as fine as the
//! counter's reset (a daily counter without the day would repeat every day), and none without
//! a reset.

use std::fmt;

use jiff::civil::Date;
use leaf_core::{Error, Result};

use crate::period::{Period, Reset};
use crate::radix::Radix;

/// The longest fixed width: `i64::MAX` has 19 decimal digits.
pub const MAX_WIDTH: usize = 19;

/// A parsed template; see the module docs.
#[derive(Clone, PartialEq, Eq)]
pub struct Template {
    source: String,
    parts: Vec<Part>,
    /// The reset it was parsed for: the period of a date read back.
    reset: Option<Reset>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Literal(String),
    Seq { radix: Radix, width: Option<usize> },
    Date(Vec<DatePart>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DatePart {
    /// `%Y`: four digits.
    Year,
    /// `%m`.
    Month,
    /// `%d`.
    Day,
    /// `%j`: the day of the year, three digits.
    DayOfYear,
    Char(char),
}

impl DatePart {
    fn width(self) -> usize {
        match self {
            DatePart::Year => 4,
            DatePart::Month | DatePart::Day => 2,
            DatePart::DayOfYear => 3,
            DatePart::Char(c) => c.len_utf8(),
        }
    }
}

fn invalid(template: &str, why: impl fmt::Display) -> Error {
    Error::InvalidInput(format!("format {template:?}: {why}"))
}

impl Template {
    /// `source` parsed for a counter that restarts as `reset` says (`None`: never); see the
    /// module docs for what is refused.
    pub fn parse(source: &str, reset: Option<Reset>) -> Result<Self> {
        let bad = |why: &dyn fmt::Display| invalid(source, why);
        let mut parts: Vec<Part> = Vec::new();
        let mut literal = String::new();
        let mut chars = source.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    literal.push('}');
                }
                '}' => return Err(bad(&"a '}' without its '{' (write '}}' for a brace)")),
                '{' => {
                    let mut field = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(c) => field.push(c),
                            None => return Err(bad(&"a '{' without its '}'")),
                        }
                    }
                    if !literal.is_empty() {
                        parts.push(Part::Literal(std::mem::take(&mut literal)));
                    }
                    parts.push(field_part(&field).map_err(|why| bad(&why))?);
                }
                c if c.is_control() => return Err(bad(&"a control character")),
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Literal(literal));
        }
        let template = Template {
            source: source.to_owned(),
            parts,
            reset,
        };
        template.check(reset).map_err(|why| bad(&why))?;
        Ok(template)
    }

    fn check(&self, reset: Option<Reset>) -> std::result::Result<(), String> {
        let seqs = self
            .parts
            .iter()
            .filter(|p| matches!(p, Part::Seq { .. }))
            .count();
        if seqs != 1 {
            return Err(format!("it needs exactly one {{seq}}, it has {seqs}"));
        }
        let dates: Vec<&Vec<DatePart>> = self
            .parts
            .iter()
            .filter_map(|p| match p {
                Part::Date(d) => Some(d),
                _ => None,
            })
            .collect();
        match (reset, dates.as_slice()) {
            (None, []) => {}
            (None, _) => {
                return Err("a {date:...} needs a counter that restarts (reset)".into());
            }
            (Some(reset), []) => {
                return Err(format!(
                    "a counter that restarts every {reset} needs the {reset} in a {{date:...}}, \
                     or its IDs repeat"
                ));
            }
            (Some(_), [_, _, ..]) => return Err("at most one {date:...}".into()),
            (Some(reset), [date]) => {
                let has = |p: DatePart| date.contains(&p);
                let year = has(DatePart::Year);
                let fine = match reset {
                    Reset::Year => year,
                    Reset::Month => year && has(DatePart::Month),
                    Reset::Day => {
                        year && (has(DatePart::DayOfYear)
                            || (has(DatePart::Month) && has(DatePart::Day)))
                    }
                };
                if !fine {
                    return Err(format!(
                        "its date is coarser than the {reset}, so its IDs would repeat: a \
                         counter that restarts every {reset} needs {}",
                        match reset {
                            Reset::Year => "%Y",
                            Reset::Month => "%Y and %m",
                            Reset::Day => "%Y, %m and %d (or %Y and %j)",
                        }
                    ));
                }
            }
        }
        // A seq without a width ends where its digits end: what follows must not be one.
        for (i, part) in self.parts.iter().enumerate() {
            if let Part::Seq { radix, width: None } = part {
                let next = match self.parts.get(i + 1) {
                    None => continue,
                    Some(Part::Literal(l)) => l.bytes().next(),
                    Some(_) => None,
                };
                if next.is_none_or(|b| radix.is_digit(b)) {
                    return Err(
                        "a {seq} without a width must end the format or be followed by a \
                         character that is not one of its digits; give it a width ({seq:06})"
                            .into(),
                    );
                }
            }
        }
        Ok(())
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The largest value it can print, if its `{seq}` has a width.
    pub fn max_value(&self) -> Option<i64> {
        self.parts.iter().find_map(|p| match p {
            Part::Seq {
                radix,
                width: Some(w),
            } => {
                let max = (radix.base() as u128).pow(*w as u32) - 1;
                Some(i64::try_from(max).unwrap_or(i64::MAX))
            }
            _ => None,
        })
    }

    /// `InvalidInput` if a counter starting at `first` could not print even its first value.
    pub fn check_first(&self, first: i64) -> Result<()> {
        match self.max_value() {
            Some(max) if first > max => Err(invalid(
                &self.source,
                format!("its width holds values up to {max}, below the first value {first}"),
            )),
            _ if first < 0 => Err(invalid(&self.source, "values are not negative")),
            _ => Ok(()),
        }
    }

    /// The text of the fields fixed for `period` (literals, the date), so that printing a
    /// value costs only its digits.
    pub fn renderer(&self, period: Option<Period>) -> Renderer {
        let mut pieces: Vec<Piece> = Vec::new();
        let mut text = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(l) => text.push_str(l),
                Part::Date(d) => {
                    if let Some(p) = period {
                        write_date(d, p.first_day(), &mut text);
                    }
                }
                Part::Seq { radix, width } => {
                    pieces.push(Piece::Text(std::mem::take(&mut text)));
                    pieces.push(Piece::Seq {
                        radix: *radix,
                        width: *width,
                    });
                }
            }
        }
        pieces.push(Piece::Text(text));
        let len = pieces
            .iter()
            .map(|p| match p {
                Piece::Text(t) => t.len(),
                Piece::Seq { width, .. } => width.unwrap_or(8),
            })
            .sum();
        Renderer {
            pieces,
            len,
            template: self.source.clone(),
        }
    }

    /// `value` printed for `period`.
    pub fn render(&self, period: Option<Period>, value: i64) -> Result<String> {
        self.renderer(period).render(value)
    }

    /// The period's date (its first day, if the template has a date) and the value of `text`,
    /// as printed by this template; `InvalidInput` if it is not one of its IDs. Only the text
    /// the template prints is read (exact widths, no leading zero where it prints none, a
    /// period's first day for a date finer than its reset), so that decoding validates an ID.
    pub fn decode(&self, text: &str) -> Result<(Option<Date>, i64)> {
        let not_ours = || {
            Error::InvalidInput(format!(
                "{text:?} is not an ID of the format {:?}",
                self.source
            ))
        };
        let mut rest = text;
        let mut date = None;
        let mut value = None;
        for part in &self.parts {
            match part {
                Part::Literal(l) => rest = rest.strip_prefix(l.as_str()).ok_or_else(not_ours)?,
                Part::Date(d) => {
                    let width: usize = d.iter().map(|p| p.width()).sum();
                    let (head, tail) = split_at(rest, width).ok_or_else(not_ours)?;
                    date = Some(read_date(d, head).ok_or_else(not_ours)?);
                    rest = tail;
                }
                Part::Seq { radix, width } => {
                    let width = match width {
                        Some(w) => *w,
                        // What follows starts at the first non-digit (checked at parse).
                        None => rest.bytes().take_while(|b| radix.is_digit(*b)).count(),
                    };
                    let (head, tail) = split_at(rest, width).ok_or_else(not_ours)?;
                    let n = radix.decode(head).ok_or_else(not_ours)?;
                    value = Some(i64::try_from(n).map_err(|_| not_ours())?);
                    rest = tail;
                }
            }
        }
        if !rest.is_empty() {
            return Err(not_ours());
        }
        let value = value.ok_or_else(not_ours)?;
        let period = date.zip(self.reset).map(|(d, r)| Period::of(r, d));
        // Fields are read leniently above (any digits, any day); the text counts only if it is
        // what this template prints for what was read.
        if self.render(period, value).ok().as_deref() != Some(text) {
            return Err(not_ours());
        }
        Ok((period.map(Period::first_day), value))
    }
}

impl fmt::Debug for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Template").field(&self.source).finish()
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

fn split_at(s: &str, n: usize) -> Option<(&str, &str)> {
    s.is_char_boundary(n)
        .then(|| s.split_at(n))
        .filter(|_| n <= s.len())
}

/// One `{...}` field.
fn field_part(field: &str) -> std::result::Result<Part, String> {
    let mut words = field.splitn(2, ':');
    let name = words.next().unwrap_or_default();
    let spec = words.next();
    match name {
        "seq" => seq_part(spec.unwrap_or("")),
        "date" => {
            let spec = spec.ok_or("{date} needs a pattern, as {date:%Y%m%d}")?;
            date_part(spec).map(Part::Date)
        }
        other => Err(format!(
            "unknown field {{{other}}}: {{seq}} or {{date:...}}"
        )),
    }
}

fn seq_part(spec: &str) -> std::result::Result<Part, String> {
    let (radix, width) = match spec.split_once(':') {
        Some((r, w)) => (Some(r), Some(w)),
        None if spec.starts_with('0') => (None, Some(spec)),
        None if spec.is_empty() => (None, None),
        None => (Some(spec), None),
    };
    let radix = match radix {
        None => Radix::Decimal,
        Some("base36") => Radix::Base36,
        Some("base62") => Radix::Base62,
        Some(other) => {
            return Err(format!(
                "{{seq:{other}}}: base36 or base62, or a width as 06"
            ));
        }
    };
    let width = match width {
        None => None,
        Some(w) => {
            let n: usize = w
                .strip_prefix('0')
                .and_then(|d| d.parse().ok())
                .filter(|n| (1..=MAX_WIDTH).contains(n))
                .ok_or_else(|| format!("{{seq:{w}}}: a width is written 01 to {MAX_WIDTH:02}"))?;
            Some(n)
        }
    };
    Ok(Part::Seq { radix, width })
}

fn date_part(spec: &str) -> std::result::Result<Vec<DatePart>, String> {
    let mut out = Vec::new();
    let mut chars = spec.chars();
    while let Some(c) = chars.next() {
        out.push(match c {
            '%' => match chars.next() {
                Some('Y') => DatePart::Year,
                // A row per period is created by whichever node's clock reaches it: 2126's
                // would print 2026's IDs again.
                Some('y') => {
                    return Err(
                        "%y repeats every hundred years (2126 would print 2026's IDs again): \
                         write %Y"
                            .into(),
                    );
                }
                Some('m') => DatePart::Month,
                Some('d') => DatePart::Day,
                Some('j') => DatePart::DayOfYear,
                Some(other) => return Err(format!("%{other} in a date: %Y, %m, %d or %j")),
                None => return Err("a date ends with %".into()),
            },
            c if c.is_ascii_digit() => return Err(format!("a digit ({c}) in a date's pattern")),
            c => DatePart::Char(c),
        });
    }
    if out.is_empty() {
        return Err("an empty date".into());
    }
    Ok(out)
}

fn write_date(parts: &[DatePart], d: Date, out: &mut String) {
    use std::fmt::Write;
    for p in parts {
        let _ = match p {
            DatePart::Year => write!(out, "{:04}", d.year()),
            DatePart::Month => write!(out, "{:02}", d.month()),
            DatePart::Day => write!(out, "{:02}", d.day()),
            DatePart::DayOfYear => write!(out, "{:03}", d.day_of_year()),
            DatePart::Char(c) => write!(out, "{c}"),
        };
    }
}

fn read_date(parts: &[DatePart], text: &str) -> Option<Date> {
    let (mut year, mut month, mut day, mut yday) = (None, None, None, None);
    let mut rest = text;
    for p in parts {
        let (head, tail) = split_at(rest, p.width())?;
        rest = tail;
        let num = || {
            head.parse::<i16>()
                .ok()
                .filter(|_| head.bytes().all(|b| b.is_ascii_digit()))
        };
        match p {
            DatePart::Year => year = Some(num()?),
            DatePart::Month => month = Some(num()? as i8),
            DatePart::Day => day = Some(num()? as i8),
            DatePart::DayOfYear => yday = Some(num()?),
            DatePart::Char(c) => {
                if !head.starts_with(*c) {
                    return None;
                }
            }
        }
    }
    let year = year?;
    match (month, day, yday) {
        (_, _, Some(yday)) => Date::new(year, 1, 1)
            .ok()?
            .with()
            .day_of_year(yday)
            .build()
            .ok(),
        (Some(m), Some(d), None) => Date::new(year, m, d).ok(),
        (Some(m), None, None) => Date::new(year, m, 1).ok(),
        (None, None, None) => Date::new(year, 1, 1).ok(),
        _ => None,
    }
}

/// A template with its fields for one period already printed: printing a value writes only
/// its digits.
#[derive(Clone, Debug)]
pub struct Renderer {
    pieces: Vec<Piece>,
    len: usize,
    template: String,
}

#[derive(Clone, Debug)]
enum Piece {
    Text(String),
    Seq { radix: Radix, width: Option<usize> },
}

impl Renderer {
    /// `value` printed; an error if it is negative or does not fit its width (a wider or cut
    /// ID is never printed).
    pub fn render(&self, value: i64) -> Result<String> {
        let mut out = String::with_capacity(self.len);
        self.render_into(value, &mut out)?;
        Ok(out)
    }

    /// [`render`](Self::render) into `out`.
    pub fn render_into(&self, value: i64, out: &mut String) -> Result<()> {
        let n = u64::try_from(value).map_err(|_| {
            Error::InvalidInput(format!("value {value} is negative: it has no printed form"))
        })?;
        for piece in &self.pieces {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Seq { radix, width } => {
                    let (w, max) = width.map_or((0, usize::MAX), |w| (w, w));
                    if !radix.encode_within(n, w, max, out) {
                        return Err(overflow(&self.template, value, w));
                    }
                }
            }
        }
        Ok(())
    }
}

/// The error of a value that no longer fits its fixed width.
pub fn overflow(template: &str, value: i64, width: usize) -> Error {
    Error::Exhausted(format!(
        "value {value} does not fit the {width} digits of the format {template:?}: a wider or cut \
         ID is never issued"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(key: &str) -> Option<Period> {
        Some(Period::from_key(Reset::Day, key).unwrap())
    }

    #[test]
    fn an_order_number_prints_and_reads_back() {
        let t = Template::parse("ORD{date:%Y%m%d}{seq:06}", Some(Reset::Day)).unwrap();
        assert_eq!(t.render(day("20261126"), 123).unwrap(), "ORD20261126000123");
        assert_eq!(t.render(day("20261127"), 1).unwrap(), "ORD20261127000001");
        let (date, value) = t.decode("ORD20261126000123").unwrap();
        assert_eq!(
            (date.unwrap().to_string(), value),
            ("2026-11-26".into(), 123)
        );
        assert_eq!(t.max_value(), Some(999_999));
        let e = t.render(day("20261126"), 1_000_000).unwrap_err();
        assert!(
            matches!(&e, Error::Exhausted(m) if m.contains("6 digits")),
            "{e}"
        );
    }

    #[test]
    fn bases_and_widths_round_trip() {
        for source in [
            "Q{seq:base36}",
            "{seq:base62}",
            "X{seq:base36:08}Y",
            "{seq}",
            "n{seq}-z",
            "{{{seq:04}}}",
        ] {
            let t = Template::parse(source, None).unwrap();
            for v in [0, 1, 35, 36, 61, 62, 1295, 9999] {
                let s = t.render(None, v).unwrap();
                assert_eq!(t.decode(&s).unwrap(), (None, v), "{source}: {s}");
            }
        }
        assert_eq!(
            Template::parse("{{{seq:04}}}", None)
                .unwrap()
                .render(None, 7)
                .unwrap(),
            "{0007}"
        );
    }

    #[test]
    fn periods_of_every_kind_print_their_date() {
        let m = Template::parse("M{date:%Y-%m}/{seq}", Some(Reset::Month)).unwrap();
        let p = Some(Period::from_key(Reset::Month, "202602").unwrap());
        assert_eq!(m.render(p, 5).unwrap(), "M2026-02/5");
        assert_eq!(m.decode("M2026-02/5").unwrap().1, 5);
        let y = Template::parse("{date:%Y}{seq:04}", Some(Reset::Year)).unwrap();
        assert_eq!(
            y.render(Some(Period::from_key(Reset::Year, "2026").unwrap()), 42)
                .unwrap(),
            "20260042"
        );
        let j = Template::parse("{date:%Y%j}.{seq}", Some(Reset::Day)).unwrap();
        assert_eq!(j.render(day("20261126"), 9).unwrap(), "2026330.9");
        assert_eq!(
            j.decode("2026330.9").unwrap().0.unwrap().to_string(),
            "2026-11-26"
        );
    }

    #[test]
    fn what_cannot_be_read_back_or_would_repeat_is_refused() {
        let refused = |source: &str, reset: Option<Reset>, why: &str| {
            let e = Template::parse(source, reset).unwrap_err();
            assert!(
                matches!(&e, Error::InvalidInput(m) if m.contains(why)),
                "{source}: {e}"
            );
        };
        refused(
            "ORD{date:%Y%m}{seq:06}",
            Some(Reset::Day),
            "coarser than the day",
        );
        refused("ORD{seq:06}", Some(Reset::Day), "needs the day");
        refused("{date:%Y}{seq}", None, "needs a counter that restarts");
        refused("{seq}{seq}", None, "exactly one {seq}");
        refused("ID", None, "exactly one {seq}, it has 0");
        refused("{seq}7", None, "without a width");
        refused("{seq}{date:%Y}", Some(Reset::Year), "without a width");
        refused("{seq:base36}a", None, "without a width");
        refused("{seq:7}", None, "base36 or base62");
        refused("{seq:00}", None, "01 to 19");
        refused("{seq:020}", None, "01 to 19");
        refused("{seq:base16}", None, "base36 or base62");
        refused("{date:%H}{seq}", Some(Reset::Day), "%H in a date");
        // Two digits of the year repeat every hundred years (issue 32).
        refused("{date:%y%m%d}{seq}", Some(Reset::Day), "%y repeats");
        refused("{date:%y}{seq:04}", Some(Reset::Year), "%y repeats");
        refused("{date:%Y-%y}{seq:04}", Some(Reset::Year), "%y repeats");
        refused("{date:%Y1}{seq}", Some(Reset::Year), "a digit");
        refused("{nope}", None, "unknown field");
        refused("{seq", None, "without its '}'");
        refused("a}b{seq}", None, "without its '{'");
        // A template holds its first value.
        let t = Template::parse("{seq:03}", None).unwrap();
        assert!(t.check_first(999).is_ok());
        assert!(
            t.check_first(1000)
                .unwrap_err()
                .to_string()
                .contains("up to 999")
        );
    }

    /// Issue 32: decode validates an ID, so it reads only the text the template prints.
    #[test]
    fn only_the_text_a_template_prints_is_decoded() {
        let check = |source: &str, reset: Option<Reset>, text: &str, expect: Option<i64>| {
            let t = Template::parse(source, reset).unwrap();
            let got = t.decode(text);
            assert_eq!(
                got.as_ref().ok().map(|d| d.1),
                expect,
                "{source} {text}: {got:?}"
            );
            if let Ok((date, value)) = got {
                let period = date.zip(reset).map(|(d, r)| Period::of(r, d));
                assert_eq!(t.render(period, value).unwrap(), text, "{source}");
            }
        };
        let day = Some(Reset::Day);
        check("N{date:%Y%m%d}-{seq:02}", day, "N20261127-01", Some(1));
        check("N{date:%Y%m%d}-{seq:03}", day, "N20261127-01", None);
        check("N{date:%Y%m%d}-{seq}", day, "N20261127-1", Some(1));
        check("N{date:%Y%m%d}-{seq}", day, "N20261127-01", None);
        check("N{date:%Y%m%d}-{seq}", day, "N20261127-0", Some(0));
        check("N{date:%Y%m%d}-{seq}", day, "N20261127-00", None);
        // A monthly counter prints the first of its month, never another day.
        let month = Some(Reset::Month);
        check("M{date:%Y%m%d}{seq:04}", month, "M202611010007", Some(7));
        check("M{date:%Y%m%d}{seq:04}", month, "M202611150007", None);
        check(
            "Y{date:%Y%m}{seq:04}",
            Some(Reset::Year),
            "Y2026010007",
            Some(7),
        );
        check(
            "Y{date:%Y%m}{seq:04}",
            Some(Reset::Year),
            "Y2026050007",
            None,
        );
        check("{date:%Y%j}.{seq}", day, "2026330.9", Some(9));
        check("{date:%Y%j}.{seq}", day, "2026000.9", None);
        // Digits without a width have no leading zero; with one, exactly that many.
        check("{seq:base62}", None, "zz", Some(3843));
        check("{seq:base62}", None, "0zz", None);
        check("{seq:base36}", None, "00zz", None);
        check("{seq:base36:04}", None, "00zz", Some(1295));
        check("{seq:base36:04}", None, "0zz", None);
        check("{seq:base36:04}", None, "000zz", None);
        check("{seq}", None, "0", Some(0));
        check("{seq}", None, "+7", None);
        check("{seq}", None, "007", None);
    }

    #[test]
    fn text_of_another_format_is_not_decoded() {
        let t = Template::parse("ORD{date:%Y%m%d}{seq:06}", Some(Reset::Day)).unwrap();
        for bad in [
            "ORD2026112600012",
            "ORD20261126000123X",
            "XRD20261126000123",
            "ORD20261131000123",
            "ORD2026112600012a",
            "",
        ] {
            assert!(t.decode(bad).is_err(), "{bad}");
        }
    }
}
