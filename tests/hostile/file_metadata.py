import os
import stat


def solve(path):
    """What Landlock does not cover: a file's mode (a setuid bit), owner, times and extended attributes, on a file
    outside its folder that it can reach, and a device node or fifo in its own folder."""
    outcome = {}

    def attempt(name, action):
        try:
            action()
            outcome[name] = "done"
        except OSError as exc:
            outcome[name] = exc.errno

    attempt("chmod", lambda: os.chmod(path, 0o4777))
    attempt("chown", lambda: os.chown(path, os.getuid(), os.getgid()))
    attempt("utime", lambda: os.utime(path, (0, 0)))
    attempt("setxattr", lambda: os.setxattr(path, "user.evolve", b"hostile"))
    attempt("removexattr", lambda: os.removexattr(path, "user.kept"))
    attempt("chmod_own_file", lambda: os.chmod("candidate.py", 0o6755))
    attempt("mknod", lambda: os.mknod("fifo", 0o600 | stat.S_IFIFO))
    return outcome
