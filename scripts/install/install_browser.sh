#!/usr/bin/env bash
# Installs Debian's Chromium for the HTML report tests (driven through the playwright package, which
# scripts/install.sh installs with the dev extras; playwright's own browser download is never used).
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "install_browser: no /usr/bin/chromium and cannot apt-get it here; the browser tests will be skipped" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq chromium >/dev/null
echo "installed $(/usr/bin/chromium --version)"
