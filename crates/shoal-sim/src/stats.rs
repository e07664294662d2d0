//! What a simulated worker says and reports: its `worker_info`, the games it "plays", the
//! batch boundaries of its updates and the PGN it uploads.
//!
//! Owns: a realistic spread of machines (concurrency 1–16, memory that fits it, OS, compiler,
//! arch) with one unique key per worker (the short name `user-Ncores-<first 8 chars>` must
//! never collide); game outcomes drawn from an Elo and a draw rate as game *pairs*, so the
//! cumulative `Stats` always satisfy the pentanomial invariants the server checks; the batch
//! sizes of the official worker (docs/protocol.md#update-batches); a small valid gzip+base64
//! PGN.
//! Must not: do I/O, or invent results the server could not have received from a real worker.
//! It shares the server's vocabulary through [`shoal_protocol`] (`Stats` and its consistency
//! check, the time-control parser, the worker version) instead of copying it; that its
//! `worker_info` passes the server's own validator is checked by the integration tests.

use std::io::Write as _;

use base64::Engine as _;
use rand::Rng;
use serde_json::{Map, Value, json};

use shoal_protocol::{REFERENCE_NPS, Stats, TimeControl, WORKER_VERSION, parse_tc, tc_duration};

/// One machine model: weight in the fleet, and what it reports.
struct Machine {
    weight: u32,
    uname: &'static str,
    architecture: [&'static str; 2],
    compiler: &'static str,
    gcc_version: [i64; 3],
    worker_arch: &'static str,
    arch: &'static str,
    /// Base engine nodes per second per thread (the bench), before ±15% noise.
    nps: f64,
}

const MACHINES: &[Machine] = &[
    Machine {
        weight: 40,
        uname: "Linux 6.1.0-18-amd64",
        architecture: ["64bit", "ELF"],
        compiler: "g++",
        gcc_version: [12, 2, 0],
        worker_arch: "x86-64-avx2",
        arch: "64bit AVX2 SSE41 SSSE3 SSE2 POPCNT",
        nps: 720_000.0,
    },
    Machine {
        weight: 20,
        uname: "Linux 5.15.0-105-generic",
        architecture: ["64bit", "ELF"],
        compiler: "g++",
        gcc_version: [11, 4, 0],
        worker_arch: "x86-64-bmi2",
        arch: "64bit BMI2 AVX2 SSE41 SSSE3 SSE2 POPCNT",
        nps: 760_000.0,
    },
    Machine {
        weight: 10,
        uname: "Linux 6.8.0-45-generic",
        architecture: ["64bit", "ELF"],
        compiler: "g++",
        gcc_version: [13, 2, 0],
        worker_arch: "x86-64-vnni512",
        arch: "64bit VNNI BMI2 AVX512 AVX2 SSE41 SSSE3 SSE2 POPCNT",
        nps: 900_000.0,
    },
    Machine {
        weight: 8,
        uname: "Linux 6.6.15-2-lts",
        architecture: ["64bit", "ELF"],
        compiler: "clang++",
        gcc_version: [17, 0, 6],
        worker_arch: "x86-64-avx512",
        arch: "64bit AVX512 AVX2 SSE41 SSSE3 SSE2 POPCNT",
        nps: 820_000.0,
    },
    Machine {
        weight: 7,
        uname: "Darwin 23.4.0",
        architecture: ["64bit", ""],
        compiler: "clang++",
        gcc_version: [15, 0, 0],
        worker_arch: "apple-silicon",
        arch: "64bit NEON_DOTPROD POPCNT",
        nps: 950_000.0,
    },
    Machine {
        weight: 5,
        uname: "Windows 10",
        architecture: ["64bit", "WindowsPE"],
        compiler: "g++",
        gcc_version: [13, 2, 0],
        worker_arch: "x86-64-sse41-popcnt",
        arch: "64bit SSE41 SSSE3 SSE2 POPCNT",
        nps: 560_000.0,
    },
    Machine {
        weight: 5,
        uname: "Linux 6.1.0-rpi7-rpi-v8",
        architecture: ["64bit", "ELF"],
        compiler: "g++",
        gcc_version: [12, 2, 0],
        worker_arch: "armv8-dotprod",
        arch: "64bit NEON_DOTPROD POPCNT",
        nps: 400_000.0,
    },
    Machine {
        weight: 5,
        uname: "Linux 4.19.0-26-amd64",
        architecture: ["64bit", "ELF"],
        compiler: "g++",
        gcc_version: [10, 2, 1],
        worker_arch: "x86-64",
        arch: "64bit SSE2",
        nps: 450_000.0,
    },
];

/// Concurrency as volunteers set it: many at the default 3, some big machines.
const CONCURRENCY: &[(u32, u32)] = &[
    (1, 10),
    (2, 10),
    (3, 25),
    (4, 15),
    (6, 8),
    (7, 7),
    (8, 10),
    (12, 5),
    (15, 4),
    (16, 6),
];

const PYTHONS: &[[i64; 3]] = &[[3, 11, 2], [3, 12, 3], [3, 10, 12], [3, 13, 0]];

fn pick<'a, T, R: Rng>(rng: &mut R, items: &'a [T], weight: impl Fn(&T) -> u32) -> &'a T {
    let total: u32 = items.iter().map(&weight).sum();
    let mut x = rng.random_range(0..total.max(1));
    for item in items {
        let w = weight(item);
        if x < w {
            return item;
        }
        x -= w;
    }
    &items[items.len() - 1]
}

