"""`evolve report` follows the design an experiment ran with, as its store keeps it: an experiment run with --set
is reported as it ran without repeating the flags (no "changed" warning, no partial cells), a file changed since is
named as such with both designs, and the store's record of the --set flags is no key a file may write."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_policy_server import FakePolicyServer

from evolve.cli.main import main
from evolve.config import ConfigError
from evolve.engine.experiment_spec import design_changes, load_experiment
from evolve.store.program_store import ProgramStore

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def policy_url() -> Iterator[str]:
    with FakePolicyServer(latency_s=0.0) as server:
        yield server.url


def experiment_file(folder: Path, url: str, temperature: float = 0.7) -> Path:
    path = folder / "exp.toml"
    path.write_text(f'problems = ["fizzbuzz"]\nseeds = [0, 1, 2]\niterations = 8\n[run]\nprograms_dir = '
                    f'"{ROOT / "programs"}"\n[[policies]]\nname = "fake"\nbackend = "openai"\nurl = "{url}"\n'
                    f'model = "fake"\ntemperature = {temperature}\n')
    return path


@pytest.fixture
def ran_with_set(tmp_path: Path, policy_url: str, capsys: pytest.CaptureFixture[str]) -> Path:
    """An experiment file of 3 seeds x 8 iterations, run with --set iterations=2 --set seeds=[0]."""
    path = experiment_file(tmp_path, policy_url)
    assert main(["experiment", str(path), "--plain", "--set", "iterations=2", "--set", "seeds=[0]"]) == 0
    hint = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("report: "))
    assert hint == f"report: evolve report {path}"  # no --set to repeat: the store keeps the design
    return path


def report(path: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[str, dict[str, Any]]:
    out_dir = path.parent / "report"
    assert main(["report", str(path), "--out", str(out_dir), *flags]) == 0
    return " ".join(capsys.readouterr().out.split()), json.loads((out_dir / "report.json").read_text())


def test_an_experiment_run_with_set_is_reported_as_it_ran_without_repeating_the_flags(
        ran_with_set: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, document = report(ran_with_set, capsys)
    assert "changed since" not in out and "partial" not in out and "no complete seed" not in out, out
    assert "note: experiment exp ran with --set iterations=2 --set seeds=[0]; the report follows that design" in out
    assert (document["seeds"], document["iterations"]) == ([0], 2)
    assert [row["state"] for row in document["table"]] == ["ok"]
    # the same flags given again still read as the design that ran, with nothing to say about it
    out, document = report(ran_with_set, capsys, "--set", "iterations=2", "--set", "seeds=[0]")
    assert "warning" not in out and "note:" not in out, out
    assert document["seeds"] == [0]


def test_a_file_changed_since_the_experiment_ran_is_named_with_both_designs(
        ran_with_set: Path, policy_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    experiment_file(ran_with_set.parent, policy_url, temperature=1.0)  # edited after the run
    out, document = report(ran_with_set, capsys)
    assert (f"warning: {ran_with_set} changed since experiment exp last ran with --set iterations=2 --set seeds=[0]; "
            "the report follows the design it ran with, not the file's: ran -> the file now: "
            "policies.fake.temperature 0.7 -> 1.0") in out, out
    assert (document["seeds"], document["iterations"]) == ([0], 2)


def test_a_report_asked_for_another_design_than_ran_says_which_differ(
        ran_with_set: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, document = report(ran_with_set, capsys, "--set", "iterations=2")
    assert ("the report follows the file and the --set asked for (cells they do not name are left out, new ones "
            "show as not run): ran -> asked: seeds [0] -> [0, 1, 2]") in out, out
    assert document["seeds"] == [0, 1, 2]


def test_the_store_keeps_the_set_flags_with_the_design_and_a_file_cannot_write_them(
        ran_with_set: Path, tmp_path: Path) -> None:
    spec = load_experiment(ran_with_set)
    stored = json.loads(ProgramStore(spec.db, mode="read").experiment_spec("exp") or "{}")
    assert stored["overrides"] == {"iterations": 2, "seeds": [0]}
    with pytest.raises(ConfigError, match="overrides is not a key of an experiment file"):
        bad = tmp_path / "bad.toml"
        bad.write_text(ran_with_set.read_text().replace("iterations = 8\n", "iterations = 8\noverrides = {}\n"))
        load_experiment(bad)
    with pytest.raises(ConfigError, match="overrides: not a key --set can set"):
        load_experiment(ran_with_set, overrides={"overrides.iterations": 3})


def test_design_changes_name_each_setting_that_differs(ran_with_set: Path) -> None:
    before = load_experiment(ran_with_set, overrides={"iterations": 2})
    after = load_experiment(ran_with_set, overrides={"seeds": [0, 5], "run.concurrency": 1})
    assert design_changes(before, after) == ["seeds [0, 1, 2] -> [0, 5]", "iterations 2 -> 8",
                                             "run.concurrency 4 -> 1"]
    assert design_changes(before, before) == []
