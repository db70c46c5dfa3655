//! The local fleet's front and its watchers: HAProxy before the replicas (its stats page
//! on `LB_STATS_PORT`), Prometheus scraping every replica with the alert rules, and the
//! trace receiver on `TRACES_PORT` keeping every span in `.state/traces.jsonl`.

use super::*;

impl Local {
    pub(super) fn start_haproxy(&self) -> Res {
        let backends: Vec<Backend> = (1..=self.replicas)
            .map(|i| Backend {
                name: format!("gw{i}"),
                ip: std::net::Ipv4Addr::LOCALHOST,
                port: LB_PORT + i,
                admin: ADMIN_BASE + i,
            })
            .collect();
        let cfg = self.file("haproxy.cfg");
        let new = self.file("haproxy.cfg.new");
        let text = render_local(LB_PORT, LB_STATS_PORT, &backends, self.proto);
        std::fs::write(&new, &text).map_err(|e| e.to_string())?;
        let valid = Command::new(haproxy_bin())
            .args(["-c", "-q", "-f"])
            .arg(&new)
            .status();
        if !valid.is_ok_and(|s| s.success()) {
            return Err(format!("generated {} is invalid", new.display()));
        }
        let pidfile = self.file("haproxy.pid");
        let changed = std::fs::read_to_string(&cfg).ok().as_deref() != Some(text.as_str());
        std::fs::rename(&new, &cfg).map_err(|e| e.to_string())?;
        let mut cmd = Command::new(haproxy_bin());
        cmd.arg("-db").arg("-f").arg(&cfg);
        match alive(&pidfile, "haproxy") {
            Some(old) if changed => {
                // Hitless reload: the new process takes over (-sf) from the old one.
                println!("==> haproxy configuration changed: reloading (replaces pid {old})");
                std::fs::write(self.file("haproxy-old.pid"), format!("{old}\n"))
                    .map_err(|e| e.to_string())?;
                launch(
                    "haproxy",
                    &pidfile,
                    &self.file("haproxy.log"),
                    cmd.arg("-sf").arg(old.to_string()),
                );
            }
            _ => self.start("haproxy", "haproxy", &[LB_PORT, LB_STATS_PORT], &mut cmd)?,
        }
        // Ready when a request through it reaches a gateway (404 off /v1/).
        let ready = || http_status(LB_PORT, "/", Duration::from_secs(2)) == Some(404);
        self.wait_ready("haproxy", Some("haproxy"), ready)
    }

    pub(super) fn start_prometheus(&self) -> Res {
        if !Command::new("sh")
            .args(["-c", "command -v prometheus"])
            .output()
            .is_ok_and(|o| o.status.success())
        {
            eprintln!("warning: prometheus is not installed; running without it");
            return Ok(());
        }
        let dir = self.state.join("prometheus");
        std::fs::create_dir_all(dir.join("targets")).map_err(|e| e.to_string())?;
        std::fs::create_dir_all(dir.join("data")).map_err(|e| e.to_string())?;
        for f in ["prometheus.yml", "alerts.yml"] {
            let _ = std::fs::remove_file(dir.join(f));
            std::os::unix::fs::symlink(self.root.join("deploy/prometheus").join(f), dir.join(f))
                .map_err(|e| e.to_string())?;
        }
        let targets: Vec<String> = (1..=self.replicas)
            .map(|i| format!("\n  {{\"targets\": [\"127.0.0.1:{}\"], \"labels\": {{\"replica\": \"gw{i}\"}}}}", ADMIN_BASE + i))
            .collect();
        let tmp = dir.join("targets/idemgate.json.tmp");
        std::fs::write(&tmp, format!("[{}\n]\n", targets.join(","))).map_err(|e| e.to_string())?;
        std::fs::rename(&tmp, dir.join("targets/idemgate.json")).map_err(|e| e.to_string())?;
        let mut cmd = Command::new("prometheus");
        cmd.arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg("--storage.tsdb.retention.time=2d")
        .arg(format!("--web.listen-address=127.0.0.1:{PROM_PORT}"))
        .arg("--web.enable-lifecycle");
        self.start("prometheus", "prometheus", &[PROM_PORT], &mut cmd)?;
        let ready = || http_status(PROM_PORT, "/-/ready", Duration::from_secs(2)) == Some(200);
        self.wait_ready("prometheus", Some("prometheus"), ready)
    }

    /// The trace receiver the replicas export to (`deploy/local/idemgate.toml`,
    /// `[tracing]`): this launcher as `idemgate-fleet otlp`, each span appended to
    /// `.state/traces.jsonl`. A receiver already on the port that make up did not start
    /// (a collector of your own) is left to receive them.
    pub(super) fn start_traces(&self) -> Res {
        let pidfile = self.file("traces.pid");
        if alive(&pidfile, "idemgate-fleet").is_none() && port_open(TRACES_PORT) {
            println!(
                "==> a trace receiver already listens on {TRACES_PORT}: the replicas export to it"
            );
            return Ok(());
        }
        let fleet = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(fleet);
        cmd.args(["otlp", "--port", &TRACES_PORT.to_string(), "--out"])
            .arg(self.file("traces.jsonl"));
        self.start("idemgate-fleet", "traces", &[TRACES_PORT], &mut cmd)?;
        self.wait_ready("trace receiver", Some("traces"), || port_open(TRACES_PORT))
    }
}
