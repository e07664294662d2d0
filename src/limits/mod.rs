//! Limits: keyed concurrency limits, floating limits and rate limits (the design is in
//! docs/limits.md).
//!
//! - [`def`]: what `[[limits]]` in settings.toml may say, validated; the built-in limits that
//!   carry Fishtest's special cases (machine limit, the per-run window, the SPSA core cap);
//! - [`engine`]: the per-key state (holders, waiters, rejections), grant and release, waiting
//!   with reservations, floating refresh state with its backoff, rate windows, the views;
//! - [`compute`]: the built-in computations of floating limits, pure.
//!
//! Must not: know HTTP or the store: the run database decides what a task's keys are and when
//! it ends (and releases), the HTTP layer counts calls against rate limits and shows the views.

pub mod compute;
pub mod def;
pub mod engine;

pub use def::{KeyKind, Kind, LimitDef, LimitSpec, Scope, Source, Unit};
pub use engine::{Engine, Full, Grant, GrantRef, Holder, KeyCtx, LimitId, LimitView, RateLimited};

#[cfg(test)]
mod props;

/// The address a per-address rate limit (signup, `/forgot`, failed logins) counts: an IPv4
/// address as it is, an IPv6 address as its /64 (`2001:db8:1:2::/64`: one customer's
/// network hands out a whole /64, so one client could otherwise count as many). Anything
/// else (not an address) as it is.
pub fn rate_addr(ip: &str) -> String {
    match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V6(v6)) if v6.to_ipv4_mapped().is_none() => {
            let s = v6.segments();
            let net = std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0);
            format!("{net}/64")
        }
        Ok(std::net::IpAddr::V6(v6)) => v6
            .to_ipv4_mapped()
            .map_or_else(|| ip.to_string(), |v4| v4.to_string()),
        _ => ip.to_string(),
    }
}

#[cfg(test)]
mod rate_addr_tests {
    #[test]
    fn ipv6_counts_by_its_64_and_ipv4_as_is() {
        use super::rate_addr;
        assert_eq!(rate_addr("192.0.2.7"), "192.0.2.7");
        assert_eq!(rate_addr("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
        assert_eq!(rate_addr("2001:db8:1:2:ffff:1:2:3"), "2001:db8:1:2::/64");
        assert_ne!(rate_addr("2001:db8:1:3::1"), "2001:db8:1:2::/64");
        assert_eq!(rate_addr("::ffff:192.0.2.7"), "192.0.2.7");
        assert_eq!(rate_addr("unknown"), "unknown");
    }
}
