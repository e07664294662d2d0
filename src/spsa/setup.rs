//! SPSA setup from the submit form: parsing `raw_params` ([`parse_raw_params`]) and building
//! a fresh `args.spsa` ([`setup_spsa`]) from the run-level settings ([`SpsaSettings`]), and
//! the errors a submission can get ([`ParamsError`]).
//!
//! Must not: do I/O, touch the store or know HTTP; touch a running tuning (setup only ever
//! builds iteration 0; what happens after is `update.rs`).

use thiserror::Error;

use super::{
    CLASSIC_ALGORITHM, DEFAULT_A_RATIO, DEFAULT_ALPHA, DEFAULT_GAMMA, SpsaArgs, SpsaParam,
};

/// Fields per `raw_params` line: `name,start,min,max,c_end,r_end`.
const RAW_PARAM_FIELDS: usize = 6;

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// Why a `raw_params` text or the run settings were refused at submit time.
/// Lines are numbered from 1, counting blank lines, like Fishtest's messages.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ParamsError {
    #[error("line {line}: expected {RAW_PARAM_FIELDS} comma-separated fields, found {found}")]
    FieldCount { line: usize, found: usize },
    #[error("line {line}: the parameter name is empty")]
    EmptyName { line: usize },
    #[error("line {line}: parameter '{name}' appears twice")]
    DuplicateName { line: usize, name: String },
    #[error("line {line}: field {field} of '{name}' is not a finite number: {value:?}")]
    BadNumber {
        line: usize,
        name: String,
        field: &'static str,
        value: String,
    },
    #[error("line {line}: parameter '{name}' has min {min} > max {max}")]
    MinAboveMax {
        line: usize,
        name: String,
        min: f64,
        max: f64,
    },
    #[error("line {line}: parameter '{name}' starts at {start}, outside [{min}, {max}]")]
    StartOutOfRange {
        line: usize,
        name: String,
        start: f64,
        min: f64,
        max: f64,
    },
    #[error("line {line}: parameter '{name}' has c_end {c_end}, which must be > 0")]
    NonPositiveCEnd {
        line: usize,
        name: String,
        c_end: f64,
    },
    #[error("line {line}: parameter '{name}' has r_end {r_end}, which must be >= 0")]
    NegativeREnd {
        line: usize,
        name: String,
        r_end: f64,
    },
    #[error("no SPSA parameters given")]
    NoParams,
    #[error("SPSA setting {field} must be a finite number >= 0, got {value}")]
    BadSetting { field: &'static str, value: f64 },
    #[error("an SPSA run needs at least 2 games (one iteration), got {0}")]
    TooFewGames(u64),
}

// ---------------------------------------------------------------------------
// Setup from the submit form
// ---------------------------------------------------------------------------

/// How the submit form gives `A`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stability {
    /// The form's "A ratio": `A = int(ratio · num_games / 2)`. This is what
    /// Fishtest's form sends and stores (as the derived int).
    Ratio(f64),
    /// An explicit `A`, stored as given.
    Absolute(f64),
}

/// The run-level SPSA settings of the submit form.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpsaSettings {
    pub stability: Stability,
    pub alpha: f64,
    pub gamma: f64,
}

impl Default for SpsaSettings {
    fn default() -> Self {
        SpsaSettings {
            stability: Stability::Ratio(DEFAULT_A_RATIO),
            alpha: DEFAULT_ALPHA,
            gamma: DEFAULT_GAMMA,
        }
    }
}

/// One parsed `raw_params` line, before the run-level constants are applied.
#[derive(Debug, Clone, PartialEq)]
pub struct RawParam {
    pub name: String,
    pub start: f64,
    pub min: f64,
    pub max: f64,
    pub c_end: f64,
    pub r_end: f64,
}

