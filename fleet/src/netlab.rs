//! Network partitions: a [`NetLab`] is a Linux bridge with a private /24
//! (`10.213.S.0/24`, `S` claimed by creating the bridge `iglS`) and one network
//! namespace per part ([`NetLab::host`]: `iglS-NAME`, joined to the bridge by a veth
//! pair, its address `10.213.S.k`). The root namespace holds `.1` on the bridge, so the
//! test process reaches every part directly; the namespaces have no other route.
//!
//! Cuts are nftables sets in each namespace's input hook: a packet from a denied
//! address is dropped where it arrives, so the sender gets no error and no RST, and a
//! call hangs until its own timeout, as across a real partition. [`NetLab::cut`] cuts
//! two sets of hosts apart in both directions; [`NetLab::cut_replies`] loses only what
//! one host sends back to another (requests arrive and are acted on, the replies
//! vanish); [`NetLab::power_off`] drops everything that reaches one host, from the
//! root namespace too (a host powered off or unplugged: no RST, no ICMP, so its
//! clients wait out their own timeouts rather than being refused);
//! [`NetLab::heal`] undoes every cut at once.
//!
//! Nothing leaves the machine: `10.213.0.0/16` is routed `unreachable` in the root
//! namespace (only a lab's own /24 on its bridge is more specific), so an address of a
//! lab that is gone fails at once instead of following the default route. Dropping the
//! lab kills what still runs in its namespaces and deletes them and the bridge (on a
//! panic too, as `Drop` runs while unwinding); a lab whose process died without that
//! is swept by the next [`NetLab::new`].

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use crate::net::Host;

/// The range every lab's /24 comes from, routed nowhere else.
const RANGE: &str = "10.213.0.0/16";
/// Where each lab writes the pid of the process that owns it (for the sweep).
const OWNERS: &str = "/run/idemgate-netlab";

/// A bridge, its namespaces and their cuts; everything is deleted on drop.
pub struct NetLab {
    subnet: u8,
    hosts: Mutex<Vec<Host>>,
}

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{:?}: {e}", cmd.get_program()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{} {:?}: {}",
            cmd.get_program().to_string_lossy(),
            cmd.get_args().collect::<Vec<_>>(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn ip(args: &[&str]) -> Result<String, String> {
    run(Command::new("ip").args(args))
}

fn nft_in(ns: &str, script: &str) -> Result<String, String> {
    run(Command::new("ip").args(["netns", "exec", ns, "nft", script]))
}

fn bridge_name(subnet: u8) -> String {
    format!("igl{subnet}")
}

fn owner_file(subnet: u8) -> PathBuf {
    Path::new(OWNERS).join(subnet.to_string())
}

/// Kills what runs in every namespace of lab `subnet`, deletes them, their veth pairs
/// (deleting the root end deletes both at once; a namespace's own end would otherwise
/// linger until the kernel's asynchronous clean-up of the namespace) and the bridge.
fn teardown(subnet: u8) {
    let veths = format!("{}v", bridge_name(subnet));
    let links = ip(&["-o", "link", "show"]).unwrap_or_default();
    for link in links.lines().filter_map(|l| l.split(": ").nth(1)) {
        let name = link.split('@').next().unwrap_or(link);
        if name.starts_with(&veths) && name[veths.len()..].bytes().all(|b| b.is_ascii_digit()) {
            let _ = ip(&["link", "del", name]);
        }
    }
    let prefix = format!("{}-", bridge_name(subnet));
    let listed = ip(&["netns", "list"]).unwrap_or_default();
    for ns in listed
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|ns| ns.starts_with(&prefix))
    {
        if let Ok(pids) = ip(&["netns", "pids", ns]) {
            for pid in pids.split_whitespace() {
                let _ = Command::new("kill").args(["-KILL", pid]).status();
            }
        }
        let _ = ip(&["netns", "del", ns]);
    }
    let _ = ip(&["link", "del", &bridge_name(subnet)]);
    let _ = std::fs::remove_file(owner_file(subnet));
}

/// Labs whose owning process is gone (killed before it could drop them).
fn sweep_stale() {
    let Ok(dir) = std::fs::read_dir(OWNERS) else {
        return;
    };
    for entry in dir.flatten() {
        let Ok(subnet) = entry.file_name().to_string_lossy().parse::<u8>() else {
            continue;
        };
        let pid = std::fs::read_to_string(entry.path()).unwrap_or_default();
        if !Path::new("/proc").join(pid.trim()).exists() || pid.trim().is_empty() {
            teardown(subnet);
        }
    }
}

