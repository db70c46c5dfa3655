//! A duplicate joining a live answer (`in_flight = "wait"`): answered as a replay
//! (`Idempotent-Replayed: true`, `replay_omit_headers` left out) with the head the
//! holder wrote, the bytes written so far at once, then the rest as they are written,
//! ending with the answer's trailers ([`reply`]); from after its `Last-Event-ID` when it
//! sends one ([`super::resume`]). It ends cleanly only once the key stores that very
//! answer, as its first client's does; an answer whose completion was refused or not
//! stored is cut.
//!
//! When the stream is gone before its end (expired after the answer was stored, or its
//! writer's replica died and its lease ran out), the joiner looks the record up: a
//! stored answer with the same status and the same bytes so far gives the rest of its
//! bytes from where the joiner is; anything else cuts the joiner's answer (HTTP: the body ends in an error;
//! gRPC: `UNAVAILABLE` trailers), so its client knows to retry.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use futures_util::stream;
use http::StatusCode;
use http_body_util::StreamBody;
use hyper::body::Frame;
use sha2::{Digest, Sha256};

use super::recording::Cut;
use super::resume::Resume;
use crate::app::App;
use crate::grpc;
use crate::idempotency::{header_map, Claim, Fingerprint, RecordId, Scope, StoredResponse};
use crate::metrics::{self, Join};
use crate::route::Route;
use crate::store::redis::live::Entry;
use crate::store::tiers::{Joined, Read};

/// The record a joiner falls back to.
pub struct Source {
    pub scope: Scope,
    pub record: RecordId,
    pub fingerprint: Fingerprint,
}

/// The joiner's answer, or `None` when the head does not decode (the caller waits
/// for the record instead).
pub fn reply(
    app: &Arc<App>,
    route: &Arc<Route>,
    source: Source,
    joined: Joined,
    resume: Option<Resume>,
) -> Option<Response> {
    let head = StoredResponse::decode(joined.head.clone()).ok()?;
    let headers = head.headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes()));
    let resume = resume.filter(|_| Resume::applies(headers));
    let mut response = head.replay(&route.policy.replay_omit);
    let grpc = grpc::is_grpc(response.headers());
    metrics::live_joiners(1.0);
    let state = Joiner {
        app: app.clone(),
        route: route.clone(),
        source,
        status: head.status,
        grpc,
        joined,
        pending: VecDeque::new(),
        ending: false,
        done: false,
        how: None,
        resume,
        read: Sha256::new(),
    };
    let body = StreamBody::new(stream::unfold(state, Joiner::step));
    *response.body_mut() = Body::new(body);
    Some(response)
}

struct Joiner {
    app: Arc<App>,
    route: Arc<Route>,
    source: Source,
    status: StatusCode,
    grpc: bool,
    /// The reader, and the joiner's place among the key's waiters.
    joined: Joined,
    pending: VecDeque<Result<Frame<Bytes>, Cut>>,
    /// The end was read: the answer ends once the key stores it ([`Joiner::end_once_stored`]).
    ending: bool,
    done: bool,
    /// How the join ended, once it did (else its client left).
    how: Option<Join>,
    /// `Last-Event-ID`: the events up to it are not sent.
    resume: Option<Resume>,
    /// A hash of the body read so far, so that the rest is taken from a record only if
    /// the record starts with the same bytes (another execution's never does).
    read: Sha256,
}

impl Drop for Joiner {
    fn drop(&mut self) {
        metrics::live_joiners(-1.0);
        metrics::live_join_ended(self.how.unwrap_or(Join::Left));
    }
}

impl Joiner {
    async fn step(mut self) -> Option<(Result<Frame<Bytes>, Cut>, Self)> {
        loop {
            if let Some(frame) = self.pending.pop_front() {
                return Some((frame, self));
            }
            if self.done {
                return None;
            }
            if std::mem::take(&mut self.ending) {
                self.end_once_stored().await;
                continue;
            }
            let renew_at = self.joined.renew_at();
            let read = tokio::select! {
                read = self.joined.reader.next() => read,
                // Attached, it keeps counting against `max_waiters` (reading is
                // cancel-safe: an entry is taken only once its read returned).
                () = tokio::time::sleep_until(renew_at.into()) => {
                    self.joined.renew().await;
                    continue;
                }
                // The replica stops: its joiners are cut (their clients retry elsewhere).
                () = self.app.calls.cancelled() => {
                    self.cut();
                    continue;
                }
            };
            match read {
                Ok(Read::Entries(entries)) => entries.into_iter().for_each(|e| self.take(e)),
                Ok(Read::Gone) => self.rest_from_record().await,
                Err(e) => {
                    tracing::warn!(error = %e, "a joined live answer could not be read on; cutting it");
                    self.cut();
                }
            }
        }
    }

