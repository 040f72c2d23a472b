import sys


def solve(x):
    line = "x" * 1_000_000 + "\n"
    for _ in range(500):
        sys.stdout.write(line)
    return 1
