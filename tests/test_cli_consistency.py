"""The `evolve` command line reads the same way everywhere: --version, a description and examples per subcommand,
one output flag (--out/-o, old spellings deprecated), --set blamed by name, tables whole when piped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from evolve.cli.main import _parser, main

ROOT = Path(__file__).resolve().parents[1]


def subcommands() -> list[str]:
    parser = _parser()
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sorted(action.choices)


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    import evolve

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"evolve {evolve.__version__}"


@pytest.mark.parametrize("command", subcommands())
def test_every_subcommand_help_has_a_description_and_an_example(
        command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    usage, _, rest = out.partition("\n\n")
    assert rest.strip() and not rest.startswith(("positional arguments", "options")), "no description"
    assert "examples:" in out and f"\n  evolve {command}" in out


def test_the_core_subcommands_are_all_there() -> None:
    expected = {"run", "runs", "show", "lineage", "report", "export", "experiment", "problems", "check",
                "new-problem", "import", "train", "sample"}
    assert expected <= set(subcommands())


@pytest.mark.parametrize(("argv", "old"), [
    (["lineage", "1", "--html", "x.html"], "--html"),
    (["export", "1", "--output", "x.jsonl"], "--output"),
    (["sample", "--problems", "fizzbuzz", "--json", "x.json"], "--json"),
])
def test_old_output_spellings_still_work_with_a_one_line_deprecation_note(
        argv: list[str], old: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = _parser().parse_args(argv)
    assert args.out == argv[-1]
    err = capsys.readouterr().err
    assert err.strip() == f"note: {old} is deprecated; use --out/-o"


@pytest.mark.parametrize("argv", [
    ["lineage", "1", "-o", "x"], ["export", "1", "--out", "x"], ["report", "default", "-o", "x"],
    ["import", "humaneval", "-o", "x"], ["train", "--out", "x"], ["sample", "--problems", "p", "-o", "x"],
])
def test_every_output_path_is_spelled_out(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert str(_parser().parse_args(argv).out) == "x"
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("argv", "blamed"), [
    (["run", "--set", "run.iterations=0"], "--set run.iterations=0: invalid value for 'run.iterations'"),
    (["run", "--set", "run.iterationz=3"], "--set run.iterationz=3: unknown key 'run.iterationz'"),
    (["run", "--set", "policy.temperature=9"], "--set policy.temperature=9: invalid value for 'policy.temperature'"),
    (["run", "--iterations", "0"], "--iterations: invalid value for 'run.iterations'"),
    (["train", "--set", "lora.r=0"], "--set lora.r=0: invalid value for 'lora.r'"),
    (["experiment", str(ROOT / "experiments/default.toml"), "--set", "iterations=0"],
     "--set iterations=0: invalid value for 'iterations'"),
    (["experiment", str(ROOT / "experiments/default.toml"), "--set", "policies.*.max_new_tokens=2"],
     "--set policies.*.max_new_tokens=2: invalid value for 'policies.0.max_new_tokens'"),
    (["experiment", str(ROOT / "experiments/default.toml"), "--set", "run.concurrenc=2"],
     "--set run.concurrenc=2: unknown key 'run.concurrenc'"),
    (["experiment", str(ROOT / "experiments/default.toml"), "--set", "policies.9.temperature=1"],
     "--set policies.9.temperature=1: no policies.9"),
])
def test_a_bad_set_is_blamed_on_the_flag_not_the_file(
        argv: list[str], blamed: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "evolve.toml").write_text("[run]\niterations = 5\n")
    assert main(argv) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert f"config error: {blamed}" in out
    assert "evolve.toml:" not in out


def test_a_mistake_in_the_file_still_names_the_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "evolve.toml").write_text("[run]\niterations = 0\n")
    assert main(["run", "--set", "run.seed=3"]) == 2
    assert "config error: evolve.toml: invalid value for 'run.iterations'" in capsys.readouterr().out


def test_experiment_set_reaches_top_level_tables_and_policies_by_index_name_or_star() -> None:
    from evolve.engine.experiment import load_experiment

    path = ROOT / "experiments/default.toml"
    spec = load_experiment(path, overrides={"iterations": 2, "run.concurrency": 3, "policies.0.max_new_tokens": 64,
                                            "policies.*.temperature": 1.25, "selection.islands": 2})
    assert (spec.iterations, spec.run.concurrency, spec.selection.islands) == (2, 3, 2)
    assert spec.policies[0].max_new_tokens == 64 and spec.policies[1].max_new_tokens != 64
    assert all(policy.temperature == 1.25 for policy in spec.policies)
    named = load_experiment(path, overrides={f"policies.{spec.policies[1].name}.top_p": 0.5})
    assert [policy.top_p for policy in named.policies][1] == 0.5


def test_piped_tables_are_not_cut_mid_word(tmp_path: Path) -> None:
    """`evolve problems | cat`: a real pipe, no COLUMNS; rich's default 80 columns would cut cells with an ellipsis."""
    env = {key: value for key, value in __import__("os").environ.items() if key != "COLUMNS"}
    result = subprocess.run([sys.executable, "-m", "evolve.cli.main", "problems", "--programs-dir",
                             str(ROOT / "programs")], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "…" not in result.stdout
    assert "symbolic_regression" in result.stdout
