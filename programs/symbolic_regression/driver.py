"""Runs inside the sandbox: the candidate's f at each point as a float, None where it raises. The values go back
raw: whether each is a finite number is judged by the evaluator, outside the candidate's process, since anything
checked here (math.isfinite, float) the candidate can replace."""


def value_at(f, x):
    try:
        return float(f(x))
    except (ArithmeticError, ValueError, TypeError):  # a failure at one point costs that point's region
        return None


def drive(candidate, xs):
    f = getattr(candidate, "f", None)
    if not callable(f):
        raise TypeError("the program defines no function f(x)")
    return [value_at(f, x) for x in xs]
