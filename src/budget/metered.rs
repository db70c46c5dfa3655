//! A keyed request body read under the budget: [`Metered`] charges it as it arrives.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

use super::charge::Charge;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A request body read by the gateway (`read_bounded`): more than its charge (the
/// declared length) grows the charge, or fails with [`OverBudget`].
pub struct Metered<B> {
    inner: B,
    charge: Option<Charge>,
    received: u64,
}

/// The budget could not take more of a request body.
#[derive(Debug, thiserror::Error)]
#[error("server.buffer_budget is spent")]
pub struct OverBudget;

impl<B> Metered<B> {
    /// Without a charge, the body is not metered.
    pub fn new(inner: B, charge: Option<Charge>) -> Self {
        Self {
            inner,
            charge,
            received: 0,
        }
    }

    /// The whole body, carrying its charge (empty bodies carry none).
    pub fn seal(&mut self, body: Bytes) -> Bytes {
        match self.charge.take() {
            Some(charge) if !body.is_empty() => charge.attach(body),
            _ => body,
        }
    }
}

impl<B> Body for Metered<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let frame = match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => return Poll::Pending,
        };
        if let (Some(charge), Some(data)) = (this.charge.as_mut(), frame.data_ref()) {
            this.received += data.len() as u64;
            let more = this.received.saturating_sub(charge.bytes());
            if more > 0 && !charge.try_grow(more) {
                return Poll::Ready(Some(Err(Box::new(OverBudget))));
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use http_body_util::{BodyExt, Full, Limited};

    use super::*;
    use crate::budget::ByteBudget;

    #[tokio::test]
    async fn a_metered_body_grows_its_charge_or_fails() {
        let budget = Arc::new(ByteBudget::new(8));
        let mut fits = Metered::new(Full::new(Bytes::from_static(b"1234")), budget.try_take(0));
        let bytes = Limited::new(&mut fits, 64)
            .collect()
            .await
            .unwrap()
            .to_bytes();
        let bytes = fits.seal(bytes);
        assert_eq!(budget.used(), 4);
        let mut too_big = Metered::new(Full::new(Bytes::from_static(b"12345")), budget.try_take(0));
        let e = Limited::new(&mut too_big, 64).collect().await.unwrap_err();
        assert!(e.downcast_ref::<OverBudget>().is_some(), "{e}");
        drop(too_big);
        assert_eq!(budget.used(), 4);
        drop(bytes);
        assert_eq!(budget.used(), 0);
    }
}
