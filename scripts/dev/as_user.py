"""Run a command as an unprivileged user, with this interpreter and repository readable to it: for the tests that
check the sandbox as a normal user on a machine where everything was installed as root (under a /root of mode 700).

As root: a private mount namespace in which the folders holding the interpreter, its packages and the repository
are made reachable by any uid (evolve/sandbox/_isolation.expose, as the sandbox does for its private uid), then
the user's uid and gid, HOME in a fresh temporary folder, and the command. Nothing changes outside the namespace.

    .venv/bin/python scripts/dev/as_user.py USER -- COMMAND [ARGS...]
"""

from __future__ import annotations

import ctypes
import os
import pwd
import site
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from evolve.sandbox import _isolation  # noqa: E402

_CLONE_NEWNS, _MS_REC, _MS_PRIVATE = 0x00020000, 1 << 14, 1 << 18


def main() -> None:
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit("usage: as_user.py USER -- COMMAND [ARGS...]")
    if os.geteuid() != 0:
        sys.exit("as_user.py: must run as root")
    try:
        user = pwd.getpwnam(sys.argv[1])
    except KeyError:
        sys.exit(f"as_user.py: no user {sys.argv[1]!r} (create it: useradd --system {sys.argv[1]})")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNS) != 0 or libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        sys.exit(f"as_user.py: no mount namespace ({os.strerror(ctypes.get_errno())})")
    folders = {sys.prefix, sys.base_prefix, os.path.dirname(os.__file__), *site.getsitepackages(), str(ROOT)}
    _isolation.expose(libc, sorted(folder for folder in folders if os.path.isdir(folder)))
    home = tempfile.mkdtemp(prefix="evolve-as-user-")
    os.chown(home, user.pw_uid, user.pw_gid)
    os.setgroups([])
    os.setgid(user.pw_gid)
    os.setuid(user.pw_uid)
    environment = {**os.environ, "HOME": home, "USER": user.pw_name, "LOGNAME": user.pw_name,
                   "PYTHONDONTWRITEBYTECODE": "1"}
    os.execvpe(sys.argv[3], sys.argv[3:], environment)


if __name__ == "__main__":
    main()
