//! Numbers: the grammar state of a number being lexed, and the fast
//! conversion of the common cases.

use serde_json::Number;

/// Where the lexer is inside a number (JSON grammar).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Num {
    /// Nothing yet.
    Start,
    /// `-`
    Minus,
    /// `0` or `-0`
    Zero,
    /// Integer digits, not starting with 0.
    Int,
    /// `.`
    Dot,
    /// Fraction digits.
    Frac,
    /// `e` or `E`
    Exp,
    /// Exponent sign.
    ExpSign,
    /// Exponent digits.
    ExpDigits,
}

impl Num {
    /// Whether the number text so far is a complete JSON number.
    pub(super) fn is_complete(self) -> bool {
        matches!(self, Num::Zero | Num::Int | Num::Frac | Num::ExpDigits)
    }
}

/// Exact powers of ten representable in an `f64`.
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// Converts a (grammatically valid) JSON number the way `serde_json` does,
/// for the common cases, without going through its parser; `None` for the
/// rest, which the caller hands to `serde_json`.
///
/// Integers become `u64` (non-negative) or `i64` (negative), as in
/// `serde_json`. A number with a fraction or exponent becomes an `f64`; the
/// fast path only takes those whose decimal significand is below 2^53 and
/// whose decimal exponent is within ±22: then both the significand and the
/// power of ten are exact `f64`s and one IEEE multiplication or division
/// gives the correctly rounded result, which is what `serde_json` computes
/// too (with or without its `float_roundtrip` feature).
#[inline]
pub(super) fn fast_number(text: &str) -> Option<Number> {
    let bytes = text.as_bytes();
    let len = bytes.len();
    let negative = bytes.first() == Some(&b'-');
    let mut i = usize::from(negative);
    let mut significand: u64 = 0;
    let mut digits = 0;
    let mut exponent: i32 = 0;
    while i < len && bytes[i].is_ascii_digit() {
        significand = significand * 10 + u64::from(bytes[i] - b'0');
        digits += 1;
        if digits > 18 {
            return None;
        }
        i += 1;
    }
    if i == len {
        return if !negative {
            Some(Number::from(significand))
        } else if significand == 0 {
            // `-0` is an f64 in serde_json.
            None
        } else {
            // At most 18 digits: the negation fits in an i64.
            i64::try_from(significand).ok().map(|m| Number::from(-m))
        };
    }
    if bytes[i] == b'.' {
        i += 1;
        while i < len && bytes[i].is_ascii_digit() {
            significand = significand * 10 + u64::from(bytes[i] - b'0');
            digits += 1;
            if digits > 18 {
                return None;
            }
            exponent -= 1;
            i += 1;
        }
    }
    if i < len && (bytes[i] == b'e' || bytes[i] == b'E') {
        i += 1;
        let exp_negative = bytes.get(i) == Some(&b'-');
        if matches!(bytes.get(i), Some(b'-' | b'+')) {
            i += 1;
        }
        let mut exp: i32 = 0;
        while i < len && bytes[i].is_ascii_digit() {
            exp = exp * 10 + i32::from(bytes[i] - b'0');
            if exp > 1000 {
                return None;
            }
            i += 1;
        }
        exponent += if exp_negative { -exp } else { exp };
    }
    if i != len || significand >= 1 << 53 {
        return None;
    }
    let pow = *POW10.get(exponent.unsigned_abs() as usize)?;
    let magnitude = significand as f64;
    let f = if exponent >= 0 {
        magnitude * pow
    } else {
        magnitude / pow
    };
    Number::from_f64(if negative { -f } else { f })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn serde_number(text: &str) -> Option<Number> {
        text.parse::<Number>().ok()
    }

    #[test]
    fn fast_number_matches_serde_json_on_edge_cases() {
        for text in [
            "0",
            "-0",
            "1",
            "-1",
            "0.0",
            "-0.0",
            "1.5",
            "-0.5e-10",
            "1E+2",
            "1e2",
            "1e-2",
            "1e22",
            "1e23",
            "1e-22",
            "1e-23",
            "9007199254740991",
            "9007199254740992",
            "9007199254740993",
            "999999999999999999",
            "9999999999999999999",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775808",
            "-9223372036854775809",
            "0.1",
            "0.2",
            "0.30000000000000004",
            "123456.789",
            "1.7976931348623157e308",
            "5e-324",
            "2.2250738585072014e-308",
            "0.000001",
            "100e-2",
            "4.35",
            "142857.14285714287",
            "0e999",
            "0.0000000000000000000000001",
            "1.0e0",
            "10",
            "-10.25E-3",
        ] {
            if let Some(fast) = fast_number(text) {
                assert_eq!(Some(fast), serde_number(text), "{text}");
            }
        }
        // The common cases do take the fast path.
        for text in ["0", "42", "-7", "0.5", "-0.5e-10", "1E+2", "3.14159"] {
            assert!(fast_number(text).is_some(), "{text}");
        }
    }

    fn number_text() -> impl Strategy<Value = String> {
        (
            any::<bool>(),
            prop_oneof![Just("0".to_owned()), "[1-9][0-9]{0,20}"],
            prop::option::of("[0-9]{1,20}"),
            prop::option::of(("[eE]", "[+-]?", "[0-9]{1,3}")),
        )
            .prop_map(|(neg, int, frac, exp)| {
                let mut s = String::new();
                if neg {
                    s.push('-');
                }
                s.push_str(&int);
                if let Some(frac) = frac {
                    s.push('.');
                    s.push_str(&frac);
                }
                if let Some((e, sign, digits)) = exp {
                    s.push_str(&e);
                    s.push_str(&sign);
                    s.push_str(&digits);
                }
                s
            })
    }

    proptest! {
        #[test]
        fn fast_number_matches_serde_json(text in number_text()) {
            if let Some(fast) = fast_number(&text) {
                prop_assert_eq!(Some(fast), serde_number(&text));
            }
        }

        #[test]
        fn fast_number_matches_serde_json_on_floats(f in any::<f64>().prop_filter("finite", |f| f.is_finite())) {
            for text in [serde_json::to_string(&f).unwrap_or_default(), format!("{f:e}"), format!("{f:.3}")] {
                if let Some(fast) = fast_number(&text) {
                    prop_assert_eq!(Some(fast), serde_number(&text), "{}", text);
                }
            }
        }
    }
}
