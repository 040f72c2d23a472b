#!/usr/bin/env bash
# Runs the whole test suite, the real SmolLM2 end-to-end test included.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m pytest -q "$@"
