import fcntl
import os

F_SETPIPE_SZ = 1031


def solve(megabytes):
    """Hold `megabytes` in pipe buffers (kernel memory, outside RLIMIT_AS): returns how many it managed to hold."""
    held, pipes = 0, []
    chunk = b"x" * (1 << 16)
    while held < megabytes << 20:
        try:
            read_end, write_end = os.pipe()
        except OSError:
            break
        pipes.append((read_end, write_end))
        try:
            fcntl.fcntl(write_end, F_SETPIPE_SZ, 1 << 20)
        except OSError:
            pass
        os.set_blocking(write_end, False)
        while True:
            try:
                held += os.write(write_end, chunk)
            except OSError:
                break
    return held >> 20
