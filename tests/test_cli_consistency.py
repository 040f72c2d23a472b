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
    (["experiment", str(ROOT / "experiments/default.toml"), "--set", "seeds.0=1"],
     "--set seeds.0=1: 'seeds' is a list of values, set whole: e.g. --set seeds=[0, 1]"),
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
    from evolve.engine.experiment_spec import load_experiment

    path = ROOT / "experiments/default.toml"
    spec = load_experiment(path, overrides={"iterations": 2, "run.concurrency": 3, "policies.0.max_new_tokens": 64,
                                            "policies.*.temperature": 1.25, "selection.islands": 2})
    assert (spec.iterations, spec.run.concurrency, spec.selection.islands) == (2, 3, 2)
    assert spec.policies[0].max_new_tokens == 64 and spec.policies[1].max_new_tokens != 64
    assert all(policy.temperature == 1.25 for policy in spec.policies)
    named = load_experiment(path, overrides={f"policies.{spec.policies[1].name}.top_p": 0.5})
    assert [policy.top_p for policy in named.policies][1] == 0.5


@pytest.mark.parametrize(("columns", "cut"), [(None, False), ("80", True)])
def test_piped_tables_are_not_cut_mid_word(tmp_path: Path, columns: str | None, cut: bool) -> None:
    """`evolve runs | cat`: a real pipe; without COLUMNS rich's default 80 columns cut cells (`fizz…`): the table is
    printed whole. A COLUMNS the user set is honoured (and then cells are cut, as asked)."""
    from evolve.store.program_store import ProgramStore

    store = ProgramStore(str(tmp_path / "wide.db"))
    for seed in range(2):
        store.create_run(name=f"an-experiment-with-a-long-name/symbolic_regression_long/policy-{seed}",
                         problem="symbolic_regression_long", policy="a-policy-with-a-rather-long-name", seed=seed,
                         config_json="{}", iterations_target=40)
    env = {key: value for key, value in __import__("os").environ.items() if key != "COLUMNS"}
    env.update({"COLUMNS": columns} if columns else {})
    result = subprocess.run([sys.executable, "-m", "evolve.cli.main", "runs", "--db", str(tmp_path / "wide.db")],
                            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert ("…" in result.stdout) == cut
    if not cut:
        assert result.stdout.count("a-policy-with-a-rather-long-name") == 2


def test_eta_comes_from_this_process_iteration_rate_and_leaves_resumed_iterations_out() -> None:
    from evolve.engine.run_stats import RunStats
    from evolve.report.pace import clock, pace

    stats = RunStats(iterations_target=40, started_at=100.0, workers=1)
    stats.iterations_done = stats.iterations_at_start = 10  # a resumed run: 10 done by an earlier process
    stats.iteration_started(11, 100.0)
    assert pace(stats, now=160.0).eta_s is None  # no iteration in this process yet: no rate, no guess
    stats.iteration_ended(11, 112.0, committed=True)  # one iteration of 12 s here: 29 left on one worker
    stats.iterations_done = 11
    now = pace(stats, now=160.0)
    assert now.elapsed_s == 60.0 and now.eta_s == 29 * 12.0 and now.waiting_on == ""
    assert (clock(now.eta_s), clock(59), clock(3720), clock(None)) == ("5m 48s", "59s", "1h 02m", "-")


def test_a_run_at_zero_says_what_it_waits_on() -> None:
    from evolve.engine.run_stats import RunStats
    from evolve.report.pace import waiting_on

    stats = RunStats(iterations_target=8)
    assert waiting_on(stats) == "starting"
    stats.evaluating = 1
    assert waiting_on(stats) == "evaluating the seed program"
    stats.evaluating, stats.in_flight = 0, 3
    assert waiting_on(stats) == "waiting for the first completion (3 requests in flight)"
    stats.iterations_done = 1
    assert waiting_on(stats) == ""


def test_plain_progress_prints_the_panel_facts_and_a_heartbeat_while_quiet() -> None:
    import io
    import time

    from rich.console import Console

    from evolve.engine.run_stats import RunStats
    from evolve.report.progress import ProgressView

    out = io.StringIO()
    stats = RunStats(iterations_target=8)
    with ProgressView("run 1", Console(file=out, width=200), live=False, heartbeat_s=0.2) as view:
        stats.in_flight = 2
        view.update(stats)
        deadline = time.monotonic() + 30
        while "waiting for the first completion" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
        stats.iterations_done = 1
        stats.note("it    1 island 0: child 1:2 scalar 0.5000")
        view.update(stats)
    text = out.getvalue()
    assert "[0/8] ... waiting for the first completion (2 requests in flight)" in text
    assert "[1/8] it    1 island 0: child 1:2 scalar 0.5000  (best -; elapsed" in text
    assert "ETA" in text and "2 requests in flight" in text


def test_the_live_panel_shows_elapsed_eta_in_flight_and_a_spinner_at_zero() -> None:
    import io

    from rich.console import Console

    from evolve.engine.experiment import CellProgress
    from evolve.engine.run_stats import RunStats
    from evolve.report.progress import ExperimentView, ProgressView

    console = Console(file=io.StringIO(), width=160)
    stats = RunStats(iterations_target=8, in_flight=3)
    console.print(ProgressView("run 1", console).render(stats))
    cells = [CellProgress(("fizzbuzz", "m1", 0), 1, "running", stats),
             CellProgress(("lis", "m1", 0), None, "waiting", None, "loading m1")]
    console.print(ExperimentView("experiment", cells, console).render())
    text = console.file.getvalue()
    assert "elapsed" in text and "ETA" in text and "3 policy requests" in text
    assert text.count("waiting for the first completion (3 requests in flight)") == 2
    assert "loading m1" in text and "in flight" in text


def interleaved_store(path: Path) -> tuple[str, list[int], list[int]]:
    """Two runs whose programs were stored in turn, so store ids and numbers within a run differ: ids per run."""
    from evolve.store.program_store import ProgramStore

    store = ProgramStore(str(path))
    runs = [store.create_run(name=f"r{i}", problem="fizzbuzz", policy="p", seed=i, config_json="{}",
                             iterations_target=3) for i in (1, 2)]
    ids: dict[int, list[int]] = {run: [] for run in runs}
    for step in range(3):
        for run in runs:
            parent = ids[run][-1] if ids[run] else None
            program = store.add_program(run, f"x = {run * 10 + step}\n", parent, 0, step, "p" if step else "",
                                        "", {"a": step / 2}, step / 2, step == 2)
            ids[run].append(program.id)
    return str(path), ids[runs[0]], ids[runs[1]]


@pytest.mark.parametrize("argv", [["2:3"], ["2", "3"], ["--run", "2", "3"], ["3", "--run", "2"]])
def test_show_numbers_programs_within_their_run(
        argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    db, _, second = interleaved_store(tmp_path / "two.db")
    assert second == [2, 4, 6]  # store-wide ids: not what `show 2:3` means
    assert main(["show", *argv, "--db", db, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["run_id"], shown["number"], shown["id"], shown["parent_number"]) == (2, 3, 6, 2)
    assert shown["code"] == "x = 22\n"


def test_show_keeps_store_ids_reachable_and_prints_run_numbers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    db, first, _ = interleaved_store(tmp_path / "two.db")
    assert main(["show", "--id", str(first[2]), "--db", db, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["number"] == 3
    assert main(["show", "2", "--db", db]) == 0
    summary = capsys.readouterr().out
    assert "first solved  2:3 (store id 6)" in summary and "code of the best program 2:3" in summary
    assert main(["show", "2:4", "--db", db]) == 1
    missing = " ".join(capsys.readouterr().out.split())
    assert "no program 2:4" in missing and "run 2 has programs 1..3" in missing
    assert main(["show", "two", "--db", db]) == 2
    assert "write RUN, RUN:N" in capsys.readouterr().out


def test_lineage_takes_the_program_number_within_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, _, second = interleaved_store(tmp_path / "two.db")
    assert main(["lineage", "2", "2", "--db", db]) == 0
    by_number = capsys.readouterr().out
    assert main(["lineage", "2", "--id", str(second[1]), "--db", db]) == 0
    assert capsys.readouterr().out == by_number
    assert f"(store id {second[1]})" in by_number and f"(store id {second[2]})" not in by_number


def test_every_output_path_flag_is_out_with_o_and_old_spellings_are_hidden() -> None:
    parser = _parser()
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, sub in action.choices.items():
        shown = [a for a in sub._actions if a.help != "==SUPPRESS=="]
        for option in shown:
            assert not set(option.option_strings) & {"--output", "--html"}, f"{name}: {option.option_strings}"
            if option.dest == "out":
                assert set(option.option_strings) == {"--out", "-o"}, f"{name}: {option.option_strings}"


def test_an_experiment_stored_before_a_new_key_with_its_default_is_not_reported_as_changed() -> None:
    import json

    from evolve.engine.experiment_spec import load_experiment
    from evolve.report.design import report_design

    path = ROOT / "experiments/default.toml"
    spec = load_experiment(path)
    older = json.loads(spec.model_dump_json())
    del older["run"]["stop_when_solved"], older["run"]["target_score"]  # as a store written before these keys
    assert report_design(path, json.dumps(older)).note == ""
    changed = report_design(path, json.dumps(older | {"iterations": spec.iterations + 1}))
    assert changed.severity == "warning" and "changed since" in changed.note
    assert changed.spec.iterations == spec.iterations + 1  # the design it ran with, not the file's
    retired = report_design(path, json.dumps(older | {"retired_key": 1}))
    assert retired.severity == "warning" and "not readable here" in retired.note


def test_the_python_api_takes_the_same_experiment_overrides() -> None:
    from evolve.api import load_experiment_file
    from evolve.config import ConfigError

    spec = load_experiment_file(ROOT / "experiments/default.toml", overrides={"iterations": 2})
    assert spec.iterations == 2
    with pytest.raises(ConfigError, match="pass the file"):
        load_experiment_file(spec, overrides={"iterations": 3})


def test_show_code_prints_the_best_program_alone_and_out_writes_it_to_a_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    db, _, _ = interleaved_store(tmp_path / "two.db")
    assert main(["show", "2", "--code", "--db", db]) == 0
    assert capsys.readouterr().out == "x = 22\n"  # the best of run 2, as a file holds it
    assert main(["show", "2:1", "--code", "--db", db]) == 0
    assert capsys.readouterr().out == "x = 20\n"
    monkeypatch.chdir(tmp_path)
    assert main(["show", "2", "-o", "best.py", "--db", db]) == 0
    assert (tmp_path / "best.py").read_text() == "x = 22\n"
    assert capsys.readouterr().out.strip() == "wrote program 2:3 (scalar 1.0000, iteration 2, solved) to best.py"
    assert main(["show", "2", "--code", "--json", "--db", db]) == 2


def test_the_read_commands_find_the_store_beside_the_config_they_are_given(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    interleaved_store(project / "runs.db")
    (project / "evolve.toml").write_text('[run]\ndb = "runs.db"\n')  # where `evolve run -c` writes it
    monkeypatch.chdir(elsewhere)
    assert main(["runs", "-c", "../project/evolve.toml"]) == 0
    assert "r1" in capsys.readouterr().out
    assert main(["show", "2", "--code", "-c", "../project/evolve.toml"]) == 0
    assert capsys.readouterr().out == "x = 22\n"


def test_check_prints_the_toml_tables_its_messages_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    shutil.copytree(ROOT / "programs" / "fizzbuzz", tmp_path / "fizzbuzz")
    with (tmp_path / "fizzbuzz" / "problem.toml").open("a") as toml:
        toml.write('\n[[cascade]]\nfunction = "quick"\nthreshold = 0.5\n')
    assert main(["check", "fizzbuzz", "--programs-dir", str(tmp_path)]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert ": [[cascade]] names quick, which evaluator.py does not define (def quick(" in out