impl NetLab {
    /// Why a lab cannot be made here (not root, no `ip netns`, no `nft`), or `None`.
    /// Scenarios that need one say this and skip.
    pub fn unavailable() -> Option<String> {
        let uid = Command::new("id").arg("-u").output().ok()?;
        if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
            return Some("network namespaces need root".into());
        }
        if let Err(e) = ip(&["netns", "list"]) {
            return Some(format!("`ip netns` does not work: {e}"));
        }
        if let Err(e) = run(Command::new("nft").arg("--version")) {
            return Some(format!(
                "nftables is missing (apt-get install nftables): {e}"
            ));
        }
        None
    }

    /// A new bridge on a /24 of its own; no hosts yet.
    pub fn new() -> Result<Self, String> {
        if let Some(why) = Self::unavailable() {
            return Err(why);
        }
        // The guard first: from here on no lab address can leave the machine.
        ip(&["route", "replace", "unreachable", RANGE])?;
        sweep_stale();
        std::fs::create_dir_all(OWNERS).map_err(|e| format!("{OWNERS}: {e}"))?;
        // Each lab of a process starts its search further on, so a lab never takes the
        // /24 its predecessor just gave back.
        static LABS: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
        let nth = LABS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let start = (std::process::id() % 200) as u16 + nth.wrapping_mul(7);
        let subnet = (0..250u16)
            .map(|i| ((start + i) % 250 + 1) as u8)
            .find(|&s| ip(&["link", "add", &bridge_name(s), "type", "bridge"]).is_ok())
            .ok_or("no free lab subnet (250 bridges igl*)")?;
        let lab = Self {
            subnet,
            hosts: Mutex::new(Vec::new()),
        };
        std::fs::write(owner_file(subnet), std::process::id().to_string())
            .map_err(|e| format!("{OWNERS}: {e}"))?;
        let bridge = bridge_name(subnet);
        ip(&[
            "addr",
            "add",
            &format!("10.213.{subnet}.1/24"),
            "dev",
            &bridge,
        ])?;
        ip(&["link", "set", &bridge, "up"])?;
        Ok(lab)
    }

    /// A new namespace `name` on the bridge, with the next free address.
    pub fn host(&self, name: &str) -> Result<Host, String> {
        let mut hosts = self.hosts.lock().unwrap();
        let k = hosts.len() + 2;
        if k > 254 {
            return Err("a lab holds at most 253 hosts".into());
        }
        let bridge = bridge_name(self.subnet);
        let ns = format!("{bridge}-{name}");
        let veth = format!("{bridge}v{k}");
        let addr = Ipv4Addr::new(10, 213, self.subnet, k as u8);
        ip(&["netns", "add", &ns])?;
        ip(&[
            "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
        ])?;
        ip(&["link", "set", &veth, "master", &bridge, "up"])?;
        ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{addr}/24"),
            "dev",
            "eth0",
        ])?;
        ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
        ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        nft_in(
            &ns,
            "add table inet lab; add set inet lab deny { type ipv4_addr; }; \
             add chain inet lab input { type filter hook input priority 0; policy accept; }; \
             add rule inet lab input ip saddr @deny drop",
        )?;
        let host = Host {
            name: name.to_string(),
            ip: addr,
            netns: Some(ns),
        };
        hosts.push(host.clone());
        Ok(host)
    }

    /// Adds `from`'s addresses to the deny set of `at`.
    fn deny(at: &Host, from: &[&Host]) -> Result<(), String> {
        if from.is_empty() {
            return Ok(());
        }
        let ns = at.netns.as_deref().ok_or("a loopback host cannot be cut")?;
        let ips: Vec<String> = from.iter().map(|h| h.ip.to_string()).collect();
        nft_in(
            ns,
            &format!("add element inet lab deny {{ {} }}", ips.join(", ")),
        )
        .map(drop)
    }

    /// Packets between any host of `a` and any host of `b` vanish, both ways.
    pub fn cut(&self, a: &[&Host], b: &[&Host]) -> Result<(), String> {
        for h in a {
            Self::deny(h, b)?;
        }
        for h in b {
            Self::deny(h, a)?;
        }
        Ok(())
    }

    /// What `server` sends to `client` vanishes; `client`'s packets still arrive (a
    /// request is received and acted on; its reply is lost, and so are new handshakes).
    pub fn cut_replies(&self, client: &Host, server: &Host) -> Result<(), String> {
        Self::deny(client, &[server])
    }

    /// Every packet that reaches `host` from the lab (the root namespace, through the
    /// bridge, and every other host) vanishes where it arrives, as if the machine had
    /// been powered off: its connections go silent, new ones get no SYN-ACK. What runs
    /// in it goes on, unseen. Until [`Self::heal`].
    pub fn power_off(&self, host: &Host) -> Result<(), String> {
        let root = Host {
            name: "root".into(),
            ip: Ipv4Addr::new(10, 213, self.subnet, 1),
            netns: None,
        };
        let hosts = self.hosts.lock().unwrap().clone();
        let mut from: Vec<&Host> = hosts.iter().filter(|h| h.ip != host.ip).collect();
        from.push(&root);
        Self::deny(host, &from)
    }

    /// Undoes every cut.
    pub fn heal(&self) -> Result<(), String> {
        for h in self.hosts.lock().unwrap().iter() {
            if let Some(ns) = &h.netns {
                nft_in(ns, "flush set inet lab deny")?;
            }
        }
        Ok(())
    }

    /// The addresses `host` drops packets from now (for evidence and tests).
    pub fn denied_at(&self, host: &Host) -> Vec<Ipv4Addr> {
        let Some(ns) = &host.netns else {
            return Vec::new();
        };
        let listed = nft_in(ns, "list set inet lab deny").unwrap_or_default();
        listed
            .split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter_map(|w| w.parse::<Ipv4Addr>().ok())
            .filter(|a| a.octets()[0] == 10)
            .collect()
    }

    /// The bridge's name (`iglS`).
    pub fn bridge(&self) -> String {
        bridge_name(self.subnet)
    }
}

impl Drop for NetLab {
    fn drop(&mut self) {
        teardown(self.subnet);
    }
}

#[cfg(test)]
mod tests;
