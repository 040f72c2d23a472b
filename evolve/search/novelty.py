"""Novelty filter: children that copy a program already in the population (up to names, comments and docstrings,
or nearly, by MinHash over token shingles) are rejected before they are evaluated.

Two tests, cheapest first. Exact structure: the code is parsed, docstrings are dropped (comments and layout never
reach the AST), and the names bound inside each function (arguments, assigned locals, loop and comprehension
variables) are renamed v0, v1, ... in order of first appearance; two programs with the same normalised AST are the
same program written differently. Near: the normalised code's tokens are cut into shingles of `shingle_size`
tokens, and each program keeps a MinHash signature of `num_perm` values (universal hashes of the shingle hashes,
the minimum per hash); the share of equal signature entries estimates the Jaccard similarity of two programs'
shingle sets, and a child whose estimate with some indexed program reaches `threshold` is a near-duplicate of it.
Constants are kept, so a child that only tunes a number is never an exact-structure duplicate (it may be a near
one: one changed token changes at most `shingle_size` shingles).

The index holds one signature row per accepted program (num_perm x 4 bytes) in a numpy matrix that doubles as it
fills, and a dict of structure hashes; a lookup compares the child's signature with every row at once. With
`in_flight` (config), ChildrenInFlight also compares a child with the accepted children of iterations not yet
committed, the same two tests.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass

import numpy as np

from evolve.config import NoveltySection

_MERSENNE = np.uint64((1 << 61) - 1)
_MAX_HASH = np.uint64((1 << 32) - 1)
_EMPTY = np.uint32(0xFFFFFFFF)


@dataclass(frozen=True)
class NoveltySettings:
    """How near is too near (config.NoveltySection, inside the engine)."""

    threshold: float = 0.95  # estimated Jaccard similarity at or above which a child is a near-duplicate
    shingle_size: int = 5  # tokens per shingle
    num_perm: int = 128  # MinHash signature length
    seed: int = 1  # the hash family; fixed so that a rebuilt index equals the live one


@dataclass(frozen=True)
class NearDuplicate:
    """Why a child was rejected: the indexed program it copies (or the child in flight it copies), and how closely."""

    program_id: int | None  # None: a child not yet committed, of iteration `in_flight_iteration`
    jaccard: float  # 1.0 for an exact-structure duplicate
    same_structure: bool
    in_flight_iteration: int | None = None

    @property
    def reason(self) -> str:
        """The stored failure reason; its head (before ':') groups the rejections in `evolve show`."""
        copied = f"program {self.program_id}" if self.in_flight_iteration is None else \
            f"a child of iteration {self.in_flight_iteration} in flight"
        if self.same_structure:
            return f"same structure: {copied} up to names, comments and docstrings"
        return f"near-duplicate: jaccard {self.jaccard:.2f} with {copied}"


class _CanonicalNames(ast.NodeTransformer):
    """Renames the names each function or lambda binds (v0, v1, ... in order of first appearance); global names,
    attributes, builtins and the functions' own names are kept, since callers and evaluators use them. A nested
    function sees its enclosing function's renamings for the names it does not bind itself."""

    def __init__(self) -> None:
        self._scopes: list[tuple[set[str], dict[str, str]]] = []  # (names bound here, their new names)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
        node.decorator_list = [self.visit(item) for item in node.decorator_list]
        if node.returns is not None:
            node.returns = self.visit(node.returns)
        self._enter(_bound_names(node))
        self._rename_args(node.args)
        node.body = [self.visit(statement) for statement in node.body]
        self._scopes.pop()
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # noqa: N815 - ast.NodeVisitor's naming

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        self._enter(_argument_names(node.args))
        self._rename_args(node.args)
        node.body = self.visit(node.body)
        self._scopes.pop()
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if self._scopes:
            bound, renamed = self._scopes[-1]
            if node.id in renamed or node.id in bound:
                node.id = self._new_name(node.id)
        return node

    def _enter(self, bound: set[str]) -> None:
        outer = self._scopes[-1][1] if self._scopes else {}
        self._scopes.append((bound, {name: new for name, new in outer.items() if name not in bound}))

    def _rename_args(self, args: ast.arguments) -> None:
        for arg in (*args.posonlyargs, *args.args, args.vararg, *args.kwonlyargs, args.kwarg):
            if arg is not None:
                arg.arg = self._new_name(arg.arg)
                arg.annotation = None  # annotations do not change what the program does
        args.defaults = [self.visit(item) for item in args.defaults]
        args.kw_defaults = [self.visit(item) if item is not None else None for item in args.kw_defaults]

    def _new_name(self, name: str) -> str:
        renamed = self._scopes[-1][1]
        if name not in renamed:
            renamed[name] = f"v{len(renamed)}"
        return renamed[name]


