//! INCRBYFLOAT's arithmetic, bit for bit as Redis's on x86-64: Redis parses both operands
//! with `strtold` into 80-bit x87 `long double`s (64-bit significand), adds them (rounded
//! to nearest, ties to even) and prints the sum with `%.17Lf`, trailing zeros removed
//! (src/t_string.c `incrbyfloatCommand`, src/util.c `string2ld` and `ld2string`). Rust
//! has no such type, so this module computes the same roundings exactly with a small
//! unsigned big integer: parse (correctly rounded, as glibc's strtold), add (correctly
//! rounded, as the x87 FPU in its default extended precision), print (exact, as glibc's
//! printf: the binary value rounded to 17 decimals, ties to even).
//!
//! Values: `(-1)^negative × significand × 2^exponent`, the significand at most 64 bits, the
//! exponent bounded as x87's (normal and subnormal numbers; beyond the largest finite one
//! is infinity).

use std::cmp::Ordering;

/// Bits of the x87 extended significand.
const SIGNIFICAND_BITS: u64 = 64;
/// The exponent of the least significant bit of the smallest subnormal (2^-16445).
const LSB_EXPONENT_MIN: i64 = -16445;
/// Values at or above 2^16384 are infinite.
const MAGNITUDE_EXPONENT_LIMIT: i64 = 16384;
/// Redis refuses float arguments this long or longer (MAX_LONG_DOUBLE_CHARS).
const TEXT_BYTES_MAX: usize = 5 * 1024;
/// `%.17Lf`.
const FRACTION_DIGITS: u32 = 17;

/// An unsigned integer of 32-bit limbs, least significant first, no high zero limbs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Big(Vec<u32>);

impl Big {
    fn from_u64(n: u64) -> Big {
        let mut b = Big(vec![n as u32, (n >> 32) as u32]);
        b.trim();
        b
    }

    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }

    fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    fn bits(&self) -> u64 {
        match self.0.last() {
            None => 0,
            Some(top) => self.0.len() as u64 * 32 - u64::from(top.leading_zeros()),
        }
    }

    fn bit(&self, i: u64) -> bool {
        self.0
            .get((i / 32) as usize)
            .is_some_and(|limb| limb >> (i % 32) & 1 == 1)
    }

    /// `self * m + a`.
    fn mul_add_small(&mut self, m: u32, a: u32) {
        let mut carry = u64::from(a);
        for limb in &mut self.0 {
            let v = u64::from(*limb) * u64::from(m) + carry;
            *limb = v as u32;
            carry = v >> 32;
        }
        if carry > 0 {
            self.0.push(carry as u32);
        }
        self.trim();
    }

    /// `self / d`, returning the remainder.
    fn div_small(&mut self, d: u32) -> u32 {
        let mut rem = 0u64;
        for limb in self.0.iter_mut().rev() {
            let v = (rem << 32) | u64::from(*limb);
            *limb = (v / u64::from(d)) as u32;
            rem = v % u64::from(d);
        }
        self.trim();
        rem as u32
    }

    fn shl(&self, bits: u64) -> Big {
        if self.is_zero() {
            return Big::default();
        }
        let (limbs, shift) = ((bits / 32) as usize, (bits % 32) as u32);
        let mut out = vec![0u32; limbs];
        let mut carry = 0u32;
        for &limb in &self.0 {
            if shift == 0 {
                out.push(limb);
            } else {
                out.push((limb << shift) | carry);
                carry = limb >> (32 - shift);
            }
        }
        if carry > 0 {
            out.push(carry);
        }
        let mut b = Big(out);
        b.trim();
        b
    }

    /// `self >> bits`, and whether any bit shifted out was set.
    fn shr(&self, bits: u64) -> (Big, bool) {
        let sticky = (0..bits.min(self.bits())).any(|i| self.bit(i));
        let (limbs, shift) = ((bits / 32) as usize, (bits % 32) as u32);
        if limbs >= self.0.len() {
            return (Big::default(), sticky);
        }
        let src = &self.0[limbs..];
        let mut out = Vec::with_capacity(src.len());
        for (i, &limb) in src.iter().enumerate() {
            let high = src.get(i + 1).copied().unwrap_or(0);
            out.push(if shift == 0 {
                limb
            } else {
                (limb >> shift) | (high << (32 - shift))
            });
        }
        let mut b = Big(out);
        b.trim();
        (b, sticky)
    }

    fn cmp(&self, other: &Big) -> Ordering {
        self.0
            .len()
            .cmp(&other.0.len())
            .then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
    }

    fn add(&self, other: &Big) -> Big {
        let mut out = Vec::with_capacity(self.0.len().max(other.0.len()) + 1);
        let mut carry = 0u64;
        for i in 0..self.0.len().max(other.0.len()) {
            let v = u64::from(self.0.get(i).copied().unwrap_or(0))
                + u64::from(other.0.get(i).copied().unwrap_or(0))
                + carry;
            out.push(v as u32);
            carry = v >> 32;
        }
        if carry > 0 {
            out.push(carry as u32);
        }
        let mut b = Big(out);
        b.trim();
        b
    }

    /// `self - other` for `self >= other`.
    fn sub(&self, other: &Big) -> Big {
        let mut out = Vec::with_capacity(self.0.len());
        let mut borrow = 0i64;
        for i in 0..self.0.len() {
            let mut v =
                i64::from(self.0[i]) - borrow - i64::from(other.0.get(i).copied().unwrap_or(0));
            borrow = i64::from(v < 0);
            if v < 0 {
                v += 1 << 32;
            }
            out.push(v as u32);
        }
        let mut b = Big(out);
        b.trim();
        b
    }

    /// The low 64 bits.
    fn low_u64(&self) -> u64 {
        u64::from(self.0.first().copied().unwrap_or(0))
            | (u64::from(self.0.get(1).copied().unwrap_or(0)) << 32)
    }

    fn pow10(n: u64) -> Big {
        let mut b = Big::from_u64(1);
        let mut left = n;
        while left > 0 {
            let step = left.min(9);
            b.mul_add_small(10u32.pow(step as u32), 0);
            left -= step;
        }
        b
    }

    /// `(self / d, whether the remainder is non-zero)`, by shift and subtract.
    fn div(&self, d: &Big) -> (Big, bool) {
        let mut quotient = vec![0u32; self.0.len()];
        let mut rem = Big::default();
        for i in (0..self.bits()).rev() {
            rem = rem.shl(1);
            if self.bit(i) {
                if rem.is_zero() {
                    rem.0.push(1);
                } else {
                    rem.0[0] |= 1;
                }
            }
            if rem.cmp(d) != Ordering::Less {
                rem = rem.sub(d);
                quotient[(i / 32) as usize] |= 1 << (i % 32);
            }
        }
        let mut q = Big(quotient);
        q.trim();
        (q, !rem.is_zero())
    }

    fn to_decimal(&self) -> String {
        if self.is_zero() {
            return "0".into();
        }
        let mut n = self.clone();
        let mut chunks = Vec::new();
        while !n.is_zero() {
            chunks.push(n.div_small(1_000_000_000));
        }
        let mut out = chunks.pop().map(|c| c.to_string()).unwrap_or_default();
        for chunk in chunks.iter().rev() {
            out.push_str(&format!("{chunk:09}"));
        }
        out
    }
}

