//! Unit tests of the raw statistics (bounds, LLRs, ranges) against their formulas.

use super::*;

fn close(got: f64, want: f64, tol: f64) {
    assert!(
        (got - want).abs() <= tol * want.abs().max(1.0),
        "got {got}, want {want}"
    );
}

fn normalized(elo0: f64, elo1: f64, overshoot: Option<Overshoot>) -> SprtParams {
    SprtParams {
        alpha: 0.05,
        beta: 0.05,
        elo0,
        elo1,
        elo_model: EloModel::Normalized,
        batch_size: 16,
        overshoot,
    }
}

/// A finished SPRT of `tests/data/fishtest-db` (run 6a5ef17522dfea1c957407ba), with
/// the numbers Fishtest's page code computes for it
/// (`tests/data/stats-page-reference.json`).
fn counts_a() -> Counts {
    Counts {
        trinomial: [1213, 6146, 1473],
        pentanomial: Some([22, 804, 2517, 1038, 35]),
    }
}

#[test]
fn bayeselo_bounds_use_the_trinomial_sigma() {
    let raw = raw_stats(&counts_a(), Some(&normalized(0.0, 2.0, None))).unwrap();
    let b = raw.bounds.unwrap();
    // Fishtest: belo1 2.1355291670446452, lelo1 0.9646615078081628 (σ₅).
    close(b.belo1.unwrap(), 2.135_529_167_044_645_2, 1e-9);
    close(b.lelo1, 0.964_661_507_808_162_8, 1e-9);
    close(b.score1, 0.501_388_255_937_410_2, 1e-12);
    // By hand: σ₃ of the trinomial distribution, score03 = 2/(800/ln 10)·σ₃ + ½.
    let t = &raw.trinomial;
    let p: [f64; 3] = [1213.0, 6146.0, 1473.0].map(|x: f64| x / 8832.0);
    let mean = 0.5 * p[1] + p[2];
    let var = p[0] * mean * mean
        + p[1] * (0.5 - mean) * (0.5 - mean)
        + p[2] * (1.0 - mean) * (1.0 - mean);
    close(t.stdev3, var.sqrt(), 1e-12);
    let score13 = 2.0 / NELO_DIVIDED_BY_NT * var.sqrt() + 0.5;
    close(b.score13, score13, 1e-14);
    let lelo13 = -400.0 * (1.0 / score13 - 1.0).log10();
    close(b.lelo13, lelo13, 1e-9);
    // elo_to_bayeselo at the trinomial draw ratio.
    let want = elo_to_bayeselo(lelo13, t.draw_ratio).unwrap().0;
    assert_eq!(b.belo1, Some(want));
    assert!((b.belo1.unwrap() - b.lelo1).abs() > 1.0, "not the σ₅ bound");
}

#[test]
fn trinomial_llrs_use_the_trinomial_bounds_and_elo_the_deciding_ones() {
    let raw = raw_stats(&counts_a(), Some(&normalized(0.0, 2.0, None))).unwrap();
    let l3 = raw.llr3.as_ref().unwrap();
    // Fishtest's page: llr3_exact 2.5650369480207846, llr3_alt 2.564933042210532,
    // llr3_alt2 2.5715160486796194, llr3_be 2.5665924477749247, llr3 2.5678813609990723.
    close(l3.exact.unwrap(), 2.565_036_948_020_784_6, 1e-8);
    close(l3.alt.unwrap(), 2.564_933_042_210_532, 1e-8);
    close(l3.alt2.unwrap(), 2.571_516_048_679_619_4, 1e-8);
    close(l3.be.unwrap(), 2.566_592_447_774_924_7, 1e-8);
    close(l3.llr.unwrap(), 2.567_881_360_999_072_3, 1e-8);
    // alt2 by hand: N·(s1 − s0)(2μ − s0 − s1)/(2·var) with the σ₃ scores.
    let b = raw.bounds.unwrap();
    let t = &raw.trinomial;
    let by_hand = t.games3 * (b.score13 - b.score03) * (2.0 * t.avg3 - b.score03 - b.score13)
        / (2.0 * t.var3);
    close(l3.alt2.unwrap(), by_hand, 1e-12);
    // Elo and LOS of the trinomial view: the σ₅ bounds (elo3 10.230905870028227,
    // [6.238401659284823, 14.226113253509512], LOS 0.999999746822011).
    let e3 = raw.elo3.unwrap();
    close(e3.elo, 10.230_905_870_028_227, 1e-8);
    close(e3.lower, 6.238_401_659_284_823, 1e-8);
    close(e3.upper, 14.226_113_253_509_512, 1e-8);
    close(e3.los, 0.999_999_746_822_011, 1e-9);
}

