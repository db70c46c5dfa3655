//! The exporter's dispatcher: a traced request runs under a subscriber of its own (the
//! log's layer and the exporter's), so that every other request, exporting or not,
//! meets only the log's subscriber, as with tracing off. A filter per layer (what one
//! subscriber for both would need) asks the registry at every entry and exit of every
//! span: that is what 1% sampling cost the 99% it leaves out.
//!
//! A traced request's server span is made under it ([`made_under`]), its handling is
//! polled under it ([`exporter`], by the HTTP edge), and a task spawned for it takes
//! it along ([`carry`]). The completer's attempts run under it too.

use std::sync::OnceLock;

use futures_util::future::Either;
use tracing::instrument::{Instrumented, WithDispatch};
use tracing::{Dispatch, Instrument as _, Subscriber};
use tracing_subscriber::Layer;

static EXPORTER: OnceLock<Dispatch> = OnceLock::new();

/// A layer of the exporter's dispatcher that does nothing but let it be recognised
/// ([`Dispatch::is`]) from a task.
pub(super) struct ExporterMark;

impl<S: Subscriber> Layer<S> for ExporterMark {}

pub(super) fn install(dispatch: Dispatch) {
    let _ = EXPORTER.set(dispatch);
}

/// The dispatcher traced requests run under, while spans are exported.
pub fn exporter() -> Option<&'static Dispatch> {
    EXPORTER.get()
}

/// What `make` returns, made under the exporter's dispatcher (spans made there are
/// exported), or under the current one while nothing is exported.
pub fn made_under<T>(make: impl FnOnce() -> T) -> T {
    match exporter() {
        Some(exporter) => tracing::dispatcher::with_default(exporter, make),
        None => make(),
    }
}

/// Whether the current task runs a traced request (under the exporter's dispatcher).
fn in_traced() -> bool {
    exporter().is_some() && tracing::dispatcher::get_default(|d| d.is::<ExporterMark>())
}

/// What a task spawned for the current request runs: `future` in the current span and,
/// for a traced request, under the exporter's dispatcher (its log lines keep the
/// request's fields, and the spans it makes are exported).
pub type Carried<F> = Either<WithDispatch<Instrumented<F>>, Instrumented<F>>;

/// `future`, to be spawned for the current request: see [`Carried`].
pub fn carry<F>(future: F) -> Carried<F> {
    let future = future.in_current_span();
    match in_traced() {
        true => Either::Left(tracing::instrument::WithSubscriber::with_current_subscriber(future)),
        false => Either::Right(future),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt as _;

    #[test]
    fn the_exporters_dispatcher_is_recognised_by_its_mark() {
        let marked = Dispatch::new(tracing_subscriber::registry().with(ExporterMark));
        let plain = Dispatch::new(tracing_subscriber::registry());
        assert!(marked.is::<ExporterMark>());
        assert!(!plain.is::<ExporterMark>());
        let under = |d: &Dispatch| {
            tracing::dispatcher::with_default(d, || {
                tracing::dispatcher::get_default(|d| d.is::<ExporterMark>())
            })
        };
        assert!(under(&marked) && !under(&plain));
    }
}
