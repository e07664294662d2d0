//! The built-in computations of floating limits, as pure functions of what the run database
//! reports (it gathers the inputs; the engine stores the results).
//!
//! Owns: the SPSA core cap per run, a run's fair share of the fleet's cores by throughput, and
//! the load-shedding value from the write-behind's lag; each fails (and the engine then keeps
//! the old value and backs off) on inputs it cannot use.
//! Must not: do I/O, lock, or know where its inputs come from.

/// One unfinished run as the computations see it.
#[derive(Debug, Clone)]
pub struct RunLoad {
    pub id: String,
    /// Number of SPSA parameters (None: not an SPSA run).
    pub spsa_params: Option<usize>,
    pub throughput: f64,
    /// Cores its active tasks hold.
    pub cores: u64,
    /// Approved and still wanting games.
    pub active: bool,
}

/// The SPSA core cap: `floor(200000 / √params)` cores for each SPSA run (other runs get no
/// value of their own, so the limit's default, unlimited, applies).
pub fn spsa_core_cap(runs: &[RunLoad]) -> Result<Vec<(String, u64)>, String> {
    Ok(runs
        .iter()
        .filter_map(|r| {
            let n = r.spsa_params.filter(|n| *n > 0)?;
            let cap = crate::spsa::max_cores(n);
            cap.is_finite()
                .then(|| (r.id.clone(), cap.floor().max(1.0) as u64))
        })
        .collect())
}

/// Each active run's fair share of the fleet's cores: `ceil(1.1 × fleet × throughput_i /
/// Σ throughput)`, never below `floor` (so a small fleet, or a fleet that is growing, is not
/// held back). Fails on a throughput that is not a finite number ≥ 0.
pub fn fair_share(runs: &[RunLoad], floor: u64) -> Result<Vec<(String, u64)>, String> {
    let mut fleet: u64 = 0;
    let mut total_tp = 0.0;
    for r in runs.iter().filter(|r| r.active) {
        if !r.throughput.is_finite() || r.throughput < 0.0 {
            return Err(format!("run {} has throughput {}", r.id, r.throughput));
        }
        fleet = fleet.saturating_add(r.cores);
        total_tp += r.throughput;
    }
    if total_tp <= 0.0 {
        return Ok(Vec::new());
    }
    Ok(runs
        .iter()
        .filter(|r| r.active)
        .map(|r| {
            // The epsilon keeps an exact product (110.000…01) from rounding up a whole core.
            let share = (1.1 * fleet as f64 * r.throughput / total_tp - 1e-9).ceil();
            let share = if share.is_finite() { share as u64 } else { 0 };
            (r.id.clone(), share.max(floor))
        })
        .collect())
}

/// Lag (seconds) under which the write-behind counts as keeping up.
pub const LAG_OK_S: f64 = 5.0;

/// Load shedding: `default_max` while the oldest unwritten change is under [`LAG_OK_S`] old,
/// then `default_max × LAG_OK_S / lag` (at least 1). Fails on a lag that is not a number.
pub fn write_behind_lag(lag_s: f64, default_max: u64) -> Result<u64, String> {
    if !lag_s.is_finite() || lag_s < 0.0 {
        return Err(format!("write-behind lag {lag_s} is not a duration"));
    }
    if lag_s <= LAG_OK_S {
        return Ok(default_max);
    }
    let v = (default_max as f64 * LAG_OK_S / lag_s).floor();
    Ok((v as u64).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str, tp: f64, cores: u64, spsa: Option<usize>) -> RunLoad {
        RunLoad {
            id: id.into(),
            spsa_params: spsa,
            throughput: tp,
            cores,
            active: true,
        }
    }

    #[test]
    fn spsa_cap_is_fishtests_budget() {
        let v = spsa_core_cap(&[run("a", 100.0, 0, Some(4)), run("b", 100.0, 0, None)])
            .expect("computes");
        assert_eq!(v, vec![("a".to_string(), 100_000)]);
    }

    #[test]
    fn fair_share_follows_throughput() {
        let v = fair_share(&[run("a", 100.0, 300, None), run("b", 300.0, 100, None)], 8)
            .expect("computes");
        // fleet 400: a gets 1.1 × 100, b 1.1 × 300.
        assert_eq!(v, vec![("a".into(), 110), ("b".into(), 330)]);
        let small = fair_share(&[run("a", 100.0, 2, None)], 8).expect("computes");
        assert_eq!(small, vec![("a".into(), 8)]);
        assert!(fair_share(&[run("a", f64::NAN, 2, None)], 8).is_err());
    }

    #[test]
    fn lag_sheds_load() {
        assert_eq!(write_behind_lag(0.5, 100), Ok(100));
        assert_eq!(write_behind_lag(10.0, 100), Ok(50));
        assert_eq!(write_behind_lag(1e9, 100), Ok(1));
        assert!(write_behind_lag(f64::NAN, 100).is_err());
    }
}
