#!/usr/bin/env python3
"""Checks the dashboard and the alert rules against a real Prometheus (live_test.sh).

    check_queries.py PROMETHEUS_URL DASHBOARD.json ALERTS.yml METRICS.txt

METRICS.txt is a /metrics answer of each scraped gateway, concatenated. Checks, and prints
every failure before exiting 1:
  1. the dashboard's shape: a `datasource` variable of type datasource (Prometheus), every
     panel and target on "${datasource}", unique panel ids, every panel inside 24 columns,
     every target with a refId and an expression;
  2. every fencegate_* name in either file is one the gateways export (the one name allowed
     to be missing is fencegate_admin_release_total, only in the dashboard, and only in an
     expression guarded with `or vector(0)`);
  3. every dashboard expression, its Grafana variables replaced, returns at least one series;
  4. every alert expression, split at its top-level and/or/unless and stripped of its
     top-level comparison with a number (the threshold), returns at least one series from
     each piece: a healthy gateway must not fire the alert, yet every metric it reads exists;
  5. Prometheus loaded every alert rule and evaluates it without error (health "ok").
"""
import json
import re
import sys
import urllib.parse
import urllib.request

import yaml

GUARDED_NAMES = {"fencegate_admin_release_total"}
# Grafana's variables and what a query with them means here: the default time range and
# every job and instance.
VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "5m",
             "${datasource}": "", "$job": ".*", "$instance": ".*"}

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg, file=sys.stderr)


def query(prom, expr):
    url = prom + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.load(resp)
    except urllib.error.HTTPError as e:
        return None, "HTTP %d: %s" % (e.code, e.read().decode(errors="replace"))
    if body.get("status") != "success":
        return None, body.get("error", "no status")
    data = body["data"]
    if data["resultType"] in ("vector", "matrix"):
        return data["result"], None
    return [data["result"]], None  # a scalar or string is one value


def substitute(expr):
    for var, value in VARIABLES.items():
        expr = expr.replace(var, value)
    if "$" in expr:
        fail("unknown Grafana variable left in: " + expr)
    return expr


def top_level(expr):
    """The indices of expr outside (), [], {} and quoted strings."""
    depth, quote, i = 0, None, 0
    while i < len(expr):
        c = expr[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = None
        elif c in "\"'`":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0:
            yield i
        i += 1


def top_level_split(expr):
    """Splits at the top-level and/or/unless; returns the pieces."""
    pieces, start = [], 0
    for i in top_level(expr):
        m = re.match(r"\s(and|or|unless)\s", expr[i:])
        if m and i >= start:
            pieces.append(expr[start:i])
            start = i + m.end()
    pieces.append(expr[start:])
    return [p.strip() for p in pieces]


def strip_threshold(piece):
    """`X > 0.8` -> `X`: the top-level comparison with a number on its right, dropped."""
    for i in top_level(piece):
        m = re.match(r"(==|!=|>=|<=|>|<)\s*(bool\s+)?[-+]?[0-9.]+(e[-+]?[0-9]+)?\s*$",
                     piece[i:])
        if m:
            return piece[:i].strip()
    return piece


def check_dashboard(dash):
    exprs = []
    variables = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
    ds = variables.get("datasource")
    if ds is None or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        fail("the dashboard has no `datasource` variable of type datasource for prometheus")
    for name, var in variables.items():
        if var.get("type") == "query":
            if var.get("datasource", {}).get("uid") != "${datasource}":
                fail("variable %s does not use ${datasource}" % name)
            q = var["query"]["query"] if isinstance(var.get("query"), dict) else var.get("query")
            m = re.match(r"label_values\((.*),\s*\w+\)$", q or "")
            if not m:
                fail("variable %s: not a label_values() query: %r" % (name, q))
            else:
                exprs.append(("variable " + name, m.group(1)))
    ids = set()
    for p in dash.get("panels", []):
        title = p.get("title", "?")
        if p.get("id") in ids:
            fail("panel %r: id %s used twice" % (title, p.get("id")))
        ids.add(p.get("id"))
        g = p.get("gridPos", {})
        if not all(k in g for k in "hwxy") or g["x"] + g["w"] > 24:
            fail("panel %r: gridPos %r does not fit 24 columns" % (title, g))
        if p.get("type") == "row":
            continue
        if p.get("datasource", {}).get("uid") != "${datasource}":
            fail("panel %r: datasource is not ${datasource}" % title)
        if not p.get("targets"):
            fail("panel %r has no query" % title)
        for t in p.get("targets", []):
            if t.get("datasource", {}).get("uid") != "${datasource}" or not t.get("refId"):
                fail("panel %r: a target without ${datasource} or refId" % title)
            if not t.get("expr"):
                fail("panel %r: target %s has no expression" % (title, t.get("refId")))
                continue
            exprs.append(("panel %r %s" % (title, t["refId"]), t["expr"]))
    return exprs


def check_names(text, where, exported, guarded_ok):
    for name in sorted(set(re.findall(r"\bfencegate_[a-z0-9_]+", text))):
        if name in exported:
            continue
        if guarded_ok and name in GUARDED_NAMES:
            continue
        fail("%s uses %s, which no gateway exports" % (where, name))


def main(prom, dash_path, alerts_path, metrics_path):
    with open(dash_path) as f:
        dash = json.load(f)
    with open(alerts_path) as f:
        rules = yaml.safe_load(f)
    with open(metrics_path) as f:
        exported = set(re.findall(r"^(fencegate_[a-z0-9_]+)", f.read(), re.M))

    checked = 0
    for where, expr in check_dashboard(dash):
        guarded = bool(re.search(r"\bor\s+vector\(0\)\s*$", expr))
        check_names(expr, where, exported, guarded)
        result, err = query(prom, substitute(expr))
        checked += 1
        if err:
            fail("%s: %s: %s" % (where, err, expr))
        elif not result:
            fail("%s returns no series: %s" % (where, expr))

    alerts = [r for g in rules["groups"] for r in g["rules"] if "alert" in r]
    for rule in alerts:
        where = "alert " + rule["alert"]
        check_names(rule["expr"], where, exported, False)
        for piece in top_level_split(rule["expr"]):
            value = strip_threshold(piece)
            result, err = query(prom, value)
            checked += 1
            if err:
                fail("%s: %s: %s" % (where, err, value))
            elif not result:
                fail("%s: no series for %s" % (where, value))

    with urllib.request.urlopen(prom + "/api/v1/rules?type=alert", timeout=10) as resp:
        loaded = {r["name"]: r for g in json.load(resp)["data"]["groups"] for r in g["rules"]}
    for rule in alerts:
        got = loaded.get(rule["alert"])
        if got is None:
            fail("Prometheus did not load alert %s" % rule["alert"])
        elif got.get("health") != "ok":
            fail("alert %s evaluates with health %r: %s" % (rule["alert"], got.get("health"),
                                                            got.get("lastError")))
    print("check_queries: %d queries, %d alerts checked, %d failures"
          % (checked, len(alerts), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(*sys.argv[1:]))
