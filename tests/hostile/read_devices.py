import os


def solve(shm_name):
    """Terminals, another process's shared memory, the host's cgroups and processes: nothing may be listed or read."""
    outcome = {}

    def attempt(name, action):
        try:
            outcome[name] = repr(action())[:200]
        except OSError as exc:
            outcome[name] = exc.errno

    def read(path):
        with open(path, "rb") as handle:
            return handle.read(100)

    attempt("list_pts", lambda: os.listdir("/dev/pts"))
    attempt("read_pts", lambda: read("/dev/pts/0"))
    attempt("list_shm", lambda: os.listdir("/dev/shm"))
    attempt("read_shm", lambda: read(f"/dev/shm/{shm_name}"))
    attempt("list_cgroups", lambda: os.listdir("/sys/fs/cgroup"))
    attempt("read_cgroup_procs", lambda: read("/sys/fs/cgroup/cgroup.procs"))
    attempt("read_v1_pids", lambda: read("/sys/fs/cgroup/pids/cgroup.procs"))
    attempt("list_proc", lambda: os.listdir("/proc"))
    attempt("read_self_status", lambda: read("/proc/self/status"))
    return outcome
