#!/usr/bin/env bash
# Runs the whole test suite, the real SmolLM2 end-to-end tests and the headless-Chromium report test included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_browser.sh
bash scripts/install_postgres.sh
exec .venv/bin/python -m pytest -q "$@"
