//! The bench's HTTP parts started: the demo upstream, nginx and the peer proxy (the
//! baselines), the gateway replicas, HAProxy in front of them, and the trace receiver
//! of the rows that export spans.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::*;

impl Bench {
    pub fn start_upstream(&self) -> Res {
        let mut cmd = Command::new(&self.upstream);
        cmd.args(["--listen", &format!("127.0.0.1:{}", ports::UPSTREAM)])
            .args(["--latency", "0ms"])
            .env("RUST_LOG", "warn")
            .env("NO_COLOR", "1");
        self.start("upstream", &[ports::UPSTREAM], &mut cmd, || {
            http_status(ports::UPSTREAM, "/_demo/health", Duration::from_secs(2)) == Some(200)
        })
    }

    /// The trace receiver of the rows with `[tracing]` on: this launcher's own
    /// (`idemgate-fleet otlp`), which decodes every span and keeps none.
    pub fn start_otlp(&self) -> Res {
        let me = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(me);
        cmd.args(["otlp", "--port", &ports::OTLP.to_string()]);
        self.start("otlp", &[ports::OTLP], &mut cmd, || port_open(ports::OTLP))
    }

    /// Fills a template of `loadtest/bench/` and writes it to `dir/name`.
    pub(super) fn render(
        &self,
        template: &str,
        dir: &Path,
        pairs: &[(&str, String)],
    ) -> Result<PathBuf, String> {
        let src = self.root.join("loadtest/bench").join(template);
        let mut text =
            std::fs::read_to_string(&src).map_err(|e| format!("{}: {e}", src.display()))?;
        for (k, v) in pairs {
            text = text.replace(k, v);
        }
        let path = dir.join(template);
        std::fs::write(&path, text).map_err(|e| e.to_string())?;
        Ok(path)
    }

    pub fn start_nginx(&self) -> Res {
        let dir = self.state.join("nginx");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("logs")).map_err(|e| e.to_string())?;
        let conf = self.render(
            "nginx.conf",
            &dir,
            &[
                ("@PREFIX@", dir.display().to_string()),
                ("@LISTEN@", format!("127.0.0.1:{}", ports::NGINX)),
                ("@UPSTREAM@", format!("127.0.0.1:{}", ports::UPSTREAM)),
            ],
        )?;
        let mut cmd = Command::new("nginx");
        cmd.arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(conf)
            .args(["-g", "daemon off;"]);
        self.start("nginx", &[ports::NGINX], &mut cmd, || {
            http_status(ports::NGINX, "/_demo/health", Duration::from_secs(2)) == Some(200)
        })
    }

    pub fn start_peer(&self) -> Res {
        if !self.peer.exists() {
            return Err(format!(
                "{} missing (loadtest/bench/run.sh installs it with cargo install)",
                self.peer.display()
            ));
        }
        let dir = self.state.join("peer-run");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        std::fs::write(dir.join(".env"), peer::env_file()).map_err(|e| e.to_string())?;
        let mut cmd = Command::new(&self.peer);
        cmd.current_dir(&dir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default());
        // Without an Idempotency-Key it answers 400 once it serves.
        self.start("peer", &[ports::PEER], &mut cmd, || {
            http_status(ports::PEER, peer::PATH, Duration::from_secs(2)) == Some(400)
        })
    }

    /// Replicas `gw-1..gw-N` with `opts`, each ready (`/readyz` 200), run by `opts.bin`
    /// when given (the last release's binary), else by [`Bench::idemgate`].
    pub fn start_gateways(&self, opts: &GatewayOptions) -> Res {
        if !(1..=ports::MAX_REPLICAS).contains(&opts.replicas) {
            return Err(format!("replicas: 1 to {}", ports::MAX_REPLICAS));
        }
        let bin = opts.bin.as_ref().unwrap_or(&self.idemgate);
        if !bin.exists() {
            return Err(format!("{} missing", bin.display()));
        }
        std::fs::create_dir_all(&self.state).map_err(|e| e.to_string())?;
        for i in (1..=opts.replicas).filter(|i| opts.only.map_or(true, |only| only == *i)) {
            let postgres = opts.postgres_for(i);
            let config = self.state.join(opts.file_name(postgres));
            std::fs::write(&config, opts.render(postgres)).map_err(|e| e.to_string())?;
            let mut cmd = Command::new(bin);
            cmd.arg("serve")
                .arg("--config")
                .arg(&config)
                .env_remove("RUST_LOG");
            cmd.envs(opts.env_of(i));
            let (gw, admin) = (opts.ports.gateway(i), opts.ports.admin(i));
            self.start(&format!("gw-{i}"), &[gw, admin], &mut cmd, || {
                http_status(admin, "/readyz", Duration::from_secs(2)) == Some(200)
            })
            .inspect_err(|_| self.stop(&["gateways".into()]))?;
        }
        Ok(())
    }

    /// HAProxy in front of `gw-1..gw-replicas`. With `rolling`, as in front of a fleet
    /// restarted replica by replica: replicas picked at random, its runtime API on
    /// [`ports::HAPROXY_ADMIN`] (a replica is drained there before it stops), and a
    /// request whose connection was refused or closed before any answer sent again to
    /// another replica (safe for keyed requests: the gateway runs a key once).
    pub fn start_haproxy(&self, replicas: u16, rolling: bool) -> Res {
        let gateways = (1..=replicas).map(ports::gateway);
        self.start_haproxy_on(ports::HAPROXY, gateways, rolling)
    }

    /// HAProxy on `port` in front of the replicas listening on `gateways` (in order).
    pub(super) fn start_haproxy_on(
        &self,
        port: u16,
        gateways: impl Iterator<Item = u16>,
        rolling: bool,
    ) -> Res {
        let (global, backend): (String, &[&str]) = match rolling {
            // The later `balance` wins: alternate requests would otherwise fall on one
            // replica each.
            true => (
                format!(
                    "    stats socket ipv4@127.0.0.1:{} level admin",
                    ports::HAPROXY_ADMIN
                ),
                &[
                    "    balance random",
                    "    retries 3",
                    "    option redispatch 1",
                    "    retry-on conn-failure empty-response",
                ],
            ),
            false => (String::new(), &[]),
        };
        let servers: Vec<String> = (backend.iter().map(|line| line.to_string()))
            .chain(
                (1..)
                    .zip(gateways)
                    .map(|(i, gw)| format!("    server gw{i} 127.0.0.1:{gw}")),
            )
            .collect();
        let cfg = self.render(
            "haproxy.cfg",
            &self.state,
            &[
                ("@GLOBAL@", global),
                ("@LISTEN@", format!("127.0.0.1:{port}")),
                ("@SERVERS@", servers.join("\n")),
            ],
        )?;
        let mut cmd = Command::new(haproxy_bin());
        cmd.arg("-db").arg("-f").arg(cfg);
        // Ready when a request through it reaches a gateway (404 off /v1/).
        self.start("haproxy", &[port], &mut cmd, || {
            http_status(port, "/", Duration::from_secs(2)) == Some(404)
        })
    }
}
