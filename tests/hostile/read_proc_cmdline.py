import os


def solve(marker):
    """Look through every process's command line for `marker` (another process's argv)."""
    found, errors = [], []
    try:
        names = os.listdir("/proc")
    except OSError as exc:
        return {"found": [], "errors": [str(exc)]}
    for name in names:
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as handle:
                    if marker.encode() in handle.read():
                        found.append(int(name))
            except OSError as exc:
                errors.append(type(exc).__name__)
    return {"found": found, "errors": sorted(set(errors))}
