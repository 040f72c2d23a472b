"""The package map of docs/ARCHITECTURE.md, read from the real imports: every import points down the layers (or within
its own package), siblings of a layer do not import each other, and no module imports itself back in a cycle."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

EVOLVE = Path(__file__).resolve().parents[1] / "evolve"

# bottom up: a unit may import units of lower layers and its own modules, nothing else. A unit is a subpackage of
# evolve/ or a top-level module; siblings in one layer stay independent of each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors",),
    ("records", "seeds", "toml_files", "program_format", "stats", "instruction_texts", "stop_signals", "interpreters",
     "ports"),
    ("policy_config",),
    ("config",),
    ("sandbox",),
    ("evaluator_api",),
    ("store",),
    ("problems",),
    ("search",),
    ("policies",),
    ("engine",),
    ("rl", "report"),
    ("cluster",),
    ("study", "serve"),
    ("api",),
    ("__init__",),  # `import evolve`: the public names, each loaded from its module on first use
    ("cli",),
    ("__main__",),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(EVOLVE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit_of(module: str) -> str:
    """'evolve.engine.controller' -> 'engine'; 'evolve.api' -> 'api'; the package itself -> '__init__'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports_of(path: Path) -> set[str]:
    """Every evolve module a file imports at any depth (function-local and TYPE_CHECKING imports included);
    `from evolve.a import b` is the module evolve.a.b when there is one, else evolve.a."""
    known = all_modules()
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & set(known)
            names.update(submodules or {node.module})
    return {name for name in names if name == "evolve" or name.startswith("evolve.")}


@functools.cache
def all_modules() -> dict[str, Path]:
    return {module_name(path): path for path in EVOLVE.rglob("*.py")}


def test_every_unit_of_the_package_has_its_place_in_the_map() -> None:
    units = {unit_of(name) for name in all_modules()}
    placed = {unit for layer in LAYERS for unit in layer}
    assert units - placed == set(), "a new subpackage or module needs its layer in LAYERS (and ARCHITECTURE.md)"


def test_imports_point_down_the_layers_and_never_sideways() -> None:
    level = {unit: index for index, layer in enumerate(LAYERS) for unit in layer}
    against: list[str] = []
    for name, path in sorted(all_modules().items()):
        source = unit_of(name)
        for target in sorted(imports_of(path)):
            unit = unit_of(target)
            if unit != source and level[unit] >= level[source]:
                against.append(f"{name} imports {target} ({unit} is not below {source})")
    assert against == []


def test_the_sandbox_imports_nothing_of_evolve() -> None:
    found = {name: imports_of(path) for name, path in all_modules().items() if unit_of(name) == "sandbox"}
    assert len(found) > 5
    assert {name: sorted(i for i in names if not i.startswith("evolve.sandbox")) for name, names in found.items()
            if any(not i.startswith("evolve.sandbox") for i in names)} == {}


def test_the_api_and_the_engine_import_nothing_from_the_command_line() -> None:
    modules = all_modules()
    offenders = {name: sorted(i for i in imports_of(path) if i.startswith("evolve.cli"))
                 for name, path in modules.items() if unit_of(name) != "cli" and name != "evolve.__main__"}
    assert {name: found for name, found in offenders.items() if found} == {}
    assert "evolve.cli.main" in imports_of(modules["evolve.__main__"])  # the check reads real imports


def test_no_module_imports_itself_back_through_a_cycle() -> None:
    modules = all_modules()
    graph = {name: {target for target in imports_of(path) if target in modules and target != name}
             for name, path in modules.items()}
    cycles: list[list[str]] = []
    visiting: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> None:
        if node in done:
            return
        if node in visiting:
            cycles.append(visiting[visiting.index(node):] + [node])
            return
        visiting.append(node)
        for target in sorted(graph[node]):
            visit(target)
        visiting.pop()
        done.add(node)

    for name in sorted(graph):
        visit(name)
    assert cycles == []