/// Parse `raw_params`: one `name,start,min,max,c_end,r_end` line per
/// parameter. Like Fishtest, lines are split on `\n`, every field is trimmed
/// (so `\r\n` text works) and blank lines are skipped. Numbers must be finite;
/// `min ≤ start ≤ max`, `c_end > 0` and `r_end ≥ 0` are required, names must
/// be non-empty and unique, and at least one parameter must be given.
pub fn parse_raw_params(raw: &str) -> Result<Vec<RawParam>, ParamsError> {
    let mut params: Vec<RawParam> = Vec::new();
    for (idx, text) in raw.split('\n').enumerate() {
        let line = idx + 1;
        let chunks: Vec<&str> = text.split(',').map(str::trim).collect();
        if matches!(chunks[..], [""]) {
            continue;
        }
        let [name, start, min, max, c_end, r_end] = chunks[..] else {
            return Err(ParamsError::FieldCount {
                line,
                found: chunks.len(),
            });
        };
        if name.is_empty() {
            return Err(ParamsError::EmptyName { line });
        }
        // Two lines with one name would send the engine the same UCI option
        // twice with different values, so the run would tune nonsense.
        if params.iter().any(|p| p.name == name) {
            return Err(ParamsError::DuplicateName {
                line,
                name: name.to_owned(),
            });
        }
        let number = |field: &'static str, value: &str| -> Result<f64, ParamsError> {
            match value.parse::<f64>() {
                Ok(x) if x.is_finite() => Ok(x),
                _ => Err(ParamsError::BadNumber {
                    line,
                    name: name.to_owned(),
                    field,
                    value: value.to_owned(),
                }),
            }
        };
        let start = number("start", start)?;
        let min = number("min", min)?;
        let max = number("max", max)?;
        let c_end = number("c_end", c_end)?;
        let r_end = number("r_end", r_end)?;
        if min > max {
            return Err(ParamsError::MinAboveMax {
                line,
                name: name.to_owned(),
                min,
                max,
            });
        }
        if !(min <= start && start <= max) {
            return Err(ParamsError::StartOutOfRange {
                line,
                name: name.to_owned(),
                start,
                min,
                max,
            });
        }
        if c_end <= 0.0 {
            return Err(ParamsError::NonPositiveCEnd {
                line,
                name: name.to_owned(),
                c_end,
            });
        }
        if r_end < 0.0 {
            return Err(ParamsError::NegativeREnd {
                line,
                name: name.to_owned(),
                r_end,
            });
        }
        params.push(RawParam {
            name: name.to_owned(),
            start,
            min,
            max,
            c_end,
            r_end,
        });
    }
    if params.is_empty() {
        return Err(ParamsError::NoParams);
    }
    Ok(params)
}

