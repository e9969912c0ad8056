#!/usr/bin/env python3
"""ctest monitoring_compose: the compose profile "monitoring" is wired to deploy/.

    check_compose.py SOURCE_DIR

No Docker engine runs here, so what `docker compose up` would find out is checked from the
files (the Compose schema itself is packaging_compose_schema's): the prometheus and grafana
services are in the profile; every file they bind-mount exists; Prometheus's rule files,
resolved beside its configuration as mounted, are the mounted alerts.yml; its fencegate job
scrapes a compose service on the port that service listens on; Grafana's dashboard provider
reads the directory the dashboard is mounted in, and its data source is the prometheus
service. Prints every failure, exits 1 if any.
"""
import os
import posixpath
import sys

import yaml

failures = []


def fail(msg):
    failures.append(msg)
    print("monitoring_compose: FAIL: " + msg, file=sys.stderr)


def binds(service, docker_dir):
    """{container path: host path} of the service's bind mounts (short syntax)."""
    out = {}
    for v in service.get("volumes", []):
        parts = v.split(":")
        if parts[0].startswith("."):
            host = os.path.normpath(os.path.join(docker_dir, parts[0]))
            if not os.path.exists(host):
                fail("%s is mounted but does not exist" % parts[0])
            out[parts[1]] = host
    return out


def main(src):
    docker_dir = os.path.join(src, "docker")
    with open(os.path.join(docker_dir, "compose.yaml")) as f:
        services = yaml.safe_load(f)["services"]
    for name in ("prometheus", "grafana"):
        if "monitoring" not in services.get(name, {}).get("profiles", []):
            fail("service %s is not in the monitoring profile" % name)
    if failures:
        return 1

    prom = binds(services["prometheus"], docker_dir)
    config_path = next((c for c in prom if c.endswith("prometheus.yml")), None)
    if config_path is None or "--config.file=" + config_path not in services["prometheus"]["command"]:
        fail("prometheus is not started with its mounted prometheus.yml")
        return 1
    with open(prom[config_path]) as f:
        config = yaml.safe_load(f)
    for rule in config.get("rule_files", []):
        inside = posixpath.join(posixpath.dirname(config_path), rule)
        if prom.get(inside) != os.path.join(src, "deploy", "prometheus", "alerts.yml"):
            fail("rule file %s is not the mounted deploy/prometheus/alerts.yml" % inside)
    jobs = [j for j in config["scrape_configs"] if j["job_name"] == "fencegate"]
    if not jobs:
        fail("prometheus.yml has no scrape job named fencegate (the alerts select on it)")
    for job in jobs:
        for sc in job["static_configs"]:
            for target in sc["targets"]:
                host, port = target.rsplit(":", 1)
                listen = services.get(host, {}).get("environment", {}).get("FENCEGATE_LISTEN", "")
                if not listen.endswith(":" + port):
                    fail("scrape target %s is no gateway service listening on %s" % (target, port))

    graf = binds(services["grafana"], docker_dir)
    prov = graf.get("/etc/grafana/provisioning")
    dash = [c for c, h in graf.items() if h == os.path.join(src, "deploy", "grafana", "fencegate.json")]
    if prov is None or not dash:
        fail("grafana does not mount the provisioning directory and the dashboard")
        return 1
    with open(os.path.join(prov, "dashboards", "fencegate.yaml")) as f:
        paths = [p["options"]["path"] for p in yaml.safe_load(f)["providers"]]
    if posixpath.dirname(dash[0]) not in paths:
        fail("no dashboard provider reads %s" % posixpath.dirname(dash[0]))
    with open(os.path.join(prov, "datasources", "prometheus.yaml")) as f:
        sources = yaml.safe_load(f)["datasources"]
    if not any(s["type"] == "prometheus" and s["url"] == "http://prometheus:9090" for s in sources):
        fail("no provisioned prometheus data source at http://prometheus:9090")
    print("monitoring_compose: %d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