def _argument_names(args: ast.arguments) -> set[str]:
    names = {arg.arg for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    return names | {arg.arg for arg in (args.vararg, args.kwarg) if arg is not None}


def _bound_names(node: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Names the function binds itself: arguments and stores in its body (nested functions' own names aside),
    less those declared global or nonlocal."""
    bound = _argument_names(node.args)
    declared: set[str] = set()
    for child in ast.walk(ast.Module(body=node.body, type_ignores=[])):
        if isinstance(child, ast.Name) and isinstance(child.ctx, (ast.Store, ast.Del)):
            bound.add(child.id)
        elif isinstance(child, (ast.Global, ast.Nonlocal)):
            declared.update(child.names)
    return bound - declared


def _strip_docstrings(node: ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> None:
    """Drop the docstrings of the module and of every class and function in it (found through statements only:
    a docstring is the first statement of one of those bodies)."""
    first = node.body[0] if node.body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        node.body = node.body[1:] or [ast.Pass()]
    statements: list[ast.stmt] = list(node.body)
    while statements:
        statement = statements.pop()
        if isinstance(statement, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            _strip_docstrings(statement)
            continue
        for name in ("body", "orelse", "finalbody", "handlers", "cases"):  # compound statements' blocks
            for child in getattr(statement, name, ()):
                statements.extend(child.body if isinstance(child, (ast.ExceptHandler, ast.match_case)) else [child])


def normalised_code(code: str) -> str:
    """The code with docstrings, comments and layout dropped and function-local names renamed canonically; code
    that does not parse is returned as it is."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError):
        return code
    _strip_docstrings(tree)
    try:
        return ast.unparse(_CanonicalNames().visit(tree))
    except RecursionError:
        return code


_TOKEN = re.compile(r"\w+|[^\w\s]")


def code_tokens(code: str) -> list[str]:
    """The code's tokens: runs of word characters (names, numbers, words inside strings) and single other
    characters (operators, brackets, quotes); layout is dropped (normalised_code already laid it out)."""
    return _TOKEN.findall(code)


def shingle_hashes(tokens: list[str], size: int) -> np.ndarray:
    """32-bit hashes of the distinct runs of `size` consecutive tokens (the whole list when it is shorter)."""
    runs = {"\x00".join(tokens[i:i + size]) for i in range(max(1, len(tokens) - size + 1))}
    values = [int.from_bytes(hashlib.blake2b(run.encode(), digest_size=4).digest(), "little") for run in runs]
    return np.array(sorted(values), dtype=np.uint64)


class MinHasher:
    """`num_perm` hash functions (a * x + b) mod (2^61 - 1), cut to 32 bits, drawn once from `seed`."""

    def __init__(self, num_perm: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.a = rng.integers(1, int(_MERSENNE), size=num_perm, dtype=np.uint64)
        self.b = rng.integers(0, int(_MERSENNE), size=num_perm, dtype=np.uint64)

    def signature(self, hashes: np.ndarray) -> np.ndarray:
        """The minimum of each hash function over the shingle hashes (uint32, num_perm values)."""
        if hashes.size == 0:
            return np.full(self.a.size, _EMPTY, dtype=np.uint32)
        with np.errstate(over="ignore"):  # uint64 products wrap, as in datasketch's MinHash
            permuted = (np.outer(hashes, self.a) + self.b) % _MERSENNE & _MAX_HASH
        return permuted.min(axis=0).astype(np.uint32)


class NoveltyIndex:
    """The accepted programs' structure hashes and MinHash signatures; `near_duplicate(code)` before evaluating a
    child, `add(program_id, code)` when a program is accepted (ids added twice are kept once)."""

    def __init__(self, settings: NoveltySettings) -> None:
        self.settings = settings
        self.hasher = MinHasher(settings.num_perm, settings.seed)
        self._structures: dict[str, int] = {}
        self._ids = np.zeros(64, dtype=np.int64)
        self._signatures = np.zeros((64, settings.num_perm), dtype=np.uint32)
        self._size = 0
        self._known: set[int] = set()

    def __len__(self) -> int:
        return self._size

    def fingerprint(self, code: str) -> tuple[str, np.ndarray]:
        """(structure hash, MinHash signature) of the code."""
        normal = normalised_code(code)
        structure = hashlib.sha1(normal.encode()).hexdigest()
        return structure, self.hasher.signature(shingle_hashes(code_tokens(normal), self.settings.shingle_size))

    def add(self, program_id: int, code: str) -> None:
        if program_id in self._known:
            return
        structure, signature = self.fingerprint(code)
        self._known.add(program_id)
        self._structures.setdefault(structure, program_id)
        if self._size == len(self._ids):
            self._ids = np.concatenate([self._ids, np.zeros_like(self._ids)])
            self._signatures = np.concatenate([self._signatures, np.zeros_like(self._signatures)])
        self._ids[self._size] = program_id
        self._signatures[self._size] = signature
        self._size += 1

    def near_duplicate(self, code: str) -> NearDuplicate | None:
        """The indexed program this code copies (same structure first, else the most similar at or above the
        threshold, the oldest among equals); None when the code is new enough."""
        return self.near_duplicate_of(*self.fingerprint(code))

    def near_duplicate_of(self, structure: str, signature: np.ndarray) -> NearDuplicate | None:
        """near_duplicate for a fingerprint already taken."""
        if structure in self._structures:
            return NearDuplicate(self._structures[structure], 1.0, same_structure=True)
        if self._size == 0:
            return None
        similarity = (self._signatures[:self._size] == signature).mean(axis=1)
        best = int(np.argmax(similarity))  # the first (oldest) row among equals
        if similarity[best] >= self.settings.threshold:
            return NearDuplicate(int(self._ids[best]), float(similarity[best]), same_structure=False)
        return None


class ChildrenInFlight:
    """Children the filter accepted whose iteration is not committed yet (being evaluated, or waiting for the other
    requests of their iteration), by iteration: the index holds only committed programs, so without this two
    near-identical children generated at the same time would both be evaluated. `hold` on acceptance, `release`
    once the iteration is committed (its children are then in the index) or dropped."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self._held: list[tuple[int, str, np.ndarray]] = []  # (iteration, structure, signature), oldest first

    def __len__(self) -> int:
        return len(self._held)

    def near_duplicate_of(self, structure: str, signature: np.ndarray) -> NearDuplicate | None:
        """The held child this fingerprint copies (same structure first, else the most similar at or above the
        threshold, the oldest among equals); None when it copies none."""
        for iteration, held_structure, _ in self._held:
            if held_structure == structure:
                return NearDuplicate(None, 1.0, same_structure=True, in_flight_iteration=iteration)
        if not self._held:
            return None
        similarity = (np.stack([held for _, _, held in self._held]) == signature).mean(axis=1)
        best = int(np.argmax(similarity))
        if similarity[best] >= self.threshold:
            return NearDuplicate(None, float(similarity[best]), same_structure=False,
                                 in_flight_iteration=self._held[best][0])
        return None

    def hold(self, iteration: int, structure: str, signature: np.ndarray) -> None:
        self._held.append((iteration, structure, signature))

    def release(self, iteration: int) -> None:
        self._held = [held for held in self._held if held[0] != iteration]


def novelty_index(section: NoveltySection) -> NoveltyIndex | None:
    """An empty index with the run's [novelty] settings; None when the filter is off."""
    if not section.enabled:
        return None
    return NoveltyIndex(NoveltySettings(section.threshold, section.shingle_size, section.num_perm))
