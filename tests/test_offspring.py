"""engine/offspring.py: completions become children (rewrite, diff, m answers, failures with their reason, each
missing answer recorded), children become scores through one cache (real sandboxed fizzbuzz evaluations), and training never imports the search loop."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from evolve.config import RunConfig
from evolve.engine.controller import Controller
from evolve.engine.offspring import (
    NO_CHANGE,
    ChildScorer,
    SeedProgramError,
    build_child,
    code_key,
    missing_answers,
    offspring,
    require_seed,
)
from evolve.policy_config import HFPolicySection, OpenAIPolicySection
from evolve.problems.problem import Problem, load_problem
from evolve.records import Completion, Evaluation
from evolve.search.prompts import Prompt, PromptOptions
from evolve.store.program_store import ProgramStore

ROOT = Path(__file__).resolve().parents[1]
PARENT = (ROOT / "programs" / "fizzbuzz" / "initial.py").read_text()
CORRECT = ('def fizzbuzz(n: int) -> str:\n    if n % 15 == 0:\n        return "FizzBuzz"\n    if n % 3 == 0:\n'
           '        return "Fizz"\n    if n % 5 == 0:\n        return "Buzz"\n    return str(n)\n')
PARTIAL = 'def fizzbuzz(n: int) -> str:\n    if n % 5 == 0:\n        return "Buzz"\n    return str(n)\n'


@pytest.fixture(scope="module")
def fizzbuzz() -> Problem:
    return load_problem("fizzbuzz", ROOT / "programs")


def tagged(*answers: str) -> str:
    return "Here you go.\n" + "".join(f"<response_{i}>\n{a}</response_{i}>\n" for i, a in enumerate(answers, 1))


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth (function-local imports included), `from a import b` as a and a.b."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_nothing_under_rl_imports_the_search_loop() -> None:
    files = sorted((ROOT / "evolve" / "rl").glob("*.py"))
    assert len(files) > 5
    offenders = {path.name: sorted(name for name in imported_modules(path) if name.startswith("evolve.engine.")
                                   and not name.startswith("evolve.engine.offspring"))
                 for path in files}
    assert {name: found for name, found in offenders.items() if found} == {}
    assert any("evolve.engine.offspring" in imported_modules(path) for path in files)  # the check reads real imports


def test_a_rewrite_answer_replaces_the_block_and_keeps_the_rest() -> None:
    (child,) = offspring(PARENT, CORRECT, PromptOptions())
    assert child.failure is None and child.code is not None and child.answer == CORRECT
    assert '"FizzBuzz"' in child.code and child.code.startswith('"""FizzBuzz:')
    assert "# EVOLVE-BLOCK-START" in child.code and "# EVOLVE-BLOCK-END" in child.code


def test_a_diff_answer_edits_the_block() -> None:
    answer = ("<<<<<<< SEARCH\n    if n % 3 == 0:\n        return \"Fizz\"\n=======\n    if n % 5 == 0:\n"
              "        return \"Buzz\"\n>>>>>>> REPLACE\n")
    (child,) = offspring(PARENT, answer, PromptOptions(edit_format="diff"))
    assert child.code is not None and '"Buzz"' in child.code and '"Fizz"' not in child.code.split('"""', 2)[2]


def test_m_answers_are_split_in_order_and_each_becomes_its_own_child() -> None:
    children = offspring(PARENT, tagged(CORRECT, "x = (", PARTIAL), PromptOptions(answers=3))
    assert [child.answer for child in children] == [CORRECT.strip("\n"), "x = (", PARTIAL.strip("\n")]
    assert [child.code is not None for child in children] == [True, False, True]
    assert children[1].failure and not children[1].unchanged  # the edit's reason is kept for the attempts table


def test_a_malformed_or_unchanged_answer_builds_no_child_and_says_why() -> None:
    broken = build_child(PARENT, "this is prose, not code (", "rewrite")
    assert broken.code is None and broken.failure and broken.failure != NO_CHANGE and not broken.unchanged
    diff_miss = build_child(PARENT, "<<<<<<< SEARCH\n    return 42\n=======\n    return 1\n>>>>>>> REPLACE", "diff")
    assert (diff_miss.code, diff_miss.failure) == (None, "SEARCH text not found")
    block = PARENT.split("# EVOLVE-BLOCK-START\n")[1].split("# EVOLVE-BLOCK-END")[0]
    same = build_child(PARENT, block, "rewrite")
    assert same.code is None and same.unchanged
    assert offspring(PARENT, "no tags at all </response_1>", PromptOptions(answers=2)) == []


def test_code_key_ignores_surrounding_whitespace_only() -> None:
    assert code_key("x = 1\n") == code_key("\n  x = 1  \n") != code_key("x = 2")


