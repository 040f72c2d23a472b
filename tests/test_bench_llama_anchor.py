"""scripts/bench/bench_llama_anchor.py at its smallest: one sequence, four tokens, one run a side. Both sides decode
the same prompt tokens from empty caches and generate exactly the tokens asked for; no timing is checked."""

from __future__ import annotations

import json
import sys

import pytest

from tests.script_modules import load_script


@pytest.mark.slow
def test_anchor_and_engine_rows(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_script("bench_llama_anchor")
    monkeypatch.setattr(sys, "argv", ["bench_llama_anchor.py", "--levels", "1", "--tokens", "4", "--repeats", "1",
                                      "--threads", "1"])
    bench.main()
    out = capsys.readouterr().out
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [(row["side"], row["sequences"]) for row in rows] == [("anchor", 1), ("engine", 1)]
    anchor, engine = rows
    assert anchor["runs"][0]["generated"] == engine["runs"][0]["generated"] == 4
    assert anchor["runs"][0]["prompt_tokens"] == engine["runs"][0]["prompt_tokens"] > 100
    assert set(engine["ratio_to_anchor"]) == {"prefill_tok_s", "decode_tok_s", "total_tok_s"}
    assert all(row[key] > 0 for row in rows for key in ("prefill_tok_s", "decode_tok_s", "total_tok_s"))
    assert "engine/anchor" in out
