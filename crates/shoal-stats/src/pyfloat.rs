//! Python float semantics for the few operations where Python raises while
//! IEEE arithmetic would silently return inf/NaN: division by zero, `math.log`
//! / `math.log10` / `math.sqrt` outside their domain, overflow of `**` and
//! `math.exp`.
//!
//! The reference's behaviour on degenerate inputs (the corpus's `raises`
//! cases, and `lower_cb`'s retry-on-`ValueError`) depends on these, so every
//! port of a Python expression that can hit one of them goes through here.
//! Pure functions only: no I/O, no async, no logging, no panics.

use super::{StatsError, StatsResult};

/// Python `a / b` on floats: `ZeroDivisionError` when `b == 0`.
#[inline]
pub(crate) fn div(a: f64, b: f64, what: &'static str) -> StatsResult<f64> {
    if b == 0.0 {
        Err(StatsError::DivisionByZero(what))
    } else {
        Ok(a / b)
    }
}

/// `math.log`: `ValueError` for x ≤ 0 (NaN passes through as NaN).
#[inline]
pub(crate) fn ln(x: f64) -> StatsResult<f64> {
    if x <= 0.0 {
        Err(StatsError::Domain("log of a non-positive number"))
    } else {
        Ok(x.ln())
    }
}

/// `math.log10`: `ValueError` for x ≤ 0.
#[inline]
pub(crate) fn log10(x: f64) -> StatsResult<f64> {
    if x <= 0.0 {
        Err(StatsError::Domain("log10 of a non-positive number"))
    } else {
        Ok(x.log10())
    }
}

/// `math.sqrt`: `ValueError` for x < 0 (−0.0 is fine and gives −0.0).
#[inline]
pub(crate) fn sqrt(x: f64) -> StatsResult<f64> {
    if x < 0.0 {
        Err(StatsError::Domain("sqrt of a negative number"))
    } else {
        Ok(x.sqrt())
    }
}

/// `math.exp`: `OverflowError` when a finite argument overflows.
#[inline]
pub(crate) fn exp(x: f64) -> StatsResult<f64> {
    let r = x.exp();
    if r.is_infinite() && x.is_finite() {
        Err(StatsError::Overflow("math.exp"))
    } else {
        Ok(r)
    }
}

/// Python `x ** y` on floats.
///
/// `0.0 ** negative` raises `ZeroDivisionError`; a negative base with a
/// non-integer exponent would produce a complex number in Python (which then
/// breaks the caller), reported here as a domain error; a finite result that
/// overflows raises `OverflowError`.
#[inline]
pub(crate) fn pow(x: f64, y: f64) -> StatsResult<f64> {
    if x == 0.0 && y < 0.0 {
        return Err(StatsError::DivisionByZero(
            "0.0 cannot be raised to a negative power",
        ));
    }
    if x < 0.0 && x.is_finite() && y.is_finite() && y.fract() != 0.0 {
        return Err(StatsError::Domain("negative number to a fractional power"));
    }
    let r = x.powf(y);
    if r.is_infinite() && x.is_finite() && y.is_finite() {
        Err(StatsError::Overflow("float power"))
    } else {
        Ok(r)
    }
}

/// Python `x ** 2`: identical to `x * x` (glibc's `pow` is exact there), but
/// overflow raises like Python.
#[inline]
pub(crate) fn sq(x: f64) -> StatsResult<f64> {
    let r = x * x;
    if r.is_infinite() && x.is_finite() {
        Err(StatsError::Overflow("float power"))
    } else {
        Ok(r)
    }
}

/// Python's built-in `max(x, y)` for two floats: keeps `x` unless `y > x`
/// (so a NaN `x` survives, unlike `f64::max`).
#[inline]
pub(crate) fn py_max(x: f64, y: f64) -> f64 {
    if y > x { y } else { x }
}

/// Python's built-in `min(x, y)`: keeps `x` unless `y < x`.
#[inline]
pub(crate) fn py_min(x: f64, y: f64) -> f64 {
    if y < x { y } else { x }
}

/// Python's `sum(list_of_floats)` before 3.12: a plain left-to-right sum.
#[inline]
pub(crate) fn sum<I: IntoIterator<Item = f64>>(it: I) -> f64 {
    it.into_iter().fold(0.0, |acc, x| acc + x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_raising_semantics() {
        assert!(div(1.0, 0.0, "t").is_err());
        assert_eq!(div(1.0, 4.0, "t"), Ok(0.25));
        assert!(ln(0.0).is_err());
        assert!(ln(-1.0).is_err());
        assert!(ln(f64::NAN).unwrap().is_nan());
        assert!(sqrt(-1e-300).is_err());
        assert_eq!(sqrt(-0.0).map(|x| x.is_sign_negative()), Ok(true));
        assert!(exp(710.0).is_err());
        assert_eq!(exp(f64::INFINITY), Ok(f64::INFINITY));
        assert_eq!(exp(-1e6), Ok(0.0));
        assert!(pow(10.0, 400.0).is_err());
        assert!(pow(0.0, -1.0).is_err());
        assert!(pow(-2.0, 0.5).is_err());
        assert_eq!(pow(-2.0, 2.0), Ok(4.0));
        assert!(sq(1e200).is_err());
    }

    #[test]
    fn python_min_max_keep_nan_first_argument() {
        assert!(py_max(f64::NAN, 1.0).is_nan());
        assert_eq!(py_max(0.0001, 0.001), 0.001);
        assert_eq!(py_min(2.0, 0.999), 0.999);
        assert!(py_min(f64::NAN, 0.999).is_nan());
    }
}
