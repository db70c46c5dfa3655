//! A small TCP fault proxy (the kernel here has no `tc netem` and toxiproxy is not
//! packaged): it sits between one gateway replica and Redis and, on command, adds
//! latency to every chunk in both directions, black-holes traffic (accepts and reads,
//! forwards nothing), or resets every connection (RST, and RST for new ones).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Forward as is.
    Pass,
    /// Hold every chunk this long before forwarding it (order kept).
    Latency(Duration),
    /// Swallow everything; nothing is forwarded and nothing is closed.
    BlackHole,
    /// Close every connection with RST; new connections are reset at once.
    Reset,
}

pub struct FaultProxy {
    pub port: u16,
    mode: watch::Sender<Fault>,
    accept: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (mode, watcher) = watch::channel(Fault::Pass);
        let accept = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                tokio::spawn(connection(client, target, watcher.clone()));
            }
        });
        Self { port, mode, accept }
    }

    pub fn set(&self, fault: Fault) {
        self.mode.send_replace(fault);
    }

    pub fn redis_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.set(Fault::Reset);
    }
}

fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

async fn connection(client: TcpStream, target: SocketAddr, mut mode: watch::Receiver<Fault>) {
    let current = *mode.borrow_and_update();
    match current {
        Fault::Reset => return reset(client),
        Fault::BlackHole => {
            // Read and discard until the fault changes, then close.
            let _ = client.set_zero_linger();
            let mut client = client;
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                tokio::select! {
                    n = client.read(&mut buf) => if matches!(n, Ok(0) | Err(_)) { return },
                    changed = mode.changed() => {
                        if changed.is_err() || *mode.borrow() != Fault::BlackHole { return; }
                    }
                }
            }
        }
        Fault::Pass | Fault::Latency(_) => {}
    }
    let Ok(server) = TcpStream::connect(target).await else {
        return reset(client);
    };
    // Every close of a proxied connection is an RST: what a Reset needs, harmless otherwise.
    for s in [&client, &server] {
        let _ = s.set_nodelay(true);
        let _ = s.set_zero_linger();
    }
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let mut up = tokio::spawn(pump(cr, sw, mode.clone()));
    let mut down = tokio::spawn(pump(sr, cw, mode.clone()));
    loop {
        tokio::select! {
            _ = &mut up => break,
            _ = &mut down => break,
            changed = mode.changed() => {
                if changed.is_err() || *mode.borrow() == Fault::Reset { break; }
            }
        }
    }
    // Dropping the halves closes both sockets (with RST).
    up.abort();
    down.abort();
}

/// Copies `from` to `to` under the current fault, keeping the order of chunks.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mode: watch::Receiver<Fault>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let fault = *mode.borrow();
            let at = match fault {
                Fault::Pass => Instant::now(),
                Fault::Latency(d) => Instant::now() + d,
                Fault::BlackHole => continue,
                Fault::Reset => return,
            };
            if tx.send((at, buf[..n].to_vec())).is_err() {
                return;
            }
        }
    };
    let writer = async move {
        while let Some((at, chunk)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    };
    tokio::join!(reader, writer);
}
