"""The trusted interpreters the engine starts import the installed evolve, never a folder `evolve/` planted in the
working directory (which would run outside the sandbox)."""

from __future__ import annotations

import ast
import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from evolve.interpreters import module_command
from evolve.problems.evaluator_pool import EvaluatorPool
from evolve.problems.problem import load_problem

ROOT = Path(__file__).resolve().parents[1]
EVOLVE_BIN = Path(sys.executable).with_name("evolve")


@pytest.fixture
def planted(tmp_path: Path) -> tuple[Path, Path]:
    """A working directory holding a package `evolve` whose import leaves a marker file; (folder, marker)."""
    folder = tmp_path / "workdir"
    marker = tmp_path / "planted-code-ran"
    (folder / "evolve").mkdir(parents=True)
    (folder / "evolve" / "__init__.py").write_text(
        f"open({str(marker)!r}, 'a').write('imported\\n')\n")
    return folder, marker


def test_a_module_command_started_in_a_planted_folder_imports_the_installed_package(planted: tuple[Path, Path]) -> None:
    folder, marker = planted
    subprocess.run(module_command("evolve.interpreters"), cwd=folder, capture_output=True, check=True)
    assert not marker.exists()


def test_plain_python_m_would_import_the_planted_package(planted: tuple[Path, Path]) -> None:
    """The attack the safe-path flag stops: without it `python -m evolve...` from that folder runs the planted code."""
    folder, marker = planted
    subprocess.run([sys.executable, "-m", "evolve.interpreters"], cwd=folder, capture_output=True)
    assert marker.exists()


def test_evolve_check_from_a_planted_folder_runs_no_planted_code(planted: tuple[Path, Path]) -> None:
    folder, marker = planted
    checked = subprocess.run([str(EVOLVE_BIN), "check", str(ROOT / "programs" / "fizzbuzz")], cwd=folder,
                             capture_output=True, text=True)
    assert not marker.exists(), "evaluator process imported evolve/ from the working directory"
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_warm_evaluators_started_from_a_planted_folder_run_no_planted_code(
        planted: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    folder, marker = planted
    problem = load_problem(str(ROOT / "programs" / "fizzbuzz"))
    monkeypatch.chdir(folder)

    async def evaluate_twice() -> list[bool]:
        async with EvaluatorPool(2) as pool:
            return [(await pool.evaluate(problem, problem.initial_code)).ok for _ in range(2)]

    assert asyncio.run(evaluate_twice()) == [True, True]
    assert not marker.exists()


def test_no_module_starts_python_minus_m_without_the_safe_path_flag() -> None:
    """Every `sys.executable, "-m", ...` in the package goes through interpreters.module_command."""
    offenders = []
    for path in (ROOT / "evolve").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.List, ast.Tuple, ast.Call)):
                items = node.elts if not isinstance(node, ast.Call) else node.args
                texts = [item.value for item in items if isinstance(item, ast.Constant)]
                executable = any(isinstance(item, ast.Attribute) and item.attr == "executable" for item in items)
                if executable and "-m" in texts and path.name != "interpreters.py":
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_ray_workers_of_a_driver_in_a_planted_folder_import_the_installed_package(
        planted: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    ray = pytest.importorskip("ray")
    from evolve.cluster.ray_cells import connect_ray

    folder, marker = planted
    monkeypatch.chdir(folder)
    connect_ray(None)
    try:
        @ray.remote
        def imported_from() -> str:
            import evolve
            return str(evolve.__file__)

        where = ray.get(imported_from.remote())
    finally:
        ray.shutdown()
    assert not marker.exists()
    assert Path(where).resolve() == (ROOT / "evolve" / "__init__.py").resolve()