#[test]
fn llr_jumps_are_under_the_expectation_statistic() {
    let raw = raw_stats(&counts_a(), Some(&normalized(0.0, 2.0, None))).unwrap();
    let j3 = raw.llr3.as_ref().unwrap().jumps.clone().unwrap();
    let j5 = raw.llr5.as_ref().unwrap().jumps.clone().unwrap();
    // Fishtest: llrjumps3 and llrjumps5 of the reference.
    let want3 = [
        -0.009_734_270_654_500_72,
        0.000_243_584_498_473_781_16,
        0.008_535_656_618_741_339,
    ];
    let want5 = [
        -0.029_929_414_826_295_186,
        -0.012_569_250_332_689_741,
        0.000_632_395_290_855_347_6,
        0.011_010_754_406_543_866,
        0.019_384_433_288_784_92,
    ];
    for (g, w) in j3.iter().zip(want3) {
        close(*g, w, 1e-8);
    }
    for (g, w) in j5.iter().zip(want5) {
        close(*g, w, 1e-8);
    }
    // Independently: the jumps of the MLEs with mean score0 and score1.
    let b = raw.bounds.unwrap();
    let (_, pdf5) = results_to_pdf(&[22.0, 804.0, 2517.0, 1038.0, 35.0]).unwrap();
    let p0 = crate::mle_expected(&pdf5, b.score0).unwrap();
    let p1 = crate::mle_expected(&pdf5, b.score1).unwrap();
    for i in 0..5 {
        close(j5[i], p1[i].1.ln() - p0[i].1.ln(), 1e-12);
    }
}

#[test]
fn ranges_and_comparison_match_the_formulas() {
    let c = Counts {
        trinomial: [1194, 5516, 1290],
        pentanomial: Some([21, 841, 2190, 917, 31]),
    };
    let raw = raw_stats(&c, None).unwrap();
    let t = &raw.trinomial;
    // Fishtest (run 6a5ef30622dfea1c957407c0): var3_l 0.07505550865573848,
    // var3_u 0.08012249134426151, stdev3_l 0.2739626044841494, avg3_l 0.4998961595241312.
    close(t.var3_l, 0.075_055_508_655_738_48, 1e-10);
    close(t.var3_u, 0.080_122_491_344_261_51, 1e-10);
    close(t.stdev3_l, 0.273_962_604_484_149_4, 1e-10);
    close(t.avg3_l, 0.499_896_159_524_131_2, 1e-10);
    close(t.nelo3_l.unwrap(), -0.130_110_155_559_816_28, 1e-8);
    let p = raw.pentanomial.as_ref().unwrap();
    close(p.var5, 0.030_682_75, 1e-12);
    close(p.var5_per_game_u, 0.063_829_036_801_742_19, 1e-10);
    close(p.avg5_u, 0.511_428_317_433_391_6, 1e-10);
    close(p.nelo5_u.unwrap(), 16.029_052_149_349_663, 1e-8);
    close(p.results5_dd_prob, 0.469_75, 1e-12);
    close(p.rms_bias_elo, 90.499_489_908_942_56, 1e-9);
    // By hand: var·(1 ± z·√((κ + 2)/N)).
    let z = phi_inv(0.975);
    let by_hand = t.var3 * (1.0 + z * ((t.exkurt3 + 2.0) / 8000.0).sqrt());
    close(t.var3_u, by_hand, 1e-14);
    // Fixed games: get_elo of each view.
    let e5 = raw.elo5.unwrap();
    close(e5.los, 0.984_858_818_135_237_3, 1e-9);
    close(raw.elo3.unwrap().lower, -0.072_777_355_136_615_54, 1e-8);
    assert!(raw.bounds.is_none() && raw.llr3.is_none() && raw.overshoot.is_none());
}