/// The first group of worker `index`'s unique key: 8 hex digits, distinct for every index
/// below 2^32 (an odd multiplier and an xor are bijections of u32).
pub fn key_prefix(index: u32, seed: u64) -> String {
    let mixed = index.wrapping_mul(0x9E37_79B1) ^ (seed as u32).wrapping_mul(0x85EB_CA6B);
    format!("{mixed:08x}")
}

/// A unique key as the official worker builds it: the prefix, then a fresh uuid4's tail.
pub fn unique_key<R: Rng>(index: u32, seed: u64, rng: &mut R) -> String {
    let a: u16 = rng.random();
    let b: u16 = rng.random::<u16>() & 0x0fff;
    let c: u16 = (rng.random::<u16>() & 0x3fff) | 0x8000;
    let d: u64 = rng.random::<u64>() & 0xffff_ffff_ffff;
    format!(
        "{}-{a:04x}-4{b:03x}-{c:04x}-{d:012x}",
        key_prefix(index, seed)
    )
}

/// A simulated machine: the worker_info it sends, and what its bench will report.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The 16-key worker_info, as sent before the first bench (nps 0.0, ARCH "?").
    pub info: Map<String, Value>,
    pub concurrency: u32,
    /// Nodes per second per thread that the first bench measures.
    pub bench_nps: f64,
    /// The "Compilation settings" text the first bench reports.
    pub bench_arch: String,
}

