//! How pages show a moment relative to now.

use crate::rundb::model::Date;

/// "N units ago" in the largest unit that is at least 1 (seconds, minutes, hours, days),
/// "0 seconds ago" for now or a moment slightly ahead, "Never" for no moment at all.
pub fn ago(t: Option<&Date>) -> String {
    let Some(t) = t else {
        return "Never".into();
    };
    let s = (chrono::Utc::now() - t.0).num_seconds().max(0);
    let (n, unit) = match s {
        0..60 => (s, "second"),
        60..3600 => (s / 60, "minute"),
        3600..86_400 => (s / 3600, "hour"),
        _ => (s / 86_400, "day"),
    };
    format!("{n} {unit}{} ago", if n == 1 { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_ago_labels() {
        let at = |s: i64| Date(chrono::Utc::now() - chrono::Duration::seconds(s));
        assert_eq!(ago(None), "Never");
        assert_eq!(ago(Some(&at(0))), "0 seconds ago");
        assert_eq!(ago(Some(&at(1))), "1 second ago");
        assert_eq!(ago(Some(&at(125))), "2 minutes ago");
        assert_eq!(ago(Some(&at(3700))), "1 hour ago");
        assert_eq!(ago(Some(&at(3 * 86_400 + 5))), "3 days ago");
    }
}
