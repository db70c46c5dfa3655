//! Until when a completed record is replayed ([`Expiry`]): the moment its completion
//! plus the route's `ttl` reaches, which every tier honours (Redis by the record's TTL,
//! Postgres by the row's `replay_until`, the replay cache by its entry's age) and which
//! the client is told (`Idempotency-Expires`, an HTTP-date: a whole second, so the
//! moment is rounded up to one).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderName, HeaderValue};

use super::StoredResponse;

/// The moment a completed record stops being replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Expiry(SystemTime);

impl Expiry {
    /// A record completed now that lives `ttl`: now + `ttl`, rounded up to a whole
    /// second (what an HTTP-date can say).
    pub fn after(ttl: Duration) -> Self {
        Self::rounded_up(SystemTime::now() + ttl)
    }

    /// A record found with `remaining` left to live (re-warmed, copied): its expiry is
    /// kept, never pushed out.
    pub fn within(remaining: Duration) -> Self {
        Self(SystemTime::now() + remaining)
    }

    fn rounded_up(at: SystemTime) -> Self {
        let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
        let whole = Duration::from_secs(since.as_secs());
        let secs = match since == whole {
            true => whole,
            false => whole + Duration::from_secs(1),
        };
        Self(UNIX_EPOCH + secs)
    }

    /// The moment itself.
    pub fn at(&self) -> SystemTime {
        self.0
    }

    /// How long from now until it (zero once passed).
    pub fn remaining(&self) -> Duration {
        self.0
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO)
    }

    /// The HTTP-date of the moment (`Fri, 27 Nov 2026 10:00:00 GMT`).
    pub fn http_date(&self) -> HeaderValue {
        let date = httpdate::fmt_http_date(self.0);
        HeaderValue::from_str(&date).expect("an HTTP-date is a valid header value")
    }

    /// Writes the moment into `stored` under `name` (any value of that name the
    /// upstream sent is replaced): the first answer and every replay carry it, the
    /// same bytes from every tier.
    pub fn stamp(&self, stored: &mut StoredResponse, name: &HeaderName) {
        stored.headers.retain(|(n, _)| n != name);
        stored.headers.push((name.clone(), self.http_date()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_up_to_a_whole_second_and_never_down() {
        let at = UNIX_EPOCH + Duration::from_millis(1_700_000_000_001);
        assert_eq!(
            Expiry::rounded_up(at).at(),
            UNIX_EPOCH + Duration::from_secs(1_700_000_001)
        );
        let whole = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(Expiry::rounded_up(whole).at(), whole);
    }

    #[test]
    fn after_is_ttl_from_now_within_a_second() {
        let before = SystemTime::now();
        let expiry = Expiry::after(Duration::from_secs(60));
        let ahead = expiry.at().duration_since(before).unwrap();
        assert!(ahead >= Duration::from_secs(60) && ahead <= Duration::from_secs(61));
        assert!(expiry.remaining() <= Duration::from_secs(61));
    }

    #[test]
    fn the_date_is_an_http_date_of_the_moment() {
        let expiry = Expiry(UNIX_EPOCH + Duration::from_secs(1_795_780_800));
        assert_eq!(expiry.http_date(), "Fri, 27 Nov 2026 12:00:00 GMT");
        let parsed = httpdate::parse_http_date(expiry.http_date().to_str().unwrap());
        assert_eq!(parsed.unwrap(), expiry.at());
    }

    #[test]
    fn stamping_replaces_the_upstreams_own_value() {
        let name = HeaderName::from_static("idempotency-expires");
        let mut stored = StoredResponse::from_upstream(
            http::StatusCode::CREATED,
            &http::HeaderMap::from_iter([(name.clone(), HeaderValue::from_static("soon"))]),
            bytes::Bytes::new(),
        );
        let expiry = Expiry::after(Duration::from_secs(5));
        expiry.stamp(&mut stored, &name);
        let values: Vec<_> = stored.headers.iter().filter(|(n, _)| *n == name).collect();
        assert_eq!(values.len(), 1);
        assert_eq!(values[0].1, expiry.http_date());
    }
}
