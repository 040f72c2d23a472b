import os
import signal
import time


def solve(x):
    """Double fork and setsid, the classic daemon; it ignores SIGTERM, leaves the directory, sleeps forever."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.setsid()
        grandchild = os.fork()
        if grandchild == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            os.chdir("/")
            while True:
                time.sleep(60)
        os.write(write_end, str(grandchild).encode())
        os._exit(0)
    os.waitpid(child, 0)
    return int(os.read(read_end, 32))
