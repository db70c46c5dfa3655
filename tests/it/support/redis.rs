//! A real `redis-server` per test, on a free loopback port in a temp dir, killed on drop.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fred::prelude::{Builder, ClientLike, Config, KeysInterface};
use tempfile::TempDir;

pub struct RedisServer {
    pub port: u16,
    dir: TempDir,
    child: Option<Child>,
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl RedisServer {
    /// Starts a fresh server with no persistence.
    pub fn start() -> Self {
        for _ in 0..5 {
            let mut server = Self {
                port: free_port(),
                dir: tempfile::tempdir().unwrap(),
                child: None,
            };
            if server.spawn() {
                return server;
            }
        }
        panic!("could not start redis-server (is it installed? `make test` installs it)");
    }

    /// Spawns on `self.port`; true once it answers.
    fn spawn(&mut self) -> bool {
        let log = std::fs::File::create(self.dir.path().join("redis.log")).unwrap();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("redis-server must be on PATH (`make test` installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                return false; // exited: port taken
            }
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// SIGKILL: all data is lost.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts again on the same port, empty.
    pub fn restart(&mut self) {
        self.stop();
        assert!(
            self.spawn(),
            "redis-server did not come back on port {}",
            self.port
        );
    }

    /// A separate client for inspecting the server from a test.
    pub async fn client(&self) -> fred::prelude::Client {
        let client = Builder::from_config(Config::from_url(&self.url()).unwrap())
            .build()
            .unwrap();
        client.init().await.unwrap();
        client
    }

    /// All keys on the server.
    pub async fn keys(&self) -> Vec<String> {
        let client = self.client().await;
        let keys: Vec<String> = client.custom(fred::cmd!("KEYS"), vec!["*"]).await.unwrap();
        let _ = client.quit().await;
        keys
    }

    /// The record keys (`idemgate:{<64 hex>}`), without fence and waiter keys.
    pub async fn records(&self) -> Vec<String> {
        (self.keys().await.into_iter())
            .filter(|k| k.starts_with("idemgate:{") && k.ends_with('}'))
            .collect()
    }

    /// Milliseconds to live of `key`.
    pub async fn pttl(&self, key: &str) -> i64 {
        let client = self.client().await;
        let ttl: i64 = client.pttl(key).await.unwrap();
        let _ = client.quit().await;
        ttl
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
