//! Unit tests of the SPSA update: golden values from Fishtest, the packed signs, the bounds,
//! the errors that leave a run alone, the history.

use super::*;
use crate::spsa::tests::{RAW, setup};
use crate::spsa::{SpsaSettings, setup_spsa};
use rand::SeedableRng;
use rand::rngs::StdRng;

/// Golden values from Fishtest's formulas evaluated by CPython 3.11 with
/// numpy's packbits and zlib's crc32 (same libm `pow`, so bit-exact).
#[test]
fn golden_values_match_python() {
    let mut spsa = setup();
    assert_eq!(spsa.params[0].c, 28.326260626654786);
    assert_eq!(spsa.params[0].a, 104.99663662650573);
    assert_eq!(spsa.params[1].c, 4.248939093998217);
    assert_eq!(spsa.params[1].a, 2.3624243240963794);
    let packed = pack_flips(&[1, -1]);
    assert_eq!(packed, vec![128]);
    assert_eq!(flips_signature(&packed), 1_069_182_125);
    let mut stored = Some(SpsaTaskParams {
        iter: 100,
        packed_flips: packed,
    });
    update_spsa(&mut spsa, &mut stored, &result(7, 3, 2, 1_069_182_125)).expect("update");
    assert_eq!(spsa.params[0].theta, 100.18689536350583);
    assert_eq!(spsa.params[1].theta, -5.528034304525875);
    assert_eq!(spsa.iter, 6);
    let history = spsa.param_history.unwrap_or_default();
    // iter 6 < period 300: no sample yet.
    assert!(history.is_empty());
}

#[test]
fn history_sample_records_the_step() {
    let mut spsa = setup();
    spsa.iter = 299;
    let mut stored = Some(SpsaTaskParams {
        iter: 100,
        packed_flips: pack_flips(&[1, -1]),
    });
    update_spsa(&mut spsa, &mut stored, &result(7, 3, 2, 1_069_182_125)).expect("update");
    // iter 305 ≥ period 300: one sample of the new theta and the step.
    let history = spsa.param_history.unwrap_or_default();
    assert_eq!(history.len(), 1);
    assert_eq!(
        history[0][0],
        HistoryEntry {
            theta: 100.18689536350583,
            r: 0.0026289707141956904,
            c: 17.772674539188277,
        }
    );
    assert_eq!(history[0][1].c, 2.6659011808782407);
    assert_eq!(history[0][1].r, 0.0026289707141956926);
}

#[test]
fn packbits_matches_numpy_layout() {
    // np.packbits(np.array([1,-1,1,1,-1,-1,-1,1,1]) == 1) -> [0b10110001, 0b10000000]
    let flips = [1, -1, 1, 1, -1, -1, -1, 1, 1];
    assert_eq!(pack_flips(&flips), vec![0b1011_0001, 0b1000_0000]);
    assert_eq!(unpack_flips(&[0b1011_0001, 0x80], 9), Some(flips.to_vec()));
    assert_eq!(pack_flips(&[]), Vec::<u8>::new());
    assert_eq!(unpack_flips(&[0xff], 9), None);
    // Values from Python's zlib.crc32, and the classic CRC-32 check value.
    assert_eq!(flips_signature(b""), 0);
    assert_eq!(flips_signature(&[0x80]), 1_069_182_125);
    assert_eq!(flips_signature(&[0b1011_0001, 0x80]), 1_371_475_494);
    assert_eq!(flips_signature(b"123456789"), 0xCBF4_3926);
}

