//! request_task's rules as pure functions (docs/protocol.md#request_task and #itp).
//!
//! Owns: time-control arithmetic (over [`crate::protocol`]'s parser and duration, re-exported
//! here), task sizing (`worker_cap`, SPRT batch rounding), the memory estimate, itp, the run
//! ordering and the first-fit filters, over plain values, so they can be tested table by table
//! without a server.
//! Must not: lock, allocate per task ever created, or do I/O: the critical section calls these
//! on a snapshot of each unfinished run.

use std::cmp::Ordering;

pub use super::arch_filter::{ArchFilter, MAX_ARCH_FILTER_LEN};
pub use crate::protocol::{REFERENCE_NPS, TimeControl, parse_tc, tc_duration};

/// Seconds a task should last.
pub const TASK_DURATION_S: f64 = 1800.0;

/// The leading number of a time control (tc_base; LTC means ≥ 40), as Fishtest reads it:
/// the moves of a moves/time control (`40/20+0.2` gives 40), else the base seconds; 0 for a
/// time control that does not parse.
pub fn tc_base(tc: &str) -> f64 {
    if parse_tc(tc).is_none() {
        return 0.0;
    }
    let lead: String = tc
        .trim()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    lead.parse().unwrap_or(0.0)
}

/// r = threads · dur(tc) / dur(10+0.1).
pub fn tc_ratio(tc: &TimeControl, threads: u32) -> f64 {
    let reference = tc_duration(&TimeControl {
        moves: None,
        base_s: 10.0,
        inc_s: 0.1,
    });
    f64::from(threads.max(1)) * tc_duration(tc) / reference
}

/// SPRT batch size in pairs: max(1, int(0.5 + 16/r)).
pub fn sprt_batch_pairs(r: f64) -> u64 {
    if r <= 0.0 || !r.is_finite() {
        return 1;
    }
    ((0.5 + 16.0 / r).floor() as u64).max(1)
}

/// Games one task should carry: 1800 / dur(tc) · (concurrency // threads), rounded down to a
/// multiple of `batch_games` (at least one batch) and capped by the remaining games, which
/// for SPRT are first rounded up to a multiple of the batch.
pub fn task_games(
    tc: &TimeControl,
    concurrency: u32,
    threads: u32,
    batch_games: u64,
    remaining: u64,
    sprt: bool,
) -> u64 {
    let batch = batch_games.max(2);
    let games_at_once = u64::from(concurrency / threads.max(1)).max(1);
    let duration = tc_duration(tc).max(1e-9);
    let raw = (TASK_DURATION_S / duration * games_at_once as f64).floor() as u64;
    let cap = if sprt {
        ((raw / batch) * batch).max(batch)
    } else {
        ((raw / 2) * 2).max(2)
    };
    let remaining = if sprt {
        remaining.div_ceil(batch) * batch
    } else {
        remaining + remaining % 2
    };
    cap.min(remaining)
}

/// The `Hash=N` option's value in MiB (0 when absent).
pub fn hash_mib(options: &str) -> u64 {
    options
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == "Hash")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// MiB a worker needs: with k = concurrency // threads,
/// 444 + 2k(151 + 31·threads) + k·(Hash_new + Hash_base).
pub fn memory_needed(concurrency: u32, threads: u32, hash_new: u64, hash_base: u64) -> u64 {
    let k = u64::from(concurrency / threads.max(1));
    444 + 2 * k * (151 + 31 * u64::from(threads)) + k * (hash_new + hash_base)
}

/// The run's internal throughput (itp), recomputed every minute:
/// clamp(throughput, 1, 500) · (r^0.774 if r > 1) · 36/(36 + n²) ·
/// (1 + min(games/200k, 1) + [llr > 2]·(0.1 + 0.1·[elo0 > 0])).
pub fn itp(
    throughput: f64,
    r: f64,
    user_runs_with_workers: u64,
    games: u64,
    llr: Option<f64>,
    elo0: f64,
) -> f64 {
    let mut itp = throughput.clamp(1.0, 500.0);
    if r > 1.0 {
        itp *= r.powf(0.774);
    }
    let n = user_runs_with_workers as f64;
    itp *= 36.0 / (36.0 + n * n);
    let mut bonus = 1.0 + (games as f64 / 200_000.0).min(1.0);
    if llr.is_some_and(|l| l > 2.0) {
        bonus += 0.1 + if elo0 > 0.0 { 0.1 } else { 0.0 };
    }
    itp * bonus
}

