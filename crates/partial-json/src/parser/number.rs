//! Numbers: the grammar state of a number being lexed, and the fast
//! conversion of the common cases.

use std::sync::OnceLock;

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

/// The most digits (integer and fraction parts together) of a number
/// converted without `serde_json`: the significand fits in a `u64`.
const MAX_DIGITS: u32 = 18;

/// The value of exponent digits is not counted beyond this.
const EXPONENT_LIMIT: u32 = 100_000;

/// What the fast conversion needs of a number, gathered while it is lexed,
/// fragment by fragment (so a complete number is not scanned again).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Digits {
    /// A leading `-`.
    negative: bool,
    /// The digits of the integer and fraction parts read as one integer
    /// (meaningful while `count` is at most [`MAX_DIGITS`]).
    significand: u64,
    /// How many digits the integer and fraction parts have.
    count: u32,
    /// How many of them follow the decimal point.
    fraction: u32,
    /// The value of the exponent's digits (at most [`EXPONENT_LIMIT`]).
    exponent: u32,
    /// The exponent has a `-` sign.
    exponent_negative: bool,
}

impl Digits {
    /// Lexes the number characters of `bytes` from `i` on, in grammar state
    /// `num`, recording their digits. Stops at the end or at the first byte
    /// that does not continue the number; returns where, and the new state.
    ///
    /// Each arm takes one part of the number (sign, integer digits, point,
    /// fraction digits, exponent) and goes on with the next part, so a
    /// number is dispatched on a few times, not at every byte.
    #[inline(always)]
    pub(super) fn lex(&mut self, bytes: &[u8], mut i: usize, mut num: Num) -> (usize, Num) {
        let len = bytes.len();
        loop {
            let Some(&c) = bytes.get(i) else {
                return (i, num);
            };
            let digit = c.wrapping_sub(b'0');
            num = match num {
                Num::Int | Num::Frac => {
                    // A run of digits, then what follows it.
                    let run = i;
                    let mut significand = self.significand;
                    while i < len {
                        let digit = bytes[i].wrapping_sub(b'0');
                        if digit >= 10 {
                            break;
                        }
                        significand = significand.wrapping_mul(10).wrapping_add(u64::from(digit));
                        i += 1;
                    }
                    self.significand = significand;
                    let n = u32::try_from(i - run).unwrap_or(u32::MAX);
                    self.count = self.count.saturating_add(n);
                    if num == Num::Frac {
                        self.fraction = self.fraction.saturating_add(n);
                    }
                    match bytes.get(i) {
                        Some(b'.') if num == Num::Int => Num::Dot,
                        Some(&c) if c | 0x20 == b'e' => Num::Exp,
                        _ => return (i, num),
                    }
                }
                Num::ExpDigits | Num::Exp | Num::ExpSign if digit < 10 => {
                    // The exponent's digits.
                    let mut exponent = self.exponent;
                    while i < len {
                        let digit = bytes[i].wrapping_sub(b'0');
                        if digit >= 10 {
                            break;
                        }
                        exponent = (exponent * 10 + u32::from(digit)).min(EXPONENT_LIMIT);
                        i += 1;
                    }
                    self.exponent = exponent;
                    return (i, Num::ExpDigits);
                }
                Num::Start | Num::Minus if digit < 10 => {
                    self.push_digit(digit);
                    if digit == 0 {
                        Num::Zero
                    } else {
                        // The rest of the integer digits, as a run.
                        i += 1;
                        num = Num::Int;
                        continue;
                    }
                }
                Num::Dot if digit < 10 => {
                    // The fraction's digits, as a run.
                    num = Num::Frac;
                    continue;
                }
                Num::Zero if c == b'.' => Num::Dot,
                Num::Zero if c | 0x20 == b'e' => Num::Exp,
                Num::Start if c == b'-' => {
                    self.negative = true;
                    Num::Minus
                }
                Num::Exp if c == b'+' || c == b'-' => {
                    self.exponent_negative = c == b'-';
                    Num::ExpSign
                }
                _ => return (i, num),
            };
            i += 1;
        }
    }

