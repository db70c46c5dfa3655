//! RFC 9457 problem details: every error the gateway itself answers with, and the one
//! place where each boundary's error enum is mapped to a status and a `code`.

use std::time::Duration;

use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, StatusCode};
use serde::Serialize;

use crate::idempotency::{KeyError, ScopeError, StoredResponse};
use crate::proxy::UpstreamError;
use crate::route::path::PathError;
use crate::store::{Failure, StoreError};

pub const PROBLEM_JSON: &str = "application/problem+json";

/// A problem+json answer produced by the gateway (never by the upstream).
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    #[serde(rename = "type")]
    pub kind: String,
    pub title: &'static str,
    #[serde(serialize_with = "as_u16")]
    pub status: StatusCode,
    pub detail: String,
    /// Machine-readable name of the problem, stable across releases.
    pub code: &'static str,
    #[serde(skip)]
    pub retry_after: Option<u64>,
}

fn as_u16<S: serde::Serializer>(s: &StatusCode, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_u16(s.as_u16())
}

impl Problem {
    pub fn new(
        status: StatusCode,
        code: &'static str,
        title: &'static str,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            kind: format!("urn:idemgate:problem:{code}"),
            title,
            status,
            detail: detail.into(),
            code,
            retry_after: None,
        }
    }

    fn retry_after(mut self, wait: Duration) -> Self {
        // Whole seconds, rounded up, at least one.
        let secs = wait.as_millis().div_ceil(1000).max(1);
        self.retry_after = Some(secs as u64);
        self
    }

    pub fn no_route(path_len: usize) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "route_not_found",
            "No route for this path",
            format!("no configured route's path_prefix matches this {path_len}-byte path"),
        )
    }

    pub fn body_too_large(limit: u64) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request_body_too_large",
            "Request body too large",
            format!("the request body exceeds the limit of {limit} bytes; nothing was claimed"),
        )
    }

    pub fn body_timeout(after: Duration) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_body_timeout",
            "Request body too slow",
            format!("the request body did not arrive within {after:?}; nothing was claimed"),
        )
    }

    pub fn body_unreadable(reason: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "request_body_unreadable",
            "Request body could not be read",
            format!("reading the request body failed: {reason}"),
        )
    }

    pub fn in_flight(remaining: Duration) -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "idempotency_key_in_flight",
            "Request with this key is in progress",
            "another request with this idempotency key is being processed; retry after it finishes",
        )
        .retry_after(remaining)
    }

    /// This request ran, but its lease ran out first and another execution took the
    /// key over: the key's outcome is that execution's, which is not stored yet.
    pub fn superseded(retry_after: Duration) -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "idempotency_outcome_superseded",
            "Outcome belongs to another execution",
            "this request's lease ran out before it completed and another execution took \
             the key over; retry to get that execution's outcome",
        )
        .retry_after(retry_after)
    }

    pub fn mismatch(status: StatusCode) -> Self {
        Self::new(
            status,
            "idempotency_key_reused",
            "Idempotency key reused with a different request",
            "this idempotency key was already used with a different method, path, query, \
             content type or body",
        )
    }

    /// The upstream may or may not have acted (`on_ambiguous = "store"`).
    pub fn outcome_unknown(e: &UpstreamError) -> Self {
        let status = match e {
            UpstreamError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::BAD_GATEWAY,
        };
        Self::new(
            status,
            "upstream_outcome_unknown",
            "Upstream outcome unknown",
            format!(
                "{e}; the upstream may have acted, so this answer is stored and replayed for \
                 this key. Check with the upstream before using a new key"
            ),
        )
    }

    /// The key's lease lapsed with no completion: the execution that held it may have
    /// acted before its replica went away (`on_ambiguous = "store"`).
    pub fn lapsed_unknown() -> Self {
        Self::new(
            StatusCode::BAD_GATEWAY,
            "upstream_outcome_unknown",
            "Upstream outcome unknown",
            "an earlier request with this key was running when the gateway replica running \
             it went away (stopped, killed or cut off) before its outcome was stored; the \
             upstream may have acted, so this answer is stored and replayed for this key. \
             Check with the upstream before using a new key",
        )
    }

    /// The client's wait ended at the route's `upstream_timeout`, but the call goes on:
    /// its answer is stored for the key, and a retry gets it (409 while it runs).
    pub fn upstream_still_running(after: Duration) -> Self {
        Self::new(
            StatusCode::GATEWAY_TIMEOUT,
            "upstream_timeout",
            "Upstream timed out",
            format!(
                "the upstream did not answer within {after:?}; the call goes on, and a retry \
                 with the same idempotency key gets its answer once it is stored (409 while \
                 it runs)"
            ),
        )
        .retry_after(after)
    }

    pub fn internal(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            "Internal error",
            detail,
        )
    }

    /// The problem as a response that can be stored and replayed like an upstream's.
    pub fn to_stored(&self) -> StoredResponse {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        let body = serde_json::to_vec(self).unwrap_or_default();
        StoredResponse::from_upstream(self.status, &headers, Bytes::from(body))
    }

    /// The request path was refused before routing (see [`crate::route::path`]).
    pub fn invalid_path(e: PathError) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_path",
            "Invalid request path",
            format!("{e}; nothing was forwarded"),
        )
    }

    /// Too many requests in flight on this replica (`server.max_concurrent_requests`).
    pub fn overloaded_in_flight(limit: usize) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded",
            "Gateway overloaded",
            format!(
                "this replica is handling its limit of {limit} requests; nothing was claimed \
                 or forwarded, retry later"
            ),
        )
        .retry_after(Duration::from_secs(1))
    }

    /// The request's connection holds its share of this replica's requests in flight
    /// (`server.connection_share` of `server.max_concurrent_requests`).
    pub fn overloaded_connection(limit: u64) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded",
            "Gateway overloaded",
            format!(
                "this connection is handling its limit of {limit} requests; nothing was \
                 claimed or forwarded, retry later"
            ),
        )
        .retry_after(Duration::from_secs(1))
    }

    /// The body buffers of this replica are full (`server.buffer_budget`).
    pub fn overloaded_buffers() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded",
            "Gateway overloaded",
            "this replica's memory for buffered bodies is in use; nothing was claimed or \
             forwarded, retry later",
        )
        .retry_after(Duration::from_secs(1))
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut response = (self.status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if let Some(secs) = self.retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

impl From<KeyError> for Problem {
    fn from(e: KeyError) -> Self {
        match e {
            KeyError::Missing(_) => Self::new(
                StatusCode::BAD_REQUEST,
                "idempotency_key_missing",
                "Idempotency key required",
                e.to_string(),
            ),
            KeyError::Invalid(_) => Self::new(
                StatusCode::BAD_REQUEST,
                "idempotency_key_invalid",
                "Invalid idempotency key",
                e.to_string(),
            ),
            KeyError::NotInBody(_) => Self::new(
                StatusCode::BAD_REQUEST,
                "idempotency_key_not_in_body",
                "Idempotency key missing from the body",
                format!("{e}; nothing was claimed or forwarded"),
            ),
            KeyError::Conflict(_) => Self::new(
                StatusCode::BAD_REQUEST,
                "idempotency_key_conflict",
                "Idempotency keys disagree",
                format!("{e}; nothing was claimed or forwarded"),
            ),
        }
    }
}

impl From<ScopeError> for Problem {
    fn from(e: ScopeError) -> Self {
        let code = match e {
            ScopeError::Missing(_) => "idempotency_scope_missing",
            ScopeError::Duplicated(_) => "idempotency_scope_duplicated",
        };
        Self::new(
            StatusCode::BAD_REQUEST,
            code,
            "Tenant scope missing or ambiguous",
            e.to_string(),
        )
    }
}

impl From<&StoreError> for Problem {
    fn from(e: &StoreError) -> Self {
        if e.unreadable().is_some() {
            return Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "stored_record_unreadable",
                "Stored response unreadable",
                "a response is stored for this key but cannot be read; it is not replayed \
                 and the request was not forwarded",
            );
        }
        match (e.failure(), e) {
            (Failure::Internal, _) => Self::internal(
                "the idempotency store returned something unexpected; the request was not forwarded",
            ),
            (_, StoreError::Timeout | StoreError::PgTimeout) => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                "Idempotency store unavailable",
                "the idempotency store did not answer in time; the request was not forwarded",
            )
            .retry_after(Duration::from_secs(1)),
            _ => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                "Idempotency store unavailable",
                "the idempotency store is unavailable; the request was not forwarded",
            )
            .retry_after(Duration::from_secs(1)),
        }
    }
}

