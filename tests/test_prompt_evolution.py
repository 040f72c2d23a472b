"""Prompt evolution: a population of system instructions, each iteration's recorded with it and sent to the policy,
scored by the gain of its iterations, the weakest replaced by a mutant of the strongest, and the same population
rebuilt on resume. A scripted policy answers over a real OpenAI-compatible endpoint on loopback."""

from __future__ import annotations

import asyncio
import io
import random
import sqlite3
from pathlib import Path

from rich.console import Console

from evolve.config import PromptEvolutionSection, RunConfig, parse_config
from evolve.engine.controller import Controller
from evolve.engine.run_driver import run_evolution
from evolve.instruction_texts import TEMPLATE_SYSTEM
from evolve.policies.factory import open_policies
from evolve.problems.problem import load_problem
from evolve.report.run_summary import render_run, run_summary_dict
from evolve.search.instructions import (
    BASE_KEY,
    HINTS,
    LEADS,
    MAX_HINTS,
    Instruction,
    InstructionPopulation,
    mutate,
    with_instruction,
)
from evolve.search.prompt_templates import load_template
from evolve.search.prompts import Prompt
from evolve.seeds import request_seed
from evolve.store.program_store import ProgramStore
from tests.scripted_policy_server import ScriptedPolicyServer, number_problem

EVOLUTION = {"enabled": True, "population": 3, "replace_every": 4, "min_uses": 2}


def evolving_config(tmp_path: Path, server: ScriptedPolicyServer, iterations: int) -> RunConfig:
    number_problem(tmp_path / "programs")
    return parse_config({"run": {"problem": "number", "programs_dir": str(tmp_path / "programs"),
                                 "iterations": iterations, "db": str(tmp_path / "run.db"), "concurrency": 1,
                                 "eval_workers": 1, "seed": 7},
                         "policy": {"backend": "openai", "name": "climber", "url": server.url, "prefill": False,
                                    "retries": 0},
                         "prompt_evolution": EVOLUTION})


def test_each_iteration_sends_and_records_its_instruction_and_the_report_splits_by_it(tmp_path: Path) -> None:
    with ScriptedPolicyServer("climber") as server:
        outcome = run_evolution(evolving_config(tmp_path, server, 20))
    with sqlite3.connect(tmp_path / "run.db") as connection:
        variants = dict(connection.execute("SELECT DISTINCT iteration, prompt_variant FROM attempts "
                                           "WHERE iteration >= 1").fetchall())
        assert connection.execute("SELECT count(*) FROM attempts WHERE iteration >= 1 AND prompt_variant IS NULL"
                                  ).fetchone() == (0,)
    assert sorted(variants) == list(range(1, 21))
    assert len(set(variants.values())) > 3  # replacements brought new instructions
    iteration_of = {request_seed(7, iteration, 0): iteration for iteration in range(1, 21)}
    systems = {iteration_of[body["seed"]]: body["messages"][0]["content"] for body in server.requests}
    original = next(systems[i] for i, key in variants.items() if key == BASE_KEY)
    assert original.startswith("You are an expert Python programmer")
    for iteration, key in variants.items():
        assert systems[iteration] == Instruction.from_key(key).text(original)
    store = ProgramStore(str(tmp_path / "run.db"), mode="read")
    rows = run_summary_dict(store, outcome.run_id)["by_instruction"]
    assert {row["name"] for row in rows} == set(variants.values())
    assert sum(row["iterations"] for row in rows) == 20
    for row in rows:  # each key shown with the text it stands for, lead 0 as the template's own message
        instruction = Instruction.from_key(row["name"])
        assert row["text"] == instruction.text(TEMPLATE_SYSTEM)
        assert all(HINTS[hint] in row["text"] for hint in instruction.hints)
        assert row["mean_gain"] >= 0.0
    assert sum(row["mean_gain"] * row["iterations"] for row in rows) > 0  # the climber improves now and then
    shown = io.StringIO()
    render_run(store, outcome.run_id, Console(file=shown, width=400))
    assert "by evolved instruction" in shown.getvalue() and "mean gain" in shown.getvalue()
    lines = shown.getvalue().splitlines()
    for row in rows:
        assert any(row["name"] in line and row["text"] in line for line in lines), row["name"]


