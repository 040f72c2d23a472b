import sys

sys.exit(3)


def solve(x):
    return x
