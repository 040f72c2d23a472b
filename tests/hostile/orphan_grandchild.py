import os
import subprocess
import sys


def solve(marker):
    """A child that leaves the process group (setsid) and becomes `sleep MARKER`; returns once its exec is done."""
    read_end, write_end = os.pipe()
    code = (f"import os; os.setsid(); os.set_inheritable({write_end}, False); "
            f"os.execv('/bin/sleep', ['sleep', '{marker}'])")
    child = subprocess.Popen([sys.executable, "-c", code], pass_fds=(write_end,))
    os.close(write_end)
    os.read(read_end, 1)  # EOF once execv has replaced the python (or it died)
    try:
        child.wait(timeout=0.3)
        return {"sleeping": False}
    except subprocess.TimeoutExpired:
        return {"sleeping": True}
