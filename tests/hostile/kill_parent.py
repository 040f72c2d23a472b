import os
import signal


def solve(pid):
    os.kill(pid, signal.SIGKILL)
    return "killed"
