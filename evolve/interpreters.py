"""The command lines of the trusted Python interpreters the engine starts: each imports only the installed package."""

from __future__ import annotations

import sys

# -P (safe path, Python 3.11+): `python -m MODULE` would otherwise put the working directory first on sys.path, so a
# folder `evolve/` wherever the user runs from (a second checkout, or a file an attacker could write) would be
# imported, outside the sandbox, in place of the installed package.
SAFE_PATH_FLAG = "-P"


def module_command(module: str, *arguments: str) -> list[str]:
    """`python -P -m MODULE ARGUMENTS...` with this process's interpreter: the child sees the same installed
    packages (environment variables such as PYTHONPATH still apply, as the user set them) and never the working
    directory's."""
    return [sys.executable, SAFE_PATH_FLAG, "-m", module, *arguments]
