#!/usr/bin/env bash
# Headless Chromium and its WebDriver for the UI test (kinematic_pipeline_tests/e2e/test_ui.py, pytest -m e2e).
# Idempotent: does nothing (0.1 s) when both binaries are already installed. Debian packages only, no
# Chrome-for-Testing download: on a fresh Debian 12 machine, 26 packages, ~130 MB fetched, 440 MB on
# disk, 15 s with apt-get update included (measured: Chromium 156.0.8078.79, 2 cores, Debian mirror).
set -euo pipefail

have() { command -v "$1" >/dev/null 2>&1; }

if have chromium && have chromedriver; then
    echo "install_browser: $(chromium --version 2>/dev/null | head -1) and chromedriver already installed"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

start=$(date +%s)
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends chromium chromium-driver
echo "install_browser: installed $(chromium --version 2>/dev/null | head -1) and" \
    "$(chromedriver --version 2>/dev/null | head -1) in $(($(date +%s) - start)) s"