    #[inline(always)]
    fn push_digit(&mut self, digit: u8) {
        self.significand = self
            .significand
            .wrapping_mul(10)
            .wrapping_add(u64::from(digit));
        self.count = self.count.saturating_add(1);
    }

    /// Converts the complete number (ending in grammar state `num`) the way
    /// `serde_json` does, for the common cases; `None` for the rest, which
    /// the caller hands to `serde_json` with the number's text.
    ///
    /// Integers become `u64` (non-negative) or `i64` (negative), as in
    /// `serde_json`. A number with a fraction or exponent becomes an `f64`:
    /// the fast path takes those with at most 18 digits whose decimal
    /// exponent is within ±22, so that the power of ten is an exact `f64`.
    /// `serde_json` computes `significand as f64` times or divided by that
    /// power, as here; below 2^53 the significand is exact too and that one
    /// IEEE operation rounds correctly, which is also what `serde_json`'s
    /// `float_roundtrip` feature computes. Larger significands are converted
    /// here only when `serde_json` was built without that feature (see
    /// [`serde_json_rounds_twice`]).
    #[inline]
    pub(super) fn to_number(self, num: Num) -> Option<Number> {
        if self.count > MAX_DIGITS {
            return None;
        }
        if matches!(num, Num::Zero | Num::Int) {
            return if !self.negative {
                Some(Number::from(self.significand))
            } else if self.significand == 0 {
                // `-0` is an f64 in serde_json.
                None
            } else {
                // At most 18 digits: the negation fits in an i64.
                i64::try_from(self.significand)
                    .ok()
                    .map(|m| Number::from(-m))
            };
        }
        if self.exponent > 1000 {
            return None;
        }
        // Both terms are at most 1000 here.
        let exponent = if self.exponent_negative {
            -(self.exponent as i32)
        } else {
            self.exponent as i32
        } - self.fraction as i32;
        let pow = *POW10.get(exponent.unsigned_abs() as usize)?;
        if self.significand >= 1 << 53 && !serde_json_rounds_twice() {
            return None;
        }
        let magnitude = self.significand as f64;
        let f = if exponent >= 0 {
            magnitude * pow
        } else {
            magnitude / pow
        };
        Number::from_f64(if self.negative { -f } else { f })
    }
}

/// Whether `serde_json` converts a significand of 2^53 or more by rounding
/// it to an `f64` first and then multiplying or dividing by the power of
/// ten, as it does unless its `float_roundtrip` feature is on (with it, it
/// rounds correctly; features are decided by the whole build). Found out
/// once, on a number where the two differ.
fn serde_json_rounds_twice() -> bool {
    static ROUNDS_TWICE: OnceLock<bool> = OnceLock::new();
    *ROUNDS_TWICE.get_or_init(|| {
        // Correctly rounded: 42.938278470668436; rounded twice:
        // 42.93827847066844.
        let twice = 42_938_278_470_668_437_u64 as f64 / 1e15;
        "42.938278470668437"
            .parse::<Number>()
            .ok()
            .and_then(|n| n.as_f64())
            == Some(twice)
    })
}

/// Converts a (grammatically valid) JSON number the way `serde_json` does,
/// for the common cases (see [`Digits::to_number`]).
#[cfg(test)]
fn fast_number(text: &str) -> Option<Number> {
    let mut digits = Digits::default();
    let (end, num) = digits.lex(text.as_bytes(), 0, Num::Start);
    if end != text.len() || !num.is_complete() {
        return None;
    }
    digits.to_number(num)
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
            "42.938278470668437",
            "-142857.14285714287",
            "9007199254740993.5",
            "123456789012345678e-5",
            "1234567890123456789e-5",
            "0.000000000000000001",
            "0.0000000000000000001",
            "1e1001",
            "1e-1001",
            "1E0",
            "0e0",
            "-0e5",
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
