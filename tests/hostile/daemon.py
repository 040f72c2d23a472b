import os
import signal


def solve(marker):
    """Double fork and setsid, the classic daemon: it ignores SIGTERM, leaves the directory and becomes
    `sleep MARKER` (the host looks for that command line); returns once the exec is done."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.setsid()
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # kept across exec
            os.chdir("/")
            os.close(read_end)
            os.execv("/bin/sleep", ["sleep", marker])  # the pipe is close-on-exec
        os._exit(0)
    os.close(write_end)
    os.waitpid(child, 0)
    return {"sleeping": os.read(read_end, 1) == b""}