/// A finite x87 value: `(-1)^negative × significand × 2^exponent`.
#[derive(Clone, Debug, PartialEq)]
struct Finite {
    negative: bool,
    significand: u64,
    exponent: i64,
}

/// Rounds the exact `n × 2^exponent` (n carries `sticky`: set bits below it) to the x87
/// format, ties to even. None if the result is infinite.
fn round(negative: bool, n: Big, exponent: i64, sticky: bool) -> Option<Finite> {
    let shift = (n.bits() as i64 - SIGNIFICAND_BITS as i64).max(LSB_EXPONENT_MIN - exponent);
    let (mut kept, mut exponent) = (n, exponent);
    if shift > 0 {
        let shift = shift as u64;
        let half = kept.bit(shift - 1);
        let (_, lower_sticky) = kept.shr(shift - 1);
        let (shifted, _) = kept.shr(shift);
        let rest = lower_sticky || sticky;
        kept = shifted;
        exponent += shift as i64;
        let odd = kept.bit(0);
        if half && (rest || odd) {
            kept = kept.add(&Big::from_u64(1));
            if kept.bits() > SIGNIFICAND_BITS {
                let (k, _) = kept.shr(1);
                kept = k;
                exponent += 1;
            }
        }
    }
    if !kept.is_zero() && kept.bits() as i64 + exponent > MAGNITUDE_EXPONENT_LIMIT {
        return None;
    }
    Some(Finite {
        negative,
        significand: kept.low_u64(),
        exponent,
    })
}

