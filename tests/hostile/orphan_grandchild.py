import subprocess
import sys


def solve(x):
    """A grandchild that leaves the process group (setsid) and sleeps; returns once it has left."""
    code = "import os, time; os.setsid(); print(os.getpid(), flush=True); time.sleep(600)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    return int(child.stdout.readline())