impl From<&UpstreamError> for Problem {
    fn from(e: &UpstreamError) -> Self {
        match e {
            UpstreamError::Timeout(_) => Self::new(
                StatusCode::GATEWAY_TIMEOUT,
                "upstream_timeout",
                "Upstream timed out",
                e.to_string(),
            ),
            UpstreamError::Connect(_) | UpstreamError::Exchange(_) | UpstreamError::Cancelled => {
                Self::new(
                    StatusCode::BAD_GATEWAY,
                    "upstream_unavailable",
                    "Upstream unavailable",
                    e.to_string(),
                )
            }
            UpstreamError::ResponseTooLarge(_) => Self::new(
                StatusCode::BAD_GATEWAY,
                "upstream_response_too_large",
                "Upstream response too large",
                e.to_string(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn renders_rfc9457_with_code_and_retry_after() {
        let r = Problem::in_flight(Duration::from_millis(1200)).into_response();
        assert_eq!(r.status(), StatusCode::CONFLICT);
        assert_eq!(r.headers()[CONTENT_TYPE], PROBLEM_JSON);
        assert_eq!(r.headers()[RETRY_AFTER], "2");
        let body = r.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["status"], 409);
        assert_eq!(v["code"], "idempotency_key_in_flight");
        for field in ["type", "title", "detail"] {
            assert!(v[field].is_string(), "{field} missing in {v}");
        }
    }

    #[test]
    fn retry_after_is_at_least_one_second() {
        assert_eq!(Problem::in_flight(Duration::ZERO).retry_after, Some(1));
        assert_eq!(
            Problem::in_flight(Duration::from_millis(3000)).retry_after,
            Some(3)
        );
    }
}
