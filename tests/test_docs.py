"""The user guide: the generated references list every key (with the default the code applies) and every command and
option, README stays short and shows the commands CI runs, and the site builds with `mkdocs build --strict`."""

from __future__ import annotations

import re
import runpy
import subprocess
import sys
import tomllib
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import BaseModel

from evolve.engine.experiment_spec import OVERRIDES_KEY

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "dev" / "gen_reference.py"
README_COMMANDS = ("bash scripts/install.sh && .venv/bin/evolve run", "bash scripts/install.sh && bash scripts/test.sh")


@pytest.fixture(scope="module")
def gen() -> SimpleNamespace:
    """scripts/dev/gen_reference.py's functions."""
    return SimpleNamespace(**runpy.run_path(str(SCRIPT)))


def cells(line: str) -> list[str]:
    """A Markdown table row's cells, unescaped."""
    return [part.strip().replace("\\|", "|") for part in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def tables(page: str) -> dict[str, dict[str, list[str]]]:
    """Each `### heading` of a page (numbered in order, headings repeat across files) -> its rows by key."""
    found: dict[str, dict[str, list[str]]] = {}
    for number, chunk in enumerate(page.split("\n### ")[1:]):
        heading, _, body = chunk.partition("\n")
        rows = [cells(line) for line in body.splitlines() if line.startswith("| `")]
        found[f"{number}: {heading}"] = {row[0].strip("`"): row for row in rows}
    return found


def nested_models(annotation: object) -> Iterator[type[BaseModel]]:
    """The pydantic models a field's annotation holds (a table, a list of tables, the policy union)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in typing.get_args(annotation):
        yield from nested_models(arg)


def reachable(roots: tuple[type[BaseModel], ...]) -> set[type[BaseModel]]:
    seen: set[type[BaseModel]] = set()
    todo = list(roots)
    while todo:
        model = todo.pop()
        if model not in seen:
            seen.add(model)
            todo += [nested for info in model.model_fields.values() for nested in nested_models(info.annotation)]
    return seen


def root_models() -> tuple[type[BaseModel], ...]:
    from evolve.config import RunConfig
    from evolve.engine.experiment_spec import ExperimentSpec
    from evolve.problems.problem_file import ProblemFile
    from evolve.rl.train_config import TrainConfig
    from evolve.study.config import StudySpec

    return RunConfig, ExperimentSpec, StudySpec, ProblemFile, TrainConfig


def filled(row: list[str], default: str) -> bool:
    """A required key whose row says what the loader puts there when the file leaves it out."""
    return default == "required" and row[2].startswith("(") and row[2].endswith(")")


def is_table(annotation: object) -> bool:
    """A field that is a table or a list of tables (documented under its own heading): a model, or a union of them."""
    if isinstance(annotation, type):
        return issubclass(annotation, BaseModel)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated or origin is tuple and args[-1:] == (Ellipsis,):
        return is_table(args[0])
    return origin in (typing.Union, types.UnionType) and all(is_table(arg) for arg in args)


def test_the_config_reference_lists_every_key_of_every_file_model_with_the_models_default(gen: SimpleNamespace) -> None:
    found = tables(gen.config_reference())
    models = reachable(root_models())
    assert len(models) >= 20
    for model in models:
        fields = model.model_fields
        expected = {key: gen.field_default(info) for key, info in fields.items()}
        # the sections that document this model: only its keys, each with the default the model applies (a policy's
        # backend is the union's tag: one row gives the default of a table without one, "hf"; a key the model
        # requires may say in parentheses what the file's loader fills in)
        covering = [rows for rows in found.values() if rows and set(rows) <= set(fields)
                    and all(row[2].strip("`") == expected[key] or key == "backend" or filled(row, expected[key])
                            for key, row in rows.items())]
        documented = set().union(*covering) if covering else set()
        not_keys = {OVERRIDES_KEY} if model.__name__ == "ExperimentSpec" else set()  # the --set flags, stored
        missing = {key for key, info in fields.items()
                   if key not in documented | not_keys and not is_table(info.annotation)}
        assert not missing, f"{model.__name__}: no row (with the model's default) for {sorted(missing)}"
        assert not documented & not_keys, f"{model.__name__}: {sorted(not_keys)} is no key of the file"


def test_the_config_reference_states_the_defaults_and_the_shipped_values_that_once_disagreed(gen: SimpleNamespace) -> None:
    evolve_toml = gen.config_reference().split("\n## ")[1]  # the first file: evolve.toml
    rows = {heading.split(": ", 1)[1]: table for heading, table in tables("\n" + evolve_toml).items()}
    assert rows["`run`"]["concurrency"][2:4] == ["`4`", "16"]
    assert rows["`selection`"]["inspirations"][2:4] == ["`2`", "1"]


def test_every_value_the_shipped_evolve_toml_sets_is_in_its_column(gen: SimpleNamespace) -> None:
    shipped = tomllib.loads((ROOT / "evolve.toml").read_text())
    evolve_toml = gen.config_reference().split("\n## ")[1]
    by_section: dict[str, dict[str, list[str]]] = {}
    for heading, rows in tables("\n" + evolve_toml).items():
        name = (re.findall(r"`([^`]*)`", heading) or [""])[0]
        for key, row in rows.items():
            by_section.setdefault(name, {})[key] = row

    def leaves(table: dict[str, object], prefix: str = "") -> Iterator[tuple[str, str, object]]:
        for key, value in table.items():
            if isinstance(value, dict):
                yield from leaves(value, f"{prefix}{key}.")
            else:
                yield prefix.rstrip("."), key, value

    checked = 0
    for section, key, value in leaves(shipped):
        assert by_section[section][key][3] == gen.toml_value(value), f"{section}.{key}"
        checked += 1
    assert checked >= 20


def test_the_cli_reference_lists_every_subcommand_and_option(gen: SimpleNamespace) -> None:
    import argparse

    from evolve.cli.main import _parser

    page = gen.cli_reference()
    sections = {chunk.partition("\n")[0]: chunk for chunk in page.split("\n## evolve ")[1:]}
    commands = gen.subcommands(_parser())
    assert {"run", "experiment", "report", "serve", "study", "train", "sample"} <= set(commands)
    assert set(sections) == set(commands)
    for name, parser in commands.items():
        for action in parser._actions:
            if action.help == argparse.SUPPRESS:
                continue
            for spelling in action.option_strings or [action.dest]:
                assert f"`{spelling}`" in sections[name], f"evolve {name} {spelling}"


def test_readme_is_short_and_shows_the_commands_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    for command in README_COMMANDS:
        assert f"```bash\n{command}\n```" in readme
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/install.sh" in ci and "bash scripts/test.sh" in ci


def test_readme_links_to_pages_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(((?:docs/)[^)#]+)", readme)
    assert len(links) >= 8
    for link in links:
        assert (ROOT / link).exists(), link


def test_user_pages_tell_the_present_not_the_history() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for page in pages:
        if page.name in ("study_cpu.md", "ARCHITECTURE.md"):  # a registered plan with its changes; a design record
            continue
        text = page.read_text()
        for pattern in (r"/tmp/", r"this session", r"\bcommit [0-9a-f]{7,40}\b", r"\(\b[0-9a-f]{7}\b\)"):
            assert not re.search(pattern, text), f"{page.relative_to(ROOT)}: {pattern}"


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    pytest.importorskip("mkdocstrings_handlers.python")
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                           cwd=ROOT, capture_output=True, text=True, env={"NO_MKDOCS_2_WARNING": "1",
                                                                         "PATH": "/usr/bin:/bin"})
    assert built.returncode == 0, built.stderr[-3000:]
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text()
    import evolve

    for name in evolve.__all__:
        if not name.startswith("_"):
            assert f'id="evolve.{name}"' in api, name
    assert "concurrency" in (tmp_path / "site" / "reference" / "config" / "index.html").read_text()


RUN_LENGTH_ANSWER = '''def encode(s: str) -> str:
    out, start, variant = [], 0, {number}
    while start < len(s):
        end = start
        while end < len(s) and s[end] == s[start]:
            end += 1
        out.append(f"{{end - start}}{{s[start]}}")
        start = end
    return "".join(out)
'''


def python_example(page: Path, after: str) -> str:
    """The first ```python block after `after` in a page, up to its first experiment line (those need a model)."""
    text = page.read_text().split(after, 1)[1]
    block = text.split("```python\n", 1)[1].split("```", 1)[0]
    return block.split("evolve.run_experiment", 1)[0]


@pytest.mark.parametrize(("page", "after"), [("README.md", "**From Python.**"),
                                             ("docs/tutorial/first-run.md", "## From Python")])
def test_the_python_example_runs_from_another_folder(page: str, after: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    from tests.scripted_policy_server import ScriptedPolicyServer

    code = python_example(ROOT / page, after)
    assert 'evolve.run("evolve.toml"' in code
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    shutil.copytree(ROOT / "programs" / "run_length", project / "programs" / "run_length")
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with ScriptedPolicyServer(lambda number, body: RUN_LENGTH_ANSWER.format(number=number)) as server:
        (project / "evolve.toml").write_text(
            '[run]\nproblem = "run_length"\nconcurrency = 2\neval_workers = 2\n\n[policy]\nbackend = "openai"\n'
            f'model = "m"\nprefill = false\nretries = 0\nurl = "{server.url}"\n')
        exec(code.replace('"evolve.toml"', repr(str(project / "evolve.toml"))), {})  # noqa: S102 - the page's code
    out = capsys.readouterr().out
    assert (project / "evolve.db").is_file() and not (elsewhere / "evolve.db").exists()
    assert "finished {" in out and "def encode" in out
    if "progress=True" in code:  # the run drawn as `evolve run` draws it
        assert "starting run 1: problem run_length" in out and "[20/20]" in out and "run 1 finished" in out
