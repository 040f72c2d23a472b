"""Runs inside the sandbox: packs each instance online with the candidate's priority function."""


def pack(candidate, items, capacity):
    remaining = []  # remaining capacity of each open bin
    assignment = []
    for item in items:
        fits = [index for index, room in enumerate(remaining) if room >= item]
        options = [remaining[index] for index in fits] + [capacity]
        scores = list(candidate.priority(item, options))
        if len(scores) != len(options):
            raise ValueError(f"priority returned {len(scores)} scores for {len(options)} bins")
        choice = max(range(len(options)), key=lambda k: float(scores[k]))
        if choice == len(fits):
            remaining.append(capacity - item)
            assignment.append(len(remaining) - 1)
        else:
            remaining[fits[choice]] -= item
            assignment.append(fits[choice])
    return assignment


def drive(candidate, payload):
    return [pack(candidate, items, payload["capacity"]) for items in payload["instances"]]
