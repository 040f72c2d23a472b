#!/usr/bin/env bash
# The veRL integration check: tests/test_verl_vpo.py in .venv-verl, where veRL is installed, so that none of it
# skips (in the main venv only the reward-function tests run). Extra arguments go to pytest.
#   bash scripts/install/install_verl.sh && bash scripts/dev/check_verl.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=.venv-verl/bin/python
[ -x $PY ] || { echo "run scripts/install/install_verl.sh first"; exit 2; }
# importorskip would turn a broken veRL install into skips: import it (and our module) first, loudly.
$PY -W ignore -c "import verl, evolve.rl.verl_vpo; print('verl', verl.__version__)"
# -rs lists skips; the filter drops veRL's notes about optional engines (megatron, veomni, ...) it cannot find.
exec $PY -m pytest tests/test_verl_vpo.py -q -rs -p no:cacheprovider -W "ignore::UserWarning:verl.workers.engine" "$@"
