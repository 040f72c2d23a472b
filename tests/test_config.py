"""Config parsing: every mistake is one clear line naming the file, the key and what is allowed."""

import json
import re
import shutil
from pathlib import Path

import pytest

from evolve.cli.main import main
from evolve.config import ConfigError, load_config, stored_config
from evolve.policy_config import HFPolicySection, LlamaCppPolicySection, OpenAIPolicySection, VLLMPolicySection

ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "evolve.toml"
    path.write_text(text)
    return path


def test_shipped_default_config_is_valid() -> None:
    config = load_config(ROOT / "evolve.toml")
    assert config.policy.backend == "llamacpp"
    assert (ROOT / "programs" / config.run.problem).is_dir()
    # the reference backend is one --set away: the llamacpp settings of the file are dropped, not refused
    assert load_config(ROOT / "evolve.toml", {"policy.backend": "hf"}).policy.backend == "hf"


def test_unknown_key_names_file_key_and_allowed_keys(tmp_path: Path) -> None:
    path = write(tmp_path, "[run]\niteratons = 5\n")
    with pytest.raises(ConfigError) as error:
        load_config(path)
    message = str(error.value)
    assert str(path) in message
    assert "run.iteratons" in message
    assert "iterations" in message and "seed" in message
    assert "\n" not in message


def test_unknown_nested_key_lists_that_sections_keys(tmp_path: Path) -> None:
    path = write(tmp_path, "[selection.map_elites]\nbinz = 3\n")
    with pytest.raises(ConfigError, match=r"selection\.map_elites\.binz.*allowed here: features, bins"):
        load_config(path)


def test_unknown_section_is_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, "[sandbx]\ntimeout = 3\n")
    with pytest.raises(ConfigError, match=r"unknown key 'sandbx'.*run, policy, selection"):
        load_config(path)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[run]\niterations = 0\n", "run.iterations"),
        ("[run]\niterations = 'many'\n", "run.iterations"),
        ("[run]\nseed = -1\n", "run.seed"),
        ("[run]\nseed = 9223372036854775808\n", "run.seed"),  # one past what the store's 64-bit column holds
        ("[policy]\nbackend = 'tensorflow'\n", "policy.backend"),
        ("[policy]\nedit_format = 'patch'\n", "policy.edit_format"),
        ("[selection]\nexploration_ratio = 0.6\nexploitation_ratio = 0.6\n", "selection"),
    ],
)
def test_invalid_values_name_the_key(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(ConfigError, match=rf"invalid value for '{key}'"):
        load_config(write(tmp_path, text))


def test_broken_toml_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "[run\nseed = 1\n"))


def test_missing_file_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "nope.toml")


def test_command_line_overrides_win(tmp_path: Path) -> None:
    path = write(tmp_path, "[run]\niterations = 5\nseed = 1\n")
    config = load_config(path, {"run.iterations": 9, "run.seed": None, "run.db": "x.db"})
    assert (config.run.iterations, config.run.seed, config.run.db) == (9, 1, "x.db")


def test_cli_reports_config_error_and_runs_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "[run]\nproblem = 'symbolic_regression'\nbogus = 1\n")
    db = tmp_path / "store.db"
    code = main(["run", "--config", str(path), "--db", str(db)])
    out = capsys.readouterr().out
    assert code == 2
    assert "config error" in out and "run.bogus" in out
    assert not db.exists()


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('[policy]\nbackend = "openai"\n', "the openai backend needs url"),
        ('[policy]\nserve = true\n', "policy.serve is an openai setting; this policy's backend is hf"),
        ('[policy]\nlora = "adapters/x"\n', "policy.lora is a vllm or openai setting; this policy's backend is hf"),
        ('[policy]\nbackend = "vllm"\nthreads = 2\n', "policy.threads is an hf or llamacpp setting; this policy's backend is vllm"),
        ('[policy]\nbackend = "openai"\nurl = "http://h/v1"\nmax_batch = 4\n', "policy.max_batch is an hf setting"),
        ('[policy]\nbackend = "openai"\nurl = "http://h/v1"\nlora = "a"\n', "this openai policy has serve = false"),
        ('[policy]\nthreds = 2\n', "unknown key 'policy.threds' (allowed here: name, backend, model"),
        ('[policy]\nanswer_tag = "re sponse"\n', "policy.answer_tag"),
        ('[policy]\nbackend = "tgi"\n', "policy.backend"),
    ],
)
def test_policy_settings_that_do_not_fit_the_backend_are_named(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text))
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


