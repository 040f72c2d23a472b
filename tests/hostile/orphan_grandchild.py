import subprocess
import sys


def solve(x):
    child = subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(600)"])
    return child.pid