#[test]
fn request_spsa_values_and_signature() {
    let spsa = setup();
    let mut rng = StdRng::seed_from_u64(7);
    let req = request_spsa(&spsa, &mut rng).expect("draw");
    let reply = &req.reply;
    assert!(reply.task_alive);
    assert_eq!(req.spsa_params.iter, 0);
    assert_eq!(reply.sig, flips_signature(&req.spsa_params.packed_flips));
    let flips: Vec<i8> = reply.w_params.iter().map(|w| w.flip).collect();
    assert_eq!(pack_flips(&flips), req.spsa_params.packed_flips);
    for ((w, b), p) in reply.w_params.iter().zip(&reply.b_params).zip(&spsa.params) {
        let c_k = p.c; // k = 1: 1^γ = 1
        let r_k = p.a / (spsa.stability + 1.0).powf(spsa.alpha) / (c_k * c_k);
        assert_eq!(w.c, c_k);
        assert!((w.r - r_k).abs() <= 1e-15 * r_k.abs());
        assert_eq!(w.name, b.name);
        let f = f64::from(w.flip);
        assert_eq!(w.value, (p.theta + c_k * f).clamp(p.min, p.max));
        assert_eq!(b.value, (p.theta - c_k * f).clamp(p.min, p.max));
    }
    // Wire shape: Fishtest's key names.
    let json = serde_json::to_value(reply).expect("json");
    assert!(json["w_params"][0].get("R").is_some());
    assert!(json["b_params"][0].get("R").is_none());
}

#[test]
fn values_are_clipped_at_the_bounds() {
    let mut spsa = setup_spsa("P,0,0,1,5,0.002", &SpsaSettings::default(), 1000).expect("ok");
    spsa.params[0].theta = 0.0;
    let mut rng = StdRng::seed_from_u64(1);
    let req = request_spsa(&spsa, &mut rng).expect("draw");
    let (w, b) = (&req.reply.w_params[0], &req.reply.b_params[0]);
    let values = [w.value, b.value];
    assert!(values.contains(&0.0) && values.contains(&1.0));
}

fn result(wins: u64, losses: u64, draws: u64, sig: u32) -> SpsaResult {
    SpsaResult {
        num_games: wins + losses + draws,
        wins,
        losses,
        draws,
        sig: u64::from(sig),
    }
}

#[test]
fn update_moves_theta_and_consumes_params() {
    let mut spsa = setup();
    let before = spsa.clone();
    let mut rng = StdRng::seed_from_u64(3);
    let req = request_spsa(&spsa, &mut rng).expect("draw");
    let mut stored = Some(req.spsa_params.clone());
    update_spsa(&mut spsa, &mut stored, &result(5, 2, 5, req.reply.sig)).expect("update");
    assert_eq!(stored, None);
    assert_eq!(spsa.iter, 6);
    for ((p, old), w) in spsa
        .params
        .iter()
        .zip(&before.params)
        .zip(&req.reply.w_params)
    {
        let want = old.theta + w.r * w.c * 3.0 * f64::from(w.flip);
        assert_eq!(p.theta, want.clamp(old.min, old.max));
    }
    // The same batch again: params are gone.
    assert_eq!(
        update_spsa(&mut spsa, &mut stored, &result(5, 2, 5, req.reply.sig)),
        Err(SpsaError::NoStoredParams)
    );
}

#[test]
fn update_rebuilds_the_step_from_the_stored_iteration() {
    let mut spsa = setup();
    spsa.iter = 100;
    let mut rng = StdRng::seed_from_u64(11);
    let req = request_spsa(&spsa, &mut rng).expect("draw");
    // Other workers advance the run before this batch comes back.
    spsa.iter = 5000;
    let theta0 = spsa.params[0].theta;
    let mut stored = Some(req.spsa_params);
    update_spsa(&mut spsa, &mut stored, &result(3, 0, 1, req.reply.sig)).expect("update");
    let w = &req.reply.w_params[0];
    assert_eq!(
        spsa.params[0].theta,
        theta0 + w.r * w.c * 3.0 * f64::from(w.flip)
    );
    assert_eq!(spsa.iter, 5002);
}

