def solve(x):
    hoard = []
    while True:
        hoard.append(bytearray(50 * 1024 * 1024))
