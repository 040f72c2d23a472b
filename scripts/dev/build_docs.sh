#!/usr/bin/env bash
# Builds the user guide into site/ with `mkdocs build --strict` (any warning fails), after installing the pinned
# documentation packages into .venv when they are missing. Run `bash scripts/install.sh` first on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
PACKAGES=(mkdocs==1.6.1 mkdocs-material==9.8.2 mkdocstrings==1.0.8 mkdocstrings-python==2.0.11)
if ! .venv/bin/python - "${PACKAGES[@]}" <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version

for pin in sys.argv[1:]:
    name, wanted = pin.split("==")
    try:
        installed = version(name)
    except PackageNotFoundError:
        sys.exit(1)
    if installed != wanted:
        sys.exit(1)
PY
then
    .venv/bin/pip install --quiet "${PACKAGES[@]}"
fi
export NO_MKDOCS_2_WARNING=1  # Material's banner about MkDocs 2.0, not a problem of these pages
exec .venv/bin/mkdocs build --strict -d site "$@"  # not --quiet: it hides the warnings strict counts
