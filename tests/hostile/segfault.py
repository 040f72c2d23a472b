import ctypes


def solve(x):
    return ctypes.string_at(0)
