def solve(x):
    raise ValueError("the candidate gave up")
