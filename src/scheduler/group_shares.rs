//! Test groups in request_task's choice (docs/test-groups.md): the takes of a group compete
//! with the other runs as one run, and inside the group the take furthest below its share of
//! the group's cores comes first.
//!
//! Owns: each grouped run's group and share, as the groups component last set them
//! ([`GroupShares::set`]), and [`arrange`], the one change a group makes to the candidates.
//! Must not: decide the shares (that is `groups::alloc`), take a run's lock, or do I/O. Its
//! lock is a leaf, taken under `sched` for a few map reads.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use super::rules::Candidate;

/// The grouped runs' shares: run id → (group id, share of the group's cores).
#[derive(Debug, Default)]
pub struct GroupShares {
    map: RwLock<HashMap<String, (Arc<str>, f64)>>,
    /// The draws so far: the k-th uses frac(k·φ⁻¹), a sequence that spreads evenly over
    /// [0, 1) (so over any run of draws each take is first in proportion to its share).
    draws: std::sync::atomic::AtomicU64,
}

/// 1/φ: the golden-ratio sequence's step.
const GOLDEN: f64 = 0.618_033_988_749_894_9;

impl GroupShares {
    /// Sets a group's shares (`runs`: each run and its share); a run of the group left out
    /// (or with share 0) is no longer grouped. Called by the groups component.
    pub fn set(&self, group_id: &str, runs: &[(String, f64)]) {
        let group: Arc<str> = Arc::from(group_id);
        let mut map = self.map.write();
        map.retain(|_, (g, _)| **g != *group_id);
        for (run, share) in runs {
            if *share > 0.0 {
                map.insert(run.clone(), (group.clone(), *share));
            }
        }
    }

    /// A run's group and share, if grouped.
    pub fn of(&self, run_id: &str) -> Option<(Arc<str>, f64)> {
        self.map.read().get(run_id).cloned()
    }

    /// [`arrange`] with the shares kept here; `ids[c.index]` is candidate `c`'s run.
    pub fn arrange(&self, ids: &[&str], candidates: &mut [Candidate], concurrency: u32) {
        let map = self.map.read();
        if map.is_empty() {
            return;
        }
        let k = self
            .draws
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let u = (k as f64 * GOLDEN).fract();
        arrange(
            candidates,
            |index| ids.get(index).and_then(|id| map.get(*id)).cloned(),
            concurrency,
            u,
        );
    }
}

