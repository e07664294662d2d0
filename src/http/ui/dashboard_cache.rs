//! The dashboard's shared renderings: its default first page (the live part and the finished
//! part) and its workers table, each rendered at most once a second for everybody, each piece
//! with a version (a hash of its HTML) that the live refresh compares against the client's
//! `If-None-Match`. Its own module because `AppState` holds it and must not depend on the
//! dashboard's handlers.
//!
//! Must not: render anything itself or call the run core (the handlers hand it what they
//! rendered, with the listed-change count they read before rendering).

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;

/// How long a rendered first page is served to everybody.
const CACHE_TTL: Duration = Duration::from_secs(1);

/// How long the workers table is kept while no listed change happened (a listed change makes
/// it stale after [`CACHE_TTL`] only, so a busy fleet costs one table a second at most).
const WORKERS_TTL: Duration = Duration::from_secs(5);

/// One rendered piece of HTML and its version (a hash of the HTML: equal pieces, equal
/// versions, whoever rendered them).
pub struct Piece {
    pub html: String,
    pub version: u64,
}

impl Piece {
    pub fn new(html: String) -> Self {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        html.hash(&mut h);
        Piece {
            version: h.finish(),
            html,
        }
    }
}

/// The default first page's shared rendering, with slots for what each viewer sees
/// differently (filled per request by the dashboard).
pub struct Dash {
    /// The cards, the workers panel's frame and the pending, paused, failed and active
    /// panels.
    pub live: Piece,
    /// The finished panel.
    pub finished: Piece,
    /// Each active run's kind for the active-run filters (a bit set, one bit per dimension).
    pub kinds: Vec<u8>,
}

/// The dashboard's default first page, rendered at most once every [`CACHE_TTL`] and shared
/// by every viewer: it depends on the runs, not on who looks, except for the slots filled
/// per request. A run created, approved, stopped, modified, deleted or finished, or a task
/// handed out or ended (`RunDb::listed_changes`) makes it stale at once; results may be up to
/// a second old. The renderings are swapped in whole (`arc_swap`): readers never wait, and
/// two renderers racing just replace each other's equally fresh page.
#[derive(Default)]
pub struct DashboardCache {
    entry: ArcSwapOption<Rendered<Dash>>,
    workers: ArcSwapOption<Rendered<Piece>>,
}

struct Rendered<T> {
    at: Instant,
    saves: u64,
    value: Arc<T>,
}

impl DashboardCache {
    /// The rendering made after `saves` listed changes, if it is still fresh.
    pub fn fresh(&self, saves: u64) -> Option<Arc<Dash>> {
        let entry = self.entry.load();
        entry
            .as_deref()
            .filter(|r| r.saves == saves && r.at.elapsed() < CACHE_TTL)
            .map(|r| Arc::clone(&r.value))
    }

    /// Keeps `dash`, rendered after `saves` listed changes.
    pub fn store(&self, saves: u64, dash: Arc<Dash>) {
        self.entry.store(Some(Arc::new(Rendered {
            at: Instant::now(),
            saves,
            value: dash,
        })));
    }

    /// The unfiltered workers table, if fresh: younger than a second, or younger than
    /// [`WORKERS_TTL`] with no listed change since (`saves`).
    pub fn fresh_workers(&self, saves: u64) -> Option<Arc<Piece>> {
        let entry = self.workers.load();
        entry
            .as_deref()
            .filter(|r| {
                let age = r.at.elapsed();
                age < CACHE_TTL || (r.saves == saves && age < WORKERS_TTL)
            })
            .map(|r| Arc::clone(&r.value))
    }

    /// Keeps the unfiltered workers table, rendered after `saves` listed changes.
    pub fn store_workers(&self, saves: u64, piece: Arc<Piece>) {
        self.workers.store(Some(Arc::new(Rendered {
            at: Instant::now(),
            saves,
            value: piece,
        })));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_pieces_have_equal_versions() {
        let a = Piece::new("<p>1</p>".into());
        let b = Piece::new("<p>1</p>".into());
        let c = Piece::new("<p>2</p>".into());
        assert_eq!(a.version, b.version);
        assert_ne!(a.version, c.version);
    }

    #[test]
    fn a_listed_change_makes_the_page_stale() {
        let cache = DashboardCache::default();
        assert!(cache.fresh(0).is_none());
        let dash = Dash {
            live: Piece::new("live".into()),
            finished: Piece::new("finished".into()),
            kinds: Vec::new(),
        };
        cache.store(3, Arc::new(dash));
        assert!(cache.fresh(3).is_some());
        assert!(cache.fresh(4).is_none());
        cache.store_workers(3, Arc::new(Piece::new("w".into())));
        assert!(cache.fresh_workers(3).is_some());
    }
}
