//! The Redis record's layouts (`lua/record.lua`): records 0.4.0 wrote as a hash (layout
//! 2) are claimed, replayed, completed, released, extended, peeked and deleted by this
//! release's scripts; `redis.record_format = "hash"` writes records 0.4.0's scripts
//! read; the string layout keeps its TTL when a waiter marks it. 0.4.0's scripts are
//! read from git.

use fred::prelude::{Client, ClientLike, KeysInterface, LuaInterface, Value};

use crate::support::RedisServer;

/// The last commit of 0.4.0, the last release that wrote hashes (layout 2).
const HASH_RELEASE: &str = "e01106b6207ba45edd1823fadc44d67b31908dbc";

/// 0.4.0's `lua/<name>.lua` (fetched if a shallow clone lacks the commit).
fn old(name: &str) -> String {
    let root = env!("CARGO_MANIFEST_DIR");
    let base = HASH_RELEASE;
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(root)
            .output();
        out.expect("git runs")
    };
    let mut out = git(&["show", &format!("{base}:lua/{name}.lua")]);
    if !out.status.success() {
        git(&["fetch", "--quiet", "--depth=1", "origin", base]);
        out = git(&["show", &format!("{base}:lua/{name}.lua")]);
    }
    assert!(out.status.success(), "git show: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// This release's `lua/<name>.lua`, with `lua/record.lua` before it.
fn new(name: &str) -> String {
    let path = |n: &str| format!("{}/lua/{n}.lua", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(path("record")).unwrap() + &std::fs::read_to_string(path(name)).unwrap()
}

const FP: &[u8; 32] = b"0123456789abcdef0123456789abcdef";
/// A response with every byte value, so a layout that mangles bytes shows.
fn response() -> Vec<u8> {
    (0..=255u8).chain(0..=255u8).collect()
}

/// claim.lua: the reply as (tag, second item as bytes).
async fn claim(c: &Client, script: &str, rec: &str, token: &str, extra: &[&str]) -> Vec<Value> {
    let keys = vec![rec.to_string(), format!("{rec}:n"), format!("{rec}:m")];
    let mut args: Vec<Value> = vec![
        bytes::Bytes::from_static(FP).into(),
        token.into(),
        "5000".into(),
        "60000".into(),
        "0".into(),
    ];
    args.extend(extra.iter().map(|a| Value::from(*a)));
    c.eval(script, keys, args).await.unwrap()
}

async fn complete(c: &Client, script: &str, rec: &str, token: &str, extra: &[&str]) -> i64 {
    let mut args: Vec<Value> = vec![
        token.into(),
        bytes::Bytes::from(response()).into(),
        "60000".into(),
        bytes::Bytes::from_static(FP).into(),
        format!("{rec}:done").into(),
        "PUBLISH".into(),
    ];
    args.extend(extra.iter().map(|a| Value::from(*a)));
    c.eval(script, rec, args).await.unwrap()
}

fn tag(reply: &[Value]) -> String {
    reply[0].as_string().unwrap()
}

async fn kind(c: &Client, key: &str) -> String {
    let t: String = c.custom(fred::cmd!("TYPE"), vec![key]).await.unwrap();
    t
}

#[tokio::test]
async fn hash_records_of_0_4_0_work_with_this_ones_scripts() {
    let redis = RedisServer::start();
    let c = redis.client().await;
    // Completed by the old scripts: replayed byte for byte, mismatch still told.
    let done = "{done}";
    assert_eq!(tag(&claim(&c, &old("claim"), done, "t1", &[]).await), "A");
    assert_eq!(complete(&c, &old("complete"), done, "t1", &[]).await, 1);
    assert_eq!(kind(&c, done).await, "hash");
    let replay = claim(&c, &new("claim"), done, "t2", &[]).await;
    assert_eq!(tag(&replay), "C");
    assert_eq!(replay[1].as_bytes().unwrap(), response().as_slice());
    assert!(replay[2].as_i64().unwrap() > 50_000, "its ttl: {replay:?}");
    let other: Vec<Value> = (c.eval(
        new("claim"),
        vec![done, "{done}:n", "{done}:m"],
        vec!["another fingerprint", "t3", "5000", "60000", "0"],
    ))
    .await
    .unwrap();
    assert_eq!(tag(&other), "M");
    let peek: Vec<Value> = c
        .eval(new("peek"), done, bytes::Bytes::from_static(FP))
        .await
        .unwrap();
    assert_eq!(
        (tag(&peek), peek[1].as_bytes().unwrap()),
        ("C".into(), response().as_slice())
    );

    // Leased by the old scripts: in flight for others (marked waited for, in the hash),
    // still the holder's own claim, extended, completed by this release (now a string).
    let leased = "{leased}";
    let first = claim(&c, &old("claim"), leased, "t1", &[]).await;
    let again = claim(&c, &new("claim"), leased, "t1", &[]).await;
    assert_eq!(
        (tag(&again), &again[1]),
        ("A".into(), &first[1]),
        "same fence"
    );
    assert_eq!(tag(&claim(&c, &new("claim"), leased, "t2", &[]).await), "I");
    assert_eq!(
        redis.record_field(leased, "w").await.as_deref(),
        Some(b"1".as_slice())
    );
    let extended: i64 = c
        .eval(new("extend"), leased, vec!["t1", "90000"])
        .await
        .unwrap();
    assert_eq!(extended, 1);
    assert!(redis.pttl(leased).await > 60_000);
    assert_eq!(
        complete(&c, &new("complete"), leased, "t2", &[]).await,
        0,
        "not ours"
    );
    assert_eq!(complete(&c, &new("complete"), leased, "t1", &[]).await, 1);
    assert_eq!(kind(&c, leased).await, "string");
    let replay = claim(&c, &new("claim"), leased, "t3", &[]).await;
    assert_eq!(
        (tag(&replay), replay[1].as_bytes().unwrap()),
        ("C".into(), response().as_slice())
    );

    // Released and deleted by this release.
    let gone = "{gone}";
    assert_eq!(tag(&claim(&c, &old("claim"), gone, "t1", &[]).await), "A");
    let not_ours: i64 = (c.eval(new("release"), gone, vec!["t2", "{gone}:done", "PUBLISH"]))
        .await
        .unwrap();
    let released: i64 = (c.eval(new("release"), gone, vec!["t1", "{gone}:done", "PUBLISH"]))
        .await
        .unwrap();
    assert_eq!((not_ours, released), (0, 1));
    assert_eq!(c.exists::<i64, _>(gone).await.unwrap(), 0);
    let deleted: Vec<Value> = c.eval(new("invalidate"), done, "0").await.unwrap();
    assert_eq!(tag(&deleted), "D");
    assert_eq!(c.exists::<i64, _>(done).await.unwrap(), 0);
}

#[tokio::test]
async fn the_hash_setting_writes_records_0_4_0_reads() {
    let redis = RedisServer::start();
    let c = redis.client().await;
    let rec = "{h}";
    let hash = ["hash"];
    let first = claim(&c, &new("claim"), rec, "t1", &hash).await;
    assert_eq!(tag(&first), "A");
    assert_eq!(kind(&c, rec).await, "hash");
    let old_same = claim(&c, &old("claim"), rec, "t1", &[]).await;
    assert_eq!((tag(&old_same), &old_same[1]), ("A".into(), &first[1]));
    assert_eq!(tag(&claim(&c, &old("claim"), rec, "t2", &[]).await), "I");
    assert_eq!(complete(&c, &new("complete"), rec, "t1", &hash).await, 1);
    assert_eq!(kind(&c, rec).await, "hash");
    let replay = claim(&c, &old("claim"), rec, "t3", &[]).await;
    assert_eq!(
        (tag(&replay), replay[1].as_bytes().unwrap()),
        ("C".into(), response().as_slice())
    );
    // A completion of an expired record, and one over a string record, write hashes too.
    assert_eq!(
        complete(&c, &new("complete"), "{gone}", "t1", &hash).await,
        1
    );
    let was_string = "{s}";
    assert_eq!(
        tag(&claim(&c, &new("claim"), was_string, "t1", &[]).await),
        "A"
    );
    assert_eq!(kind(&c, was_string).await, "string");
    assert_eq!(
        tag(&claim(&c, &new("claim"), was_string, "t2", &[]).await),
        "I"
    );
    assert_eq!(
        complete(&c, &new("complete"), was_string, "t1", &hash).await,
        1
    );
    for key in ["{gone}", was_string] {
        assert_eq!(kind(&c, key).await, "hash");
        let replay = claim(&c, &old("claim"), key, "t9", &[]).await;
        assert_eq!(
            (tag(&replay), replay[1].as_bytes().unwrap()),
            ("C".into(), response().as_slice())
        );
    }
    assert_eq!(
        redis.record_field(was_string, "w").await.as_deref(),
        Some(b"1".as_slice())
    );
}

#[tokio::test]
async fn string_records_keep_their_ttl_and_skip_the_fence_key_when_asked() {
    let redis = RedisServer::start();
    let c = redis.client().await;
    let rec = "{s}";
    let first = claim(&c, &new("claim"), rec, "t1", &[]).await;
    assert_eq!(kind(&c, rec).await, "string");
    assert!(
        first[1].as_i64().unwrap() > 1_000_000_000_000,
        "a fence: {first:?}"
    );
    assert_eq!(c.exists::<i64, _>("{s}:n").await.unwrap(), 1);
    let ttl = redis.pttl(rec).await;
    assert!(ttl > 4_000 && ttl <= 5_000, "{ttl}");
    assert_eq!(
        redis.record_field(rec, "w").await.as_deref(),
        None,
        "not waited for"
    );
    assert_eq!(tag(&claim(&c, &new("claim"), rec, "t2", &[]).await), "I");
    assert_eq!(
        redis.record_field(rec, "w").await.as_deref(),
        Some(b"1".as_slice())
    );
    assert!(redis.pttl(rec).await > 4_000, "SETRANGE kept the ttl");
    assert_eq!(
        redis.record_field(rec, "t").await.as_deref(),
        Some(b"t1".as_slice())
    );
    assert_eq!(
        redis.record_field(rec, "f").await.as_deref(),
        Some(FP.as_slice())
    );

    // Without a fence key (write-through claims): fence 0, no `:n` key.
    let keys = vec!["{nf}", "{nf}:n"];
    let args = vec![FP.as_slice(), b"t1", b"5000", b"0", b"0"];
    let args: Vec<Value> = args
        .into_iter()
        .map(|a| bytes::Bytes::copy_from_slice(a).into())
        .collect();
    let reply: Vec<Value> = c.eval(new("claim"), keys, args).await.unwrap();
    assert_eq!((tag(&reply), reply[1].as_i64()), ("A".into(), Some(0)));
    assert_eq!(c.exists::<i64, _>("{nf}:n").await.unwrap(), 0);
}

/// A completion rewrites a leased string record in place: the state byte, then the
/// lease's w, f, t and n byte for byte, then the response where the lease's l was (a
/// vouched claim's record); another token's completion then changes nothing.
#[tokio::test]
async fn a_completion_keeps_the_leases_fields_byte_for_byte() {
    let redis = RedisServer::start();
    let c = redis.client().await;
    for (rec, waited) in [("{cw}", true), ("{cn}", false)] {
        // ARGV[6..9]: the string layout, no epoch marker, l = 3000 ms after the lease
        // (the helper's ARGV[3], 5000 ms, is the record's ttl: a 2000 ms lease, then l).
        let first = claim(&c, &new("claim"), rec, "t1", &["", "0", "0", "3000"]).await;
        let fence = first[1].as_string().unwrap();
        if waited {
            assert_eq!(tag(&claim(&c, &new("claim"), rec, "t2", &[]).await), "I");
        }
        assert_eq!(complete(&c, &new("complete"), rec, "t1", &[]).await, 1);
        let mut want = vec![b'C', if waited { b'1' } else { b'0' }, 32];
        want.extend_from_slice(FP);
        want.extend_from_slice(&[2, b't', b'1', fence.len() as u8]);
        want.extend_from_slice(fence.as_bytes());
        want.extend(response());
        let got: Vec<u8> = c.get(rec).await.unwrap();
        assert_eq!(got, want, "{rec}");
        let ttl = redis.pttl(rec).await;
        assert!(ttl > 59_000 && ttl <= 60_000, "{ttl}");
        assert_eq!(complete(&c, &new("complete"), rec, "t2", &[]).await, 0);
        assert_eq!(c.get::<Vec<u8>, _>(rec).await.unwrap(), want);
    }
}

/// With write-through claims the fencing token forwarded is the one Postgres' row holds
/// (every forwarded claim holds one there), growing per key across releases, and Redis
/// keeps no fence key.
#[tokio::test]
async fn write_through_claims_forward_postgres_fence_and_keep_no_redis_fence_key() {
    let (redis, pg, upstream, app) =
        crate::support::durable_stack("claims = \"write_through\"", "").await;
    upstream.push_statuses(&[503, 503]);
    for _ in 0..3 {
        app.post("fenced", "{}").send().await.unwrap();
    }
    assert_eq!(
        upstream.executions(),
        3,
        "two releases, then a stored answer"
    );
    let fences: Vec<i64> = (upstream.seen().iter())
        .map(|s| {
            s.headers["idempotency-fencing-token"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(fences[0] < fences[1] && fences[1] < fences[2], "{fences:?}");
    let row: i64 = (pg.client().await)
        .query_one("SELECT fence FROM idemgate_records", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(row, fences[2], "the token forwarded is Postgres'");
    let keys = redis.keys().await;
    assert!(
        !keys.iter().any(|k| k.ends_with(":n")),
        "a fence key: {keys:?}"
    );
    assert_eq!(redis.records().await.len(), 1);
}
