//! The response sent for a record: a first execution and every replay are built by
//! the same [`StoredResponse::to_response`], so they are byte-identical apart from
//! `Idempotent-Replayed`; a replay also leaves out what the route keeps out of replays.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use hyper::body::Frame;

use super::stored::{header_map, StoredResponse};
use crate::config::ReplayOmit;
use crate::proxy::headers::REPLAYED;

impl StoredResponse {
    /// The response to send: stored status, headers, body and trailers, plus
    /// `Idempotent-Replayed`.
    pub fn to_response(&self, replayed: bool) -> Response {
        self.response_without(replayed, None)
    }

    /// [`to_response`](Self::to_response) without the headers `omit` names.
    fn response_without(&self, replayed: bool, omit: Option<&ReplayOmit>) -> Response {
        let mut response = Response::new(self.to_body());
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        headers.reserve(self.headers.len() + 1);
        let omit = omit.filter(|o| !o.is_empty());
        for (name, value) in &self.headers {
            if !omit.is_some_and(|o| o.omits(name)) {
                headers.append(name.clone(), value.clone());
            }
        }
        let flag = if replayed { "true" } else { "false" };
        headers.insert(REPLAYED, HeaderValue::from_static(flag));
        // For the edge: a replay's span links to the execution (never sent).
        if let Some(origin) = self.origin.filter(|_| replayed) {
            response.extensions_mut().insert(origin);
        }
        response
    }

    /// The body, then the trailers when there are any.
    fn to_body(&self) -> Body {
        if self.trailers.is_empty() {
            return Body::from(self.body.clone());
        }
        let trailers = header_map(&self.trailers);
        let data = (!self.body.is_empty()).then(|| self.body.clone());
        Body::new(WithTrailers {
            data,
            trailers: Some(trailers),
        })
    }

    /// The response for a replay: as stored, with `Idempotent-Replayed: true`, minus the
    /// headers the route keeps out of replays (`omit`): a record stored before they were
    /// kept out (or under another route policy) may hold them.
    pub fn replay(&self, omit: &ReplayOmit) -> Response {
        self.response_without(true, Some(omit))
    }
}

/// A body of one data frame (if any) and then trailers.
struct WithTrailers {
    data: Option<Bytes>,
    trailers: Option<HeaderMap>,
}

impl hyper::body::Body for WithTrailers {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let frame = match self.data.take() {
            Some(data) => Some(Frame::data(data)),
            None => self.trailers.take().map(Frame::trailers),
        };
        Poll::Ready(frame.map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none() && self.trailers.is_none()
    }

    /// The data's length as a lower bound only: an exact size would make hyper send a
    /// `content-length` on an answer that ends with trailers.
    fn size_hint(&self) -> hyper::body::SizeHint {
        let mut hint = hyper::body::SizeHint::new();
        hint.set_lower(self.data.as_ref().map_or(0, |d| d.len() as u64));
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::super::stored::sample;
    use super::*;
    use http::StatusCode;

    #[tokio::test]
    async fn a_response_with_trailers_sends_them_after_the_body() {
        use http_body_util::BodyExt;
        let mut t = HeaderMap::new();
        t.append("grpc-status", HeaderValue::from_static("5"));
        let s = sample().with_trailers(Some(&t));
        let collected = s.to_response(true).into_body().collect().await.unwrap();
        assert_eq!(collected.trailers().unwrap()["grpc-status"], "5");
        assert_eq!(collected.to_bytes(), s.body);
    }

    #[test]
    fn omitted_headers_are_not_stored_and_not_replayed_from_old_records() {
        use crate::config::HeaderPattern;
        let omit = ReplayOmit::new(&[HeaderPattern::parse("x-request-*").unwrap()], false);
        let old = sample();
        let replay = old.replay(&omit);
        let names: Vec<&str> = replay.headers().keys().map(|n| n.as_str()).collect();
        assert_eq!(names, ["content-type", "idempotent-replayed"]);
        let mut stored = sample();
        stored.omit(&omit);
        assert_eq!(stored.headers, [old.headers[0].clone()]);
        let nothing = ReplayOmit::new(&[], true);
        stored = sample();
        stored.omit(&nothing);
        assert_eq!(stored, old);
        assert_eq!(old.replay(&nothing).headers().len(), 5);
    }

    #[test]
    fn response_carries_the_replay_flag() {
        let r = sample().to_response(true);
        assert_eq!(r.status(), StatusCode::CREATED);
        assert_eq!(r.headers()["idempotent-replayed"], "true");
        assert_eq!(r.headers().get_all("set-cookie").iter().count(), 2);
    }
}
