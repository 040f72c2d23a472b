"""scripts/bench/bench_speculative.py: a stored call's prompt comes back as the controller stored it, and the
smallest side-by-side run (study workload, 3 calls, one round) prints a row per engine; no timing is checked."""

from __future__ import annotations

import json
import sys

import pytest

from evolve.engine.controller import render_prompt_text
from tests.script_modules import load_script

PARENT = "def add(a, b):\n    return a - b\n"


def test_a_stored_prompt_gives_back_its_messages_prefill_and_the_parents_stops() -> None:
    bench = load_script("bench_speculative")
    messages = [{"role": "system", "content": "You improve code."},
                {"role": "user", "content": "Current code:\n```python\n" + PARENT + "```\n<user> is not a role line"}]
    prompt = bench.stored_prompt(render_prompt_text(messages, "def add(a, b):\n"), PARENT, {"max_new_tokens": 100})
    assert prompt.messages == messages and prompt.prefill == "def add(a, b):\n"
    assert prompt.stop and 0 < prompt.max_new_tokens <= 100


@pytest.mark.slow
def test_the_smallest_comparison_prints_a_row_per_engine(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_script("bench_speculative")
    monkeypatch.setattr(sys, "argv", ["bench_speculative.py", "--requests", "3", "--slots", "3", "--rounds", "1",
                                      "--weights", "f16", "--drafts", "0,4"])
    bench.main()
    out = capsys.readouterr().out
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert sorted(row["draft_tokens"] for row in rows) == [0, 4]
    assert all(row["workload"] == "study/base" and row["requests"] == 3 and row["generated"] > 0 for row in rows)
    assert "x plain" in out


@pytest.mark.slow
def test_decode_rows_prints_a_row_per_batch_shape(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_script("bench_decode_rows")
    monkeypatch.setattr(sys, "argv", ["bench_decode_rows.py", "--weights", "f16", "--sequences", "1,2",
                                      "--rows-per-sequence", "1,3", "--context", "20", "--repeats", "1"])
    bench.main()
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [(row["sequences"], row["rows"], row["logits"]) for row in rows] == [
        (sequences, sequences * multiple, logits) for sequences in (1, 2) for multiple in (1, 3)
        for logits in ("last", "all")]
    assert all(row["ms"] > 0 for row in rows)


@pytest.mark.slow
def test_prefill_share_counts_prompt_new_and_generated_tokens_of_stored_calls(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_script("prefill_share")
    monkeypatch.setattr(sys, "argv", ["prefill_share.py", "--arm", "grpo-t0", "--runs", "1"])
    bench.main()
    out = capsys.readouterr().out
    means = json.loads(out.splitlines()[0])
    assert means["runs"] == 1 and means["answers"] > 0
    assert 0 <= means["new"] <= means["new_vs_previous"] <= means["prompt"] and means["generated"] > 0
    assert "the prompt tokens to decode are" in out
