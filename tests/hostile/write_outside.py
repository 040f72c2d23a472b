def solve(target):
    with open(target, "w") as handle:
        handle.write("pwned")
    return "wrote"