impl Identity {
    /// Machine `index` of a fleet, for `username`.
    pub fn generate<R: Rng>(index: u32, seed: u64, username: &str, rng: &mut R) -> Identity {
        let m = pick(rng, MACHINES, |m| m.weight);
        let concurrency = pick(rng, CONCURRENCY, |c| c.1).0;
        // RAM in GiB, at least what the worker needs for its concurrency at max_memory = RAM/2
        // (the official worker lowers its concurrency to at most (max_memory - 444) / 396).
        let need_mib = 2 * (444 + 396 * u64::from(concurrency));
        let mut ram_gib: u64 = [8, 16, 32, 64][rng.random_range(0..4)];
        while ram_gib * 1024 < need_mib {
            ram_gib *= 2;
        }
        let max_memory = ram_gib * 1024 / 2;
        let python = PYTHONS[rng.random_range(0..PYTHONS.len())];
        let key = unique_key(index, seed, rng);
        let info = json!({
            "uname": m.uname,
            "architecture": m.architecture,
            "concurrency": concurrency,
            "max_memory": max_memory,
            "min_threads": 1,
            "username": username,
            "version": WORKER_VERSION,
            "python_version": python,
            "gcc_version": m.gcc_version,
            "compiler": m.compiler,
            "unique_key": key,
            "modified": false,
            "worker_arch": m.worker_arch,
            "ARCH": "?",
            "nps": 0.0,
            "near_github_api_limit": false,
        });
        let info = match info {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        let bench_nps = (m.nps * rng.random_range(0.85..1.15)).round();
        Identity {
            info,
            concurrency,
            bench_nps,
            bench_arch: m.arch.to_string(),
        }
    }

    /// After the first bench the worker reports its nps and ARCH with every call.
    pub fn after_bench(&mut self) {
        self.info.insert("nps".into(), json!(self.bench_nps));
        self.info.insert("ARCH".into(), json!(self.bench_arch));
    }
}

/// Game-outcome model: per-game win/draw/loss probabilities of the New engine.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GameModel {
    pub win: f64,
    pub draw: f64,
    pub loss: f64,
}

impl GameModel {
    /// From an Elo difference and a draw rate: expected score s = 1/(1+10^(-elo/400)),
    /// win = s - draw/2, loss = 1 - s - draw/2 (the draw rate is lowered if it does not fit).
    pub fn new(elo: f64, draw_rate: f64) -> GameModel {
        let elo = if elo.is_finite() {
            elo.clamp(-800.0, 800.0)
        } else {
            0.0
        };
        let s = 1.0 / (1.0 + 10f64.powf(-elo / 400.0));
        let d_max = 2.0 * s.min(1.0 - s);
        let draw = if draw_rate.is_finite() {
            draw_rate.clamp(0.0, 1.0).min(d_max)
        } else {
            0.0
        };
        let win = (s - draw / 2.0).max(0.0);
        let loss = (1.0 - s - draw / 2.0).max(0.0);
        GameModel { win, draw, loss }
    }

    /// Pair-score probabilities [LL, LD, DD or WL, WD, WW] for two independent games.
    pub fn pentanomial(&self) -> [f64; 5] {
        let (w, d, l) = (self.win, self.draw, self.loss);
        [l * l, 2.0 * l * d, d * d + 2.0 * w * l, 2.0 * w * d, w * w]
    }

    /// Plays one game pair and adds it to cumulative `stats` (pentanomial and trinomial
    /// together, so the invariants hold by construction).
    pub fn play_pair<R: Rng>(&self, stats: &mut Stats, rng: &mut R) {
        let g = |rng: &mut R| {
            let x: f64 = rng.random();
            if x < self.win {
                2u8
            } else if x < self.win + self.draw {
                1
            } else {
                0
            }
        };
        let (a, b) = (g(rng), g(rng));
        stats.pentanomial[usize::from(a + b)] += 1;
        for r in [a, b] {
            match r {
                2 => stats.wins += 1,
                1 => stats.draws += 1,
                _ => stats.losses += 1,
            }
        }
    }

    /// Plays `games` more games (rounded up to whole pairs).
    pub fn play<R: Rng>(&self, stats: &mut Stats, games: u64, rng: &mut R) {
        for _ in 0..games.div_ceil(2) {
            self.play_pair(stats, rng);
        }
    }
}

/// Games the worker plays at once.
pub fn games_at_once(concurrency: u32, threads: u32) -> u64 {
    u64::from(concurrency / threads.max(1)).max(1)
}

/// The worker's time budget per game for a time control (docs/protocol.md#update-batches):
/// 3 × base + 200 × increment, × 100/moves for moves/time controls.
pub fn time_budget(tc: &TimeControl) -> f64 {
    let l = 3.0 * tc.base_s + 200.0 * tc.inc_s;
    match tc.moves {
        Some(m) if m > 0 => l * 100.0 / f64::from(m),
        _ => l,
    }
}