#[test]
fn update_errors_leave_the_run_alone() {
    let mut spsa = setup();
    let mut rng = StdRng::seed_from_u64(5);
    let req = request_spsa(&spsa, &mut rng).expect("draw");
    let snapshot = spsa.clone();

    // Schema-level failures do not consume the stored params.
    let mut stored = Some(req.spsa_params.clone());
    let mut bad = result(2, 2, 2, req.reply.sig);
    bad.num_games = 8;
    assert_eq!(
        update_spsa(&mut spsa, &mut stored, &bad),
        Err(SpsaError::GameCountMismatch {
            num_games: 8,
            sum: 6
        })
    );
    assert_eq!(
        update_spsa(&mut spsa, &mut stored, &result(2, 0, 1, req.reply.sig)),
        Err(SpsaError::OddGames(3))
    );
    let overflow = SpsaResult {
        num_games: 2,
        wins: u64::MAX,
        losses: 1,
        draws: 1,
        sig: 0,
    };
    assert!(matches!(
        update_spsa(&mut spsa, &mut stored, &overflow),
        Err(SpsaError::GameCountMismatch { .. })
    ));
    assert!(stored.is_some());

    // A wrong signature consumes them (like Fishtest) but changes nothing.
    let wrong = req.reply.sig.wrapping_add(1);
    assert_eq!(
        update_spsa(&mut spsa, &mut stored, &result(1, 1, 0, wrong)),
        Err(SpsaError::SigMismatch {
            expected: req.reply.sig,
            got: u64::from(wrong)
        })
    );
    assert_eq!(stored, None);
    assert_eq!(spsa, snapshot);

    // Truncated flips.
    let mut stored = Some(SpsaTaskParams {
        iter: 0,
        packed_flips: vec![],
    });
    assert_eq!(
        update_spsa(&mut spsa, &mut stored, &result(1, 1, 0, 0)),
        Err(SpsaError::FlipCountMismatch {
            stored: 0,
            params: 2
        })
    );
    assert_eq!(spsa, snapshot);
}

#[test]
fn unknown_algorithm_is_refused() {
    let mut spsa = setup();
    spsa.algorithm = Some("sf-sgd".into());
    let mut rng = StdRng::seed_from_u64(0);
    assert_eq!(
        request_spsa(&spsa, &mut rng).err(),
        Some(SpsaError::UnknownAlgorithm("sf-sgd".into()))
    );
    spsa.algorithm = None; // legacy runs: classic
    assert!(request_spsa(&spsa, &mut rng).is_ok());
}

#[test]
fn degenerate_step_is_an_error_not_nan() {
    let mut spsa = setup();
    spsa.params[0].c = 0.0;
    let mut rng = StdRng::seed_from_u64(0);
    assert!(matches!(
        request_spsa(&spsa, &mut rng),
        Err(SpsaError::DegenerateStep { .. })
    ));
}

#[test]
fn history_is_sampled_once_per_period() {
    // 2 params, 400 games: num_iter 200, 100 samples, period 2 iterations.
    let mut spsa = setup_spsa(RAW, &SpsaSettings::default(), 400).expect("ok");
    assert_eq!(history_period(spsa.num_iter, 2), 2.0);
    let mut rng = StdRng::seed_from_u64(9);
    let mut lens = Vec::new();
    for games in [2u64, 2, 8, 2, 2] {
        let req = request_spsa(&spsa, &mut rng).expect("draw");
        let mut stored = Some(req.spsa_params);
        let res = SpsaResult {
            num_games: games,
            wins: games,
            losses: 0,
            draws: 0,
            sig: u64::from(req.reply.sig),
        };
        update_spsa(&mut spsa, &mut stored, &res).expect("update");
        lens.push(spsa.param_history.as_ref().map_or(0, Vec::len));
        // Each sample records the new theta and the step it was made with.
        if let Some(last) = spsa.param_history.as_ref().and_then(|h| h.last()) {
            assert_eq!(last[0].theta, spsa.params[0].theta);
            assert_eq!(last[0].c, req.reply.w_params[0].c);
            assert_eq!(last[0].r, req.reply.w_params[0].r);
        }
    }
    // iter: 1, 2, 6, 7, 8 -> iter/period: 0.5, 1, 3, 3.5, 4;
    // at most one sample per update, so it catches up on later ones.
    assert_eq!(lens, vec![0, 1, 2, 3, 4]);
    assert_eq!(history_period(1000, 200), 20.0);
    assert_eq!(history_period(1000, 5000), 1000.0);
    assert_eq!(history_period(0, 5), 0.0);
}
