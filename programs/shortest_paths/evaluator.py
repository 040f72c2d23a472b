"""Trusted evaluator for shortest_paths: one objective per test, each right only if exact and within its time limit.

Only the inputs go to the candidate's child, one test at a time (sandbox.call_each); the sandbox times each
call from this side and stops it at its limit, so the candidate cannot fake its time. The expected distances
are computed here by a reference Dijkstra and never leave this process.
"""

import heapq
import random
from typing import Any

from evolve.evaluator_api import (
    EvaluationResult,
    Sandbox,
    SandboxResult,
    call_failure,
    fail_unless_any_ok,
    join_feedback,
)

FUNCTION = "shortest_paths"
SMALL_LIMIT_S = 1.0
BIG_LIMIT_S = 1.0  # the measured time includes sending up to 100,000 edges and back 50,000 distances (about 0.1 s)
G = 10**9

Graph = tuple[int, list[list[int]], int]  # n, edges [u, v, w], source

# ([n, edges, source] given in full | generate spec [kind, seed, sizes...], time limit in seconds)
TESTS: list[tuple[list[Any], float]] = [
    ([1, [], 0], SMALL_LIMIT_S),
    ([3, [], 1], SMALL_LIMIT_S),
    ([4, [[0, 1, 4], [1, 2, 1], [2, 3, 7]], 0], SMALL_LIMIT_S),
    ([3, [[0, 1, 10], [0, 2, 1], [2, 1, 2]], 0], SMALL_LIMIT_S),
    ([2, [[1, 0, 5]], 0], SMALL_LIMIT_S),
    ([3, [[0, 1, 5], [0, 1, 2], [1, 1, 0], [1, 2, 0]], 0], SMALL_LIMIT_S),
    ([4, [[0, 1, 0], [1, 2, 0], [2, 0, 0], [2, 3, 3]], 1], SMALL_LIMIT_S),
    ([5, [[0, 1, 10], [0, 3, 5], [1, 2, 1], [1, 3, 2], [3, 1, 3], [3, 2, 9], [3, 4, 2], [2, 4, 4], [4, 2, 6],
          [4, 0, 7]], 0], SMALL_LIMIT_S),
    ([6, [[4, 5, G], [0, 5, 6 * G], [3, 4, G], [2, 3, G], [1, 2, G], [0, 1, G]], 0], SMALL_LIMIT_S),
    ([6, [[3, 4, 2], [4, 5, 2], [3, 5, 5], [0, 3, 1], [1, 2, 1]], 3], SMALL_LIMIT_S),
    (["random", 10, 60, 90, 20, 5], SMALL_LIMIT_S),
    (["random", 11, 500, 2500, 100, 20], SMALL_LIMIT_S),
    (["random", 12, 20_000, 98_000, 10_000, 2000], BIG_LIMIT_S),
    (["chain", 13, 50_000, 50_000], BIG_LIMIT_S),
    (["grid", 14, 158, 158, 100], BIG_LIMIT_S),
    (["two_parts", 15, 40_000, 99_000, G, 1000], BIG_LIMIT_S),
]


