//! The tee of a live answer: reads the upstream's body as it comes into the
//! [`Recording`] (the record, the first client's queue, the publisher's source) and
//! hands back the whole body and its trailers for settling. However the read ends
//! (an error, the call's deadline or the shutdown dropping it), the recording is told,
//! so the first client's body and the joiners end too.

use std::sync::Arc;

use bytes::Bytes;
use http::HeaderMap;
use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::recording::{End, Recording};
use crate::proxy::{strip_owned, UpstreamError};
use crate::route::Route;

/// Reads `body` into `recording` (recorded up to `max` bytes); the body and trailers,
/// or why there is no body to store.
pub async fn tee(
    route: &Route,
    recording: &Arc<Recording>,
    mut body: Incoming,
    max: u64,
) -> Result<(Bytes, Option<HeaderMap>), UpstreamError> {
    let mut ending = Ending {
        recording,
        end: None,
    };
    let mut trailers = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| UpstreamError::Exchange(Box::new(e)))?;
        match frame.into_data() {
            Ok(data) if data.is_empty() => {}
            Ok(data) => {
                recording.push(data, max);
                recording.room().await;
            }
            Err(frame) => {
                if let Ok(mut received) = frame.into_trailers() {
                    strip_owned(route, &mut received);
                    trailers = Some(received);
                }
            }
        }
    }
    ending.end = Some(End::Ended(trailers.clone()));
    drop(ending);
    if recording.over() {
        return Err(UpstreamError::ResponseTooLarge(max));
    }
    Ok((recording.body(), trailers))
}

/// Tells the recording how the read ended: aborted unless it got to the end.
struct Ending<'a> {
    recording: &'a Recording,
    end: Option<End>,
}

impl Drop for Ending<'_> {
    fn drop(&mut self) {
        self.recording.end(self.end.take().unwrap_or(End::Aborted));
    }
}
