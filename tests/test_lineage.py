"""Lineage replay on a real store (SQLite, then PostgreSQL) written as evolve/engine/controller.py writes it: chain, targets, diffs, views.

The run: objectives t1..t3 (0/1 tests) and speed; the scalar is their mean; solved means every objective >= 0.5.
Seed #1 -> #2 gains t1 -> #3 gains t2, t3 and loses speed (its code holds `</script><b>`) -> #4 (a call with
three answers: a child, an eval failure, a duplicate) gains speed and loses t1 -> #5 regains t1, solved first
-> #6 the best. #7 branches off the seed. Iteration 4 is a policy error.
"""

from __future__ import annotations

import re

import pytest
from rich.console import Console

from evolve.report.lineage import Lineage, LineageError, ancestry, lineage_html, render_lineage
from evolve.store.program_store import AttemptRecord, ChildRecord, ProgramStore, StoreError

POLICY = 'vpo [m=3] <x> & "co"'  # rich markup and HTML in a policy name
OBJECTIVES = ("t1", "t2", "t3", "speed")
HOSTILE = 's = "</script><b>"'


def code(body: str) -> str:
    return f"import math\n\n# EVOLVE-BLOCK-START\ndef f(x):\n{body}\n# EVOLVE-BLOCK-END\n"


def child(body: str, vector: tuple[float, ...], parent_id: int | None, policy: str = POLICY) -> ChildRecord:
    scores = dict(zip(OBJECTIVES, vector, strict=True))
    return ChildRecord(code=code(body), parent_id=parent_id, island=1 if parent_id else 0, policy=policy,
                       edit=f"def f(x):\n{body}" if parent_id else "", scores=scores,
                       scalar=sum(vector) / len(vector), solved=min(vector) >= 0.5)


def call(n: int) -> AttemptRecord:
    return AttemptRecord("policy_call", "stop", prompt=f"<user>\nprompt {n}\n<assistant>\ndef f(x):",
                         completion=f"completion {n} <script>alert(1)</script>", latency_s=1.0, prompt_tokens=50,
                         completion_tokens=20)


def record(store: ProgramStore, run: int, iteration: int, records: list[AttemptRecord | ChildRecord]) -> list[int]:
    return [p.id for p in store.record_iteration(run, iteration, records, policy=POLICY)]


def build_run(store: ProgramStore) -> tuple[int, dict[str, int]]:
    run = store.create_run("lineage-run", "tests4", POLICY, 0, "{}", 8)
    (seed,) = [p.id for p in store.record_iteration(run, 0, [child("    return 0", (0, 0, 0, 0.2), None, "")])]
    (a,) = record(store, run, 1, [call(1), child("    return 1", (1, 0, 0, 0.2), seed)])
    (b,) = record(store, run, 2, [call(2), child(f"    {HOSTILE}\n    return 2", (1, 1, 1, 0.1), a)])
    (c,) = record(store, run, 3, [
        call(3),
        AttemptRecord("duplicate", "same code as an earlier program", child_code=code("    return 1")),
        child("    return 3", (0, 1, 1, 0.6), b),
        AttemptRecord("eval_failed", "crash: ZeroDivisionError", completion="def f(x):\n    1/0",
                      child_code=code("    1/0")),
    ])
    record(store, run, 4, [AttemptRecord("policy_error", "ReadTimeout: timed out", prompt="<user>\nprompt 4")])
    (d,) = record(store, run, 5, [call(5), child("    return 5", (1, 1, 1, 0.6), c)])
    (e,) = record(store, run, 6, [call(6), child("    return 6", (1, 1, 1, 0.9), d)])
    (side,) = record(store, run, 7, [call(7), child("    return 7", (0, 1, 0, 0.2), seed)])
    return run, {"seed": seed, "a": a, "b": b, "c": c, "d": d, "e": e, "side": side}


@pytest.fixture
def store(store_url: str) -> ProgramStore:
    """On a SQLite file, then on a PostgreSQL database (tests/conftest.py)."""
    return ProgramStore(store_url)