    /// The end was read: the answer ends as its first client's does, cleanly only once
    /// the key stores this very answer (its status and every byte read), so that a
    /// retry sent on seeing the end replays it. While the key is in flight (its
    /// completion on its way) this waits, at most the route's `lock_ttl`; anything else
    /// (the completion refused or not stored, the key released or another execution's,
    /// no answer in time) cuts the answer, as the first client's is.
    async fn end_once_stored(&mut self) {
        let Source {
            scope,
            record,
            fingerprint,
        } = &self.source;
        let deadline = Instant::now() + self.route.policy.settings.lock_ttl;
        let (wake, read) = (self.joined.reader.wake(), self.read.clone().finalize());
        loop {
            let notified = wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let found = (self.app.stores).find(&self.route, *scope, *record, fingerprint);
            match found.await {
                Ok(Some(Claim::Completed { response, .. }))
                    if response.status == self.status
                        && response.body.len() as u64 == self.joined.reader.offset()
                        && Sha256::digest(&response.body) == read =>
                {
                    return self.end(&response.trailers, Join::Ended);
                }
                Ok(Some(Claim::InFlight { .. })) if Instant::now() < deadline => {}
                _ => {
                    tracing::warn!(
                        "a joined live answer ended, but the key does not store it; cutting it"
                    );
                    return self.cut();
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep(left.min(Duration::from_millis(100))) => {}
            }
        }
    }

    fn take(&mut self, entry: Entry) {
        if self.done || self.ending {
            return;
        }
        match entry {
            Entry::Head(_) => {}
            Entry::Data(piece) => {
                self.read.update(&piece);
                self.data(piece);
            }
            Entry::End(end) => match StoredResponse::decode(end) {
                Ok(_) => self.ending = true,
                Err(_) => self.cut(),
            },
            Entry::Aborted => self.cut(),
        }
    }

    /// The stream is gone before its end: the rest from the stored record, if it is
    /// the same answer.
    async fn rest_from_record(&mut self) {
        let Source {
            scope,
            record,
            fingerprint,
        } = &self.source;
        let found = (self.app.stores).find(&self.route, *scope, *record, fingerprint);
        let offset = self.joined.reader.offset() as usize;
        let read = std::mem::take(&mut self.read).finalize();
        let same = |body: &Bytes| body.len() >= offset && Sha256::digest(&body[..offset]) == read;
        match found.await {
            Ok(Some(Claim::Completed { response, .. }))
                if response.status == self.status && same(&response.body) =>
            {
                if response.body.len() > offset {
                    self.data(response.body.slice(offset..));
                }
                self.end(&response.trailers, Join::FromRecord);
            }
            _ => {
                tracing::warn!("a joined live answer ended before its end and no record completes it; cutting it");
                self.cut();
            }
        }
    }

    /// A piece of the body, unless it comes before the resume point.
    fn data(&mut self, piece: Bytes) {
        let piece = match self.resume.as_mut() {
            Some(resume) => match resume.feed(piece) {
                Ok(piece) => piece,
                Err(e) => {
                    tracing::warn!(error = %e, "a resumed joiner holds more than the budget allows; cutting it");
                    return self.cut();
                }
            },
            None => Some(piece),
        };
        if let Some(piece) = piece {
            self.pending.push_back(Ok(Frame::data(piece)));
        }
    }

    fn end(&mut self, trailers: &[(http::HeaderName, http::HeaderValue)], how: Join) {
        self.how = Some(how);
        if let Some(held) = self.resume.as_mut().and_then(Resume::finish) {
            self.pending.push_back(Ok(Frame::data(held)));
        }
        if !trailers.is_empty() {
            self.pending
                .push_back(Ok(Frame::trailers(header_map(trailers))));
        }
        self.done = true;
    }

    /// Ends the answer so that its client knows it is incomplete.
    fn cut(&mut self) {
        self.how = Some(Join::Cut);
        let end = match self.grpc {
            true => Ok(Frame::trailers(grpc::cut_trailers())),
            false => Err(Cut),
        };
        self.pending.push_back(end);
        self.done = true;
    }
}
