#!/usr/bin/env python3
"""Checks the rendered manifests for what a schema cannot see: that the pieces fit
together and agree with the files they come from.

- the PrometheusRule's spec is deploy/prometheus/alerts.yml, and the dashboard
  ConfigMap holds deploy/grafana/idemgate.json with the Grafana sidecar's label;
- the config ConfigMap is idemgate.toml, mounted where IDEMGATE_CONFIG points, and the
  container ports are the listen ports it configures;
- terminationGracePeriodSeconds covers the preStop pause plus server.shutdown_grace,
  and the memory limit covers server.buffer_budget plus postgres.retry_queue_bytes;
- probes, the restricted security context, topology spread; Services, the PDB, the
  HPA, the NetworkPolicy and the ServiceMonitor select these pods and name real ports;
  every Secret key the Deployment reads exists.

Usage: check_manifests.py RENDERED.yaml   (the output of `kubectl kustomize deploy/kubernetes`)
       check_manifests.py --render        (renders itself, without kubectl: resources,
                                           configMapGenerator without the hash suffix,
                                           namespace, images; prints the YAML)
"""
import json
import re
import sys
import tomllib
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ALERTS = HERE.parent / "prometheus" / "alerts.yml"
DASHBOARD = HERE.parent / "grafana" / "idemgate.json"
TOML = HERE / "idemgate.toml"
UNITS = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "ki": 2**10, "mi": 2**20, "gi": 2**30}


def render() -> list:
    k = yaml.safe_load((HERE / "kustomization.yaml").read_text())
    docs = [d for r in k["resources"] for d in yaml.safe_load_all((HERE / r).read_text()) if d]
    for gen in k.get("configMapGenerator", []):
        data = {Path(f).name: (HERE / f).read_text() for f in gen["files"]}
        docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gen["name"]}, "data": data})
    for d in docs:
        if d["kind"] != "Namespace":
            d["metadata"]["namespace"] = k["namespace"]
    images = {i["name"]: i for i in k.get("images", [])}
    for d in docs:
        for c in d.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            if c["image"] in images:
                i = images[c["image"]]
                c["image"] = f"{i.get('newName', c['image'])}:{i['newTag']}"
    return docs


def size(text: str) -> int:
    m = re.fullmatch(r"(\d+)\s*([a-zA-Z]*)", text.strip())
    return int(m.group(1)) * UNITS[m.group(2).lower()]


def seconds(text: str) -> float:
    m = re.fullmatch(r"(\d+)(ms|s|m)", text.strip())
    return int(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60}[m.group(2)]


