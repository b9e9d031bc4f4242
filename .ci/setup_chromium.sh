#!/usr/bin/env bash
# Headless Chromium for tests/e2e/test_mlflow_ui.py (screenshot of the MLflow runs page).
# Debian package `chromium`; non-interactive and idempotent. Needs root (or sudo) and apt.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  echo "chromium already installed: $(chromium --version 2>/dev/null || echo unknown version)"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "setup_chromium: need root or sudo to apt-get install chromium" >&2; exit 1; }
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
chromium --version