def test_an_openai_policy_with_a_url_is_accepted(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, '[policy]\nbackend = "openai"\nurl = "http://127.0.0.1:8000/v1"\n'
                                         'model = "smollm2"\nanswers = 3\napi = "completions"\n'))
    assert (config.policy.backend, config.policy.answers, config.policy.api) == ("openai", 3, "completions")


def test_command_line_settings_reach_any_key_and_are_checked_like_the_file(tmp_path: Path) -> None:
    from evolve.cli.common import parse_setting

    overrides = {**parse_setting("policy.answers=3"), **parse_setting("selection.map_elites.bins = 4"),
                 **parse_setting("policy.url=http://127.0.0.1:9/v1"), **parse_setting("policy.backend=openai")}
    config = load_config(None, overrides)
    assert (config.policy.answers, config.selection.map_elites.bins, config.policy.url) == (3, 4, "http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match="policy.answers"):
        load_config(None, parse_setting("policy.answers=0"))
    with pytest.raises(ConfigError, match="SECTION.KEY=VALUE"):
        parse_setting("answers3")


@pytest.mark.parametrize(
    ("text", "section"),
    [
        ('[policy]\nthreads = 2\n', HFPolicySection),
        ('[policy]\nbackend = "hf"\ndevice = "cuda"\n', HFPolicySection),
        ('[policy]\nbackend = "vllm"\nlora = "adapters/x"\ntensor_parallel_size = 2\n', VLLMPolicySection),
        ('[policy]\nbackend = "openai"\nurl = "http://127.0.0.1:8000/v1"\nretries = 1\n', OpenAIPolicySection),
        ('[policy]\nbackend = "openai"\nserve = true\nlora = "adapters/x"\ndtype = "bfloat16"\n', OpenAIPolicySection),
    ],
)
def test_each_backend_parses_into_its_own_section(tmp_path: Path, text: str, section: type) -> None:
    policy = load_config(write(tmp_path, text)).policy
    assert type(policy) is section
    assert policy.backend == section.model_fields["backend"].default


def test_a_policy_without_backend_is_hf_and_carries_only_hf_settings() -> None:
    policy = load_config(None, {"policy.max_batch": 3}).policy
    assert isinstance(policy, HFPolicySection) and policy.max_batch == 3
    assert "url" not in policy.model_dump() and "lora" not in policy.model_dump()


def test_set_backend_openai_with_url_on_the_command_line_gives_an_openai_policy(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from evolve.cli.common import parse_setting

    overrides = {**parse_setting('policy.backend="openai"'), **parse_setting('policy.url="http://127.0.0.1:9/v1"')}
    policy = load_config(ROOT / "evolve.toml", overrides).policy
    assert isinstance(policy, OpenAIPolicySection) and policy.url == "http://127.0.0.1:9/v1"
    # the file's hf settings (max_batch) give way to the new backend; one set on the command line is refused
    code = main(["run", "--config", str(ROOT / "evolve.toml"), "--db", str(tmp_path / "s.db"),
                 "--set", 'policy.backend="vllm"', "--set", "policy.max_batch=2"])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 2 and "policy.max_batch is an hf setting; this policy's backend is vllm" in out
    assert not (tmp_path / "s.db").exists()


def test_an_experiment_policy_with_a_foreign_setting_is_named_by_its_index(tmp_path: Path) -> None:
    from evolve.engine.experiment_spec import load_experiment

    path = tmp_path / "e.toml"
    path.write_text('problems = ["fizzbuzz"]\niterations = 2\n[[policies]]\nname = "a"\n'
                    '[[policies]]\nname = "b"\nbackend = "vllm"\nurl = "http://h/v1"\n')
    with pytest.raises(ConfigError) as caught:
        load_experiment(path)
    assert str(caught.value) == f"{path}: policies.1.url is an openai setting; this policy's backend is vllm"


def test_a_run_stored_with_every_backends_settings_still_loads() -> None:
    """Stores written before the split hold all 30 policy keys; the other backends' (unused) ones are dropped."""
    flat = {"name": "p", "backend": "hf", "model": "", "max_batch": 2, "dtype": "auto", "device": "cpu",
            "threads": 1, "lora": "", "tensor_parallel_size": 1, "url": "", "api_key_env": "", "timeout_s": 300.0,
            "serve": False, "serve_port": 0, "serve_args": []}
    config = stored_config(json.dumps({"run": {"iterations": 3}, "policy": flat}))
    assert isinstance(config.policy, HFPolicySection) and (config.policy.max_batch, config.policy.threads) == (2, 1)
    served = {**flat, "backend": "openai", "url": "http://h/v1", "lora": "unused-without-serve"}
    config = stored_config(json.dumps({"policy": served}))
    assert isinstance(config.policy, OpenAIPolicySection) and config.policy.lora == ""
    assert stored_config(config.model_dump_json()) == config


def test_every_shipped_config_and_experiment_file_still_parses() -> None:
    from evolve.engine.experiment_spec import load_experiment
    from evolve.study.plan import load_study

    assert isinstance(load_config(ROOT / "evolve.toml").policy, LlamaCppPolicySection)
    studies = sorted((ROOT / "experiments").glob("study*.toml"))
    assert studies, "the shipped study files are gone"
    for path in sorted((ROOT / "experiments").glob("*.toml")):
        if path in studies:
            assert load_study(path).name
        else:
            assert load_experiment(path, db="x.db").policies


def test_a_sampling_run_stored_with_another_backend_names_the_backend_and_the_common_settings() -> None:
    from evolve.engine.sampling import settings_changed

    stored = load_config(None)
    wanted = load_config(None, {"policy.backend": "openai", "policy.url": "http://h/v1", "policy.temperature": 1.0})
    assert settings_changed(stored, wanted) == ["policy.backend 'hf' -> 'openai'", "policy.temperature 0.8 -> 1.0"]


def test_a_sampling_run_resumes_under_other_slots_context_or_threads_but_not_another_token_cap() -> None:
    from evolve.engine.sampling import settings_changed

    stored = load_config(None, {"policy.backend": "llamacpp"})
    roomier = load_config(None, {"policy.backend": "llamacpp", "policy.slots": 4, "policy.context": 4096,
                                 "policy.threads": 1})
    assert settings_changed(stored, roomier) == []  # they change what runs at once, not what is written
    longer = load_config(None, {"policy.backend": "llamacpp", "policy.max_new_tokens": 999})
    assert settings_changed(stored, longer) == [f"policy.max_new_tokens {stored.policy.max_new_tokens} -> 999"]


def one_error_line(capsys: pytest.CaptureFixture[str], code: int) -> str:
    out = capsys.readouterr()
    text = " ".join((out.out + out.err).split())
    assert code == 2 and "Traceback" not in out.out + out.err and text.startswith("config error:"), (code, text)
    assert len((out.out + out.err).strip().splitlines()) == 1, out
    return text


def featureless_problem(tmp_path: Path) -> Path:
    """A copy of fizzbuzz whose problem.toml declares no [map_elites] features: the run's own features are used."""
    folder = tmp_path / "programs" / "fizzbuzz"
    shutil.copytree(ROOT / "programs" / "fizzbuzz", folder)
    toml = folder / "problem.toml"
    toml.write_text(re.sub(r"\[map_elites\]\nfeatures = .*\n", "", toml.read_text()))
    assert "map_elites" not in toml.read_text()
    return folder.parent


@pytest.mark.parametrize("problem", ["featureless", "shipped"])
def test_an_unknown_map_elites_feature_is_one_config_line_before_any_model_loads_or_run_is_written(
        problem: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    programs = featureless_problem(tmp_path) if problem == "featureless" else ROOT / "programs"
    name = "fizzbuzz" if problem == "featureless" else "symbolic_regression"
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "runs.db"
    code = main(["run", "--plain", "--db", str(db), "--problem", name, "--set", f"run.programs_dir={programs}",
                 "--set", 'selection.map_elites.features=["nope"]'])
    text = one_error_line(capsys, code)
    assert "selection.map_elites.features" in text and "'nope'" in text and name in text, text
    assert "code_length, scalar" in text
    assert not db.exists()  # no store, so no run row either


def test_map_elites_features_naming_an_objective_are_accepted_and_a_repeated_one_is_refused(tmp_path: Path) -> None:
    from evolve.engine.run_setup import check_features
    from evolve.problems.problem import load_problem

    problem = load_problem("fizzbuzz", featureless_problem(tmp_path))
    check_features(("test_03", "scalar"), problem)
    with pytest.raises(ConfigError, match="'test_99' is no feature of problem fizzbuzz"):
        check_features(("test_99",), problem)
    with pytest.raises(ConfigError, match="feature names must be distinct; repeated: scalar"):
        load_config(None, {"selection.map_elites.features": ["scalar", "scalar"]})


@pytest.mark.parametrize(("url", "reason"), [
    ("http://[::1", "Invalid IPv6 URL"),
    ("ftp://127.0.0.1/v1", "http:// or https://"),
    ("127.0.0.1:8000/v1", "http:// or https://"),
    ("http:///v1", "names no host"),
    ("http://127.0.0.1:99999/v1", "Port out of range"),
    ("http://127.0.0.1:0/v1", "port must be 1..65535"),
    ("http://127.0.0.1:80x/v1", "Port could not be cast"),
    ("http://local host/v1", "no spaces"),
    ("http://[fe80::zz]/v1", "not a URL"),
    ("http://127.0.0.1:8000/v1?key=1", "no ?query"),
])
def test_a_policy_url_that_does_not_parse_is_refused_at_config_load(url: str, reason: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(None, {"policy.backend": "openai", "policy.url": url}, {"policy.url": f"--set policy.url={url}"})
    message = str(caught.value)
    assert message.startswith(f"--set policy.url={url}: invalid value for 'policy.url'") and reason in message
    assert "\n" not in message
    with pytest.raises(ConfigError, match=reason.replace("?", r"\?").replace("(", r"\(")):
        load_config(None, {"policy.backend": "openai", "policy.url": ["http://127.0.0.1:8000/v1", url]})
    for good in ("http://127.0.0.1:8000/v1", "https://api.example.com/v1", "http://[::1]:8000/v1", "http://h"):
        assert load_config(None, {"policy.backend": "openai", "policy.url": good}).policy.replica_urls() == [good]


@pytest.mark.parametrize(("key", "value"), [
    ("policy.timeout_s", 1e300), ("policy.timeout_s", 3601), ("policy.timeout_s", float("inf")),
    ("policy.timeout_s", float("nan")), ("policy.backoff_s", float("inf")), ("policy.startup_timeout_s", 1e300)])
def test_policy_timeouts_are_finite_and_bounded(key: str, value: float) -> None:
    settings = {"policy.backend": "openai", "policy.url": "http://127.0.0.1:8000/v1", key: value}
    if key == "policy.startup_timeout_s":
        settings = {"policy.backend": "openai", "policy.serve": True, key: value}
    with pytest.raises(ConfigError, match=rf"invalid value for '{key}'"):
        load_config(None, settings)
    assert load_config(None, {**settings, key: 3600}).policy.model_dump()[key.split(".")[1]] == 3600


@pytest.mark.parametrize(("key", "value"), [
    ("run.iterations", True), ("run.iterations", False), ("run.seed", True), ("run.concurrency", 2.0),
    ("selection.islands", True), ("selection.map_elites.bins", True), ("policy.answers", True),
    ("novelty.num_perm", 64.0), ("prompt_evolution.population", "3")])
def test_counts_are_strict_integers_not_booleans_floats_or_strings(key: str, value: object, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=rf"invalid value for '{key}'.*valid integer"):
        load_config(None, {key: value})
    section, name = key.rsplit(".", 1)
    path = write(tmp_path, f"[{section}]\n{name} = true\n")
    with pytest.raises(ConfigError, match=rf"{path}: invalid value for '{key}': True"):
        load_config(path)
