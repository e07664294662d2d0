//! Unit tests of the purge maths: the crash/time rule, the chi-squared rounds, the residuals.

use super::*;

fn stats(p: [u64; 5]) -> PurgeStats {
    // W/L/D consistent with the pentanomial, reading every middle pair
    // as DD.
    PurgeStats {
        wins: 2 * p[4] + p[3],
        losses: 2 * p[0] + p[1],
        draws: p[1] + 2 * p[2] + p[3],
        crashes: 0,
        time_losses: 0,
        pentanomial: Some(p),
    }
}

/// An honest fleet: 20 workers of 300 pairs each, drawn with numpy
/// (`default_rng(20240917).multinomial(300, [.03, .22, .5, .22, .03])`).
/// The golden values in these tests come from Fishtest's `get_chi2`
/// algorithm run with numpy 2.4.6 / scipy 1.17.1 on the same data.
const FLEET: [[u64; 5]; 20] = [
    [12, 62, 148, 73, 5],
    [6, 70, 147, 65, 12],
    [12, 62, 154, 63, 9],
    [7, 55, 164, 66, 8],
    [5, 56, 150, 79, 10],
    [8, 64, 144, 72, 12],
    [4, 72, 147, 71, 6],
    [10, 60, 158, 64, 8],
    [7, 67, 148, 70, 8],
    [9, 71, 151, 61, 8],
    [8, 66, 144, 73, 9],
    [13, 52, 163, 60, 12],
    [14, 64, 160, 60, 2],
    [10, 58, 162, 61, 9],
    [11, 55, 158, 71, 5],
    [12, 74, 155, 55, 4],
    [6, 70, 152, 60, 12],
    [4, 63, 151, 71, 11],
    [14, 64, 147, 70, 5],
    [5, 68, 146, 71, 10],
];
const ALL_WINS: [u64; 5] = [0, 0, 0, 0, 300];
/// A worker that is off, but only by about 4.7 sigma.
const LUCKY: [u64; 5] = [4, 46, 136, 80, 34];

fn honest_keys(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("w{i:02}-0000-4000-8000-000000000000"))
        .collect()
}

fn fleet(keys: &[String]) -> Vec<PurgeTask<'_>> {
    keys.iter()
        .zip(FLEET)
        .map(|(k, p)| PurgeTask {
            unique_key: k,
            stats: stats(p),
            bad: false,
        })
        .collect()
}

/// `FLEET` plus one extra worker (key index 20) with pentanomial `odd`.
fn fleet_plus(keys: &[String], odd: [u64; 5]) -> Vec<PurgeTask<'_>> {
    let mut tasks = fleet(&keys[..20]);
    tasks.push(PurgeTask {
        unique_key: &keys[20],
        stats: stats(odd),
        bad: false,
    });
    tasks
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn crash_or_time_edges() {
    let s = |games: u64, crashes: u64, time_losses: u64| PurgeStats {
        wins: games,
        crashes,
        time_losses,
        ..PurgeStats::default()
    };
    assert!(!crash_or_time(&s(100, 3, 0)));
    assert!(crash_or_time(&s(100, 4, 0)));
    assert!(crash_or_time(&s(0, 4, 0)));
    // Needs more than 20 games.
    assert!(!crash_or_time(&s(20, 0, 20)));
    assert!(crash_or_time(&s(21, 0, 3)));
    assert!(!crash_or_time(&s(21, 0, 2)));
    // Exactly 10% is not more than 10%.
    assert!(!crash_or_time(&s(30, 0, 3)));
    assert!(crash_or_time(&s(30, 0, 4)));
    assert!(!crash_or_time(&s(1000, 0, 100)));
    assert!(crash_or_time(&s(1000, 0, 101)));
}

#[test]
fn honest_fleet_is_clean() {
    let keys = honest_keys(20);
    let tasks = fleet(&keys);
    let chi2 = get_chi2(&tasks, &HashSet::new());
    assert_eq!(chi2.dof, 38);
    assert!(close(chi2.chi2, 28.214426776218467), "{}", chi2.chi2);
    assert!(close(chi2.p, 0.8766078083131523), "{}", chi2.p);
    let golden = [
        0.0,
        0.0,
        0.0,
        0.5792487622842021,
        1.3058744149324109,
        0.13874443476863751,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.19147896298641437,
        0.8425256518837058,
        0.0,
        0.0,
        1.7194613557578515,
        0.0,
        0.0,
        0.0,
        0.0,
    ];
    assert_eq!(chi2.residuals.len(), 20);
    for ((w, key), want) in chi2.residuals.iter().zip(&keys).zip(golden) {
        assert_eq!(&w.unique_key, key, "first-appearance order");
        assert!(close(w.residual, want), "{key}: {} vs {want}", w.residual);
        assert_eq!(residual_to_color(w.residual, &chi2), ResidualColor::Green);
    }
    for t in [AUTO_PURGE, MANUAL_PURGE] {
        assert!(get_bad_workers(&tasks, t, 10).is_empty());
        assert!(!plan_purge(&tasks, t, PURGE_ROUNDS).purged());
    }
}