@pytest.fixture
def built(store: ProgramStore) -> tuple[int, dict[str, int]]:
    return build_run(store)


def test_default_target_is_the_first_solved_program_not_the_best(store: ProgramStore, built) -> None:
    run, ids = built
    lineage = ancestry(store, run)
    assert (lineage.target_id, lineage.chosen_as) == (ids["d"], "first solved")
    assert [s.program_id for s in lineage.steps] == [ids[k] for k in ("seed", "a", "b", "c", "d")]
    assert [s.iteration for s in lineage.steps] == [0, 1, 2, 3, 5]
    assert lineage.steps[0].policy == "" and all(s.policy == POLICY for s in lineage.steps[1:])


def test_default_target_without_a_solution_is_the_best_by_scalar(store: ProgramStore) -> None:
    run = store.create_run("unsolved", "tests4", POLICY, 1, "{}", 2)
    (seed,) = [p.id for p in store.record_iteration(run, 0, [child("    return 0", (0, 0, 0, 0.2), None, "")])]
    (good,) = record(store, run, 1, [call(1), child("    return 1", (1, 0, 0, 0.4), seed)])
    record(store, run, 2, [call(2), child("    return 2", (0, 0, 0, 0.3), seed)])
    lineage = ancestry(store, run)
    assert (lineage.target_id, lineage.chosen_as) == (good, "best by scalar")
    assert [s.program_id for s in lineage.steps] == [seed, good]


def test_a_chosen_program_gives_its_own_chain(store: ProgramStore, built) -> None:
    run, ids = built
    side = ancestry(store, run, ids["side"])
    assert side.chosen_as == "chosen" and [s.program_id for s in side.steps] == [ids["seed"], ids["side"]]
    best = ancestry(store, run, ids["e"])
    assert [s.program_id for s in best.steps][-2:] == [ids["d"], ids["e"]] and len(best.steps) == 6


def test_a_program_outside_the_run_is_one_clear_store_error(store: ProgramStore, built) -> None:
    run, ids = built
    other = store.create_run("other", "tests4", POLICY, 2, "{}", 1)
    with pytest.raises(LineageError, match=f"^program {ids['a']} is not in run {other} ") as error:
        ancestry(store, other, ids["a"])
    assert isinstance(error.value, StoreError) and "\n" not in str(error.value)
    with pytest.raises(LineageError, match=f"run {other} has no programs yet"):
        ancestry(store, other)
    with pytest.raises(StoreError, match="no run 99"):
        ancestry(store, 99)


def test_steps_name_objectives_gained_and_lost_and_the_scalar_change(store: ProgramStore, built) -> None:
    run, _ = built
    seed, a, b, c, d = ancestry(store, run).steps
    assert (seed.gained, seed.lost, seed.scores_before, seed.scalar_delta) == ((), (), None, None)
    assert (a.gained, a.lost) == (("t1",), ())
    assert (b.gained, b.lost) == (("t2", "t3"), ("speed",))
    assert (c.gained, c.lost) == (("speed",), ("t1",))
    assert (d.gained, d.lost, d.solved) == (("t1",), (), True)
    assert c.scores_before == {"t1": 1, "t2": 1, "t3": 1, "speed": 0.1} and c.scores_after["speed"] == 0.6
    assert b.scalar_before == pytest.approx(0.3) and b.scalar_after == pytest.approx(0.775)
    assert b.scalar_delta == pytest.approx(0.475)


def test_steps_carry_a_labelled_unified_diff_and_the_completion_of_their_call(store: ProgramStore, built) -> None:
    run, ids = built
    seed, a, b, c, _ = ancestry(store, run).steps
    assert seed.diff == "" and seed.completion is None
    assert a.diff.splitlines()[:2] == [f"--- {run}:1 (parent)", f"+++ {run}:2"]  # RUN:N, as `evolve show` takes
    assert [step.label for step in (seed, a, b, c)] == [f"{run}:{number}" for number in (1, 2, 3, 4)]
    assert "-    return 0" in a.diff.splitlines() and "+    return 1" in a.diff.splitlines()
    assert f"+    {HOSTILE}" in b.diff.splitlines()
    assert c.completion == "completion 3 <script>alert(1)</script>"  # the multi-answer call's whole text
    assert c.edit == "def f(x):\n    return 3"


