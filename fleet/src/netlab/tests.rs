//! The lab's own tests: cuts, one-way cuts, a host powered off, heal and tear-down,
//! checked with a tiny python3 echo server in the namespaces.

use super::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A one-shot echo of "hi" in `host`'s namespace, through python3 (on every machine
/// the suite runs on): returns the child, which listens once it printed "up".
fn greeter(host: &Host, port: u16) -> std::process::Child {
    let script = format!(
        "import socket,sys\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
         s.bind(('{}',{port}))\ns.listen()\nprint('up',flush=True)\n\
         while True:\n  c,_=s.accept()\n  c.recv(16)\n  c.sendall(b'hi')\n  c.close()\n",
        host.ip
    );
    let mut child = host
        .command("python3")
        .args(["-c", &script])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut up = [0u8; 3];
    child.stdout.as_mut().unwrap().read_exact(&mut up).unwrap();
    child
}

/// From `host`'s namespace, whether "hi" comes back from `to` within a second.
fn greeted(host: &Host, to: &Host, port: u16) -> bool {
    let script = format!(
        "import socket\ns=socket.create_connection(('{}',{port}),timeout=1)\n\
         s.settimeout(1)\ns.sendall(b'x')\nprint(s.recv(2).decode())\n",
        to.ip
    );
    let out = host.command("python3").args(["-c", &script]).output();
    out.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "hi")
}

#[test]
fn a_powered_off_host_answers_nobody_until_healed() {
    if let Some(why) = NetLab::unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let lab = NetLab::new().unwrap();
    let (a, b) = (lab.host("a").unwrap(), lab.host("b").unwrap());
    let mut server = greeter(&b, 7001);
    assert!(greeted(&a, &b, 7001));
    lab.power_off(&b).unwrap();
    assert!(!greeted(&a, &b, 7001), "another host gets no answer");
    // From the root namespace: no refusal, the connect times out.
    let started = std::time::Instant::now();
    let e = TcpStream::connect_timeout(&b.addr(7001), Duration::from_millis(800)).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
    assert!(started.elapsed() >= Duration::from_millis(750));
    assert!(lab
        .denied_at(&b)
        .contains(&Ipv4Addr::new(10, 213, lab.subnet, 1)));
    lab.heal().unwrap();
    assert!(greeted(&a, &b, 7001), "healed");
    drop(lab);
    let _ = server.wait();
}

#[test]
fn cuts_heal_and_tear_down() {
    if let Some(why) = NetLab::unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let lab = NetLab::new().unwrap();
    let (a, b, c) = (
        lab.host("a").unwrap(),
        lab.host("b").unwrap(),
        lab.host("c").unwrap(),
    );
    let mut server = greeter(&b, 7000);
    assert!(greeted(&a, &b, 7000) && greeted(&c, &b, 7000));
    // The root namespace reaches a host through the bridge.
    let mut s = TcpStream::connect_timeout(&b.addr(7000), Duration::from_secs(1)).unwrap();
    s.write_all(b"x").unwrap();
    let mut hi = [0u8; 2];
    s.read_exact(&mut hi).unwrap();

    lab.cut(&[&a], &[&b]).unwrap();
    assert!(!greeted(&a, &b, 7000), "a and b are cut apart");
    assert!(greeted(&c, &b, 7000), "c is on neither side");
    assert_eq!(lab.denied_at(&b), vec![a.ip]);
    lab.heal().unwrap();
    assert!(greeted(&a, &b, 7000), "healed");

    // One way: b's replies to a vanish; a's packets still reach b.
    lab.cut_replies(&a, &b).unwrap();
    assert!(!greeted(&a, &b, 7000));
    assert_eq!(lab.denied_at(&b), Vec::<Ipv4Addr>::new());
    assert_eq!(lab.denied_at(&a), vec![b.ip]);
    lab.heal().unwrap();

    let (bridge, ns) = (lab.bridge(), b.netns.clone().unwrap());
    drop(lab);
    let _ = server.wait();
    assert!(
        !ip(&["netns", "list"]).unwrap().contains(&ns),
        "namespace gone"
    );
    assert!(ip(&["link", "show", &bridge]).is_err(), "bridge gone");
    let links = ip(&["-o", "link", "show"]).unwrap();
    assert!(
        !links.contains(&format!("{bridge}v")),
        "veth pairs gone at once"
    );
    // The next lab of this process does not take the /24 just given back.
    let next = NetLab::new().unwrap();
    assert_ne!(next.bridge(), bridge);
    // The guard route stays: a lab address no longer on a bridge fails at once.
    let route = ip(&["route", "get", &b.ip.to_string()]);
    assert!(
        route
            .as_ref()
            .is_err_and(|e| e.contains("No route to host")),
        "{route:?}"
    );
}
