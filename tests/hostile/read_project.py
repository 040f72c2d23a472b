def solve(path):
    with open(path) as handle:
        return handle.read()
