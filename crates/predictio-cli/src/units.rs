//! Sizes and byte ranges as people type them: `4096`, `64K`, `1.5G`,
//! `0..64M`, `1G+256M`.

use anyhow::{Context, Result, bail};

/// Parses a size: a number with an optional binary suffix (K, M, G, T, with
/// or without `iB`/`B`).
pub fn parse_size(text: &str) -> Result<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, suffix) = t.split_at(split);
    if number.is_empty() {
        bail!("{text:?} is not a size (expected e.g. 4096, 64K, 16M, 1.5G)");
    }
    let shift = match suffix.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        other => bail!("unknown size suffix {other:?} in {text:?} (use K, M, G or T)"),
    };
    let bytes = if number.contains('.') {
        let value: f64 = number.parse().with_context(|| format!("{text:?} is not a size"))?;
        (value * (1u64 << shift) as f64).round()
    } else {
        let value: u64 = number.parse().with_context(|| format!("{text:?} is not a size"))?;
        return value.checked_mul(1 << shift).with_context(|| format!("{text:?} is too large"));
    };
    if !(0.0..1.8e19).contains(&bytes) {
        bail!("{text:?} is out of range");
    }
    Ok(bytes as u64)
}

/// `text` safe to print on a terminal: control characters (an escape
/// sequence in a file or tensor name, a newline in a recorded path) are
/// shown escaped (`\u{1b}`, `\n`), so that a name written by someone else
/// cannot move the cursor, retitle the terminal or forge an output line.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A path as text for people and JSON: bytes that are not UTF-8 are shown
/// as `\xNN` (rather than lost to U+FFFD, which would make two names one),
/// and control characters escaped as in [`printable`].
pub fn path_text(path: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::new();
    for chunk in path.as_os_str().as_bytes().utf8_chunks() {
        out.push_str(&printable(chunk.valid()));
        for byte in chunk.invalid() {
            out.push_str(&format!("\\x{byte:02x}"));
        }
    }
    out
}

/// The longest duration any option takes: a year.
const MAX_SECONDS: f64 = 365.0 * 86_400.0;

/// Parses a duration in seconds (`0.5`, `120`) for a command-line option:
/// a finite number from 0 to a year. `nan`, `inf`, `1e30` and negative
/// numbers are refused with a message, never a panic or an endless wait.
pub fn parse_seconds(text: &str) -> Result<std::time::Duration, String> {
    let secs: f64 = text.trim().parse().map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !secs.is_finite() || !(0.0..=MAX_SECONDS).contains(&secs) {
        return Err(format!("{text} seconds is out of range (0 to {MAX_SECONDS:.0}, a year)"));
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

/// A byte range `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteSpan {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
}

/// Parses `START..END` or `START+LEN` (sizes as in [`parse_size`]); `START..`
/// means to the end of the file (`u64::MAX` until clamped).
pub fn parse_range(text: &str) -> Result<ByteSpan> {
    let span = if let Some((a, b)) = text.split_once("..") {
        let start = parse_size(a).with_context(|| format!("in range {text:?}"))?;
        let end =
            if b.trim().is_empty() { u64::MAX } else { parse_end(b).with_context(|| format!("in range {text:?}"))? };
        ByteSpan { start, end }
    } else if let Some((a, b)) = text.split_once('+') {
        let start = parse_size(a).with_context(|| format!("in range {text:?}"))?;
        let len = parse_size(b).with_context(|| format!("in range {text:?}"))?;
        ByteSpan { start, end: start.checked_add(len).context("range end overflows")? }
    } else {
        bail!("{text:?} is not a range (expected START..END or START+LEN, e.g. 0..64M or 1G+256M)");
    };
    if span.end <= span.start {
        bail!("range {text:?} is empty or ends before it starts");
    }
    Ok(span)
}

/// An end bound may itself be `A+B` (e.g. `1G..1G+256M`).
fn parse_end(text: &str) -> Result<u64> {
    match text.split_once('+') {
        Some((a, b)) => parse_size(a)?.checked_add(parse_size(b)?).context("range end overflows"),
        None => parse_size(text),
    }
}

/// Formats bytes for people: `256.0 MiB`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} B") } else { format!("{value:.1} {}", UNITS[unit]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cannot_drive_the_terminal() {
        assert_eq!(printable("plain/name"), "plain/name");
        assert_eq!(printable("a\x1b]0;owned\x07b\nc"), "a\\u{1b}]0;owned\\u{7}b\\nc");
        use std::os::unix::ffi::OsStrExt;
        let path = std::path::Path::new(std::ffi::OsStr::from_bytes(b"/tmp/a\xffb\x1b"));
        assert_eq!(path_text(path), "/tmp/a\\xffb\\u{1b}");
    }

    #[test]
    fn seconds_are_finite_and_bounded() {
        assert_eq!(parse_seconds("0.5"), Ok(std::time::Duration::from_millis(500)));
        assert_eq!(parse_seconds("120"), Ok(std::time::Duration::from_secs(120)));
        for bad in ["nan", "NaN", "inf", "-inf", "1e30", "-1", "", "x"] {
            assert!(parse_seconds(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64K").unwrap(), 64 << 10);
        assert_eq!(parse_size("16MiB").unwrap(), 16 << 20);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn ranges() {
        assert_eq!(parse_range("0..64M").unwrap(), ByteSpan { start: 0, end: 64 << 20 });
        assert_eq!(parse_range("1G+256M").unwrap(), ByteSpan { start: 1 << 30, end: (1 << 30) + (256 << 20) });
        assert_eq!(parse_range("1G..1G+4K").unwrap(), ByteSpan { start: 1 << 30, end: (1 << 30) + 4096 });
        assert_eq!(parse_range("4K..").unwrap().end, u64::MAX);
        assert!(parse_range("5..5").is_err());
        assert!(parse_range("9..2").is_err());
        assert!(parse_range("abc").is_err());
    }
}