def test_prompt_options_come_from_a_policy_section() -> None:
    policy = OpenAIPolicySection(url="http://127.0.0.1:9/v1", edit_format="diff", answers=3, answer_tag="answer",
                                 max_new_tokens=200, api="completions", prefill=False)
    assert PromptOptions.from_policy(policy) == PromptOptions(edit_format="diff", answers=3, answer_tag="answer",
                                                              max_new_tokens_cap=200, api="completions",
                                                              prefill=False)
    assert PromptOptions.from_policy(HFPolicySection()) == PromptOptions()


def test_a_seed_that_fails_its_evaluation_is_a_seed_program_error(fizzbuzz: Problem) -> None:
    with pytest.raises(SeedProgramError, match=r"initial\.py: the initial program fails its evaluation \(crash: boom"):
        require_seed(fizzbuzz, Evaluation(ok=False, failure="crash", detail="boom"))
    passed = Evaluation(ok=True, scores={"a": 1.0})
    assert require_seed(fizzbuzz, passed) is passed


def test_the_same_child_is_evaluated_once_however_often_and_wherever_it_is_scored(fizzbuzz: Problem) -> None:
    scorer = ChildScorer(2)

    async def score_three_completions() -> list[list[list[float] | None]]:
        completions = [tagged(CORRECT, PARTIAL), tagged(PARTIAL, "x = ("), tagged(CORRECT)]
        scored = await asyncio.gather(*(scorer.score(fizzbuzz, PARENT, text, PromptOptions(answers=2))
                                        for text in completions))
        return [[child.vector for child in children] for children in scored]

    vectors = asyncio.run(score_three_completions())
    assert scorer.evaluations == 2  # CORRECT and PARTIAL, each once although asked for concurrently twice
    assert vectors[0][0] == vectors[2][0] and sum(vectors[0][0] or []) == len(fizzbuzz.objectives)
    assert vectors[0][1] == vectors[1][0] and vectors[1][1] is None
    again = asyncio.run(scorer.score(fizzbuzz, PARENT, CORRECT, PromptOptions()))  # another event loop (veRL's)
    assert again[0].vector == vectors[0][0] and scorer.evaluations == 2


def test_without_a_cache_every_call_evaluates_and_a_full_cache_drops_its_oldest(fizzbuzz: Problem) -> None:
    uncached = ChildScorer(asyncio.Semaphore(1), capacity=0)
    child = build_child(PARENT, PARTIAL, "rewrite").code
    assert child is not None

    async def twice() -> None:
        await uncached.evaluate(fizzbuzz, child)
        await uncached.evaluate(fizzbuzz, child)

    asyncio.run(twice())
    assert uncached.evaluations == 2
    small = ChildScorer(1, capacity=1)
    asyncio.run(small.vector(fizzbuzz, child))
    asyncio.run(small.vector(fizzbuzz, "x = ("))  # a program that crashes: kept too, and pushes the first out
    asyncio.run(small.vector(fizzbuzz, child))
    assert small.evaluations == 3
    assert asyncio.run(small.vector(fizzbuzz, None)) is None and small.evaluations == 3


def test_each_answer_a_completion_was_asked_for_and_lacks_is_one_record() -> None:
    assert missing_answers(3, 3, "text") == [] and missing_answers(1, 1, "text") == []
    short = missing_answers(1, 3, "text")
    assert [(r.kind, r.reason, r.completion) for r in short] == [
        ("edit_failed", "missing from the completion (1 of 3 answers written)", None)] * 2
    empty = missing_answers(0, 3, "text")
    assert [(r.reason, r.completion) for r in empty] == [("no answer in the completion", "text"),
                                                         ("no answer in the completion", None),
                                                         ("no answer in the completion", None)]


class OneAnswerPolicy:
    """Asked for m = 3 answers, writes one tagged answer (the controller's accounting is under test)."""

    name = "one-answer"

    async def generate(self, prompt: Prompt, seed: int) -> Completion:
        return Completion(tagged(PARTIAL), completion_tokens=20)

    async def close(self) -> None:
        return None


def test_a_run_records_every_answer_of_a_short_completion(fizzbuzz: Problem, tmp_path: Path) -> None:
    config = RunConfig.model_validate({
        "run": {"problem": "fizzbuzz", "programs_dir": str(ROOT / "programs"), "iterations": 1, "concurrency": 1,
                "eval_workers": 1},
        "policy": {"answers": 3, "prefill": False},
    })
    store = ProgramStore(str(tmp_path / "runs.db"))
    run_id = store.create_run("r", "fizzbuzz", "one-answer", 0, config.model_dump_json(), 1)
    asyncio.run(Controller(config, fizzbuzz, store, OneAnswerPolicy(), run_id).run())  # type: ignore[arg-type]
    outcomes = [(a.kind, a.reason) for a in store.attempts(run_id) if a.iteration == 1 and a.kind != "policy_call"]
    assert sorted(outcomes, key=str) == sorted(
        [("child", None)] + [("edit_failed", "missing from the completion (1 of 3 answers written)")] * 2, key=str)