#[test]
fn tasks_are_grouped_by_worker() {
    // Worker 3's games split over three tasks give the same table.
    let keys = honest_keys(20);
    let mut tasks = fleet(&keys);
    tasks[3].stats = stats([3, 20, 60, 30, 4]);
    tasks.push(PurgeTask {
        unique_key: &keys[3],
        stats: stats([4, 35, 104, 36, 4]),
        bad: false,
    });
    tasks.push(PurgeTask {
        unique_key: &keys[3],
        stats: stats([0; 5]),
        bad: false,
    });
    let chi2 = get_chi2(&tasks, &HashSet::new());
    assert_eq!(chi2.residuals.len(), 20);
    assert!(close(chi2.chi2, 28.214426776218467));
    assert!(close(
        chi2.residual(&keys[3]).unwrap_or(f64::NAN),
        0.5792487622842021
    ));
}

#[test]
fn cheater_is_flagged_alone() {
    let mut keys = honest_keys(20);
    keys.push("cheat000-0000-4000-8000-000000000000".into());
    let mut tasks = fleet_plus(&keys, ALL_WINS);
    let chi2 = get_chi2(&tasks, &HashSet::new());
    assert_eq!(chi2.dof, 40);
    assert!(close(chi2.chi2, 814.273509507268), "{}", chi2.chi2);
    assert_eq!(chi2.p, 0.0);
    let r = chi2.residual(&keys[20]).unwrap_or(f64::NAN);
    assert!(close(r, 27.899644691466143), "{r}");
    for t in [AUTO_PURGE, MANUAL_PURGE] {
        // Even with many rounds only the cheater goes: without it the
        // fleet is homogeneous again.
        let bad = get_bad_workers(&tasks, t, 10);
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert_eq!(bad[0].unique_key, keys[20]);
        assert!(close(bad[0].residual, 27.899644691466143));
        assert_eq!(bad[0].color, ResidualColor::Red);

        let plan = plan_purge(&tasks, t, PURGE_ROUNDS);
        assert_eq!(plan.bad_tasks.len(), 1);
        assert_eq!(plan.bad_tasks[0].index, 20);
        assert_eq!(plan.bad_tasks[0].reason, BadReason::Chi2);
        assert_eq!(plan.bad_tasks[0].color, ResidualColor::Red);
    }
    // Once it is bad, a second purge finds nothing.
    tasks[20].bad = true;
    assert!(!plan_purge(&tasks, MANUAL_PURGE, PURGE_ROUNDS).purged());
}

#[test]
fn thresholds_separate_manual_from_auto() {
    let mut keys = honest_keys(20);
    keys.push("lucky000-0000-4000-8000-000000000000".into());
    let tasks = fleet_plus(&keys, LUCKY);
    let chi2 = get_chi2(&tasks, &HashSet::new());
    assert!(close(chi2.p, 0.05417407244948125), "{}", chi2.p);
    let r = chi2.residual(&keys[20]).unwrap_or(f64::NAN);
    assert!(close(r, 4.713442683998272), "{r}");
    // 4.71 > 4.5 (manual) but < 7 (auto), and p is above both p's.
    let manual = plan_purge(&tasks, MANUAL_PURGE, PURGE_ROUNDS);
    assert_eq!(manual.bad_tasks.len(), 1);
    assert_eq!(manual.bad_tasks[0].index, 20);
    assert_eq!(manual.bad_tasks[0].color, ResidualColor::Red);
    assert!(!plan_purge(&tasks, AUTO_PURGE, PURGE_ROUNDS).purged());
    // A low table p-value makes every worker eligible: the worst goes.
    let strict = PurgeThresholds {
        p: 0.06,
        res: f64::INFINITY,
    };
    let bad = get_bad_workers(&tasks, strict, 1);
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0].unique_key, keys[20]);
}

