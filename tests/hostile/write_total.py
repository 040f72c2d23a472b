import os


def solve(files):
    """Write `files` files of 4 MiB each, every one under the per-file cap, into its own folder."""
    block = os.urandom(1024 * 1024)
    for index in range(files):
        with open(f"part_{index}.bin", "wb") as handle:
            for _ in range(4):
                handle.write(block)
    return files


def capacity():
    """The size of the filesystem its folder is on."""
    info = os.statvfs(".")
    return info.f_blocks * info.f_frsize
