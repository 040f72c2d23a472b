"""The experiment report's Evolved instructions section (HTML and terminal): an arm whose cells evolved their system instruction gets one
row per instruction, with its text, pooled over the arm's cells; arms without prompt evolution get none. The cell
runs through the real controller against a scripted policy on a loopback OpenAI-compatible endpoint, into a real
store."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

from rich.console import Console

from evolve.config import PromptEvolutionSection
from evolve.engine.controller import Controller
from evolve.engine.experiment_spec import load_experiment
from evolve.instruction_texts import TEMPLATE_SYSTEM, Instruction
from evolve.policies.factory import open_policies
from evolve.problems.problem import load_problem
from evolve.report.html import report_html
from evolve.report.results import collect
from evolve.report.terminal import render_report
from evolve.store.program_store import ProgramStore
from tests.scripted_policy_server import ScriptedPolicyServer, number_problem

EXPERIMENT = """\
problems = ["number"]
seeds = [5]
iterations = 16
[run]
programs_dir = "{programs}"
concurrency = 1
eval_workers = 1
[[policies]]
name = "climber"
backend = "openai"
url = "{url}"
prefill = false
retries = 0
"""


def test_the_experiment_report_shows_each_evolved_instruction_with_its_text(tmp_path: Path) -> None:
    number_problem(tmp_path / "programs")
    with ScriptedPolicyServer("climber") as server:
        path = tmp_path / "evolving.toml"
        path.write_text(EXPERIMENT.replace("{programs}", str(tmp_path / "programs")).replace("{url}", server.url))
        spec = load_experiment(path)
        store = ProgramStore(spec.db)
        store.save_experiment(spec.name, spec.model_dump_json())
        evolution = PromptEvolutionSection(enabled=True, population=3, replace_every=4, min_uses=2)
        config = spec.cell_config("number", "climber", 5).model_copy(update={"prompt_evolution": evolution})
        run_id = store.create_run(config.run.name, "number", "climber", 5, config.model_dump_json(), 16,
                                  experiment=spec.name)
        with open_policies(config.ensemble_policies()) as policies:
            asyncio.run(Controller(config, load_problem("number", tmp_path / "programs"), store, policies,
                                   run_id).run())
    results = collect(ProgramStore(spec.db, mode="read"), spec, samples=200)
    (arm,) = results.instructions
    assert arm.policy == "climber" and arm.runs == 1
    assert sum(row.iterations for row in arm.rows) == 16 and len(arm.rows) > 3  # the population changed
    page = report_html(results)
    assert "<h2>Evolved instructions</h2>" in page
    for row in arm.rows:
        assert row.text == Instruction.from_key(row.name).text(TEMPLATE_SYSTEM)
        assert f'data-instruction="{row.name}"' in page
    assert "the template&#x27;s own system message" in page  # lead 0, escaped
    console = Console(record=True, width=400)
    render_report(results, console)
    shown = console.export_text()
    assert "evolved instructions of climber, pooled over its 1 runs" in shown
    assert all(row.text in shown for row in arm.rows)
    assert "Evolved instructions" not in report_html(collect(ProgramStore(spec.db, mode="read"),
                                                             spec.model_copy(update={"name": "other"}), samples=200))


def test_no_report_module_imports_search() -> None:
    """The report reads instruction texts from evolve/instruction_texts.py, never from search/ (the layering in
    docs/ARCHITECTURE.md)."""
    report = Path(__file__).resolve().parents[1] / "evolve" / "report"
    offenders = []
    for module in sorted(report.glob("*.py")):
        for node in ast.walk(ast.parse(module.read_text())):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{module.name}: {name}" for name in names if name.startswith("evolve.search")]
    assert offenders == []
