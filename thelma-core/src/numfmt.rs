//! Numbers for people to read: the one format of every number thelma prints on a terminal or in a
//! report (CSV, JSON and VTK keep Rust's exact round-trip forms, which programs read).
//!
//! A number keeps at most a few significant digits with trailing zeros dropped (`Re = 1000`, not
//! `1000.000000`), and turns scientific, with a signed exponent of at least two digits, only where
//! plain decimals would need many zeros: below 0.01 or from a million up (`2.0e-03`, `1.5e+06`).
//! Rust's own `{:e}` (`2e-3`, `2.000e0`) reads as neither.

use std::fmt;

/// Significant digits of [`num`]: enough for a relaxation time near ½ (`0.500012`), few enough
/// to hide the last bits of floating-point arithmetic (`0.064` for `0.1 * 64 / 100`).
const DEFAULT_DIGITS: usize = 6;

/// Plain decimals for magnitudes in `[10^MIN_PLAIN, 10^MAX_PLAIN]`; scientific outside.
const MIN_PLAIN: i32 = -2;
const MAX_PLAIN: i32 = 5;

/// A number formatted for reading; see the module's documentation. `Display` honours `+` (a sign
/// on positive numbers too) and width, fill and alignment (`{:>10}`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Num {
    value: f64,
    /// Significant digits; `None`: as many as tell `value` apart from every other f64.
    digits: Option<usize>,
    scientific: bool,
}

/// `x` with up to six significant digits.
pub fn num(x: f64) -> Num {
    num_sig(x, DEFAULT_DIGITS)
}

/// `x` with up to `digits` significant digits (at least one, at most 17: an f64 holds no more).
pub fn num_sig(x: f64, digits: usize) -> Num {
    Num {
        value: x,
        digits: Some(digits.clamp(1, 17)),
        scientific: false,
    }
}

/// `x` with the fewest digits that read back as exactly `x` (`0.1`, `0.50000003`), for a value
/// echoed back to the user who wrote it, or one whose last digit decides a refusal.
pub fn num_exact(x: f64) -> Num {
    Num {
        value: x,
        digits: None,
        scientific: false,
    }
}

impl Num {
    /// Scientific notation whatever the magnitude, for a column or a scale whose numbers should
    /// all read alike.
    pub fn scientific(self) -> Num {
        Num {
            scientific: true,
            ..self
        }
    }

    /// The text without padding: sign, digits, exponent.
    fn render(&self, plus: bool) -> String {
        let x = self.value;
        if x.is_nan() {
            return "NaN".into();
        }
        let sign = if x.is_sign_negative() && x != 0.0 {
            "-"
        } else if plus {
            "+"
        } else {
            ""
        };
        if x.is_infinite() {
            return format!("{sign}inf");
        }
        if x == 0.0 {
            // `-0` would read as a sign the quantity does not have.
            return format!("{sign}0");
        }
        // Rust rounds to the requested digits correctly (a carry moves the exponent: 9.9999 to
        // four digits is `1.000e1`); what is left is to drop zeros and place the point.
        let sci = match self.digits {
            Some(d) => format!("{:.*e}", d - 1, x.abs()),
            None => format!("{:e}", x.abs()),
        };
        let (mantissa, exp) = sci
            .split_once('e')
            .expect("`{:e}` always writes an exponent");
        let exp: i32 = exp.parse().expect("`{:e}` writes an integer exponent");
        let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
        let digits = digits.trim_end_matches('0');
        let digits = if digits.is_empty() { "0" } else { digits };
        if self.scientific || !(MIN_PLAIN..=MAX_PLAIN).contains(&exp) {
            // One decimal at least, so that `2.0e-03` reads as a number with an exponent and not
            // as a product.
            let (lead, rest) = digits.split_at(1);
            let rest = if rest.is_empty() { "0" } else { rest };
            let esign = if exp < 0 { '-' } else { '+' };
            return format!("{sign}{lead}.{rest}e{esign}{:02}", exp.unsigned_abs());
        }
        let body = if exp >= 0 {
            let point = exp as usize + 1;
            if digits.len() <= point {
                format!("{digits}{}", "0".repeat(point - digits.len()))
            } else {
                format!("{}.{}", &digits[..point], &digits[point..])
            }
        } else {
            format!("0.{}{digits}", "0".repeat((-exp - 1) as usize))
        };
        format!("{sign}{body}")
    }
}

impl fmt::Display for Num {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.render(f.sign_plus()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: Num) -> String {
        n.to_string()
    }

