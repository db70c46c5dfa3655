//! gRPC on keyed routes: a gRPC call's status read from an upstream answer (to decide
//! whether it releases the key), and what the gateway answers a gRPC call with itself:
//! the gRPC status of each [`Problem`], as a trailers-only response, never problem+json.
//!
//! A call is gRPC when its `Content-Type` is ([`is_grpc`]). Its key, scope and
//! fingerprint are an HTTP request's: the `idempotency-key` metadata is the header,
//! and the fingerprint covers the framed message bytes. Statuses (docs/http.md, "gRPC"):
//! a reused key is `FAILED_PRECONDITION` (the call is refused because of what the
//! system holds, not because of its arguments), a key in flight `ABORTED`, a store or
//! an upstream that cannot be reached `UNAVAILABLE`, a missing or invalid key or scope
//! `INVALID_ARGUMENT`; `grpc-message` starts with the problem's `code`.

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use crate::config::GrpcCode;
use crate::idempotency::StoredResponse;
use crate::problem::Problem;

pub use crate::proxy::headers::is_grpc;

const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
/// gRPC's retry pushback: how long a client's retry policy waits before trying again.
const GRPC_RETRY_PUSHBACK: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");
const APPLICATION_GRPC: HeaderValue = HeaderValue::from_static("application/grpc");

/// The status a gRPC answer ends with: its trailers' `grpc-status`, or its headers'
/// for a trailers-only answer. `None` when there is none, or not a number gRPC knows.
pub fn status_of(headers: &HeaderMap, trailers: Option<&HeaderMap>) -> Option<GrpcCode> {
    let value = trailers
        .and_then(|t| t.get(GRPC_STATUS))
        .or_else(|| headers.get(GRPC_STATUS))?;
    let n = value.to_str().ok()?.trim().parse::<u32>().ok()?;
    GrpcCode::from_number(n)
}

/// The gRPC status of a problem the gateway answers with.
pub fn code_for(problem: &Problem) -> GrpcCode {
    match problem.code {
        "idempotency_key_reused" => GrpcCode::FailedPrecondition,
        "idempotency_key_in_flight" | "idempotency_outcome_superseded" => GrpcCode::Aborted,
        "idempotency_key_missing"
        | "idempotency_key_invalid"
        | "idempotency_key_not_in_body"
        | "idempotency_key_conflict"
        | "idempotency_scope_missing"
        | "idempotency_scope_duplicated"
        | "invalid_path"
        | "request_body_unreadable" => GrpcCode::InvalidArgument,
        "route_not_found" => GrpcCode::Unimplemented,
        "request_body_too_large" | "upstream_response_too_large" => GrpcCode::ResourceExhausted,
        "request_body_timeout" | "upstream_timeout" => GrpcCode::DeadlineExceeded,
        "store_unavailable" | "overloaded" | "upstream_unavailable" => GrpcCode::Unavailable,
        "upstream_outcome_unknown" => GrpcCode::Unknown,
        _ => GrpcCode::Internal,
    }
}

/// A problem as a gRPC call's answer: `200`, `Content-Type: application/grpc`, no body,
/// and the status in the headers (a trailers-only response): `grpc-status`,
/// `grpc-message` (`<code>: <detail>`, percent-encoded as gRPC requires) and, when the
/// problem says when to retry, `grpc-retry-pushback-ms`.
pub fn answer(problem: &Problem) -> Response {
    let mut response = Response::new(Body::empty());
    let headers = response.headers_mut();
    *headers = status_headers(problem);
    if let Some(secs) = problem.retry_after {
        headers.insert(GRPC_RETRY_PUSHBACK, HeaderValue::from(secs * 1000));
    }
    response
}

/// A problem as the answer to a request: [`answer`] to a gRPC call (`grpc`: its
/// `Content-Type` is gRPC, [`is_grpc`]), problem+json to any other. Whatever refuses a
/// request (the flow, the listener's `max_concurrent_requests` and `buffer_budget`)
/// answers so.
pub fn render(problem: Problem, grpc: bool) -> Response {
    match grpc {
        true => answer(&problem),
        false => problem.into_response(),
    }
}

/// A problem stored for a gRPC call (an outcome unknown, a response too large): the
/// same trailers-only answer as [`answer`], replayed to every retry.
pub fn to_stored(problem: &Problem) -> StoredResponse {
    StoredResponse::from_upstream(StatusCode::OK, &status_headers(problem), Bytes::new())
}

/// The trailers that end a gRPC answer joined live whose source was cut (its replica
/// died, or the upstream's answer broke off): `UNAVAILABLE`, so the client retries.
pub fn cut_trailers() -> HeaderMap {
    let mut trailers = HeaderMap::with_capacity(2);
    let code = u16::from(GrpcCode::Unavailable.number());
    trailers.insert(GRPC_STATUS, HeaderValue::from(code));
    let message = "live_answer_cut: the answer being joined was cut; retry";
    trailers.insert(GRPC_MESSAGE, HeaderValue::from_static(message));
    trailers
}

/// `Content-Type`, `grpc-status` and `grpc-message` of a problem's status.
fn status_headers(problem: &Problem) -> HeaderMap {
    let mut headers = HeaderMap::with_capacity(4);
    headers.insert(CONTENT_TYPE, APPLICATION_GRPC);
    let code = u16::from(code_for(problem).number());
    headers.insert(GRPC_STATUS, HeaderValue::from(code));
    headers.insert(GRPC_MESSAGE, message(problem));
    headers
}

