#!/usr/bin/env bash
# The browser the page tests drive: Debian's chromium, installed when it is missing.
#
# Playwright (a dev dependency) drives it through executable_path; Playwright's own
# browser download is never used. Needs root for apt-get; without it, says what to run.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "ensure-browser: no chromium on PATH; install it: sudo apt-get install -y chromium" >&2
    exit 1
fi
echo "ensure-browser: installing Debian's chromium (about a minute)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium >/dev/null
command -v chromium >/dev/null
