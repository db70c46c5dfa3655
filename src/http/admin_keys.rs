//! The admin API over idempotency records: show one (`GET`) or invalidate it in both
//! tiers (`DELETE`), addressed by route, raw key and tenant, or the `scope_hash` that
//! request logs carry. Bearer token from `admin.token`.
//!
//! The tenant travels in headers, never in the query string (which access logs keep):
//! each of the route's `scope_headers` as `Idemgate-Scope-<name>`, for example
//! `Idemgate-Scope-X-Tenant-Id: acme`. Neither headers nor `scope_hash`: the shared
//! anonymous scope.

use axum::extract::{FromRequestParts, Path, Query, State};
use axum::Json;
use http::header::AUTHORIZATION;
use http::request::Parts;
use http::{HeaderMap, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};

use super::AppState;
use crate::app::App;
use crate::idempotency::{key, RecordId, Scope};
use crate::problem::Problem;
use crate::store::redis::Invalidated;

#[derive(Debug, Deserialize)]
pub struct Which {
    /// Refused: a tenant credential in a URL ends up in access logs.
    tenant: Option<String>,
    /// The scope's hex hash, as logged.
    scope_hash: Option<String>,
    #[serde(default)]
    force: bool,
}

/// A record addressed by the request, resolved (and the caller authorised).
pub struct Target {
    force: bool,
    route: String,
    scope: Scope,
    record: RecordId,
}

fn authorize(app: &App, headers: &HeaderMap) -> Result<(), Problem> {
    let expected = app.config.admin.token.as_deref().unwrap_or_default();
    let given = (headers.get(AUTHORIZATION))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    if !crate::config::token_matches(given, expected) {
        return Err(Problem::new(
            StatusCode::UNAUTHORIZED,
            "admin_unauthorized",
            "Admin token required",
            "send `Authorization: Bearer <admin.token>`",
        ));
    }
    Ok(())
}

/// Prefix of the admin request headers that carry the tenant's scope header values.
const SCOPE_PREFIX: &str = "idemgate-scope-";

fn resolve(
    app: &App,
    route: &str,
    raw_key: &str,
    which: &Which,
    headers: &HeaderMap,
) -> Result<Target, Problem> {
    let not_found = || {
        Problem::new(
            StatusCode::NOT_FOUND,
            "route_not_found",
            "No such route",
            "no route has this name",
        )
    };
    let route = app
        .routes
        .iter()
        .find(|r| r.name == route)
        .ok_or_else(not_found)?;
    let key = key::parse(raw_key.as_bytes(), route.policy.settings.max_key_length)
        .map_err(Problem::from)?;
    if which.tenant.is_some() {
        return Err(bad_query(
            "send the tenant as Idemgate-Scope-<header> request headers, not in the query \
             string (URLs end up in access logs)",
        ));
    }
    let names = &route.policy.settings.scope_headers;
    let mut tenant = HeaderMap::new();
    for name in names {
        for value in headers.get_all(format!("{SCOPE_PREFIX}{name}").as_str()) {
            tenant.append(name.clone(), value.clone());
        }
    }
    let secret = app.scope_keys.current.as_ref();
    let from_headers = Scope::from_headers(&route.name, &tenant, names, secret)
        .map_err(|_| bad_query("an Idemgate-Scope-<header> header appears more than once"))?;
    let scope = match (from_headers, &which.scope_hash) {
        (Some(_), Some(_)) => {
            return Err(bad_query(
                "give either tenant headers or scope_hash, not both",
            ))
        }
        (Some(scope), None) => scope,
        (None, Some(hash)) => {
            Scope::from_hex(hash).ok_or_else(|| bad_query("scope_hash is not 64 hex digits"))?
        }
        (None, None) => Scope::anonymous(&route.name, names, secret),
    };
    let record = RecordId::new(scope, &key, secret);
    Ok(Target {
        force: which.force,
        route: route.name.clone(),
        scope,
        record,
    })
}

fn bad_query(detail: &'static str) -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "admin_bad_query",
        "Bad admin query",
        detail,
    )
}

fn unavailable(e: crate::store::StoreError) -> Problem {
    Problem::from(&e)
}

impl FromRequestParts<AppState> for Target {
    type Rejection = Problem;