/// Games between two updates (docs/protocol.md#update-batches): 2 × batch_size for SPRT;
/// otherwise (concurrency // threads) × 4 × max(1, round(L_ltc / L_tc)), with L_tc doubled for
/// SPSA.
pub fn update_batch(
    tc: &TimeControl,
    concurrency: u32,
    threads: u32,
    sprt_batch_size: Option<u64>,
    spsa: bool,
) -> u64 {
    if let Some(b) = sprt_batch_size {
        return 2 * b.max(1);
    }
    let ltc = time_budget(&TimeControl {
        moves: None,
        base_s: 60.0,
        inc_s: 0.6,
    });
    let mut l_tc = time_budget(tc).max(1e-9);
    if spsa {
        l_tc *= 2.0;
    }
    let ratio = (ltc / l_tc).round().max(1.0) as u64;
    games_at_once(concurrency, threads) * 4 * ratio
}

/// Simulated seconds one game lasts on this machine: the server's estimate for the time
/// control, scaled as the worker scales it (628000 / nps).
pub fn game_seconds(tc: &str, nps: f64) -> Option<f64> {
    let tc = parse_tc(tc)?;
    let nps = if nps > 0.0 { nps } else { REFERENCE_NPS };
    Some(tc_duration(&tc) * REFERENCE_NPS / nps)
}

