import os
import resource


def solve(pid):
    """Another process's limits, priority and CPUs (a host process named by pid, and its own parent), and raising its
    own limits; reading its own limits must keep working."""
    outcome = {"pid": os.getpid(), "parent": os.getppid()}

    def attempt(name, action):
        try:
            action()
            outcome[name] = "done"
        except OSError as exc:
            outcome[name] = exc.errno
        except ValueError as exc:  # the resource module's word for EPERM
            outcome[name] = str(exc)

    for target, who in (("host", pid), ("parent", os.getppid())):
        attempt(f"prlimit_{target}", lambda who=who: resource.prlimit(who, resource.RLIMIT_NOFILE, (3, 3)))
        attempt(f"prlimit_cpu_{target}", lambda who=who: resource.prlimit(who, resource.RLIMIT_CPU, (1, 1)))
        attempt(f"read_limits_{target}", lambda who=who: resource.prlimit(who, resource.RLIMIT_NOFILE))
        attempt(f"setpriority_{target}", lambda who=who: os.setpriority(os.PRIO_PROCESS, who, 19))
        attempt(f"affinity_{target}", lambda who=who: os.sched_setaffinity(who, {0}))
        attempt(f"kill_{target}", lambda who=who: os.kill(who, 9))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    outcome["own_limits_readable"] = soft > 0
    attempt("raise_own", lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard)))
    attempt("lower_own", lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)))
    return outcome