    /// Authorises the caller and resolves route, key and scope into a record.
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Problem> {
        let app = &state.0;
        authorize(app, &parts.headers)?;
        let Path((route, raw_key)) = Path::<(String, String)>::from_request_parts(parts, state)
            .await
            .map_err(|_| bad_query("the path must be /admin/keys/{route}/{key}"))?;
        let Query(which) = Query::<Which>::from_request_parts(parts, state)
            .await
            .map_err(|_| bad_query("unknown or malformed query parameters"))?;
        resolve(app, &route, &raw_key, &which, &parts.headers)
    }
}

/// `GET /admin/keys/{route}/{key}`: the record's state in Redis and Postgres.
pub async fn show(
    State(AppState(app)): State<AppState>,
    t: Target,
) -> Result<Json<Value>, Problem> {
    let (redis, postgres) = states(&app, &t).await?;
    Ok(Json(json!({
        "route": t.route,
        "key_hash": t.record.short(),
        "scope_hash": t.scope.to_hex(),
        "redis": redis,
        "postgres": postgres,
    })))
}

async fn states(app: &App, t: &Target) -> Result<(Value, Value), Problem> {
    let view = (app.stores.inspect(&t.route, t.scope, t.record))
        .await
        .map_err(unavailable)?;
    let redis = match view.redis {
        None => json!({"state": "absent"}),
        Some(r) if r.completed => json!({
            "state": "completed", "stored_bytes": r.stored_bytes, "expires_in_ms": r.ttl_ms,
        }),
        Some(r) => json!({"state": "in_flight", "lease_remaining_ms": r.ttl_ms}),
    };
    let completer = view.postgres.flatten().map(|r| {
        json!({
            "state": r.completer.map(|m| m.as_str()),
            "attempts": r.completer_attempts,
            "request_kept": r.request_kept,
        })
    });
    let mut postgres = match view.postgres {
        None => json!({"state": "not_configured"}),
        Some(None) => json!({"state": "absent"}),
        Some(Some(r)) if r.expires_in_ms <= 0 => json!({"state": "expired"}),
        Some(Some(r)) if r.completed => json!({
            "state": "completed", "status": r.status, "stored_bytes": r.stored_bytes,
            "expires_in_ms": r.expires_in_ms,
        }),
        Some(Some(r)) => match r.lease_remaining_ms {
            Some(ms) if ms > 0 => json!({"state": "in_flight", "lease_remaining_ms": ms}),
            _ => json!({"state": "lease_expired"}),
        },
    };
    // What the completer did with the record, or holds for it (docs/completer.md).
    if let (Some(completer), Some(fields)) = (completer, postgres.as_object_mut()) {
        fields.insert("completer".into(), completer);
    }
    Ok((redis, postgres))
}

/// `DELETE /admin/keys/{route}/{key}`: invalidates the record in both tiers; refuses
/// while a lease is held unless `?force=true`.
///
/// Each tier decides and deletes in one step (a conditional `DELETE`, a Lua script), so
/// a claim that lands during the call is never deleted without `force`. Postgres goes
/// first: a lease found there stops the call before Redis is touched.
pub async fn invalidate(
    State(AppState(app)): State<AppState>,
    t: Target,
) -> Result<Json<Value>, Problem> {
    let done = (app.stores.invalidate(&t.route, t.scope, t.record, t.force))
        .await
        .map_err(unavailable)?;
    if let Some(Invalidated::Leased { .. }) = done.postgres {
        return Err(leased());
    }
    let (in_redis, in_postgres) = (done.redis, done.postgres.unwrap_or(Invalidated::Absent));
    let deleted = |i: Invalidated| i == Invalidated::Deleted;
    if let Invalidated::Leased { .. } = in_redis {
        return Err(leased());
    }
    tracing::warn!(route = %t.route, key_hash = %t.record.short(), forced = t.force,
        postgres = deleted(in_postgres), redis = deleted(in_redis),
        "record invalidated through the admin API");
    Ok(Json(json!({
        "route": t.route,
        "key_hash": t.record.short(),
        "deleted": {"redis": deleted(in_redis), "postgres": deleted(in_postgres)},
    })))
}

fn leased() -> Problem {
    Problem::new(
        StatusCode::CONFLICT,
        "record_leased",
        "Record is in flight",
        "a request holds this key's lease; deleting it could let a duplicate run. \
         Retry later, or add ?force=true",
    )
}
