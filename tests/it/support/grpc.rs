//! The real gRPC client and server of `tests/grpc/` (grpcio; `client.py` runs a plan of
//! calls, `server.py` counts executions per key) and a gateway with a `grpc` route to
//! that server, for the gRPC tests (`grpc/`, `streaming/grpc.rs`, `h2_abuse/`).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::{json, Value};

use super::{config, redis::RedisServer, TestApp};

/// The python of the grpcio virtualenv `tests/grpc/setup.sh` installs (`make test` runs
/// it first).
fn python() -> PathBuf {
    let tools = std::env::var_os("IDEMGATE_GRPC_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache"));
            cache.join("idemgate/grpc-tools")
        });
    let python = tools.join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `bash tests/grpc/setup.sh` (make test does)",
        python.display()
    );
    python
}

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/grpc")
        .join(name)
}

/// `tests/grpc/server.py`, killed on drop.
pub struct GrpcServer {
    child: Child,
    pub port: u16,
}

impl GrpcServer {
    pub fn start() -> Self {
        let mut child = Command::new(python())
            .arg(script("server.py"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().expect("server.py prints its port");
        Self { child, port }
    }

    /// Executions per key, as the server counted them.
    pub async fn executions(&self, target: &str, key: &str) -> u64 {
        let out = calls(
            target,
            json!([{"method": "/demo.Payments/Count", "message": ""}]),
        )
        .await;
        let counts = hex::decode(out[0]["messages"][0].as_str().unwrap()).unwrap();
        let counts: Value = serde_json::from_slice(&counts).unwrap();
        counts[key].as_u64().unwrap_or(0)
    }
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `tests/grpc/client.py` with these calls against `target`: one result per call.
pub async fn calls(target: &str, calls: Value) -> Vec<Value> {
    let plan = json!({"target": target, "calls": calls}).to_string();
    let out = tokio::process::Command::new(python())
        .arg(script("client.py"))
        .arg(plan)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "client.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

pub fn create(key: &str, message: &str) -> Value {
    json!({"method": "/demo.Payments/Create", "message": message, "key": key, "tenant": "t1"})
}

/// Redis, the gRPC server, and a gateway with a `grpc` route (h2c upstream, keys
/// required, scoped by `x-tenant-id`) plus `extra` TOML for that route, whose
/// `upstream_timeout` is `upstream_timeout`.
pub async fn grpc_stack_with(
    extra: &str,
    upstream_timeout: &str,
) -> (RedisServer, GrpcServer, TestApp, String) {
    grpc_stack_server("", extra, upstream_timeout).await
}

/// [`grpc_stack_with`] plus `server` lines in `[server]`.
pub async fn grpc_stack_server(
    server: &str,
    extra: &str,
    upstream_timeout: &str,
) -> (RedisServer, GrpcServer, TestApp, String) {
    let redis = RedisServer::start();
    let grpc = GrpcServer::start();
    let route = format!(
        "[server]\nbody_read_timeout = \"1s\"\n{server}\n\
         [[routes]]\nname = \"grpc\"\npath_prefix = \"/demo.Payments/\"\n\
         upstream = \"http://127.0.0.1:{}\"\nupstream_protocol = \"h2c\"\nupstream_timeout = \"{upstream_timeout}\"\n\
         [routes.idempotency]\nanonymous = \"reject\"\nscope_headers = [\"x-tenant-id\"]\n{required}{extra}",
        grpc.port,
        required = if extra.contains("required") { "" } else { "required = true\n" },
    );
    // `/demo.Payments/Count` must pass through unkeyed: GET-less gRPC is all POSTs, so
    // the count call is made straight to the server.
    let app = TestApp::spawn(config(&redis.url(), "http://127.0.0.1:9", &route)).await;
    let target = app.addr.to_string();
    (redis, grpc, app, target)
}

pub fn metadata<'a>(result: &'a Value, part: &str, name: &str) -> Option<&'a str> {
    (result[part].as_array().unwrap().iter())
        .find(|kv| kv[0] == name)
        .map(|kv| kv[1].as_str().unwrap())
}