#[test]
fn tiny_samples_give_no_false_positive() {
    // 20 workers with 4 pairs each, one of them all wins: every expected
    // cell is ≤ 5, so all are dropped and nothing can be concluded.
    let keys = honest_keys(20);
    let mut tasks: Vec<PurgeTask<'_>> = keys
        .iter()
        .map(|k| PurgeTask {
            unique_key: k,
            stats: stats([0, 1, 2, 1, 0]),
            bad: false,
        })
        .collect();
    tasks[0].stats = stats([0, 0, 0, 0, 4]);
    let chi2 = get_chi2(&tasks, &HashSet::new());
    assert!(chi2.p.is_nan() && chi2.residuals.is_empty());
    assert!(get_bad_workers(&tasks, MANUAL_PURGE, 10).is_empty());
    // A lone worker, and no games at all, are empty tables too.
    assert!(get_chi2(&tasks[..1], &HashSet::new()).p.is_nan());
    let zero: Vec<PurgeTask<'_>> = keys
        .iter()
        .map(|k| PurgeTask {
            unique_key: k,
            stats: PurgeStats {
                pentanomial: Some([0; 5]),
                ..PurgeStats::default()
            },
            bad: false,
        })
        .collect();
    assert!(get_chi2(&zero, &HashSet::new()).p.is_nan());
    assert_eq!(
        residual_to_color(0.0, &Chi2::empty()),
        ResidualColor::Red,
        "NaN thresholds paint red, as in Fishtest"
    );
}

#[test]
fn thin_workers_are_dropped_iteratively() {
    // Cells [pair W, pair L, pair D]: A [0, 40, 0], B [47, 6, 47],
    // C [200, 10, 200], D [190, 12, 210]. Pass 1 drops A (expected L
    // 2.75); only without A's losses does B's expected L fall to ≤ 5, so
    // pass 2 drops B, leaving C and D.
    let mk = |key, p| PurgeTask {
        unique_key: key,
        stats: stats(p),
        bad: false,
    };
    let tasks = [
        mk("A", [20, 20, 0, 0, 0]),
        mk("B", [3, 3, 47, 27, 20]),
        mk("C", [5, 5, 200, 100, 100]),
        mk("D", [6, 6, 210, 95, 95]),
    ];
    let chi2 = get_chi2(&tasks, &HashSet::new());
    let kept: Vec<&str> = chi2
        .residuals
        .iter()
        .map(|w| w.unique_key.as_str())
        .collect();
    assert_eq!(kept, ["C", "D"]);
    assert_eq!(chi2.dof, 2);
    assert_eq!(chi2.residual_or_inf("B"), f64::INFINITY);
    // Excluding a worker works the same way as it being bad.
    let without_c = get_chi2(&tasks, &HashSet::from(["C".to_owned()]));
    assert!(without_c.residuals.iter().all(|w| w.unique_key != "C"));
}

#[test]
fn chi2_matches_hand_computation() {
    // Two workers, cells [W, L, D]: [30, 20, 50] and [20, 30, 50].
    // Expected: [25, 25, 50] each; chi² = 4·(25/25) = 4, dof 2,
    // p = exp(−2). Each row: chi² 2, adjusted 2 / (1 − 1/2) = 4,
    // sf = exp(−2), z = isf(exp(−2)).
    let a = "a";
    let b = "b";
    let mk = |key, p: [u64; 5]| PurgeTask {
        unique_key: key,
        stats: PurgeStats {
            pentanomial: Some(p),
            ..PurgeStats::default()
        },
        bad: false,
    };
    let tasks = [mk(a, [10, 10, 50, 10, 20]), mk(b, [10, 20, 50, 10, 10])];
    let chi2 = get_chi2(&tasks, &HashSet::new());
    assert_eq!(chi2.dof, 2);
    assert!((chi2.chi2 - 4.0).abs() < 1e-12);
    assert!((chi2.p - (-2.0f64).exp()).abs() < 1e-12);
    // scipy: norm.isf(exp(-2)) = 1.10151962849875,
    // norm.ppf(1 - 0.05/2) = 1.959963984540054,
    // norm.ppf(1 - 0.01/2) = 2.5758293035489004.
    let r = chi2.residual(a).unwrap_or(f64::NAN);
    assert!(close(r, 1.10151962849875), "{r}");
    assert!(close(chi2.z_95, 1.959963984540054));
    assert!(close(chi2.z_99, 2.5758293035489004));
}

#[test]
fn trinomial_runs_use_wld() {
    let mk = |key, w, l, d| PurgeTask {
        unique_key: key,
        stats: PurgeStats {
            wins: w,
            losses: l,
            draws: d,
            ..PurgeStats::default()
        },
        bad: false,
    };
    let tasks = [mk("a", 30, 20, 50), mk("b", 20, 30, 50)];
    let chi2 = get_chi2(&tasks, &HashSet::new());
    assert!((chi2.chi2 - 4.0).abs() < 1e-12);
}