def check(docs: list) -> list:
    errors = []

    def expect(ok, what):
        if not ok:
            errors.append(what)

    def one(kind, name=None):
        found = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
        if len(found) != 1:
            raise SystemExit(f"check_manifests: want one {kind} {name or ''}, found {len(found)}")
        return found[0]

    def selects(selector, labels):
        return bool(selector) and all(labels.get(k) == v for k, v in selector.items())

    config = tomllib.loads(TOML.read_text())
    deploy = one("Deployment")
    pod = deploy["spec"]["template"]
    pod_labels = pod["metadata"]["labels"]
    (c,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    env = {e["name"]: e for e in c.get("env", [])}

    rule = one("PrometheusRule")
    expect(rule["spec"] == yaml.safe_load(ALERTS.read_text()), "PrometheusRule spec differs from deploy/prometheus/alerts.yml")
    dash = one("ConfigMap", "idemgate-grafana-dashboard")
    expect(dash["metadata"]["labels"].get("grafana_dashboard") == "1", "dashboard ConfigMap lacks grafana_dashboard: \"1\"")
    expect(json.loads(dash["data"]["idemgate.json"]) == json.loads(DASHBOARD.read_text()), "dashboard ConfigMap differs from deploy/grafana/idemgate.json")

    (cfg,) = [d for d in docs if d["kind"] == "ConfigMap" and "idemgate.toml" in d.get("data", {})]
    expect(cfg["data"]["idemgate.toml"] == TOML.read_text(), "config ConfigMap differs from idemgate.toml")
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    config_path = env["IDEMGATE_CONFIG"]["value"]
    vol = volumes.get(mounts.get(config_path.rsplit("/", 1)[0]), {})
    expect(vol.get("configMap", {}).get("name") == cfg["metadata"]["name"], f"{config_path} is not the config ConfigMap")
    for key, port in [("listen", "http"), ("admin_listen", "admin")]:
        want = int(config["server"][key].rsplit(":", 1)[1])
        expect(ports.get(port) == want, f"containerPort {port} is not server.{key}'s port {want}")

    grace = deploy["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    pause = c["lifecycle"]["preStop"]["sleep"]["seconds"]
    drain = seconds(config["server"]["shutdown_grace"])
    expect(grace > pause + drain, f"terminationGracePeriodSeconds {grace} <= preStop {pause} + shutdown_grace {drain}")
    budget = size(config["server"]["buffer_budget"]) + size(config.get("postgres", {}).get("retry_queue_bytes", "256MiB"))
    limit = size(c["resources"]["limits"]["memory"])
    expect(limit > budget, f"memory limit {limit} <= buffer_budget + retry_queue_bytes {budget}")
    expect(all(c["resources"][k].keys() >= {"cpu", "memory"} for k in ("requests", "limits")), "resources incomplete")

    expect(deploy["spec"]["replicas"] == 3, "Deployment is not 3 replicas")
    for probe, path in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz"), ("startupProbe", "/healthz")]:
        got = c.get(probe, {}).get("httpGet", {})
        expect(got.get("path") == path and got.get("port") == "admin", f"{probe} is not {path} on the admin port")
    psc, sc = pod["spec"]["securityContext"], c["securityContext"]
    expect(psc.get("runAsNonRoot") is True and psc.get("seccompProfile", {}).get("type") == "RuntimeDefault", "pod securityContext not restricted")
    expect(sc.get("readOnlyRootFilesystem") is True and sc.get("allowPrivilegeEscalation") is False
           and sc.get("capabilities", {}).get("drop") == ["ALL"], "container securityContext not restricted")
    spread = pod["spec"].get("topologySpreadConstraints", [])
    expect(any(t["topologyKey"] == "kubernetes.io/hostname" and selects(t["labelSelector"]["matchLabels"], pod_labels) for t in spread),
           "no topology spread across nodes")

    secret = one("Secret")
    refs = [e["valueFrom"]["secretKeyRef"] for e in env.values() if "secretKeyRef" in e.get("valueFrom", {})]
    refs += [{"name": v["secret"]["secretName"], "key": i["key"]} for v in volumes.values() if "secret" in v for i in v["secret"].get("items", [])]
    for ref in refs:
        expect(ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"], f"Secret key {ref} missing")

    services = {s["metadata"]["name"]: s for s in docs if s["kind"] == "Service"}
    for s in services.values():
        expect(selects(s["spec"]["selector"], pod_labels), f"Service {s['metadata']['name']} selects no gateway pod")
        for p in s["spec"]["ports"]:
            expect(p["targetPort"] in ports, f"Service {s['metadata']['name']} targets unknown port {p['targetPort']}")
    mon = one("ServiceMonitor")
    scraped = [s for s in services.values() if selects(mon["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])]
    expect(len(scraped) == 1, "ServiceMonitor does not select exactly one Service")
    for e in mon["spec"]["endpoints"]:
        expect(all(any(p["name"] == e["port"] and p["targetPort"] == "admin" for p in s["spec"]["ports"]) for s in scraped),
               "ServiceMonitor does not scrape the admin port")
        expect({"targetLabel": "job", "replacement": "idemgate", "action": "replace"} in e.get("relabelings", []),
               "ServiceMonitor does not set job=\"idemgate\" (the alerts and dashboard select it)")

    pdb, hpa = one("PodDisruptionBudget"), one("HorizontalPodAutoscaler")
    expect(selects(pdb["spec"]["selector"]["matchLabels"], pod_labels), "PDB selects no gateway pod")
    expect(hpa["spec"]["scaleTargetRef"]["name"] == deploy["metadata"]["name"], "HPA targets another Deployment")
    expect(hpa["spec"]["minReplicas"] == deploy["spec"]["replicas"], "HPA minReplicas differs from the Deployment's replicas")
    expect([m["resource"]["name"] for m in hpa["spec"]["metrics"]] == ["cpu"], "HPA does not scale on CPU")

    net = one("NetworkPolicy")
    expect(selects(net["spec"]["podSelector"]["matchLabels"], pod_labels), "NetworkPolicy selects no gateway pod")
    admin_rules = [r for r in net["spec"]["ingress"]
                   if not r.get("ports") or any(p["port"] in ("admin", ports["admin"]) for p in r["ports"])]
    expect(admin_rules, "no NetworkPolicy rule lets Prometheus reach the admin port")
    for r in admin_rules:
        expect(r.get("from") == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
               "the admin port is open to more than the monitoring namespace")
    return errors


def main() -> int:
    if sys.argv[1:] == ["--render"]:
        sys.stdout.write(yaml.safe_dump_all(render(), sort_keys=False))
        return 0
    (path,) = sys.argv[1:]
    errors = check([d for d in yaml.safe_load_all(Path(path).read_text()) if d])
    for e in errors:
        print(f"check_manifests: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