def test_terminal_view_prints_step_headers_moves_and_diffs_literally(store: ProgramStore, built) -> None:
    run, ids = built
    console = Console(record=True, width=160, color_system=None)
    render_lineage(ancestry(store, run), console)
    text = console.export_text()
    assert f"step 1: {run}:2 (store id {ids['a']}) iteration 1 by {POLICY}, scalar 0.0500 -> 0.3000 (+0.2500)" in text
    assert f"step 3: {run}:4 (store id {ids['c']}) iteration 3 by {POLICY}, scalar 0.7750 -> 0.6500 (-0.1250)" in text
    assert f"step 0: {run}:1 (store id {ids['seed']}) iteration 0 (seed), scalar 0.0500" in text
    assert "gained: t2, t3   lost: speed" in text and "gained: speed   lost: t1" in text
    assert f"+    {HOSTILE}" in text and "SOLVED" in text


def test_terminal_view_colours_gained_green_and_lost_red(store: ProgramStore, built) -> None:
    run, _ = built
    console = Console(record=True, width=160, force_terminal=True, color_system="standard")
    render_lineage(ancestry(store, run), console)
    styled = console.export_text(styles=True)
    assert "\x1b[32mt2, t3\x1b[0m" in styled and "\x1b[31mspeed\x1b[0m" in styled


def test_terminal_view_truncates_long_diffs_with_a_note(store: ProgramStore) -> None:
    run = store.create_run("long", "tests4", POLICY, 3, "{}", 1)
    (seed,) = [p.id for p in store.record_iteration(run, 0, [child("    return 0", (0, 0, 0, 0), None, "")])]
    long_body = "\n".join(f"    y{i} = {i}" for i in range(300)) + "\n    return 1"
    record(store, run, 1, [call(1), child(long_body, (1, 0, 0, 0), seed)])
    console = Console(record=True, width=160, color_system=None)
    render_lineage(ancestry(store, run), console)
    text = console.export_text()
    assert "y70 = 70" in text and "y200 = 200" not in text
    assert re.search(r"diff truncated: \d+ more lines of 30\d", text)


def _page(store: ProgramStore, run: int) -> tuple[Lineage, str]:
    lineage = ancestry(store, run)
    return lineage, lineage_html(lineage)


def test_html_page_escapes_code_completions_and_names(store: ProgramStore, built) -> None:
    run, _ = built
    _, page = _page(store, run)
    assert "</script><b>" not in page and "&lt;/script&gt;&lt;b&gt;" in page
    assert "<script" not in page.lower()  # neither the completion's script nor any of our own
    assert "vpo [m=3] &lt;x&gt; &amp; &quot;co&quot;" in page and POLICY not in page
    assert not re.search(r"(src|href)\s*=|<link|@import|url\(", page)  # nothing external


def test_html_page_has_each_step_with_coloured_diff_and_highlighted_changed_cells(store: ProgramStore, built) -> None:
    run, ids = built
    lineage, page = _page(store, run)
    assert page.count('<section class="step"') == len(lineage.steps) == 5
    assert '<span class="add">+    return 1</span>' in page and '<span class="del">-    return 0</span>' in page
    step_c = page.split(f'id="p{ids["c"]}"')[1].split("</section>")[0]
    assert '<td>speed</td><td class="num">0.1</td><td class="num up">0.6</td><td class="num up">+0.5</td>' in step_c
    assert '<td>t1</td><td class="num">1</td><td class="num down">0</td><td class="num down">-1</td>' in step_c
    assert '<td>t2</td><td class="num">1</td><td class="num">1</td><td class="num"></td>' in step_c
    assert 'gained: <span class="gained">speed</span>' in step_c and 'lost: <span class="lost">t1</span>' in step_c
    assert "completion 3 &lt;script&gt;alert(1)&lt;/script&gt;" in step_c