#[test]
fn crash_task_skips_the_chi2_rounds() {
    let mut keys = honest_keys(20);
    keys.push("cheat000-0000-4000-8000-000000000000".into());
    let mut tasks = fleet_plus(&keys, ALL_WINS);
    tasks[4].stats.crashes = 4;
    let plan = plan_purge(&tasks, AUTO_PURGE, PURGE_ROUNDS);
    assert_eq!(plan.bad_tasks.len(), 1);
    let t = &plan.bad_tasks[0];
    assert_eq!((t.index, t.reason), (4, BadReason::CrashOrTime));
    assert_eq!((t.residual, t.color), (10.0, ResidualColor::Red));
    // The crash task is out of the displayed table.
    assert!(plan.chi2.residual(&keys[4]).is_none());
    // With two rounds, one is left for the cheater.
    let plan = plan_purge(&tasks, AUTO_PURGE, 2);
    assert_eq!(plan.bad_tasks.len(), 2);
    assert_eq!(plan.bad_tasks[1].index, 20);
    assert_eq!(plan.bad_tasks[1].reason, BadReason::Chi2);
    // Already-bad tasks are not purged again.
    tasks[4].bad = true;
    let plan = plan_purge(&tasks, AUTO_PURGE, PURGE_ROUNDS);
    assert_eq!(plan.bad_tasks.len(), 1);
    assert_eq!(plan.bad_tasks[0].index, 20);
}

#[test]
fn residual_colours() {
    let keys = honest_keys(20);
    let chi2 = get_chi2(&fleet(&keys), &HashSet::new());
    // Bonferroni over 20 rows: ppf(1 − 0.05/20), ppf(1 − 0.01/20).
    assert!(close(chi2.z_95, 2.807033768343811));
    assert!(close(chi2.z_99, 3.2905267314919255));
    assert_eq!(residual_to_color(2.8, &chi2), ResidualColor::Green);
    assert_eq!(residual_to_color(-2.8, &chi2), ResidualColor::Green);
    assert_eq!(residual_to_color(2.81, &chi2), ResidualColor::Yellow);
    assert_eq!(residual_to_color(3.3, &chi2), ResidualColor::Red);
    assert_eq!(residual_to_color(f64::INFINITY, &chi2), ResidualColor::Red);
    assert_eq!(
        serde_json::to_value(ResidualColor::Yellow).ok(),
        Some(serde_json::json!("yellow"))
    );
    let legacy: Result<ResidualColor, _> = serde_json::from_str("\"#FF6A6A\"");
    assert_eq!(legacy.ok(), Some(ResidualColor::Red));
}

#[test]
fn task_residual_for_display() {
    let keys = honest_keys(20);
    let mut tasks = fleet(&keys);
    let chi2 = get_chi2(&tasks, &HashSet::new());
    let (r, c) = task_residual(&tasks[15], &chi2);
    assert!(close(r, 1.7194613557578515));
    assert_eq!(c, ResidualColor::Green);
    tasks[15].stats.crashes = 5;
    assert_eq!(task_residual(&tasks[15], &chi2), (10.0, ResidualColor::Red));
    let stranger = PurgeTask {
        unique_key: "nobody",
        stats: PurgeStats::default(),
        bad: false,
    };
    assert_eq!(
        task_residual(&stranger, &chi2),
        (f64::INFINITY, ResidualColor::Red)
    );
}

#[test]
fn flags() {
    let sprt = |state| RunKind::Sprt {
        state,
        elo0: 0.0,
        elo1: 2.0,
    };
    let green = RunFlags {
        is_green: true,
        is_yellow: false,
    };
    let yellow = RunFlags {
        is_green: false,
        is_yellow: true,
    };
    let none = RunFlags::default();
    assert_eq!(run_flags(sprt(SprtState::Accepted), 10, 20), green);
    assert_eq!(run_flags(sprt(SprtState::Rejected), 11, 10), yellow);
    assert_eq!(run_flags(sprt(SprtState::Rejected), 10, 10), none);
    assert_eq!(run_flags(sprt(SprtState::Running), 11, 10), none);
    let non_regression = RunKind::Sprt {
        state: SprtState::Accepted,
        elo0: -1.75,
        elo1: 0.25,
    };
    // Blue on the pages, green in the flags (Fishtest's run schema computes it so).
    assert_eq!(run_flags(non_regression, 10, 10), green);
    let fixed = |los| RunKind::FixedGames { los };
    assert_eq!(run_flags(fixed(0.96), 1, 2), green);
    assert_eq!(run_flags(fixed(0.95), 1, 2), none);
    assert_eq!(run_flags(fixed(0.04), 3, 2), yellow);
    assert_eq!(run_flags(fixed(0.04), 2, 3), none);
    assert_eq!(run_flags(fixed(0.05), 3, 2), none);
    assert_eq!(run_flags(fixed(f64::NAN), 3, 2), none);
    assert_eq!(run_flags(RunKind::Spsa, 3, 2), none);
}
