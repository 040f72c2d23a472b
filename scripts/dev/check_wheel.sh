#!/usr/bin/env bash
# Builds evolve's wheel, installs it into a clean venv and runs the CLI from outside the repository, so a file the
# package reads at run time but the wheel lacks (scaffold, templates) fails here rather than for a user.
#
# The clean venv is made from .venv's interpreter without --system-site-packages; the wheel goes in with --no-deps,
# and the dependencies (torch, transformers, ...) come from .venv's site-packages, appended to sys.path by one .pth
# file. That takes seconds, where installing them (even from pip's cache) copies gigabytes. A plain path line in a
# .pth file does not run the .pth files of the directory it names, so .venv's editable finder for evolve stays off:
# `import evolve` can only find the wheel's copy, which the script asserts.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$(pwd)
PY="$REPO/.venv/bin/python"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
started=$SECONDS

# Build from a copy of the files git sees (tracked or not ignored): a build/ or evolve.egg-info/ left in the
# repository would otherwise hand the wheel files that package-data does not declare. Without build isolation when
# .venv has setuptools, so nothing is downloaded.
mkdir "$WORK/src"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' path; do
        [ -e "$path" ] && printf '%s\0' "$path"
    done | tar -cf - --null -T - | tar -xf - -C "$WORK/src"
else  # a copy without .git: what the build reads, without caches
    tar -cf - --exclude=__pycache__ pyproject.toml README.md evolve | tar -xf - -C "$WORK/src"
fi
ISOLATION=--no-build-isolation
"$PY" -c 'import setuptools, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 68)' 2>/dev/null \
    || ISOLATION=""  # no recent setuptools in .venv (Python >= 3.12 venvs have none): pip fetches it from PyPI
"$PY" -m pip wheel -q --no-deps $ISOLATION -w "$WORK/dist" "$WORK/src" >/dev/null
WHEEL=$(ls "$WORK"/dist/evolve-*.whl)
echo "built $(basename "$WHEEL")"

# Every file of the package's source that is not Python must be in the wheel.
"$PY" - "$WHEEL" "$WORK/src" <<'EOF'
import sys
import zipfile
from pathlib import Path

source = Path(sys.argv[2])
data = {path.relative_to(source).as_posix() for path in (source / "evolve").rglob("*")
        if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts}
in_wheel = set(zipfile.ZipFile(sys.argv[1]).namelist())
missing = sorted(data - in_wheel)
if missing:
    sys.exit(f"check_wheel: the wheel lacks {len(missing)} package data file(s): {', '.join(missing)}")
print(f"wheel holds all {len(data)} package data files")
EOF

"$PY" -m venv --without-pip "$WORK/venv"
VENV_PY="$WORK/venv/bin/python"
VENV_SITE=$("$VENV_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
MAIN_SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$PY" -m pip --python "$VENV_PY" install -q --no-deps "$WHEEL"
echo "$MAIN_SITE" >"$VENV_SITE/zz_evolve_dependencies.pth"

mkdir "$WORK/cwd"
cd "$WORK/cwd"
"$VENV_PY" - "$VENV_SITE" <<'EOF'
import sys
from pathlib import Path

import evolve
from evolve.search.prompt_templates import builtin_templates

where = Path(evolve.__file__).resolve()
if not where.is_relative_to(Path(sys.argv[1]).resolve()):
    sys.exit(f"check_wheel: evolve was imported from {where}, not from the wheel's install")
if "default" not in builtin_templates():
    sys.exit("check_wheel: the installed package has no default prompt template")
print(f"evolve imported from {where.parent}")
EOF
EVOLVE="$WORK/venv/bin/evolve"
"$EVOLVE" new-problem demo
"$EVOLVE" check demo
"$EVOLVE" new-problem demo_io --template io-tests
"$EVOLVE" check demo_io
"$EVOLVE" problems
echo "check_wheel: ok ($((SECONDS - started)) s)"
