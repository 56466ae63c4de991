//! Go-style durations (`10s`, `1m30s`, `500ms`, `2h`) as kubelet flags and the
//! KubeletConfiguration file spell them (Go's `time.ParseDuration` and `metav1.Duration`).

use std::time::Duration;

/// Parses a Go duration: a sequence of `<number><unit>` with units `ns`, `us`/`µs`, `ms`, `s`,
/// `m`, `h` (Go's `time.ParseDuration`; a bare `0` is zero). Used by the duration flags and the
/// duration fields of the KubeletConfiguration file.
///
/// Errors: text that is not such a sequence (a number without a unit, an unknown unit, empty).
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = s;
    if rest.is_empty() {
        return Err(format!("invalid duration {s:?}"));
    }
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("missing unit in duration {s:?}"))?;
        let (num, after) = rest.split_at(num_end);
        let n: f64 = num.parse().map_err(|_| format!("invalid duration {s:?}"))?;
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_end);
        let mult = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(format!("unknown unit {unit:?} in duration {s:?}")),
        };
        total += n * mult;
        rest = after;
    }
    Ok(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_go_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_go_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(
            parse_go_duration("500ms").unwrap(),
            Duration::from_millis(500)
        );
        assert!(parse_go_duration("10").is_err());
        assert!(parse_go_duration("5x").is_err());
    }

    #[test]
    fn go_formatting_parses_back() {
        for d in [0, 1, 90, 300, 3600 * 168] {
            let d = Duration::from_secs(d);
            assert_eq!(parse_go_duration(&crate::time::go_duration(d)).unwrap(), d);
        }
    }
}
