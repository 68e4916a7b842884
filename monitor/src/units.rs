//! Parsing and formatting of durations, byte sizes, UTC times and Markdown code spans: the one
//! place for how montrace writes a figure. Pure functions.
use std::time::Duration;

/// Longest duration montrace takes (about 31.7 years): beyond it, time arithmetic overflows.
const MAX_DURATION_S: f64 = 1e9;

/// Parses `500ms`, `2s`, `1.5s`, `5m`, `1h`, `250us`. A bare number is refused: `--interval 100`
/// would mean 100 seconds to one reader and 100 ms to another.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration: use e.g. 500ms, 2s, 1.5m, 1h"))?;
    let seconds = match unit.trim() {
        "" => {
            return Err(format!(
            "`{text}` has no unit: write e.g. {number}ms or {number}s (units: ns, us, ms, s, m, h)"
        ))
        }
        "s" | "sec" => value,
        "ms" => value / 1e3,
        "us" | "µs" => value / 1e6,
        "ns" => value / 1e9,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        other => {
            return Err(format!(
                "unknown unit `{other}` in `{text}`: use ns, us, ms, s, m or h"
            ))
        }
    };
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(format!("`{text}` is not a valid duration"));
    }
    if seconds > MAX_DURATION_S {
        return Err(format!(
            "`{text}` is too long: montrace takes durations up to {MAX_DURATION_S:.0}s"
        ));
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("`{text}` is not a valid duration"))
}

/// Parses `4096`, `64KiB`, `8MiB`, `1GiB` (also KB/MB/GB as binary multiples, K/M/G).
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a size: use e.g. 8MiB, 512KiB, 1GiB"))?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => {
            return Err(format!(
                "unknown unit `{other}` in `{text}`: use B, KiB, MiB or GiB"
            ))
        }
    };
    value
        .checked_mul(scale)
        .ok_or_else(|| format!("`{text}` is too large"))
}

/// `1.5 GiB`, `200.0 MiB`, `512 B`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// `512 B`, `1.5 KiB`, `513.3 MiB`, `1.13 GiB`: two decimals below 10 of a unit, so that a
/// gigabyte figure moves visibly with a few percent.
pub fn format_bytes_signif(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes.max(0.0);
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{value:.0} B"),
        _ if value < 10.0 => format!("{value:.2} {}", UNITS[unit]),
        _ => format!("{value:.1} {}", UNITS[unit]),
    }
}

/// Seconds with millisecond precision: `12.345s`.
pub fn format_seconds_ns(ns: u64) -> String {
    format!("{:.3}s", ns as f64 / 1e9)
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn utc_parts(unix_ns: i64) -> (i64, u32, u32, i64, i64, i64, i64) {
    let secs = unix_ns.div_euclid(1_000_000_000);
    let nanos = unix_ns.rem_euclid(1_000_000_000);
    let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
    let sod = secs.rem_euclid(86_400);
    (y, mo, d, sod / 3600, sod % 3600 / 60, sod % 60, nanos)
}

/// RFC 3339 in UTC with microseconds: `2026-11-22T05:47:27.123456Z`.
pub fn rfc3339(unix_ns: i64) -> String {
    let (y, mo, d, h, mi, s, ns) = utc_parts(unix_ns);
    format!(
        "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{:06}Z",
        ns / 1000
    )
}

/// Parses what [`rfc3339`] writes (UTC, `Z`, any number of fraction digits) back to ns since the
/// Unix epoch.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, mo, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut t = hms.split(':').map(|p| p.parse::<i64>().ok());
    let (h, mi, s) = (t.next()??, t.next()??, t.next()??);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&day) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let digits: String = fraction.chars().take(9).collect();
    if !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let nanos = format!("{digits:0<9}").parse::<i64>().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm), the inverse of civil_from_days.
    let yy = if mo <= 2 { y - 1 } else { y };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let doy = (153 * (mo + if mo > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 86_400 + h * 3600 + mi * 60 + s) * 1_000_000_000) + nanos)
}

/// Compact UTC stamp for directory names: `20261122T054727Z`.
pub fn compact_utc(unix_ns: i64) -> String {
    let (y, mo, d, h, mi, s, _) = utc_parts(unix_ns);
    format!("{y:04}{mo:02}{d:02}T{h:02}{mi:02}{s:02}Z")
}

/// `text` as a Markdown code span, whatever backticks it holds.
pub fn md_code(text: &str) -> String {
    let text = text.replace(['\n', '\r'], " ");
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{text}{pad}{fence}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md_code_fences_any_backticks() {
        assert_eq!(md_code("ls -l"), "`ls -l`");
        assert_eq!(md_code("echo `date`"), "`` echo `date` ``");
        assert_eq!(md_code("a``b"), "```a``b```");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert!(parse_duration("1.5").unwrap_err().contains("1.5ms or 1.5s"));
        assert!(parse_duration("100").unwrap_err().contains("has no unit"));
        assert!(parse_duration("99999999999999999999s")
            .unwrap_err()
            .contains("too long"));
        assert!(parse_duration("1e400s").is_err());
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("50us").unwrap(), Duration::from_micros(50));
        assert!(parse_duration("fast")
            .unwrap_err()
            .contains("not a duration"));
        assert!(parse_duration("3 weeks")
            .unwrap_err()
            .contains("unknown unit"));
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_bytes("8MiB").unwrap(), 8 << 20);
        assert_eq!(parse_bytes("64k").unwrap(), 64 << 10);
        assert_eq!(parse_bytes("1GiB").unwrap(), 1 << 30);
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("99999999999999999999GiB").is_err());
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(200 << 20), "200.0 MiB");
        assert_eq!(format_bytes(3 << 29), "1.5 GiB");
    }

    #[test]
    fn utc_times() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000000Z");
        for t in [
            0,
            1_795_513_066_751_269_000,
            951_782_400_000_000_000,
            -86_400_000_000_000,
        ] {
            assert_eq!(parse_rfc3339(&rfc3339(t)), Some(t), "{}", rfc3339(t));
        }
        assert_eq!(
            parse_rfc3339("2026-11-24T09:53:00Z"),
            parse_rfc3339("2026-11-24T09:53:00.000Z")
        );
        assert_eq!(parse_rfc3339("2026-13-01T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("yesterday"), None);
        // 2026-11-22T05:47:27.5Z
        let t = 1_795_326_447_500_000_000;
        assert_eq!(rfc3339(t), "2026-11-22T05:47:27.500000Z");
        assert_eq!(compact_utc(t), "20261122T054727Z");
        // Leap day and before the epoch.
        assert_eq!(
            rfc3339(951_782_400_000_000_000),
            "2000-02-29T00:00:00.000000Z"
        );
        assert_eq!(rfc3339(-1_000_000_000), "1969-12-31T23:59:59.000000Z");
    }
}
