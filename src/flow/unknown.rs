//! Outcomes nobody knows: what is stored for a key whose upstream may have acted without
//! leaving an answer the gateway can keep, so that every retry gets that one answer
//! instead of running the key again (`idempotency.on_ambiguous`): a call reset after it
//! was sent, cancelled at its `upstream_deadline` or by a stop, an answer too large to
//! store, or a lease taken over after it lapsed mid-call (its replica killed, frozen
//! past `lock_ttl`, or cut off from the stores).

use crate::config::OnAmbiguous;
use crate::grpc;
use crate::idempotency::StoredResponse;
use crate::metrics;
use crate::problem::Problem;
use crate::proxy::UpstreamError;
use crate::route::Route;

/// What is stored for a failed upstream call that may have acted, so that a retry
/// does not run it again (as a gRPC status for a gRPC call); `None` when the call can
/// be tried again.
pub fn stored_problem(route: &Route, e: &UpstreamError, is_grpc: bool) -> Option<StoredResponse> {
    let problem = match e {
        UpstreamError::ResponseTooLarge(_) => {
            // The upstream acted; a retry must not run it again. Store the problem instead.
            tracing::warn!(error = %e,
                "upstream response too large to store; storing a 502 problem for this key");
            Problem::from(e)
        }
        e if e.is_ambiguous() && route.policy.settings.on_ambiguous == OnAmbiguous::Store => {
            // The upstream may have acted: answer every retry with the same "unknown".
            tracing::warn!(error = %e,
                "upstream outcome unknown; storing it for this key (on_ambiguous = store)");
            Problem::outcome_unknown(e)
        }
        _ => return None,
    };
    Some(stored(&problem, is_grpc))
}

/// What is stored for a client's claim that took over a lease which lapsed with no
/// completion (its holder killed, frozen past `lock_ttl`, or cut off mid-call): with
/// `on_ambiguous = "store"`, an unknown outcome, since that execution may have acted;
/// `None` (run again) with `"release"` or on a route with the completer, whose upstream
/// deduplicates on the forwarded key.
pub fn lapse_problem(route: &Route, is_grpc: bool) -> Option<StoredResponse> {
    let settings = &route.policy.settings;
    if settings.on_ambiguous != OnAmbiguous::Store || settings.completer {
        metrics::lapsed_takeover("ran_again");
        tracing::info!(
            "took over a lease that lapsed with no completion; running the key \
            again (on_ambiguous = release, or the completer's route)"
        );
        return None;
    }
    metrics::lapsed_takeover("stored_unknown");
    tracing::warn!(
        "took over a lease that lapsed with no completion: its execution may \
        have acted; storing upstream_outcome_unknown for this key (on_ambiguous = store)"
    );
    Some(stored(&Problem::lapsed_unknown(), is_grpc))
}

/// `problem` as it is stored and replayed: problem+json, or a gRPC call's status.
fn stored(problem: &Problem, is_grpc: bool) -> StoredResponse {
    match is_grpc {
        true => grpc::to_stored(problem),
        false => problem.to_stored(),
    }
}

#[cfg(test)]
mod tests {
    use http::StatusCode;

    use super::*;
    use crate::config::Config;
    use crate::route::RouteTable;

    /// The route `/v1/` with `idempotency` as its own settings, claims written through.
    fn route(idempotency: &str) -> std::sync::Arc<Route> {
        let config = Config::from_toml(&format!(
            "[postgres]\nurl = \"postgres://idemgate@127.0.0.1:1/idemgate\"\n\
             [[routes]]\nname = \"pay\"\npath_prefix = \"/v1/\"\n\
             upstream = \"http://127.0.0.1:1\"\nupstream_timeout = \"1s\"\n\
             [routes.idempotency]\n{idempotency}\n"
        ))
        .unwrap();
        RouteTable::new(&config).find("/v1/x").unwrap().clone()
    }

    /// The problem type of a stored problem+json answer.
    fn problem_type(stored: &StoredResponse) -> String {
        let body: serde_json::Value = serde_json::from_slice(&stored.body).unwrap();
        body["type"]
            .as_str()
            .unwrap()
            .rsplit(':')
            .next()
            .unwrap()
            .into()
    }

    #[test]
    fn a_lapsed_lease_is_stored_as_unknown_only_where_the_key_must_not_run_again() {
        let stored = lapse_problem(&route(""), false).expect("the default stores");
        assert_eq!(stored.status, StatusCode::BAD_GATEWAY);
        assert_eq!(problem_type(&stored), "upstream_outcome_unknown");
        let released = route("on_ambiguous = \"release\"");
        assert!(lapse_problem(&released, false).is_none(), "runs again");
        // The completer's upstream deduplicates on the forwarded key.
        let completer = route("completer = true");
        assert!(lapse_problem(&completer, false).is_none(), "runs again");
    }

    #[test]
    fn a_grpc_call_stores_the_unknown_outcome_as_a_grpc_status() {
        let stored = lapse_problem(&route(""), true).unwrap();
        assert_eq!(stored.status, StatusCode::OK);
        assert!(stored.body.is_empty());
        let status = (stored.headers.iter())
            .find(|(name, _)| name.as_str() == "grpc-status")
            .map(|(_, value)| value.to_str().unwrap().to_string());
        assert!(
            status.is_some_and(|code| code != "0"),
            "{:?}",
            stored.headers
        );
    }
}