/// A small valid PGN of up to four of the games in `stats`, gzip-compressed (member name
/// `<run_id>-<task_id>.pgn.gz`) and base64-encoded, as upload_pgn carries it.
pub fn pgn_payload(run_id: &str, task_id: u64, stats: &Stats) -> std::io::Result<String> {
    let mut text = String::new();
    let results = std::iter::repeat_n("1-0", stats.wins as usize)
        .chain(std::iter::repeat_n("1/2-1/2", stats.draws as usize))
        .chain(std::iter::repeat_n("0-1", stats.losses as usize))
        .take(4);
    for (round, result) in results.enumerate() {
        let (white, black) = if round % 2 == 0 {
            ("New-patch", "Base-master")
        } else {
            ("Base-master", "New-patch")
        };
        text.push_str(&format!(
            "[Event \"Batch {task_id}: patch vs master\"]\n[Site \"shoal sim\"]\n\
             [Date \"2024.01.01\"]\n[Round \"{}\"]\n[White \"{white}\"]\n[Black \"{black}\"]\n\
             [Result \"{result}\"]\n[TimeControl \"10+0.1\"]\n\n\
             1. e4 {{+0.30/20 0.41s}} e5 {{-0.25/19 0.38s}} 2. Nf3 {{+0.33/21 0.40s}} \
             Nc6 {{-0.28/20 0.39s}} 3. Bb5 {{+0.35/20 0.42s}} a6 {{-0.30/21 0.40s}} {result}\n\n",
            round + 1
        ));
    }
    let mut gz = flate2::GzBuilder::new()
        .filename(format!("{run_id}-{task_id}.pgn.gz"))
        .write(Vec::new(), flate2::Compression::fast());
    gz.write_all(text.as_bytes())?;
    let bytes = gz.finish()?;
    Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;
    use std::collections::HashSet;
    use std::io::Read as _;

    #[test]
    fn key_prefixes_are_distinct() {
        let mut seen = HashSet::new();
        for i in 0..200_000u32 {
            assert!(seen.insert(key_prefix(i, 9)));
        }
    }

    fn check_model(elo: f64, draw: f64) {
        let m = GameModel::new(elo, draw);
        assert!((m.win + m.draw + m.loss - 1.0).abs() < 1e-12);
        assert!((m.pentanomial().iter().sum::<f64>() - 1.0).abs() < 1e-12);
        let mut rng = StdRng::seed_from_u64(elo.to_bits() ^ draw.to_bits());
        let mut stats = Stats::default();
        for batch in 0..200 {
            let before = stats;
            m.play(&mut stats, 2 * (batch % 7 + 1), &mut rng);
            // Cumulative: never goes down; the server's own consistency check passes.
            assert!(stats.delta(&before).is_some());
            stats.check().expect("consistent stats");
            let p = stats.pentanomial;
            assert_eq!(2 * p.iter().sum::<u64>(), stats.games());
            assert_eq!(
                stats.wins as i64 - stats.losses as i64,
                2 * p[4] as i64 + p[3] as i64 - p[1] as i64 - 2 * p[0] as i64
            );
            assert!(p[1] + p[3] <= stats.draws && stats.draws <= p[1] + 2 * p[2] + p[3]);
        }
    }

    #[test]
    fn pentanomial_invariants_hold() {
        for (elo, draw) in [
            (0.0, 0.6),
            (2.0, 0.0),
            (-5.0, 0.95),
            (400.0, 0.9),
            (-800.0, 0.3),
            (1.0, 1.0),
        ] {
            check_model(elo, draw);
        }
    }

    #[test]
    fn model_matches_elo_and_draw_rate() {
        let m = GameModel::new(0.0, 0.6);
        assert!((m.win - 0.2).abs() < 1e-12 && (m.loss - 0.2).abs() < 1e-12);
        let m = GameModel::new(100.0, 0.5);
        let s = m.win + m.draw / 2.0;
        assert!((s - 1.0 / (1.0 + 10f64.powf(-0.25))).abs() < 1e-12);
        // A draw rate that cannot fit is lowered.
        let m = GameModel::new(800.0, 0.9);
        assert!(m.loss >= 0.0 && m.draw < 0.9);
        // Empirical draw rate close to the requested one.
        let m = GameModel::new(0.0, 0.6);
        let mut rng = StdRng::seed_from_u64(5);
        let mut stats = Stats::default();
        m.play(&mut stats, 100_000, &mut rng);
        let d = stats.draws as f64 / stats.games() as f64;
        assert!((d - 0.6).abs() < 0.01, "draw rate {d}");
    }

    #[test]
    fn batches_follow_the_protocol() {
        let stc = parse_tc("10+0.1").expect("tc");
        assert_eq!(update_batch(&stc, 7, 1, Some(16), false), 32);
        // The official worker at concurrency 1: 24 games for fixed runs and 12 for SPSA.
        assert_eq!(update_batch(&stc, 1, 1, None, false), 24);
        assert_eq!(update_batch(&stc, 1, 1, None, true), 12);
        assert_eq!(update_batch(&stc, 8, 2, None, false), 4 * 4 * 6);
        let ltc = parse_tc("60+0.6").expect("tc");
        assert_eq!(update_batch(&ltc, 3, 1, None, false), 12);
        assert_eq!(games_at_once(3, 8), 1);
        let g = game_seconds("10+0.1", REFERENCE_NPS).expect("tc");
        assert!((g - (10.0 + 6.8) * 1.84).abs() < 1e-9);
        assert!(game_seconds("10+0.1", 2.0 * REFERENCE_NPS).expect("tc") < g);
    }

    #[test]
    fn pgn_is_valid_gzip() {
        let stats = Stats {
            wins: 3,
            losses: 1,
            draws: 4,
            pentanomial: [0, 1, 2, 1, 0],
            ..Stats::default()
        };
        let b64 = pgn_payload("0123456789abcdef01234567", 7, &stats).expect("pgn");
        let gz = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .expect("base64");
        assert_eq!(&gz[..2], &[0x1f, 0x8b]);
        let mut text = String::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_string(&mut text)
            .expect("gunzip");
        assert_eq!(text.matches("[Event ").count(), 4);
        assert!(text.contains("[Result \"1-0\"]") && text.contains("[Result \"1/2-1/2\"]"));
    }
}
