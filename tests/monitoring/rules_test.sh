#!/usr/bin/env bash
# ctest monitoring_alert_rules: deploy/prometheus/alerts.yml passes `promtool check rules`,
# deploy/prometheus/prometheus.yml (the compose profile's, which loads them) passes
# `promtool check config`, and the rules pass `promtool test rules` with
# tests/monitoring/alerts_test.yml, which gives every alert series that fire it and series
# that do not; every alert has a test case and a runbook entry in docs/operations.md. A
# missing promtool fails; it never skips.
set -euo pipefail
src=${1:?usage: rules_test.sh SOURCE_DIR}
command -v promtool >/dev/null 2>&1 \
    || { echo "monitoring_alert_rules: FAIL: promtool is not installed (scripts/install-deps.sh installs Debian's prometheus)" >&2; exit 1; }
promtool check rules "$src/deploy/prometheus/alerts.yml"
promtool check config "$src/deploy/prometheus/prometheus.yml"
# Every alert of the rules has a test case, so a new alert cannot come without one.
missing=$(comm -23 <(grep -oP '^\s*- alert: \K\w+' "$src/deploy/prometheus/alerts.yml" | sort -u) \
    <(grep -oP '^\s*alertname: \K\w+' "$src/tests/monitoring/alerts_test.yml" | sort -u))
if [ -n "$missing" ]; then
    echo "monitoring_alert_rules: FAIL: no promtool test for: $missing" >&2
    exit 1
fi
# Every alert has a runbook entry in docs/operations.md, and its runbook annotation points
# at it.
for alert in $(grep -oP '^\s*- alert: \K\w+' "$src/deploy/prometheus/alerts.yml"); do
    grep -q "^#### $alert\$" "$src/docs/operations.md" || {
        echo "monitoring_alert_rules: FAIL: docs/operations.md has no runbook entry for $alert" >&2
        exit 1
    }
    grep -q "runbook: \"docs/operations.md#${alert,,}\"" "$src/deploy/prometheus/alerts.yml" || {
        echo "monitoring_alert_rules: FAIL: $alert's runbook annotation does not point at #${alert,,}" >&2
        exit 1
    }
done
cd "$src/tests/monitoring"
promtool test rules alerts_test.yml