/// Build a fresh `args.spsa` for a new run of `num_games` games.
///
/// `A = int(ratio · num_games / 2)` (or the absolute value), `num_iter =
/// num_games / 2`, and per parameter `c = c_end · num_iter^γ`,
/// `a_end = r_end · c_end²`, `a = a_end · (A + num_iter)^α`, `theta = start`.
pub fn setup_spsa(
    raw_params: &str,
    settings: &SpsaSettings,
    num_games: u64,
) -> Result<SpsaArgs, ParamsError> {
    let check = |field: &'static str, value: f64| {
        if value.is_finite() && value >= 0.0 {
            Ok(value)
        } else {
            Err(ParamsError::BadSetting { field, value })
        }
    };
    let alpha = check("alpha", settings.alpha)?;
    let gamma = check("gamma", settings.gamma)?;
    let stability = match settings.stability {
        // Python's int() truncates toward zero; the value is ≥ 0 here.
        Stability::Ratio(ratio) => (check("A ratio", ratio)? * num_games as f64 / 2.0).trunc(),
        Stability::Absolute(a) => check("A", a)?,
    };
    let num_iter = num_games / 2;
    // With no iteration c would be 0 and every step would divide by zero.
    if num_iter == 0 {
        return Err(ParamsError::TooFewGames(num_games));
    }
    let params = parse_raw_params(raw_params)?
        .into_iter()
        .map(|raw| {
            let c = raw.c_end * (num_iter as f64).powf(gamma);
            let a_end = raw.r_end * raw.c_end.powf(2.0);
            let a = a_end * (stability + num_iter as f64).powf(alpha);
            SpsaParam {
                name: raw.name,
                start: raw.start,
                min: raw.min,
                max: raw.max,
                c_end: raw.c_end,
                r_end: raw.r_end,
                c,
                a_end,
                a,
                theta: raw.start,
            }
        })
        .collect();
    Ok(SpsaArgs {
        algorithm: Some(CLASSIC_ALGORITHM.to_owned()),
        stability,
        alpha,
        gamma,
        raw_params: raw_params.to_owned(),
        iter: 0,
        num_iter,
        params,
        param_history: None,
    })
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spsa::tests::{RAW, setup};

    #[test]
    fn setup_follows_fishtest_formulas() {
        let spsa = setup();
        assert_eq!(spsa.algorithm.as_deref(), Some("classic"));
        // int(0.1 * 60000 / 2) = 3000
        assert_eq!(spsa.stability, 3000.0);
        assert_eq!(spsa.num_iter, 30_000);
        assert_eq!(spsa.iter, 0);
        let foo = &spsa.params[0];
        assert_eq!(foo.name, "Foo");
        assert_eq!(foo.c, 10.0 * 30_000f64.powf(0.101));
        assert_eq!(foo.a_end, 0.002 * 100.0);
        assert_eq!(foo.a, 0.002 * 100.0 * 33_000f64.powf(0.602));
        assert_eq!(foo.theta, 100.0);
        assert_eq!(spsa.params[1].theta, -5.5);
    }

    #[test]
    fn a_ratio_truncates_like_python_int() {
        let s = SpsaSettings {
            stability: Stability::Ratio(0.15),
            ..SpsaSettings::default()
        };
        // 0.15 * 1001 / 2 = 75.075 -> 75
        assert_eq!(setup_spsa(RAW, &s, 1001).map(|x| x.stability), Ok(75.0));
        let s = SpsaSettings {
            stability: Stability::Absolute(12.5),
            ..SpsaSettings::default()
        };
        assert_eq!(setup_spsa(RAW, &s, 1000).map(|x| x.stability), Ok(12.5));
    }

    #[test]
    fn bad_settings_are_refused() {
        for (s, field) in [
            (
                SpsaSettings {
                    alpha: -0.1,
                    ..SpsaSettings::default()
                },
                "alpha",
            ),
            (
                SpsaSettings {
                    gamma: f64::NAN,
                    ..SpsaSettings::default()
                },
                "gamma",
            ),
            (
                SpsaSettings {
                    stability: Stability::Ratio(f64::INFINITY),
                    ..SpsaSettings::default()
                },
                "A ratio",
            ),
        ] {
            match setup_spsa(RAW, &s, 1000) {
                Err(ParamsError::BadSetting { field: f, .. }) => assert_eq!(f, field),
                other => panic!("expected BadSetting({field}), got {other:?}"),
            }
        }
        assert_eq!(
            setup_spsa(RAW, &SpsaSettings::default(), 1),
            Err(ParamsError::TooFewGames(1))
        );
    }

    #[test]
    fn raw_params_accepts_blank_lines_crlf_and_spaces() {
        let raw = "\r\n  A , 1 , 0 , 2 , 0.5 , 0.002 \r\n\n   \nB,1e1,-1e2,1e2,1,0\n";
        let params = parse_raw_params(raw).expect("valid");
        assert_eq!(params.len(), 2);
        assert_eq!(params[0].name, "A");
        assert_eq!(params[0].r_end, 0.002);
        assert_eq!(params[1].start, 10.0);
        assert_eq!(params[1].r_end, 0.0);
    }

    #[test]
    fn raw_params_errors() {
        use ParamsError::*;
        let err = |raw: &str| parse_raw_params(raw).err();
        assert!(matches!(
            err("A,1,0,2,1"),
            Some(FieldCount { line: 1, found: 5 })
        ));
        assert!(matches!(
            err("\nA,1,0,2,1,0,7"),
            Some(FieldCount { line: 2, found: 7 })
        ));
        assert!(matches!(err(" ,1,0,2,1,0"), Some(EmptyName { line: 1 })));
        assert!(matches!(
            err("A,1,0,2,1,0\nA,1,0,2,1,0"),
            Some(DuplicateName { line: 2, .. })
        ));
        assert!(matches!(
            err("A,x,0,2,1,0"),
            Some(BadNumber { field: "start", .. })
        ));
        assert!(matches!(
            err("A,1,0,inf,1,0"),
            Some(BadNumber { field: "max", .. })
        ));
        assert!(matches!(
            err("A,1,0,2,NaN,0"),
            Some(BadNumber { field: "c_end", .. })
        ));
        assert!(matches!(err("A,1,3,2,1,0"), Some(MinAboveMax { .. })));
        assert!(matches!(err("A,5,0,2,1,0"), Some(StartOutOfRange { .. })));
        assert!(matches!(err("A,-1,0,2,1,0"), Some(StartOutOfRange { .. })));
        assert!(matches!(err("A,1,0,2,0,0"), Some(NonPositiveCEnd { .. })));
        assert!(matches!(err("A,1,0,2,-1,0"), Some(NonPositiveCEnd { .. })));
        assert!(matches!(err("A,1,0,2,1,-0.1"), Some(NegativeREnd { .. })));
        assert!(matches!(err(""), Some(NoParams)));
        assert!(matches!(err("\n \n"), Some(NoParams)));
        // Edges that are allowed: start on a bound, min == max.
        assert!(parse_raw_params("A,0,0,2,1,0\nB,3,3,3,1,0").is_ok());
    }
}