/// What request_task knows about one unfinished run.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub index: usize,
    pub priority: f64,
    pub cores: u64,
    pub itp: f64,
    pub finished: bool,
    pub approved: bool,
    pub threads: u32,
    pub remaining: u64,
    pub hash_new: u64,
    pub hash_base: u64,
    /// Number of SPSA parameters, for SPSA runs.
    pub spsa_params: Option<usize>,
    pub arch_filter: Option<ArchFilter>,
    pub compiler: Option<String>,
    pub is_last_run: bool,
    pub in_worker_runs: bool,
    /// A limit keyed by this run (its window, the SPSA core cap, a configured one) is full.
    pub limited: bool,
}

/// The worker's side of the match.
#[derive(Debug, Clone)]
pub struct WorkerNeeds<'a> {
    pub concurrency: u32,
    pub min_threads: u32,
    pub max_memory: u64,
    pub near_github_api_limit: bool,
    pub worker_arch: &'a str,
    pub compiler: &'a str,
}

/// Why a run was not chosen (for tests and debug logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    Finished,
    NotApproved,
    TooManyThreads,
    TooFewThreads,
    NoGamesLeft,
    Memory,
    GithubLimit,
    /// A run-keyed limit (window, SPSA core cap, configured) is full.
    Limit,
    Arch,
    Compiler,
}

/// The first failing filter, in Fishtest's order; None if the worker may take the run.
pub fn skip_reason(c: &Candidate, w: &WorkerNeeds<'_>) -> Option<Skip> {
    if c.finished {
        return Some(Skip::Finished);
    }
    if !c.approved {
        return Some(Skip::NotApproved);
    }
    if c.threads > w.concurrency {
        return Some(Skip::TooManyThreads);
    }
    if c.threads < w.min_threads {
        return Some(Skip::TooFewThreads);
    }
    if c.remaining == 0 {
        return Some(Skip::NoGamesLeft);
    }
    if memory_needed(w.concurrency, c.threads, c.hash_new, c.hash_base) > w.max_memory {
        return Some(Skip::Memory);
    }
    if w.near_github_api_limit && !c.in_worker_runs {
        return Some(Skip::GithubLimit);
    }
    if c.limited {
        return Some(Skip::Limit);
    }
    if let Some(f) = &c.arch_filter
        && !f.allows(w.worker_arch)
    {
        return Some(Skip::Arch);
    }
    if let Some(pin) = &c.compiler
        && !pin.is_empty()
        && pin != w.compiler
    {
        return Some(Skip::Compiler);
    }
    None
}

/// Fishtest's order: ascending (−priority, adj_cores > 0, (adj_cores + concurrency/2)/itp),
/// where adj_cores adds the worker's own cores to its last run (so it tends to stay).
pub fn compare(a: &Candidate, b: &Candidate, concurrency: u32) -> Ordering {
    let key = |c: &Candidate| {
        let adj = c.cores
            + if c.is_last_run {
                u64::from(concurrency)
            } else {
                0
            };
        let load = (adj as f64 + f64::from(concurrency) / 2.0) / c.itp.max(1e-9);
        (-c.priority, adj > 0, load)
    };
    let (ka, kb) = (key(a), key(b));
    ka.0.total_cmp(&kb.0)
        .then(ka.1.cmp(&kb.1))
        .then(ka.2.total_cmp(&kb.2))
}

/// Sorts the candidates and returns the first that fits, with the reasons the others did not.
pub fn choose(
    candidates: Vec<Candidate>,
    w: &WorkerNeeds<'_>,
) -> (Option<Candidate>, Vec<(usize, Skip)>) {
    choose_with(candidates, w, |_| false)
}