/// What `string2ld` accepts, as a value: None for text Redis refuses (empty, too long,
/// leading space, trailing bytes, NaN, overflow, underflow to zero).
fn parse(text: &[u8]) -> Option<Option<Finite>> {
    if text.is_empty() || text.len() >= TEXT_BYTES_MAX || text[0].is_ascii_whitespace() {
        return None;
    }
    let (negative, rest) = match text[0] {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    if rest.eq_ignore_ascii_case(b"inf") || rest.eq_ignore_ascii_case(b"infinity") {
        // Infinite: valid to parse, and any sum with it is refused.
        return Some(None);
    }
    let hex = rest.len() > 2 && rest[0] == b'0' && (rest[1] | 0x20) == b'x';
    let (digits_text, radix, exp_char) = if hex {
        (&rest[2..], 16u32, b'p')
    } else {
        (rest, 10u32, b'e')
    };
    let (mantissa, exp_text) = match digits_text.iter().position(|&c| c | 0x20 == exp_char) {
        Some(at) => (&digits_text[..at], Some(&digits_text[at + 1..])),
        None => (digits_text, None),
    };
    let mut n = Big::default();
    // Digits, and those from the first non-zero one (the value's decimal magnitude).
    let (mut digits, mut significant) = (0usize, 0i64);
    let (mut fraction_digits, mut seen_point) = (0i64, false);
    for &c in mantissa {
        if c == b'.' && !seen_point {
            seen_point = true;
            continue;
        }
        let d = (c as char).to_digit(radix)?;
        n.mul_add_small(radix, d);
        digits += 1;
        if !n.is_zero() {
            significant += 1;
        }
        if seen_point {
            fraction_digits += 1;
        }
    }
    if digits == 0 {
        return None;
    }
    let mut exp = 0i64;
    if let Some(e) = exp_text {
        let (exp_negative, e) = match e.first() {
            Some(b'-') => (true, &e[1..]),
            Some(b'+') => (false, &e[1..]),
            _ => (false, e),
        };
        if e.is_empty() || !e.iter().all(u8::is_ascii_digit) {
            return None;
        }
        for &d in e {
            exp = exp.saturating_mul(10).saturating_add(i64::from(d - b'0'));
        }
        if exp_negative {
            exp = -exp;
        }
    }
    if n.is_zero() {
        return Some(Some(Finite {
            negative,
            significand: 0,
            exponent: 0,
        }));
    }
    let value = if hex {
        // n × 2^(exp - 4 × fraction digits): exact in binary.
        let exponent = exp.saturating_sub(4 * fraction_digits);
        if exponent.saturating_add(n.bits() as i64) > MAGNITUDE_EXPONENT_LIMIT + 1 {
            return None;
        }
        round(negative, n, exponent.max(LSB_EXPONENT_MIN * 2), false)
    } else {
        let decimal = exp.saturating_sub(fraction_digits);
        // Far outside the range: overflow, or underflow to zero (both refused).
        let magnitude = decimal.saturating_add(significant);
        if magnitude > 4934 {
            return None;
        }
        if magnitude < -4952 {
            return None;
        }
        if decimal >= 0 {
            round(negative, n.mul_pow10(decimal as u64), 0, false)
        } else {
            // n / 10^-decimal: enough quotient bits for the rounding, the rest as sticky.
            let divisor = Big::pow10(decimal.unsigned_abs());
            let extra = (divisor.bits() + SIGNIFICAND_BITS + 2).saturating_sub(n.bits());
            let (q, inexact) = n.shl(extra).div(&divisor);
            round(negative, q, -(extra as i64), inexact)
        }
    };
    match value {
        // Overflow (HUGE_VAL) and underflow to zero set ERANGE: refused.
        None => None,
        Some(v) if v.significand == 0 => None,
        Some(v) => Some(Some(v)),
    }
}

impl Big {
    fn mul_pow10(mut self, n: u64) -> Big {
        let mut left = n;
        while left > 0 {
            let step = left.min(9);
            self.mul_add_small(10u32.pow(step as u32), 0);
            left -= step;
        }
        self
    }
}

/// The correctly rounded sum; None if infinite.
fn add(a: &Finite, b: &Finite) -> Option<Finite> {
    if a.significand == 0 {
        return Some(b.clone());
    }
    if b.significand == 0 {
        return Some(a.clone());
    }
    let exponent = a.exponent.min(b.exponent);
    let x = Big::from_u64(a.significand).shl((a.exponent - exponent) as u64);
    let y = Big::from_u64(b.significand).shl((b.exponent - exponent) as u64);
    let (negative, sum) = if a.negative == b.negative {
        (a.negative, x.add(&y))
    } else {
        match x.cmp(&y) {
            Ordering::Less => (b.negative, y.sub(&x)),
            _ => (a.negative, x.sub(&y)),
        }
    };
    if sum.is_zero() {
        return Some(Finite {
            negative: false,
            significand: 0,
            exponent: 0,
        });
    }
    round(negative, sum, exponent, false)
}

/// `%.17Lf`, trailing zeros and point removed, `-0` as `0` (ld2string's LD_STR_HUMAN).
fn format(v: &Finite) -> String {
    let scaled = Big::from_u64(v.significand).mul_pow10(u64::from(FRACTION_DIGITS));
    let units = if v.exponent >= 0 {
        scaled.shl(v.exponent as u64)
    } else {
        let shift = v.exponent.unsigned_abs();
        let (q, _) = scaled.shr(shift);
        let half = shift >= 1 && scaled.bit(shift - 1);
        let (_, below_half) = scaled.shr(shift.saturating_sub(1));
        let below = shift >= 1 && below_half;
        if half && (below || q.bit(0)) {
            q.add(&Big::from_u64(1))
        } else {
            q
        }
    };
    let digits = units.to_decimal();
    let digits = format!("{digits:0>width$}", width = FRACTION_DIGITS as usize + 1);
    let (int, frac) = digits.split_at(digits.len() - FRACTION_DIGITS as usize);
    let frac = frac.trim_end_matches('0');
    let mut out = String::new();
    if v.negative {
        out.push('-');
    }
    out.push_str(int);
    if !frac.is_empty() {
        out.push('.');
        out.push_str(frac);
    }
    if out == "-0" {
        out = "0".into();
    }
    out
}

/// Why INCRBYFLOAT refuses.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// An operand is no float: `value is not a valid float`.
    NotAFloat,
    /// `increment would produce NaN or Infinity`.
    NanOrInfinity,
}

