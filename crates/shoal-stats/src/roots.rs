//! Brent's root finder with the exact semantics of scipy's `brentq`
//! (`scipy/optimize/Zeros/brentq.c` plus its Python wrapper), which the
//! reference uses for the secular equation and for `sprt.lower_cb`.
//!
//! Matching scipy step for step matters: the corpus's tolerances leave room
//! for a different root finder, but edge behaviour (which bracket raises,
//! where a root next to a pole is found) only matches with the same
//! iteration. Pure function: no I/O, no async, no logging, no panics.

use super::{StatsError, StatsResult};

/// scipy's default absolute tolerance.
pub const XTOL: f64 = 2e-12;
/// scipy's default (and minimum) relative tolerance, `4 * eps`.
pub const RTOL: f64 = 4.0 * f64::EPSILON;
/// scipy's default iteration cap.
pub const MAXITER: u32 = 100;

/// What `brentq(..., full_output=True, disp=False)` returns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BrentOutcome {
    /// The final estimate (the root when `converged`).
    pub root: f64,
    /// Whether the tolerance was met within `maxiter` iterations.
    pub converged: bool,
    /// Iterations performed.
    pub iterations: u32,
    /// Function evaluations performed.
    pub function_calls: u32,
}

/// scipy `brentq` with its default tolerances (xtol = 2e-12, rtol = 4·eps,
/// maxiter = 100).
pub fn brentq<F>(f: F, a: f64, b: f64) -> StatsResult<BrentOutcome>
where
    F: FnMut(f64) -> StatsResult<f64>,
{
    brentq_with(f, a, b, XTOL, RTOL, MAXITER)
}

