//! The pager under a paged table (`templates/kit.html` draws it, numbered with `pager` or
//! as Prev / page N of M / Next with `prev_next`), and the `page` query parameter it links
//! with.

/// The last page that may be asked for (the same bound as `/api/finished_runs`).
pub const MAX_PAGE: u64 = 1_000_000;

/// `page` from a query: 1-based, capped at [`MAX_PAGE`]; anything but a number from 1 on
/// is page 1.
pub fn page_param(page: Option<&str>) -> u64 {
    page.and_then(|p| p.trim().parse::<u64>().ok())
        .filter(|p| *p >= 1)
        .map_or(1, |p| p.min(MAX_PAGE))
}

/// One item of the numbered pager: a page link, a disabled Prev/Next (empty `href`) or a
/// gap ("…").
pub struct PageLink {
    pub label: String,
    pub href: String,
    pub current: bool,
}

/// Page `page` of `last`, with each page's link.
pub struct Pager {
    pub page: u64,
    pub last: u64,
    /// The previous and next pages' links; empty at either end (shown disabled).
    pub prev: String,
    pub next: String,
    /// The numbered form: Prev · pages · Next; empty when there is one page.
    pub links: Vec<PageLink>,
}

impl Pager {
    /// The pager of page `page` of `last`, each page's link from `href_of`.
    pub fn new(page: u64, last: u64, href_of: impl Fn(u64) -> String) -> Pager {
        let at = |target: Option<u64>| target.map_or_else(String::new, &href_of);
        let prev = at((page > 1).then(|| page - 1));
        let next = at((page < last).then(|| page + 1));
        let mut links = Vec::new();
        if last > 1 {
            let link = |label: String, href: String, current: bool| PageLink {
                label,
                href,
                current,
            };
            links.push(link("Prev".into(), prev.clone(), false));
            for p in pages(page, last) {
                links.push(match p {
                    Some(p) => link(p.to_string(), href_of(p), p == page),
                    None => link("…".into(), String::new(), false),
                });
            }
            links.push(link("Next".into(), next.clone(), false));
        }
        Pager {
            page,
            last,
            prev,
            next,
            links,
        }
    }

    /// One page only: nothing to show.
    pub fn is_empty(&self) -> bool {
        self.last <= 1
    }
}

/// Page 1 of 1: nothing to show.
impl Default for Pager {
    fn default() -> Self {
        Pager::new(1, 1, |_| String::new())
    }
}

/// The pages the numbered pager shows: page 1 always, the last page, and either pages 2–4
/// (near the start), the last four (near the end) or the current page with its neighbours;
/// `None` marks a gap.
pub fn pages(page: u64, last: u64) -> Vec<Option<u64>> {
    let mut pages = vec![1, last];
    if page <= 3 {
        pages.extend(2..=4);
    } else if page + 2 >= last {
        pages.extend(last.saturating_sub(3)..=last);
    } else {
        pages.extend(page - 1..=page + 1);
    }
    pages.retain(|p| (1..=last).contains(p));
    pages.sort_unstable();
    pages.dedup();
    let mut out = Vec::new();
    let mut prev = 0;
    for p in pages {
        if p > prev + 1 {
            out.push(None);
        }
        out.push(Some(p));
        prev = p;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pager_follows_the_spec_layout() {
        let show = |page, last| {
            pages(page, last)
                .into_iter()
                .map(|p| p.map_or("…".to_string(), |p| p.to_string()))
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(show(1, 1), "1");
        assert_eq!(show(1, 3), "1 2 3");
        assert_eq!(show(1, 10), "1 2 3 4 … 10");
        assert_eq!(show(3, 10), "1 2 3 4 … 10");
        assert_eq!(show(5, 10), "1 … 4 5 6 … 10");
        assert_eq!(show(9, 10), "1 … 7 8 9 10");
        assert_eq!(show(10, 10), "1 … 7 8 9 10");
        let href = |p: u64| format!("/x?page={p}");
        assert!(Pager::new(1, 1, href).links.is_empty());
        let p = Pager::new(1, 2, href);
        assert_eq!(p.links[0].href, "", "Prev disabled on page 1");
        assert_eq!(p.prev, "");
        assert_eq!(p.links.last().map(|l| l.href.as_str()), Some("/x?page=2"));
        assert_eq!(p.next, "/x?page=2");
    }

    #[test]
    fn the_page_parameter() {
        assert_eq!(page_param(None), 1);
        assert_eq!(page_param(Some("x")), 1);
        assert_eq!(page_param(Some("0")), 1);
        assert_eq!(page_param(Some("-3")), 1);
        assert_eq!(page_param(Some(" 7 ")), 7);
        assert_eq!(page_param(Some("99999999999")), MAX_PAGE);
        assert_eq!(page_param(Some("99999999999999999999999")), 1);
    }
}