/// `old + increment` as Redis's INCRBYFLOAT stores and returns it.
pub fn incr_by_float(old: &[u8], increment: &[u8]) -> Result<String, Refusal> {
    let old = parse(old).ok_or(Refusal::NotAFloat)?;
    let increment = parse(increment).ok_or(Refusal::NotAFloat)?;
    let (Some(old), Some(increment)) = (old, increment) else {
        return Err(Refusal::NanOrInfinity);
    };
    let sum = add(&old, &increment).ok_or(Refusal::NanOrInfinity)?;
    Ok(format(&sum))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(a: &str, b: &str) -> String {
        incr_by_float(a.as_bytes(), b.as_bytes()).unwrap_or_else(|e| panic!("{a} + {b}: {e:?}"))
    }

    // Goal: sums print exactly as redis-server 7.0.15 on x86-64 printed them (its long double
    // rounding shows in the 17th digit). Method: operand pairs whose replies were read from
    // that server, and the cases of Redis's incr.tcl.
    #[test]
    fn sums_match_redis() {
        for (a, b, want) in [
            ("0", "1", "1"),
            ("1", "0.25", "1.25"),
            ("10.50", "0.1", "10.6"),
            ("10.6", "-5", "5.6"),
            ("1", "-1.1", "-0.1"),
            ("5.0e3", "2.0e2", "5200"),
            ("17179869184", "1.5", "17179869185.5"),
            ("17179869184", "17179869184", "34359738368"),
            ("1.5", "1e3", "1001.5"),
            ("0.15", "1000", "1000.15000000000000002"),
            ("-0", "0", "0"),
            ("1", "-1", "0"),
            ("0", "1e-20", "0"),
            ("0", "-1e-20", "0"),
            ("0.1", "0.2", "0.3"),
            ("0", "0x10", "16"),
            ("0", "0x1.8p1", "3"),
        ] {
            assert_eq!(sum(a, b), want, "{a} + {b}");
        }
        for bad in [
            "", " 1", "1 ", "abc", "nan", "-nan", "1e", "1e+", "--1", "1..2", ".", "1e5000",
            "1e-5000", "0x",
        ] {
            assert_eq!(
                incr_by_float(b"0", bad.as_bytes()),
                Err(Refusal::NotAFloat),
                "{bad:?}"
            );
            assert_eq!(
                incr_by_float(bad.as_bytes(), b"1"),
                Err(Refusal::NotAFloat),
                "{bad:?}"
            );
        }
        for (a, b) in [
            ("0", "+inf"),
            ("inf", "1"),
            ("0", "-Infinity"),
            ("1e4932", "1e4932"),
        ] {
            assert_eq!(
                incr_by_float(a.as_bytes(), b.as_bytes()),
                Err(Refusal::NanOrInfinity),
                "{a} + {b}"
            );
        }
        assert_eq!(sum("0e99999999999", "1"), "1");
    }
}
