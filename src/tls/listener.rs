//! TLS on the proxy listener (`[server.tls]`): the certificate it presents, loaded from
//! its PEM files at start ([`ListenerCert::load`]: an error names the key) and read
//! again on SIGHUP or when either file changes ([`ListenerCert::watch`]). A rustls
//! certificate resolver holds the pair in use: a reload swaps it, so new handshakes get
//! the new certificate while open connections keep theirs; a reload that fails keeps the
//! pair in use and logs one warning. ALPN offers `h2` and `http/1.1`
//! ([`ListenerCert::server_config`]).

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;

use super::{certs, private_key, provider, TlsError};
use crate::config::ListenerTls;

/// How often the files' modification times are compared with the ones loaded.
pub const POLL: Duration = Duration::from_secs(5);

/// What the listener's ALPN offers, preferred first.
const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// The listener's certificate and key: the pair in use, and where it is read from.
pub struct ListenerCert {
    cert_file: PathBuf,
    key_file: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
    /// The files' modification times, sizes and inodes when last read.
    seen: Mutex<Option<Stamp>>,
}

type Stamp = [(SystemTime, u64, u64); 2];

impl ListenerCert {
    /// The pair of `[server.tls]`; `None` without TLS on the listener.
    pub fn load(tls: &ListenerTls) -> Result<Option<Arc<Self>>, TlsError> {
        let Some((cert_file, key_file)) = tls.files() else {
            return Ok(None);
        };
        let seen = stamp(cert_file, key_file);
        let pair = read_pair(cert_file, key_file)?;
        Ok(Some(Arc::new(Self {
            cert_file: cert_file.to_path_buf(),
            key_file: key_file.to_path_buf(),
            current: RwLock::new(Arc::new(pair)),
            seen: Mutex::new(seen),
        })))
    }

    /// The rustls configuration of the listener: this certificate, no client
    /// certificates asked for, ALPN `h2` then `http/1.1`.
    pub fn server_config(self: &Arc<Self>) -> Arc<ServerConfig> {
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
        Arc::new(config)
    }

    /// Reads both files again and, if they make a usable pair, presents it from the next
    /// handshake on; otherwise keeps the pair in use.
    pub fn reload(&self) -> Result<(), TlsError> {
        let seen = stamp(&self.cert_file, &self.key_file);
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = seen;
        let pair = read_pair(&self.cert_file, &self.key_file)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(pair);
        Ok(())
    }

    /// Whether either file changed (or appeared, or went away) since it was last read.
    fn changed(&self) -> bool {
        let now = stamp(&self.cert_file, &self.key_file);
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) != now
    }

    /// Reloads on SIGHUP and when the files change, until dropped; logs each reload and
    /// each failed one (once per change: a file left broken is not warned about again).
    /// SIGHUP is caught from the call on, before the future is first polled.
    pub fn watch(self: Arc<Self>) -> impl Future<Output = ()> + Send + 'static {
        let mut hangup = hangup();
        async move {
            let mut poll = tokio::time::interval(POLL);
            poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let why = tokio::select! {
                    _ = poll.tick() => {
                        if !self.changed() {
                            continue;
                        }
                        "the files changed"
                    }
                    () = next(&mut hangup) => "SIGHUP",
                };
                self.reload_logged(why);
            }
        }
    }

    /// [`Self::reload`], its outcome logged.
    fn reload_logged(&self, why: &str) {
        match self.reload() {
            Ok(()) => tracing::info!(
                cert = %self.cert_file.display(),
                trigger = why,
                "server.tls: certificate reloaded"
            ),
            Err(e) => tracing::warn!(
                error = %e,
                trigger = why,
                "server.tls: reload failed; the certificate in use is kept"
            ),
        }
    }
}

impl fmt::Debug for ListenerCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListenerCert")
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .finish_non_exhaustive()
    }
}

impl ResolvesServerCert for ListenerCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

/// The certificate chain and its key, checked to go together.
fn read_pair(cert_file: &Path, key_file: &Path) -> Result<CertifiedKey, TlsError> {
    let chain = certs("server.tls.cert", cert_file)?;
    let key = private_key("server.tls.key", key_file)?;
    CertifiedKey::from_der(chain, key, &provider()).map_err(|e| {
        TlsError::new(
            "server.tls.key",
            format!(
                "{} does not go with the certificate {}: {e}",
                key_file.display(),
                cert_file.display()
            ),
        )
    })
}

/// Both files' modification times, sizes and inodes, symbolic links followed (`None` if
/// either cannot be read): a file renamed over the old one is seen even with the same
/// time and size.
fn stamp(cert_file: &Path, key_file: &Path) -> Option<Stamp> {
    let one = |path: &Path| {
        let meta = std::fs::metadata(path).ok()?;
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(&meta);
        #[cfg(not(unix))]
        let inode = 0;
        Some((meta.modified().ok()?, meta.len(), inode))
    };
    Some([one(cert_file)?, one(key_file)?])
}

#[cfg(unix)]
type Hangup = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangup = ();

/// SIGHUP's stream (registered at once, so a SIGHUP sent from now on is caught).
fn hangup() -> Hangup {
    #[cfg(unix)]
    {
        let hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
        if let Err(e) = &hangup {
            tracing::warn!(error = %e, "server.tls: no SIGHUP handler; reloads on file changes only");
        }
        hangup.ok()
    }
}

/// The next SIGHUP (never, without a handler).
async fn next(hangup: &mut Hangup) {
    #[cfg(unix)]
    if let Some(signal) = hangup {
        if signal.recv().await.is_some() {
            return;
        }
    }
    #[cfg(not(unix))]
    let _ = hangup;
    std::future::pending().await
}
