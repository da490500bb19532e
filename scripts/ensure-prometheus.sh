#!/usr/bin/env bash
# Prometheus and promtool for tests/observe: Debian's `prometheus` package, installed when missing.
#
# The tests check /metrics with `promtool check metrics` and let a real Prometheus server
# scrape a daemon on loopback. Needs root for apt-get; without it, says what to run.
# The package's service is not started here (a container has no init to start it).
set -euo pipefail
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "ensure-prometheus: no prometheus/promtool on PATH; install them: sudo apt-get install -y prometheus" >&2
    exit 1
fi
echo "ensure-prometheus: installing Debian's prometheus (server and promtool)" >&2
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d 101: the package may not start its service while it is installed.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod +x "$policy"
    created_policy=1
fi
trap 'if [ "$created_policy" -eq 1 ]; then rm -f "$policy"; fi' EXIT
apt-get update -qq
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
command -v prometheus >/dev/null && command -v promtool >/dev/null