    #[test]
    fn plain_numbers_lose_their_trailing_zeros() {
        assert_eq!(s(num(1000.0)), "1000");
        assert_eq!(s(num(0.1)), "0.1");
        assert_eq!(s(num(0.5018)), "0.5018");
        assert_eq!(s(num(123456.0)), "123456");
        assert_eq!(s(num(0.01)), "0.01");
        assert_eq!(s(num(-2.5)), "-2.5");
        // The last bits of arithmetic stay hidden; the digits that matter near τ = ½ do not.
        assert_eq!(s(num(0.1 * 64.0 / 100.0)), "0.064");
        assert_eq!(s(num(0.1 * 64.0 / 1000.0)), "6.4e-03");
        assert_eq!(s(num(0.1 + 0.2)), "0.3");
        assert_eq!(s(num(0.500012)), "0.500012");
    }

    #[test]
    fn small_and_large_magnitudes_turn_scientific_with_a_signed_two_digit_exponent() {
        assert_eq!(s(num(0.002)), "2.0e-03");
        assert_eq!(s(num(1.5e6)), "1.5e+06");
        assert_eq!(s(num(1e6)), "1.0e+06");
        assert_eq!(s(num(-2.44140625e-6)), "-2.44141e-06");
        assert_eq!(s(num(1e-300)), "1.0e-300");
        assert_eq!(s(num(1.7976931348623157e308)), "1.79769e+308");
        assert_eq!(s(num(f64::MIN_POSITIVE / 4.0)), "5.56268e-309");
    }

    #[test]
    fn rounding_carries_into_the_exponent_and_the_notation() {
        assert_eq!(s(num_sig(9.99996, 5)), "10");
        assert_eq!(s(num_sig(0.0099996, 3)), "0.01");
        assert_eq!(s(num_sig(999999.7, 6)), "1.0e+06");
        assert_eq!(s(num_sig(1234.5678, 3)), "1230");
        assert_eq!(s(num_sig(0.05773503, 4)), "0.05774");
        assert_eq!(s(num_sig(2.0, 0)), "2");
        assert_eq!(s(num_sig(1.0 / 3.0, 99)), "0.33333333333333331");
    }

    #[test]
    fn exact_numbers_keep_every_digit_that_matters_and_no_more() {
        assert_eq!(s(num_exact(0.1)), "0.1");
        assert_eq!(s(num_exact(0.1 + 0.2)), "0.30000000000000004");
        assert_eq!(s(num_exact(3.0 * 1e-8 + 0.5)), "0.50000003");
        assert_eq!(s(num_exact(1e308)), "1.0e+308");
        assert_eq!(s(num_exact(-1e-300)), "-1.0e-300");
        for x in [0.1, 1.0 / 3.0, 6.02214076e23, 5e-324, 123456.789] {
            assert_eq!(s(num_exact(x)).parse::<f64>().unwrap(), x);
        }
    }

    #[test]
    fn zero_and_non_finite_values_read_as_themselves() {
        assert_eq!(s(num(0.0)), "0");
        assert_eq!(s(num(-0.0)), "0");
        assert_eq!(s(num(f64::NAN)), "NaN");
        assert_eq!(s(num(f64::INFINITY)), "inf");
        assert_eq!(s(num(f64::NEG_INFINITY)), "-inf");
    }

    #[test]
    fn forced_scientific_signs_and_padding() {
        assert_eq!(s(num(0.06).scientific()), "6.0e-02");
        assert_eq!(s(num(150.0).scientific()), "1.5e+02");
        assert_eq!(format!("{:+}", num_sig(3.25e-9, 3)), "+3.25e-09");
        assert_eq!(format!("{:+}", num(-0.25)), "-0.25");
        assert_eq!(format!("{:+}", num(0.0)), "+0");
        assert_eq!(format!("[{:>8}]", num(1000.0)), "[    1000]");
        assert_eq!(format!("[{:<6}]", num(0.5)), "[0.5   ]");
    }

    #[test]
    fn every_rendering_parses_back_to_the_rounded_value() {
        // The text is a number a program could read too: what it holds is x rounded to the digits.
        for &x in &[
            1.0,
            0.3,
            2.5e-7,
            6.02214076e23,
            4096.000001,
            0.015625,
            99999.95,
            1e5,
            1e-2,
            7e-3,
        ] {
            for digits in [1, 3, 6, 10, 17] {
                let text = s(num_sig(x, digits));
                let back: f64 = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
                let rounded: f64 = format!("{:.*e}", digits - 1, x).parse().unwrap();
                assert_eq!(back, rounded, "{x} to {digits} digits: {text}");
            }
        }
    }
}
