#!/usr/bin/env bash
# Runs the whole test suite, the real SmolLM2 end-to-end tests and the headless-Chromium report test included.
# The test files run in parallel (pytest-xdist, one file's tests on one worker: a file's module fixtures are
# built once), in the order tests/conftest.py gives them, the longest first (--no-loadscope-reorder keeps xdist from
# putting the files with the most tests first instead). EVOLVE_TEST_WORKERS sets how many workers (default 4: most
# tests wait on subprocesses, servers and the sandbox more than they compute, so even 2 cores gain from more workers
# than cores; 0 runs them all in this process). Arguments go to pytest: `bash scripts/test.sh tests/test_store.py -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install/install_browser.sh
bash scripts/install/install_postgres.sh
exec .venv/bin/python -m pytest -q -n "${EVOLVE_TEST_WORKERS:-4}" --dist loadfile --no-loadscope-reorder "$@"
