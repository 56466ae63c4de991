//! Resource quantities as the API server prints them (k8s.io/apimachinery `resource.Quantity`):
//! enough of the canonical formatting to report node capacity and allocatable exactly like the
//! Go kubelet (`cpu: "2"`, `memory: "24563532Ki"`, `ephemeral-storage: "242484262267"`).

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Formats a byte count in the canonical binary-SI form the Go kubelet uses for memory and
/// storage: the largest of `Ei`, `Pi`, `Ti`, `Gi`, `Mi`, `Ki` that divides it exactly, else the
/// plain number of bytes.
pub fn binary_si(bytes: u64) -> Quantity {
    const UNITS: [(&str, u64); 6] = [
        ("Ei", 1 << 60),
        ("Pi", 1 << 50),
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ];
    if bytes == 0 {
        return Quantity("0".into());
    }
    for (suffix, size) in UNITS {
        if bytes % size == 0 {
            return Quantity(format!("{}{}", bytes / size, suffix));
        }
    }
    Quantity(bytes.to_string())
}

/// Formats a CPU amount given in millicores in canonical decimal-SI form: whole cores print as an
/// integer (`"2"`), others with the `m` suffix (`"1500m"`).
pub fn cpu_millis(millis: u64) -> Quantity {
    if millis % 1000 == 0 {
        Quantity((millis / 1000).to_string())
    } else {
        Quantity(format!("{millis}m"))
    }
}

/// Errors from [`parse`].
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum QuantityError {
    /// The text is not a Kubernetes quantity (`<number><suffix>`).
    #[error("invalid quantity {0:?}")]
    Invalid(String),
}

/// Parses a quantity into its value scaled by 1000 (milli-units), rounding up as
/// `Quantity.MilliValue()` does. `"100m"` → 100, `"2"` → 2000, `"1Gi"` → 1073741824000.
pub fn parse_milli(q: &str) -> Result<i128, QuantityError> {
    let q = q.trim();
    let bad = || QuantityError::Invalid(q.to_string());
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    // Exponent forms like 1e3 / 1E3.
    let (num, suffix, exp10): (&str, &str, i32) =
        if let Some(rest) = suffix.strip_prefix(['e', 'E']) {
            (num, "", rest.parse::<i32>().map_err(|_| bad())?)
        } else {
            (num, suffix, 0)
        };
    if num.is_empty() {
        return Err(bad());
    }
    let (mult_num, mult_den): (i128, i128) = match suffix {
        "" => (1, 1),
        "n" => (1, 1_000_000_000),
        "u" => (1, 1_000_000),
        "m" => (1, 1000),
        "k" => (1000, 1),
        "M" => (1_000_000, 1),
        "G" => (1_000_000_000, 1),
        "T" => (1_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000, 1),
        "E" => (1_000_000_000_000_000_000, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        _ => return Err(bad()),
    };
    let neg = num.starts_with('-');
    let digits = num.trim_start_matches(['+', '-']);
    let (int_part, frac_part) = digits.split_once('.').unwrap_or((digits, ""));
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(bad());
    }
    if !int_part.chars().all(|c| c.is_ascii_digit())
        || !frac_part.chars().all(|c| c.is_ascii_digit())
    {
        return Err(bad());
    }
    // value = (int.frac) * 10^exp10 * mult_num / mult_den * 1000, rounded up.
    let mut numer: i128 = format!("{int_part}{frac_part}")
        .parse::<i128>()
        .unwrap_or(0);
    let mut denom: i128 = 10i128.pow(frac_part.len() as u32);
    if exp10 >= 0 {
        numer = numer.saturating_mul(10i128.pow(exp10 as u32));
    } else {
        denom = denom.saturating_mul(10i128.pow((-exp10) as u32));
    }
    numer = numer.saturating_mul(mult_num).saturating_mul(1000);
    denom = denom.saturating_mul(mult_den);
    let mut v = numer / denom;
    if numer % denom != 0 {
        v += 1;
    }
    Ok(if neg { -v } else { v })
}

/// Parses a quantity into whole units, rounding up (`Quantity.Value()`): `"1Gi"` → 1073741824,
/// `"100m"` → 1.
pub fn parse_value(q: &str) -> Result<i128, QuantityError> {
    let m = parse_milli(q)?;
    Ok(if m >= 0 { (m + 999) / 1000 } else { m / 1000 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_si_uses_largest_exact_suffix() {
        assert_eq!(binary_si(24563532 * 1024).0, "24563532Ki");
        assert_eq!(binary_si(1 << 30).0, "1Gi");
        assert_eq!(binary_si(100 << 20).0, "100Mi");
        assert_eq!(binary_si(1000).0, "1000");
        assert_eq!(binary_si(0).0, "0");
    }

    #[test]
    fn cpu_prints_whole_cores_without_suffix() {
        assert_eq!(cpu_millis(2000).0, "2");
        assert_eq!(cpu_millis(1500).0, "1500m");
    }

    #[test]
    fn parses_common_quantities() {
        assert_eq!(parse_milli("100m").unwrap(), 100);
        assert_eq!(parse_milli("2").unwrap(), 2000);
        assert_eq!(parse_milli("0.5").unwrap(), 500);
        assert_eq!(parse_value("1Gi").unwrap(), 1 << 30);
        assert_eq!(parse_value("128Mi").unwrap(), 128 << 20);
        assert_eq!(parse_value("1e3").unwrap(), 1000);
        assert_eq!(parse_value("1k").unwrap(), 1000);
        assert!(parse_milli("abc").is_err());
        assert!(parse_milli("1Qi").is_err());
    }
}
