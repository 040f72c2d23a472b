def solve(x):
    while True:
        pass