/// The group's change to the candidates, before Fishtest's ordering sorts them (a stable
/// sort): every take of a group that can play (approved, unfinished) gets the group's summed cores and itp (so the group is placed
/// as one run whose throughput is its takes' together: the fleet share its takes would get as
/// separate runs), its highest priority and, if the worker's last run was any take, that
/// mark. Then the group's takes are ordered: first the take drawn by `u` (in [0, 1): the
/// take whose slice of [0, 1), slices as wide as the shares, holds `u`), so each take is
/// offered tasks in proportion to its share however many workers ask at once; then the
/// others by their deficit, share × (group cores + the worker's cores) − own cores, largest
/// first. The sort keeps that order among the group's takes (equal keys), so a worker the
/// drawn take does not fit gets the take furthest below its share.
pub fn arrange(
    candidates: &mut [Candidate],
    group_of: impl Fn(usize) -> Option<(Arc<str>, f64)>,
    concurrency: u32,
    u: f64,
) {
    let mut groups: HashMap<Arc<str>, Vec<(usize, f64)>> = HashMap::new();
    for (pos, c) in candidates.iter().enumerate() {
        // Only takes that can play count (and are arranged): one waiting for approval, or
        // finished, neither adds to the group's cores and itp nor takes a slice.
        if !c.approved || c.finished {
            continue;
        }
        if let Some((g, share)) = group_of(c.index) {
            groups.entry(g).or_default().push((pos, share));
        }
    }
    for members in groups.values() {
        let cores: u64 = members.iter().map(|(p, _)| candidates[*p].cores).sum();
        let itp: f64 = members.iter().map(|(p, _)| candidates[*p].itp).sum();
        let priority = members
            .iter()
            .map(|(p, _)| candidates[*p].priority)
            .fold(f64::NEG_INFINITY, f64::max);
        let last = members.iter().any(|(p, _)| candidates[*p].is_last_run);
        let target = (cores + u64::from(concurrency)) as f64;
        let mut order: Vec<(f64, Candidate)> = members
            .iter()
            .map(|(p, share)| {
                let c = &candidates[*p];
                (share * target - c.cores as f64, c.clone())
            })
            .collect();
        // The drawn take (members in candidate order, slices in that order).
        let total: f64 = members.iter().map(|(_, share)| share).sum();
        let mut edge = 0.0;
        let drawn = members.iter().position(|(_, share)| {
            edge += share;
            u * total < edge
        });
        if let Some(d) = drawn {
            order[d].0 = f64::INFINITY;
        }
        order.sort_by(|a, b| b.0.total_cmp(&a.0));
        for ((pos, _), (_, mut c)) in members.iter().zip(order) {
            c.cores = cores;
            c.itp = itp;
            c.priority = priority;
            c.is_last_run = last;
            candidates[*pos] = c;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::rules::{WorkerNeeds, choose};
    use super::*;

    fn cand(index: usize, cores: u64) -> Candidate {
        Candidate {
            index,
            priority: 0.0,
            cores,
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

    const W: WorkerNeeds<'static> = WorkerNeeds {
        concurrency: 8,
        min_threads: 1,
        max_memory: 100_000,
        near_github_api_limit: false,
        worker_arch: "x86-64",
        compiler: "g++",
    };

    fn pick(shares: [f64; 2], cores: [u64; 3], u: f64) -> Option<usize> {
        let g: Arc<str> = Arc::from("g");
        let mut cs = vec![cand(0, cores[0]), cand(1, cores[1]), cand(2, cores[2])];
        arrange(&mut cs, |i| (i < 2).then(|| (g.clone(), shares[i])), 8, u);
        choose(cs, &W).0.map(|c| c.index)
    }

    #[test]
    fn the_drawn_take_comes_first_and_the_group_counts_as_one() {
        // a has 16 cores, b 16, other 32: as a whole the group (itp 200, 32 cores) is less
        // loaded than `other` (itp 100, 32 cores); the draw picks by the shares' slices.
        assert_eq!(pick([0.8, 0.2], [16, 16, 32], 0.5), Some(0));
        assert_eq!(pick([0.8, 0.2], [16, 16, 32], 0.9), Some(1));
        assert_eq!(pick([0.2, 0.8], [16, 16, 32], 0.5), Some(1));
        // A busier group loses to the other run, whatever the draw.
        assert_eq!(pick([0.8, 0.2], [60, 60, 32], 0.5), Some(2));
        // Over many draws of the golden sequence each take is first in proportion to its
        // share.
        let shares = GroupShares::default();
        shares.set("g", &[("a".into(), 0.75), ("b".into(), 0.25)]);
        let ids = ["a", "b", "other"];
        let mut first_a = 0;
        for _ in 0..1000 {
            let mut cs = vec![cand(0, 0), cand(1, 0), cand(2, 32)];
            shares.arrange(&ids, &mut cs, 8);
            if choose(cs, &W).0.map(|c| c.index) == Some(0) {
                first_a += 1;
            }
        }
        assert!((740..=760).contains(&first_a), "{first_a}");
        // A take waiting for approval adds nothing: the group's cores and itp are the
        // approved takes' alone.
        let g: Arc<str> = Arc::from("g");
        let mut cs = vec![cand(0, 16), cand(1, 16), cand(2, 32)];
        cs[1].approved = false;
        cs[1].itp = 1000.0;
        arrange(&mut cs, |i| (i < 2).then(|| (g.clone(), 0.5)), 8, 0.1);
        assert_eq!((cs[0].cores, cs[0].itp), (16, 100.0));
        // ... and a finished one neither.
        let mut cs = vec![cand(0, 16), cand(1, 16), cand(2, 32)];
        cs[1].finished = true;
        arrange(&mut cs, |i| (i < 2).then(|| (g.clone(), 0.5)), 8, 0.1);
        assert_eq!((cs[0].cores, cs[0].itp), (16, 100.0));
        // Not grouped any more: each run for itself again.
        shares.set("g", &[]);
        assert!(shares.of("a").is_none());
    }
}
