//! The exporter's dispatcher: a traced request runs under a subscriber of its own (the
//! log's layer and the exporter's), so that every other request, exporting or not,
//! meets only the log's subscriber, as with tracing off. A filter per layer (what one
//! subscriber for both would need) asks the registry at every entry and exit of every
//! span: that is what 1% sampling cost the 99% it leaves out.
//!
//! A traced request's server span is made under it ([`made_under`]), its handling is
//! polled and dropped under it ([`Under`], by the HTTP edge), and a task spawned for it
//! takes it along ([`carry`]). The completer's attempts run under it too
//! ([`under_exporter`]). Dropped under it too, not only polled: a registry closes a
//! closing span's parent through the *current* dispatcher, so a child span of the
//! exporter's registry dropped under another would close an id that one does not know
//! (a panic, or another span's count taken down).

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};

use tracing::instrument::Instrumented;
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

/// Whether the current task runs under the exporter's dispatcher (a traced request).
fn in_traced() -> bool {
    tracing::dispatcher::get_default(|d| d.is::<ExporterMark>())
}

pin_project_lite::pin_project! {
    /// A future polled and dropped under `dispatch` while it has one (a traced
    /// request's), and as it is otherwise. Its future is dropped as soon as it is done,
    /// inside its last poll.
    pub struct Under<F> {
        #[pin]
        future: Option<F>,
        dispatch: Option<&'static Dispatch>,
    }

    impl<F> PinnedDrop for Under<F> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(dispatch) = this.dispatch {
                let mut future = this.future;
                tracing::dispatcher::with_default(dispatch, || future.set(None));
            }
        }
    }
}

impl<F> Under<F> {
    /// `future` under `dispatch`, or as it is with none.
    pub fn new(future: F, dispatch: Option<&'static Dispatch>) -> Self {
        Under {
            future: Some(future),
            dispatch,
        }
    }
}

impl<F: Future> Future for Under<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let mut this = self.project();
        let Some(dispatch) = this.dispatch else {
            let future = this.future.as_pin_mut().expect("polled after it was done");
            return future.poll(cx);
        };
        tracing::dispatcher::with_default(dispatch, || {
            let future = this.future.as_mut().as_pin_mut();
            let done = future.expect("polled after it was done").poll(cx);
            if done.is_ready() {
                this.future.set(None);
            }
            done
        })
    }
}

/// `future`, to be spawned for the current request: in the current span and, for a
/// traced request, under the exporter's dispatcher (its log lines keep the request's
/// fields, and the spans it makes are exported).
pub fn carry<F>(future: F) -> Under<Instrumented<F>> {
    let dispatch = exporter().filter(|_| in_traced());
    Under::new(future.in_current_span(), dispatch)
}

/// `future`, run under the exporter's dispatcher while spans are exported, whatever
/// dispatcher spawns it: for work that is always traced (the completer's attempts),
/// where [`carry`] would take the spawner's.
pub fn under_exporter<F>(future: F) -> Under<F> {
    Under::new(future, exporter())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt as _;

    /// A future holding the last handle of a child span of `registry`'s, its parent
    /// kept alive outside.
    fn holding_a_child(registry: &Dispatch) -> (tracing::Span, impl Future<Output = ()>) {
        tracing::dispatcher::with_default(registry, || {
            let parent = tracing::info_span!("request");
            let child = tracing::info_span!(parent: &parent, "phase");
            (parent, std::future::pending::<()>().instrument(child))
        })
    }

    #[test]
    fn a_child_span_dropped_with_its_future_closes_in_its_own_registry() {
        let exporter = Dispatch::new(tracing_subscriber::registry().with(ExporterMark));
        let exporter: &'static Dispatch = Box::leak(Box::new(exporter));
        let logs = Dispatch::new(tracing_subscriber::registry());
        // The hazard: dropped under another dispatcher, the child's close reaches it.
        let (_parent, future) = holding_a_child(exporter);
        let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            tracing::dispatcher::with_default(&logs, || drop(future))
        }));
        assert!(
            dropped.is_err(),
            "the log's registry was asked to close a span"
        );
        // Under drops its future under its own dispatcher.
        let (parent, future) = holding_a_child(exporter);
        tracing::dispatcher::with_default(&logs, || drop(Under::new(future, Some(exporter))));
        drop(parent);
    }

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