def build(spec: list[Any]) -> Graph:
    """The graph of a generated test, source 0; only Random.random() is used, so it is the same on every
    Python version. Each kind lists some edges of its cheapest paths in reverse order, so that a pass of
    Bellman-Ford over the edge list settles one more edge of them only."""
    kind, seed, *sizes = spec
    rng = random.Random(seed)

    def below(high: int) -> int:
        return int(rng.random() * high)

    edges: list[list[int]] = []
    if kind == "random":  # m uniform edges, weights 0..max_w, plus a cheap path 0 -> 1 -> ... -> spine
        n, m, max_w, spine = sizes
        edges = [[below(n), below(n), below(max_w + 1)] for _ in range(m)]
        edges += [[node - 1, node, 1 + below(3)] for node in range(spine, 0, -1)]
    elif kind == "chain":  # 0 -> 1 -> ... -> n-1 (weights 1..100) and heavier shortcuts forward, any weight back
        n, extra = sizes
        edges = [[node, node + 1, 1 + below(100)] for node in range(n - 2, -1, -1)]
        for _ in range(extra):
            u, v = below(n), below(n)
            edges.append([u, v, 100 * (v - u) + 1 + below(100)] if u < v else [u, v, below(1000)])
    elif kind == "grid":  # rows x cols, an edge each way between neighbours (weights 1..max_w), nodes listed last first
        rows, cols, max_w = sizes
        n = rows * cols
        for node in range(n - 1, -1, -1):
            row, col = divmod(node, cols)
            for other_row, other_col in ((row, col + 1), (row + 1, col), (row, col - 1), (row - 1, col)):
                if 0 <= other_row < rows and 0 <= other_col < cols:
                    edges.append([node, other_row * cols + other_col, 1 + below(max_w)])
    elif kind == "two_parts":  # source's half A = [0, n/2) and B; edges within A, within B and from B into A only
        n, m, max_w, spine = sizes
        half = n // 2
        for _ in range(m // 2):
            edges.append([below(half), below(half), below(max_w + 1)])
        for _ in range(m // 4):
            edges.append([half + below(n - half), half + below(n - half), below(max_w + 1)])
            edges.append([half + below(n - half), below(half), below(max_w + 1)])
        edges += [[node - 1, node, 1 + below(10)] for node in range(spine, 0, -1)]
    else:
        raise ValueError(f"unknown test kind {kind!r}")
    return n, edges, 0


def is_generated(given: list[Any]) -> bool:
    return isinstance(given[0], str)


def reference_distances(n: int, edges: list[list[int]], source: int) -> list[int]:
    """Dijkstra with a binary heap; -1 for a node the source cannot reach."""
    adjacency: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for u, v, w in edges:
        adjacency[u].append((v, w))
    distance: list[int] = [-1] * n
    distance[source] = 0
    heap = [(0, source)]
    while heap:
        d, u = heapq.heappop(heap)
        if d > distance[u]:
            continue
        for v, w in adjacency[u]:
            if distance[v] < 0 or d + w < distance[v]:
                distance[v] = d + w
                heapq.heappush(heap, (d + w, v))
    return distance


def label(given: list[Any], graph: Graph) -> str:
    n, edges, source = graph
    if is_generated(given):
        return f"shortest_paths(<{given[0]} graph, {n:,} nodes, {len(edges):,} edges>, {source})"
    text = f"shortest_paths({n}, {edges!r}, {source})"
    return text if len(text) <= 70 else f"shortest_paths({n}, <{len(edges)} edges>, {source})"


def distances_problem(value: Any, n: int) -> str | None:
    """What is wrong with the returned value as a list of n ints, None when nothing (a tuple or numpy array
    arrives as a list and numpy integers as ints; a bool is not an int)."""
    if type(value) is not list:
        return f"returned {type(value).__name__}, not a list of {n} ints"
    if len(value) != n:
        return f"returned {len(value)} distances for {n} nodes"
    for node, distance in enumerate(value):
        if type(distance) is not int:
            return f"returned {type(distance).__name__} {distance!r} for node {node}, not int"[:200]
    return None


def failure_line(name: str, given: list[Any], graph: Graph, expected: list[int], run: SandboxResult,
                 limit_s: float) -> str | None:
    """Why the test fails, in one short line; None when it passes. It shows what the candidate returned, never
    the expected distances (the policy could hard-code them)."""
    call = label(given, graph)
    failure = call_failure(f"{name}: {call}", run, limit_s)
    if failure is not None:
        return failure
    problem = distances_problem(run.value, graph[0])
    if problem is not None:
        return f"{name}: {call} {problem}"
    output: list[int] = run.value
    if output == expected:
        return None
    node = next(node for node, (want, got) in enumerate(zip(expected, output, strict=True)) if want != got)
    if not is_generated(given) and len(repr(output)) <= 40:
        return f"{name}: {call} got {output!r}, which is wrong"
    return f"{name}: {call} wrong distance for node {node} (got {output[node]})"


def evaluate(program_path: str, sandbox: Sandbox) -> EvaluationResult:
    graphs: list[Graph] = [build(given) if is_generated(given) else (given[0], given[1], given[2])
                           for given, _ in TESTS]
    runs = fail_unless_any_ok(sandbox.call_each(program_path, FUNCTION, [list(graph) for graph in graphs],
                                                [limit_s for _, limit_s in TESTS]))
    scores, failures = {}, []
    for number, ((given, limit_s), graph, run) in enumerate(zip(TESTS, graphs, runs, strict=True)):
        name = f"test_{number:02d}"
        failure = failure_line(name, given, graph, reference_distances(*graph), run, limit_s)
        scores[name] = 0.0 if failure else 1.0
        if failure:
            failures.append(failure)
    return EvaluationResult(scores=scores, artifacts={"feedback": join_feedback(failures)})