/// `<code>: <detail>`, percent-encoded: every byte outside printable ASCII, and `%`.
fn message(problem: &Problem) -> HeaderValue {
    let text = format!("{}: {}", problem.code, problem.detail);
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    HeaderValue::from_str(&out).unwrap_or(HeaderValue::from_static("internal_error"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_problem_becomes_a_trailers_only_status_with_its_code_in_the_message() {
        let r = answer(&Problem::in_flight(Duration::from_millis(1500)));
        assert_eq!(r.status(), StatusCode::OK);
        let h = r.headers();
        assert_eq!(h[CONTENT_TYPE], "application/grpc");
        assert_eq!(h["grpc-status"], "10");
        let message = h["grpc-message"].to_str().unwrap();
        assert!(
            message.starts_with("idempotency_key_in_flight: "),
            "{message}"
        );
        assert_eq!(h["grpc-retry-pushback-ms"], "2000");
        let reused = answer(&Problem::mismatch(StatusCode::UNPROCESSABLE_ENTITY));
        assert_eq!(reused.headers()["grpc-status"], "9");
    }

    /// The backticked words of a markdown table cell that are problem codes.
    fn codes(cell: &str) -> Vec<&str> {
        let word =
            |w: &&str| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
        cell.split('`').skip(1).step_by(2).filter(word).collect()
    }

    /// The rows of the first table after `heading` in docs/http.md, as cells.
    fn table<'a>(doc: &'a str, heading: &str) -> Vec<Vec<&'a str>> {
        let after = &doc[doc.find(heading).expect("heading")..];
        let rows = after.lines().skip_while(|l| !l.starts_with('|')).skip(2);
        let rows = rows.take_while(|l| l.starts_with('|'));
        rows.map(|l| l.split('|').map(str::trim).collect())
            .collect()
    }

    /// What is wrong with the gRPC table of `doc` (docs/http.md): a row whose status is
    /// not what [`code_for`] answers for its codes, a code of the "Errors" table without
    /// a row, and a row for a code the "Errors" table does not have.
    fn grpc_table_problems(doc: &'static str) -> Vec<String> {
        let mut problems = Vec::new();
        let mut documented = Vec::new();
        for row in table(doc, "| problem `code` | gRPC status |") {
            let status = row[2].split('`').nth(1).unwrap_or("no status");
            for code in codes(row[1]) {
                let problem = Problem::new(StatusCode::OK, code, "t", "d");
                let answered = serde_json::to_value(code_for(&problem)).unwrap();
                if answered != status {
                    problems.push(format!(
                        "{code}: the gRPC table says {status}, answered {answered}"
                    ));
                }
                documented.push(code);
            }
        }
        let errors: Vec<&str> = (table(doc, "## Errors").iter())
            .flat_map(|row| codes(row[2]))
            .collect();
        for code in errors.iter().filter(|code| !documented.contains(code)) {
            problems.push(format!("{code}: no row in the gRPC table"));
        }
        for code in documented.iter().filter(|code| !errors.contains(code)) {
            problems.push(format!(
                "{code}: a row in the gRPC table, but no such problem"
            ));
        }
        problems
    }

    #[test]
    fn the_documented_grpc_statuses_are_those_answered_for_every_documented_problem() {
        let doc = include_str!("../docs/http.md");
        assert!(
            table(doc, "## Errors").len() > 15,
            "the Errors table is read"
        );
        let problems = grpc_table_problems(doc);
        assert!(
            problems.is_empty(),
            "docs/http.md:\n{}",
            problems.join("\n")
        );
    }

    /// A wrong status, a problem without a row and a row for no problem are all found.
    #[test]
    fn the_grpc_table_check_finds_a_wrong_status_a_missing_row_and_a_stray_one() {
        let doc = "## Errors\n\n| status | code | when |\n|---|---|---|\n\
                   | 422 | `idempotency_key_reused` | x |\n| 409 | `idempotency_key_in_flight` | x |\n\
                   | 400 | `invalid_path` | x |\n\n\
                   | problem `code` | gRPC status |\n|---|---|\n\
                   | `idempotency_key_reused` | `FAILED_PRECONDITION`: why |\n\
                   | `idempotency_key_in_flight` | `UNAVAILABLE` |\n| `gone` | `INTERNAL` |\n";
        assert_eq!(
            grpc_table_problems(doc),
            [
                "idempotency_key_in_flight: the gRPC table says UNAVAILABLE, answered \"ABORTED\"",
                "invalid_path: no row in the gRPC table",
                "gone: a row in the gRPC table, but no such problem",
            ]
        );
    }

    #[test]
    fn the_message_is_percent_encoded() {
        let p = Problem::internal("50% done\nnaïve");
        let m = message(&p);
        assert_eq!(m, "internal_error: 50%25 done%0Ana%C3%AFve");
    }

    #[test]
    fn the_status_is_read_from_trailers_then_headers() {
        let mut headers = HeaderMap::new();
        let mut trailers = HeaderMap::new();
        assert_eq!(status_of(&headers, Some(&trailers)), None);
        headers.insert(GRPC_STATUS, HeaderValue::from_static("14"));
        assert_eq!(status_of(&headers, None), Some(GrpcCode::Unavailable));
        trailers.insert(GRPC_STATUS, HeaderValue::from_static("0"));
        assert_eq!(status_of(&headers, Some(&trailers)), Some(GrpcCode::Ok));
        trailers.insert(GRPC_STATUS, HeaderValue::from_static("99"));
        assert_eq!(status_of(&HeaderMap::new(), Some(&trailers)), None);
    }
}