/// scipy `brentq` with explicit tolerances.
///
/// Errors, as in scipy: a NaN function value is a `ValueError`
/// ([`StatsError::NanFunctionValue`]); end values of the same sign are a
/// `ValueError` ([`StatsError::NoSignChange`]); errors returned by `f`
/// propagate unchanged. Non-convergence is *not* an error: it is reported in
/// [`BrentOutcome::converged`], as with `disp=False`.
pub fn brentq_with<F>(
    mut f: F,
    xa: f64,
    xb: f64,
    xtol: f64,
    rtol: f64,
    maxiter: u32,
) -> StatsResult<BrentOutcome>
where
    F: FnMut(f64) -> StatsResult<f64>,
{
    // scipy wraps f so that a NaN value raises ValueError before the C code
    // ever sees it.
    let mut eval = |x: f64| -> StatsResult<f64> {
        let y = f(x)?;
        if y.is_nan() {
            Err(StatsError::NanFunctionValue)
        } else {
            Ok(y)
        }
    };

    let mut xpre = xa;
    let mut xcur = xb;
    let mut xblk = 0.0_f64;
    let mut fblk = 0.0_f64;
    let mut spre = 0.0_f64;
    let mut scur = 0.0_f64;

    let mut fpre = eval(xpre)?;
    let mut fcur = eval(xcur)?;
    let mut function_calls = 2;
    // The initial test is on the product (as in scipy), the in-loop test on
    // sign bits; keep both so that underflowing products behave the same.
    if fpre * fcur > 0.0 {
        return Err(StatsError::NoSignChange);
    }
    if fpre == 0.0 {
        return Ok(BrentOutcome {
            root: xpre,
            converged: true,
            iterations: 0,
            function_calls,
        });
    }
    if fcur == 0.0 {
        return Ok(BrentOutcome {
            root: xcur,
            converged: true,
            iterations: 0,
            function_calls,
        });
    }

    let mut iterations = 0;
    for _ in 0..maxiter {
        iterations += 1;
        if fpre != 0.0 && fcur != 0.0 && (fpre.is_sign_negative() != fcur.is_sign_negative()) {
            xblk = xpre;
            fblk = fpre;
            spre = xcur - xpre;
            scur = spre;
        }
        if fblk.abs() < fcur.abs() {
            xpre = xcur;
            xcur = xblk;
            xblk = xpre;

            fpre = fcur;
            fcur = fblk;
            fblk = fpre;
        }

        let delta = (xtol + rtol * xcur.abs()) / 2.0;
        let sbis = (xblk - xcur) / 2.0;
        if fcur == 0.0 || sbis.abs() < delta {
            return Ok(BrentOutcome {
                root: xcur,
                converged: true,
                iterations,
                function_calls,
            });
        }

        if spre.abs() > delta && fcur.abs() < fpre.abs() {
            let stry = if xpre == xblk {
                // interpolate
                -fcur * (xcur - xpre) / (fcur - fpre)
            } else {
                // extrapolate
                let dpre = (fpre - fcur) / (xpre - xcur);
                let dblk = (fblk - fcur) / (xblk - xcur);
                -fcur * (fblk * dblk - fpre * dpre) / (dblk * dpre * (fblk - fpre))
            };
            // C's MIN(a, b) is `a < b ? a : b`.
            let lim_a = spre.abs();
            let lim_b = 3.0 * sbis.abs() - delta;
            let lim = if lim_a < lim_b { lim_a } else { lim_b };
            if 2.0 * stry.abs() < lim {
                // good short step
                spre = scur;
                scur = stry;
            } else {
                // bisect
                spre = sbis;
                scur = sbis;
            }
        } else {
            // bisect
            spre = sbis;
            scur = sbis;
        }

        xpre = xcur;
        fpre = fcur;
        if scur.abs() > delta {
            xcur += scur;
        } else {
            xcur += if sbis > 0.0 { delta } else { -delta };
        }

        fcur = eval(xcur)?;
        function_calls += 1;
    }
    Ok(BrentOutcome {
        root: xcur,
        converged: false,
        iterations,
        function_calls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(x: f64) -> StatsResult<f64> {
        Ok(x)
    }

    #[test]
    fn finds_simple_roots() {
        let r = brentq(|x| ok(x * x - 2.0), 0.0, 2.0).unwrap();
        assert!(r.converged);
        assert!((r.root - 2f64.sqrt()).abs() < 4e-12);

        let r = brentq(|x| ok(x.cos() - x), -1.0, 1.0).unwrap();
        assert!(r.converged);
        assert!((r.root - 0.739_085_133_215_160_6).abs() < 4e-12);
    }

    #[test]
    fn exact_zero_at_an_end_is_returned() {
        let r = brentq(|x| ok(x - 1.0), 1.0, 3.0).unwrap();
        assert_eq!(r.root, 1.0);
        assert_eq!(r.iterations, 0);
        let r = brentq(|x| ok(x - 3.0), 1.0, 3.0).unwrap();
        assert_eq!(r.root, 3.0);
    }

    #[test]
    fn same_sign_is_a_value_error() {
        let e = brentq(|x| ok(x * x + 1.0), -1.0, 1.0).unwrap_err();
        assert_eq!(e, StatsError::NoSignChange);
        assert!(e.is_value_error());
    }

    #[test]
    fn nan_is_a_value_error_and_f_errors_propagate() {
        let e = brentq(|_| ok(f64::NAN), -1.0, 1.0).unwrap_err();
        assert_eq!(e, StatsError::NanFunctionValue);
        let e = brentq(|_| Err(StatsError::Overflow("t")), -1.0, 1.0).unwrap_err();
        assert_eq!(e, StatsError::Overflow("t"));
    }

    #[test]
    fn reports_non_convergence_instead_of_failing() {
        let r = brentq_with(|x| ok(x.powi(3) - 0.3), 0.0, 1.0, XTOL, RTOL, 2).unwrap();
        assert!(!r.converged);
        assert_eq!(r.iterations, 2);
    }

    #[test]
    fn tolerance_is_scipys() {
        // A root of large magnitude: the relative tolerance dominates.
        let r = brentq(|x| ok(x - 1.234_567_890_123e6), 0.0, 1e7).unwrap();
        assert!(r.converged);
        assert!((r.root - 1.234_567_890_123e6).abs() <= XTOL + RTOL * 1.3e6);
        // A decreasing function works the same way.
        let r = brentq(|x| ok(0.5 - x), -3.0, 7.0).unwrap();
        assert!((r.root - 0.5).abs() < 1e-11);
    }

    #[test]
    fn steep_function_near_a_pole() {
        // Shape of the secular equation: sum p a / (1 + x a).
        let pdf = [(-0.9, 0.001), (0.1, 0.999)];
        let f = |x: f64| ok(pdf.iter().map(|(a, p)| p * a / (1.0 + x * a)).sum());
        let r = brentq(f, -1.0 / 0.1 + 1e-9, 1.0 / 0.9 - 1e-9).unwrap();
        assert!(r.converged);
        assert!((r.root - 1.099_999_999_999_97).abs() < 1e-10);
    }
}
