//! The dashboard's shared first page: rendered at most once a second for everybody. Its own
//! module because `AppState` holds it and must not depend on the dashboard's handlers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;

/// How long a rendered first page is served to everybody.
const CACHE_TTL: Duration = Duration::from_secs(1);

/// The dashboard's default first page (no filter, page 1), rendered at most once every
/// [`CACHE_TTL`] and shared by every viewer: it depends on the runs, not on who looks, except
/// for the forms' CSRF token, which is filled in per request. A run created, approved,
/// stopped, modified, deleted or finished, or a task handed out or ended
/// (`RunDb::listed_changes`) makes it stale at once; results may be up to a second old.
/// The rendering is swapped in whole (`arc_swap`): readers never wait, and two renderers
/// racing just replace each other's equally fresh page.
#[derive(Default)]
pub struct DashboardCache {
    entry: ArcSwapOption<Rendered>,
}

struct Rendered {
    at: Instant,
    saves: u64,
    html: Arc<String>,
}

impl DashboardCache {
    /// The rendering made after `saves` listed changes, if it is still fresh.
    pub fn fresh(&self, saves: u64) -> Option<Arc<String>> {
        let entry = self.entry.load();
        entry
            .as_deref()
            .filter(|r| r.saves == saves && r.at.elapsed() < CACHE_TTL)
            .map(|r| Arc::clone(&r.html))
    }

    /// Keeps `html`, rendered after `saves` listed changes.
    pub fn store(&self, saves: u64, html: Arc<String>) {
        self.entry.store(Some(Arc::new(Rendered {
            at: Instant::now(),
            saves,
            html,
        })));
    }
}
