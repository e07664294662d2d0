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

/// What every slot's name starts with (`__shoal_csrf_token__`…).
pub const SLOT_PREFIX: &str = "__shoal_";

/// One rendered piece of HTML and its version (a hash of the HTML: equal pieces, equal
/// versions, whoever rendered them), with where its slots are, found once when it is made:
/// a request fills them by copying the text between them ([`Piece::write_filled`]), never
/// searching the whole piece again.
pub struct Piece {
    pub html: String,
    pub version: u64,
    /// The byte offsets of every [`SLOT_PREFIX`], in order.
    marks: Vec<usize>,
}

impl Piece {
    pub fn new(html: String) -> Self {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        html.hash(&mut h);
        Piece {
            version: h.finish(),
            marks: html.match_indices(SLOT_PREFIX).map(|(at, _)| at).collect(),
            html,
        }
    }

    /// Writes the HTML with each slot named in `slots` replaced by its value (a name not in
    /// `slots` is left as it is).
    pub fn write_filled<W: std::fmt::Write>(
        &self,
        out: &mut W,
        slots: &[(&str, &str)],
    ) -> std::fmt::Result {
        let mut from = 0;
        for &at in &self.marks {
            let Some(tail) = self.html.get(at..).filter(|_| at >= from) else {
                continue;
            };
            if let Some((slot, value)) = slots.iter().find(|(slot, _)| tail.starts_with(slot)) {
                out.write_str(&self.html[from..at])?;
                out.write_str(value)?;
                from = at + slot.len();
            }
        }
        out.write_str(&self.html[from..])
    }

    /// The HTML with its slots filled ([`Piece::write_filled`]), as a string.
    pub fn filled(&self, slots: &[(&str, &str)]) -> String {
        let extra: usize = slots.iter().map(|(_, v)| v.len()).sum();
        let mut out = String::with_capacity(self.html.len() + extra);
        // Writing to a String cannot fail.
        let _ = self.write_filled(&mut out, slots);
        out
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
    fn slots_are_filled_and_other_names_left_alone() {
        let p = Piece::new("a __shoal_csrf__ b __shoal_x__ c __shoal_shown__".into());
        assert_eq!(
            p.filled(&[("__shoal_csrf__", "T"), ("__shoal_shown__", " (2)")]),
            "a T b __shoal_x__ c  (2)"
        );
        assert_eq!(
            Piece::new("plain".into()).filled(&[("__shoal_x__", "T")]),
            "plain"
        );
        // A value is never searched for slots.
        let p = Piece::new("__shoal_a____shoal_b__".into());
        assert_eq!(
            p.filled(&[("__shoal_a__", "__shoal_b__"), ("__shoal_b__", "B")]),
            "__shoal_b__B"
        );
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