/// [`choose`], asking `limited(index)` (a run-keyed limit is full) only of the candidates
/// that pass every other filter, in order: usually the first one, so the limits engine is
/// consulted for one run rather than for every unfinished run.
pub fn choose_with(
    mut candidates: Vec<Candidate>,
    w: &WorkerNeeds<'_>,
    mut limited: impl FnMut(usize) -> bool,
) -> (Option<Candidate>, Vec<(usize, Skip)>) {
    candidates.sort_by(|a, b| compare(a, b, w.concurrency));
    let mut skipped = Vec::new();
    for c in candidates {
        match skip_reason(&c, w) {
            None if limited(c.index) => skipped.push((c.index, Skip::Limit)),
            None => return (Some(c), skipped),
            Some(why) => skipped.push((c.index, why)),
        }
    }
    (None, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tc(s: &str) -> TimeControl {
        parse_tc(s).expect("valid tc")
    }

    #[test]
    fn tc_base_is_the_leading_number() {
        assert_eq!(tc_base("60+0.6"), 60.0);
        assert_eq!(tc_base("40/60"), 40.0);
        assert_eq!(tc_base("40/20+0.2"), 40.0);
        assert_eq!(tc_base("10/60+0.6"), 10.0);
        assert_eq!(tc_base("10+0.1"), 10.0);
        assert_eq!(tc_base("nonsense"), 0.0);
    }

    #[test]
    fn durations_ratios_and_batches() {
        let stc = tc("10+0.1");
        assert!((tc_ratio(&stc, 1) - 1.0).abs() < 1e-12);
        let ltc = tc("60+0.6");
        assert!((tc_ratio(&ltc, 1) - 6.0).abs() < 1e-9);
        assert_eq!(sprt_batch_pairs(1.0), 16);
        assert_eq!(sprt_batch_pairs(6.0), 3);
        assert_eq!(sprt_batch_pairs(100.0), 1);
    }

    #[test]
    fn task_sizes() {
        let stc = tc("10+0.1");
        // 1800 / 30.912 = 58.2 games per slot; 8 slots = 465.
        assert_eq!(task_games(&stc, 8, 1, 2, 1_000_000, false), 464);
        // SPRT with 32-game batches: a multiple of 32.
        assert_eq!(task_games(&stc, 8, 1, 32, 1_000_000, true), 448);
        // Few games left: SPRT rounds the remainder up to a batch.
        assert_eq!(task_games(&stc, 8, 1, 32, 10, true), 32);
        assert_eq!(task_games(&stc, 8, 1, 2, 10, false), 10);
        assert_eq!(task_games(&stc, 8, 1, 2, 11, false), 12);
        // A very long tc still gets at least one batch.
        assert_eq!(task_games(&tc("3600+10"), 1, 1, 6, 100, true), 6);
        // More threads than concurrency//threads slots: one slot.
        assert_eq!(task_games(&stc, 1, 8, 2, 1000, false), 58);
    }

    #[test]
    fn memory_and_hash() {
        assert_eq!(hash_mib("Hash=16 Threads=1"), 16);
        assert_eq!(hash_mib("Threads=1"), 0);
        assert_eq!(
            memory_needed(4, 1, 16, 16),
            444 + 2 * 4 * (151 + 31) + 4 * 32
        );
    }

    #[test]
    fn itp_formula() {
        assert_eq!(itp(100.0, 1.0, 0, 0, None, 0.0), 100.0);
        assert_eq!(itp(1000.0, 1.0, 0, 0, None, 0.0), 500.0);
        let with_two_runs = itp(100.0, 1.0, 2, 0, None, 0.0);
        assert!((with_two_runs - 100.0 * 36.0 / 40.0).abs() < 1e-9);
        let ltc = itp(100.0, 6.0, 0, 0, None, 0.0);
        assert!((ltc - 100.0 * 6f64.powf(0.774)).abs() < 1e-9);
        let late = itp(100.0, 1.0, 0, 400_000, Some(2.5), 0.5);
        assert!((late - 100.0 * (1.0 + 1.0 + 0.2)).abs() < 1e-9);
    }

    fn cand(index: usize) -> Candidate {
        Candidate {
            index,
            priority: 0.0,
            cores: 0,
            itp: 100.0,
            finished: false,
            approved: true,
            threads: 1,
            remaining: 1000,
            hash_new: 16,
            hash_base: 16,
            spsa_params: None,
            arch_filter: None,
            compiler: None,
            is_last_run: false,
            in_worker_runs: false,
            limited: false,
        }
    }

    fn worker() -> WorkerNeeds<'static> {
        WorkerNeeds {
            concurrency: 4,
            min_threads: 1,
            max_memory: 8000,
            near_github_api_limit: false,
            worker_arch: "x86-64-avx2",
            compiler: "g++",
        }
    }

    #[test]
    fn filters_in_order() {
        let w = worker();
        type Edit = Box<dyn Fn(&mut Candidate)>;
        let table: Vec<(Edit, Option<Skip>)> = vec![
            (Box::new(|_| {}), None),
            (Box::new(|c| c.finished = true), Some(Skip::Finished)),
            (Box::new(|c| c.approved = false), Some(Skip::NotApproved)),
            (Box::new(|c| c.threads = 8), Some(Skip::TooManyThreads)),
            (Box::new(|c| c.remaining = 0), Some(Skip::NoGamesLeft)),
            (Box::new(|c| c.hash_new = 4096), Some(Skip::Memory)),
            // The run's limits (window, SPSA core cap) are the engine's; a full one skips.
            (Box::new(|c| c.limited = true), Some(Skip::Limit)),
            (
                Box::new(|c| c.arch_filter = Some(ArchFilter::compile("avx512"))),
                Some(Skip::Arch),
            ),
            (
                Box::new(|c| c.arch_filter = Some(ArchFilter::compile("avx2|bmi2"))),
                None,
            ),
            (
                Box::new(|c| c.arch_filter = Some(ArchFilter::compile("(unclosed"))),
                None,
            ),
            (
                Box::new(|c| c.compiler = Some("clang++".into())),
                Some(Skip::Compiler),
            ),
            (
                Box::new(|c| {
                    c.approved = false;
                    c.threads = 8;
                }),
                Some(Skip::NotApproved),
            ),
        ];
        for (i, (edit, want)) in table.into_iter().enumerate() {
            let mut c = cand(0);
            edit(&mut c);
            assert_eq!(skip_reason(&c, &w), want, "row {i}");
        }
        let mut w2 = worker();
        w2.min_threads = 2;
        assert_eq!(skip_reason(&cand(0), &w2), Some(Skip::TooFewThreads));
        w2.min_threads = 1;
        w2.near_github_api_limit = true;
        assert_eq!(skip_reason(&cand(0), &w2), Some(Skip::GithubLimit));
        let mut known = cand(0);
        known.in_worker_runs = true;
        assert_eq!(skip_reason(&known, &w2), None);
    }

    #[test]
    fn ordering_priority_then_idle_then_load_over_itp() {
        let w = worker();
        let mut busy = cand(0);
        busy.cores = 40;
        let idle = cand(1);
        let (pick, _) = choose(vec![busy.clone(), idle.clone()], &w);
        assert_eq!(pick.map(|c| c.index), Some(1), "an idle run first");

        let mut urgent = busy.clone();
        urgent.index = 2;
        urgent.priority = 1.0;
        let (pick, _) = choose(vec![idle.clone(), urgent], &w);
        assert_eq!(pick.map(|c| c.index), Some(2), "priority beats everything");

        // Both busy: the one with less load per itp.
        let mut a = cand(3);
        a.cores = 40;
        a.itp = 100.0;
        let mut b = cand(4);
        b.cores = 40;
        b.itp = 300.0;
        let (pick, _) = choose(vec![a.clone(), b.clone()], &w);
        assert_eq!(pick.map(|c| c.index), Some(4));

        // The worker's last run counts its own cores: with equal cores elsewhere it stays
        // unless the other run is idle.
        let mut last = cand(5);
        last.is_last_run = true;
        let (pick, _) = choose(vec![last, idle], &w);
        assert_eq!(pick.map(|c| c.index), Some(1));

        // First fit skips runs that do not fit, reporting why.
        let mut big = cand(6);
        big.priority = 5.0;
        big.threads = 16;
        let (pick, skipped) = choose(vec![big, a], &w);
        assert_eq!(pick.map(|c| c.index), Some(3));
        assert_eq!(skipped, vec![(6, Skip::TooManyThreads)]);
    }
}