def test_a_resumed_population_is_the_one_the_writing_process_held(tmp_path: Path) -> None:
    with ScriptedPolicyServer("climber") as server:
        config = evolving_config(tmp_path, server, 18)
        problem = load_problem("number", tmp_path / "programs")
        store = ProgramStore(config.run.db)
        run_id = store.create_run("r", "number", "climber", 7, config.model_dump_json(), 18)
        with open_policies(config.ensemble_policies()) as policies:
            first = Controller(config, problem, store, policies, run_id)
            asyncio.run(first.run())
            resumed = Controller(config, problem, ProgramStore(config.run.db, mode="existing"), policies, run_id)
            assert resumed.restore()
    held, rebuilt = first.choices.instructions, resumed.choices.instructions
    assert held is not None and rebuilt is not None
    assert (rebuilt.alive, rebuilt.generations, rebuilt.committed) == (held.alive, held.generations, held.committed)
    assert held.generations > 2  # the population changed during the run
    assert rebuilt.bandit.stats == held.bandit.stats
    assert [rebuilt.choose(i) for i in range(19, 40)] == [held.choose(i) for i in range(19, 40)]


def test_mutations_stay_in_the_instruction_space_and_keys_name_them() -> None:
    rng = random.Random(3)
    instruction = Instruction.from_key(BASE_KEY)
    seen = set()
    for _ in range(300):
        child = mutate(instruction, rng)
        assert child != instruction
        assert 0 <= child.lead < len(LEADS) and len(child.hints) <= MAX_HINTS
        assert all(0 <= hint < len(HINTS) for hint in child.hints) and list(child.hints) == sorted(set(child.hints))
        assert Instruction.from_key(child.key) == child
        seen.add(child.key)
        instruction = child
    assert len(seen) > 30


def test_the_weakest_tried_instruction_is_replaced_by_a_mutant_of_the_strongest() -> None:
    population = InstructionPopulation(PromptEvolutionSection(enabled=True, population=3, replace_every=6,
                                                              min_uses=2), seed=1)
    strong, weak, middling = population.alive
    for key, gain in ((strong, 0.5), (weak, 0.0), (middling, 0.1)) * 2:
        population.record(key, gain)
    assert weak not in population.alive and strong in population.alive and middling in population.alive
    assert len(set(population.alive)) == 3
    newcomer = next(key for key in population.alive if key not in (strong, middling))
    parent, child = Instruction.from_key(strong), Instruction.from_key(newcomer)
    assert child.lead != parent.lead or abs(len(child.hints) - len(parent.hints)) <= 1


def test_an_untried_or_tied_population_is_left_as_it_is() -> None:
    population = InstructionPopulation(PromptEvolutionSection(enabled=True, population=2, replace_every=2,
                                                              min_uses=3), seed=1)
    before = list(population.alive)
    for key in before:
        population.record(key, 1.0)
    assert population.alive == before  # tried fewer than min_uses times


def test_the_instruction_replaces_the_system_message_and_the_completion_text() -> None:
    template = load_template("default")
    prompt = Prompt([{"role": "system", "content": "Be good."}, {"role": "user", "content": "x = 1"}], "x =",
                    ("<|im_end|>",), 32)
    key = "L1+h0+h2"
    changed = with_instruction(prompt, key, template, "completions")
    assert changed.messages[0]["content"] == f"{LEADS[1]} {HINTS[0]} {HINTS[2]}"
    assert changed.messages[1] == prompt.messages[1] and prompt.messages[0]["content"] == "Be good."
    assert changed.text is not None and LEADS[1] in changed.text and changed.text.endswith("x =")
    assert with_instruction(prompt, "L0+h3", template, "chat").messages[0]["content"] == f"Be good. {HINTS[3]}"
