//! Sortable table headers (`templates/kit.html`'s `sort_headers` draws the cells): each
//! column links to the
//! table sorted by it; the column sorted now flips its order, another starts in its own
//! default order. Also the `order` parameter they link with.

/// One sortable column header.
pub struct Column {
    pub label: &'static str,
    pub href: String,
}

/// `order` from a query: `asc` or `desc`, else the sort key's default.
pub fn order_param(order: Option<&str>, default_desc: bool) -> bool {
    match order {
        Some("asc") => false,
        Some("desc") => true,
        _ => default_desc,
    }
}

/// The `order` parameter's value.
pub fn order_text(desc: bool) -> &'static str {
    if desc { "desc" } else { "asc" }
}

/// The order a click on column `key` asks for, the table being sorted by `sort` (`desc`):
/// the other order for the current column, the column's default for another.
pub fn next_desc(key: &str, default_desc: bool, sort: &str, desc: bool) -> bool {
    if key == sort { !desc } else { default_desc }
}

/// The headers of `columns` (key, label, descending by default), each linking to
/// `href(key, desc)`.
pub fn sort_columns<'a>(
    columns: impl IntoIterator<Item = (&'a str, &'static str, bool)>,
    sort: &str,
    desc: bool,
    href: impl Fn(&str, bool) -> String,
) -> Vec<Column> {
    columns
        .into_iter()
        .map(|(key, label, default_desc)| Column {
            label,
            href: href(key, next_desc(key, default_desc, sort, desc)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sorted_column_flips_the_others_start_at_their_default() {
        let cols = sort_columns(
            [("name", "Name", false), ("time", "Time", true)],
            "name",
            false,
            |k, d| format!("?sort={k}&order={}", order_text(d)),
        );
        assert_eq!(cols[0].href, "?sort=name&order=desc");
        assert_eq!(cols[1].href, "?sort=time&order=desc");
        assert!(order_param(None, true));
        assert!(!order_param(Some("asc"), true));
        assert!(order_param(Some("desc"), false));
        assert!(!order_param(Some("up"), false));
    }
}
