//! A TCP proxy that can hold back what the server sends: while held, requests still
//! reach the server, but its answers wait in the proxy until released. It models an
//! answer lost on the way back: the server did the work, the client never hears of it.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct HoldProxy {
    pub port: u16,
    hold: watch::Sender<bool>,
    target: watch::Sender<SocketAddr>,
    accept: JoinHandle<()>,
}

impl HoldProxy {
    /// Proxies `127.0.0.1:port_0` to `target`, passing everything through until held.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (hold, watcher) = watch::channel(false);
        let (target, to) = watch::channel(target);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let target = *to.borrow();
                let Ok(server) = TcpStream::connect(target).await else {
                    continue;
                };
                tokio::spawn(connection(client, server, watcher.clone()));
            }
        });
        Self {
            port,
            hold,
            target,
            accept,
        }
    }

    /// New connections go to `target` from now on (those open stay where they are): a
    /// failover behind one address.
    pub fn retarget(&self, target: SocketAddr) {
        self.target.send_replace(target);
    }

    /// A handle that holds or releases like [`Self::hold`], for a task of its own.
    pub fn hold_handle(&self) -> watch::Sender<bool> {
        self.hold.clone()
    }

    /// Holds (true) or releases (false) everything the server sends, on every connection.
    pub fn hold(&self, on: bool) {
        self.hold.send_replace(on);
    }
}

impl Drop for HoldProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.hold(false);
    }
}

async fn connection(client: TcpStream, server: TcpStream, mut hold: watch::Receiver<bool>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upstream = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
        let _ = server_write.shutdown().await;
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match server_read.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if hold.wait_for(|held| !*held).await.is_err() {
            break;
        }
        if client_write.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = client_write.shutdown().await;
    upstream.abort();
}
