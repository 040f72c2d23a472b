import ctypes
import os

# x86_64 and aarch64 numbers of calls the os module does not wrap
NUMBERS = {
    "x86_64": {"mount": 165, "unshare": 272, "setns": 308, "keyctl": 250, "add_key": 248, "bpf": 321,
               "perf_event_open": 298, "userfaultfd": 323, "ptrace": 101, "clone": 56, "process_vm_readv": 310},
    "aarch64": {"mount": 40, "unshare": 97, "setns": 268, "keyctl": 219, "add_key": 217, "bpf": 280,
                "perf_event_open": 241, "userfaultfd": 282, "ptrace": 117, "clone": 220, "process_vm_readv": 270},
}
CLONE_NEWUSER, CLONE_NEWNS, SIGCHLD = 0x10000000, 0x00020000, 17


def solve(x):
    """Every call here widens what a candidate can reach: each must fail with EPERM. Returns name -> errno
    (0 where the call succeeded)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    numbers = NUMBERS[os.uname().machine]
    outcome = {}

    def call(name, *args):
        ctypes.set_errno(0)
        result = libc.syscall(numbers[name], *(ctypes.c_long(arg) for arg in args))
        if result == 0 and name == "clone":  # the clone happened: the new process must not go on as this one
            os._exit(0)
        outcome[name] = 0 if result >= 0 else ctypes.get_errno()

    call("mount", 0, 0, 0, 0, 0)
    call("unshare", CLONE_NEWUSER)
    call("setns", 0, 0)
    call("keyctl", 0, -3, 0)
    call("add_key", 0, 0, 0, 0, -3)
    call("bpf", 5, 0, 0)
    call("perf_event_open", 0, 0, -1, -1, 0)
    call("userfaultfd", 0)
    call("ptrace", 0, 0, 0, 0)
    call("clone", CLONE_NEWUSER | CLONE_NEWNS | SIGCHLD, 0, 0, 0, 0)
    call("process_vm_readv", 1, 0, 0, 0, 0, 0)
    try:
        os.close(os.memfd_create("hoard"))
        outcome["memfd_create"] = 0
    except OSError as exc:
        outcome["memfd_create"] = exc.errno
    return outcome