#[test]
fn no_games_has_neutral_values() {
    let c = Counts {
        trinomial: [0, 0, 0],
        pentanomial: Some([0; 5]),
    };
    let raw = raw_stats(&c, Some(&normalized(0.0, 2.0, None))).unwrap();
    let t = &raw.trinomial;
    close(t.games3, 0.003, 1e-12);
    close(t.avg3, 0.5, 1e-12);
    close(t.var3_l, -4.050_504_372_938_867, 1e-9);
    assert_eq!(t.stdev3_l, 0.0);
    let p = raw.pentanomial.as_ref().unwrap();
    close(p.games5, 0.01, 1e-12);
    close(p.ratio, 1.5, 1e-12);
    assert_eq!(p.rms_bias, 0.0);
    let b = raw.bounds.unwrap();
    // Fishtest: belo1 1.8371401363257842, lelo1 2.0000220916813682.
    close(b.belo1.unwrap(), 1.837_140_136_325_784_2, 1e-9);
    close(b.lelo1, 2.000_022_091_681_368_2, 1e-9);
    let e5 = raw.elo5.unwrap();
    assert_eq!((e5.lower, e5.upper), (-1000.0, 1000.0));
    close(e5.los, 0.5, 1e-9);
    assert_eq!(raw.overshoot, Some([0.0, 0.0]));
}

#[test]
fn logistic_and_bayeselo_bounds() {
    let c = counts_a();
    let mut s = normalized(0.0, 2.0, None);
    s.elo_model = EloModel::Logistic;
    let raw = raw_stats(&c, Some(&s)).unwrap();
    let b = raw.bounds.unwrap();
    assert_eq!((b.lelo0, b.lelo1, b.lelo13), (0.0, 2.0, 2.0));
    let sc = logistic(2.0).unwrap();
    close(b.score1, sc, 1e-15);
    close(
        b.nelo1,
        NELO_DIVIDED_BY_NT * (sc - 0.5) / raw.pentanomial.as_ref().unwrap().stdev5_per_game,
        1e-14,
    );
    close(
        b.nelo13,
        NELO_DIVIDED_BY_NT * (sc - 0.5) / raw.trinomial.stdev3,
        1e-14,
    );
    let l5 = raw.llr5.as_ref().unwrap();
    close(
        l5.llr.unwrap(),
        llr_logistic(0.0, 2.0, &[22.0, 804.0, 2517.0, 1038.0, 35.0]).unwrap(),
        1e-14,
    );
    s.elo_model = EloModel::BayesElo;
    let raw = raw_stats(&c, Some(&s)).unwrap();
    let b = raw.bounds.unwrap();
    assert_eq!((b.belo0, b.belo1), (Some(0.0), Some(2.0)));
    let de = raw.drawelo.unwrap();
    close(b.lelo1, bayeselo_to_elo(2.0, de).unwrap(), 1e-15);
    assert_eq!(b.batch_size_games, 32);
}

#[test]
fn overshoot_is_zero_without_a_record() {
    assert_eq!(expected_overshoot(None), [0.0, 0.0]);
    let o = Overshoot {
        m0: -2.0,
        sq0: 1.0,
        m1: 4.0,
        sq1: 2.0,
        ..Overshoot::default()
    };
    assert_eq!(expected_overshoot(Some(&o)), [0.25, 0.25]);
    let tri_only = Counts {
        trinomial: [100, 300, 120],
        pentanomial: None,
    };
    let raw = raw_stats(&tri_only, Some(&normalized(0.0, 2.0, Some(o)))).unwrap();
    assert!(raw.overshoot.is_none() && raw.llr5.is_none());
    assert_eq!(raw.bounds.unwrap().batch_size_games, 1);
}
