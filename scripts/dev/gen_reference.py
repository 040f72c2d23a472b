"""The documentation's generated references: every file key from the pydantic models and every command and option
from the argument parser, so neither can drift from the code. MkDocs loads this file as a hook (mkdocs.yml) and adds
the pages at build time; `python scripts/dev/gen_reference.py --out DIR` writes them for reading without MkDocs."""

from __future__ import annotations

import argparse
import html
import json
import math
import tomllib
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parents[2]
CONFIG_PAGE = "reference/config.md"
CLI_PAGE = "reference/cli.md"
CONFIG_CLASS = "config-reference"  # the CSS class docs/stylesheets/reference.css styles the page's tables by
REQUIRED = "required"


class Section(NamedTuple):
    """One table of a file: its TOML name ("run", "[[policies]]", "" for the top level), the model that reads it,
    the keys it leaves to other sections (a nested table, the common policy keys), a line saying what it is, and the
    keys the file's loader fills in when the file leaves them out (the model requires them)."""

    name: str
    model: type[BaseModel]
    note: str = ""
    skip: tuple[str, ...] = ()
    heading: str = ""
    filled: tuple[tuple[str, str], ...] = ()


class FileReference(NamedTuple):
    """One kind of file a user writes: its title, what it is, its sections and an example file whose values are
    shown beside the defaults (evolve.toml)."""

    title: str
    intro: str
    sections: tuple[Section, ...]
    example: Path | None = None


def toml_value(value: Any) -> str:
    """A default as it would be written in TOML (None: unset)."""
    if value is None:
        return "unset"
    if isinstance(value, BaseModel):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.model_dump().items()) + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def field_default(info: FieldInfo) -> str:
    """The default a key has when the file leaves it out, as TOML, or "required"."""
    if info.default_factory is not None:
        return toml_value(info.default_factory())  # type: ignore[call-arg]
    if info.default is PydanticUndefined:
        return REQUIRED
    return toml_value(info.default)


def type_name(annotation: Any) -> str:
    """A field's type as a user reads it: int, float, "a" | "b", list of str, a table."""
    origin = typing.get_origin(annotation)
    args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is typing.Literal:
        return " | ".join(json.dumps(arg) for arg in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        names = [type_name(arg) for arg in args]
        return " or ".join(dict.fromkeys(names)) + (" (optional)" if type(None) in typing.get_args(annotation) else "")
    if origin in (tuple, list):
        return f"list of {type_name(args[0])}" if args else "list"
    if origin is dict:
        return "table"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "table"
    name = getattr(annotation, "__name__", str(annotation))
    return "int" if name == "StrictInt" else name


def bounds(info: FieldInfo) -> str:
    """The limits pydantic enforces on a value: >= 1, <= 256, a pattern, a length."""
    words = []
    for item in info.metadata:
        for attribute, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if getattr(item, attribute, None) is not None:
                words.append(f"{sign} {getattr(item, attribute)}")
        for attribute, sign in (("min_length", ">="), ("max_length", "<=")):
            if getattr(item, attribute, None) is not None:
                words.append(f"length {sign} {getattr(item, attribute)}")
        if getattr(item, "pattern", None):
            words.append(f"matches `{item.pattern}`")
    return ", ".join(words)


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell: one line, pipes escaped, and outside `code` spans < > & escaped, so a
    description's "<tag_1>...</tag_1>" shows as written instead of becoming HTML."""
    parts = " ".join(text.split()).split("`")
    parts[::2] = [html.escape(part, quote=False) for part in parts[::2]]
    return "`".join(parts).replace("|", "\\|")


def lookup(data: dict[str, Any] | None, section: str, key: str) -> Any:
    """The value a shipped example file gives `section.key`, or None when it says nothing."""
    table: Any = data or {}
    for part in [p for p in section.split(".") if p]:
        table = table.get(part, {}) if isinstance(table, dict) else {}
    return table.get(key) if isinstance(table, dict) else None


def section_rows(section: Section, example: dict[str, Any] | None) -> Iterator[str]:
    """The Markdown table of one section: key, type, default, the example's value, allowed values, meaning."""
    shipped = example is not None
    yield "| key | type | default |" + (" evolve.toml |" if shipped else "") + " allowed | meaning |"
    yield "|---|---|---|" + ("---|" if shipped else "") + "---|---|"
    for key, info in section.model.model_fields.items():
        if key in section.skip:
            continue
        value = lookup(example, section.name, key) if shipped else None
        given = (f" {cell(toml_value(value))} |" if value is not None else " |") if shipped else ""
        default = f"({dict(section.filled)[key]})" if key in dict(section.filled) else f"`{field_default(info)}`"
        yield (f"| `{key}` | {cell(type_name(info.annotation))} | {cell(default)} |{given} "
               f"{cell(bounds(info))} | {cell(info.description or '')} |")


def render_file(reference: FileReference) -> list[str]:
    """One file's part of the configuration reference."""
    example = tomllib.loads(reference.example.read_text()) if reference.example else None
    lines = [f"## {reference.title}", "", reference.intro, ""]
    for section in reference.sections:
        lines += [f"### {section.heading or (f'`{section.name}`' if section.name else 'top level')}", ""]
        if section.note:
            lines += [section.note, ""]
        lines += [*section_rows(section, example), ""]
    return lines


def file_references() -> tuple[FileReference, ...]:
    """Every file a user writes, with the models that read it (imported here: MkDocs loads this module early)."""
    from evolve import config, policy_config
    from evolve.engine import experiment_spec
    from evolve.problems import cascade, objectives
    from evolve.problems import problem_file as problem
    from evolve.rl import train_config
    from evolve.study import config as study_config

    common = tuple(policy_config.BasePolicySection.model_fields)
    policy = [Section("policy", policy_config.BasePolicySection, "Every policy's keys, whatever its backend. "
                      "`[[policies]]` tables (an ensemble) take the same keys.")]
    for backend, model in policy_config.POLICY_BACKENDS.items():
        policy.append(Section("policy", model, f"{model.__doc__ or ''} Its own keys, besides the common ones (another "
                              "backend's key is refused in one line):", skip=common,
                              heading=f'`policy` with `backend = "{backend}"`'))
    run_config = FileReference(
        "evolve.toml (`evolve run`)",
        "Every key is optional; an unknown key or a bad value stops the command before anything starts, with one line "
        "naming the file, the key and what is allowed. The column evolve.toml is the value the shipped file sets. "
        "`--set SECTION.KEY=VALUE` overrides any key (VALUE is TOML).",
        (Section("run", config.RunSection), *policy,
         Section("selection", config.SelectionConfig, skip=("map_elites",)),
         Section("selection.map_elites", config.MapElitesSection),
         Section("ensemble", config.EnsembleSection, config.EnsembleSection.__doc__ or ""),
         Section("prompt_evolution", config.PromptEvolutionSection, config.PromptEvolutionSection.__doc__ or ""),
         Section("novelty", config.NoveltySection, config.NoveltySection.__doc__ or ""),
         Section("", config.RunConfig, "The tables above, and:",
                 skip=("run", "policy", "selection", "ensemble", "prompt_evolution", "novelty"))),
        ROOT / "evolve.toml")
    experiment = FileReference(
        "Experiment files (`evolve experiment FILE`)",
        "An experiment runs every cell (policy x problem x seed) in one store; see experiments/default.toml.",
        (Section("", experiment_spec.ExperimentSpec, skip=("run", "selection", experiment_spec.OVERRIDES_KEY),
                 filled=(("name", "the file's name less .toml"), ("db", "NAME.db beside the file"))),
         Section("run", experiment_spec.CellDefaults, experiment_spec.CellDefaults.__doc__ or ""),
         Section("selection", config.SelectionConfig, "As in evolve.toml.", skip=("map_elites",)),
         Section("[[policies]]", policy_config.BasePolicySection, "One table per policy: the `[policy]` keys of "
                 "evolve.toml, its backend's keys included."),
         Section("[[ensembles]]", experiment_spec.EnsembleArm, experiment_spec.EnsembleArm.__doc__ or ""),
         Section("arm_budget.ARM", experiment_spec.ArmBudget, experiment_spec.ArmBudget.__doc__ or "")))
    study = FileReference(
        "Study files (`evolve study FILE`)",
        "A study trains, samples, evolves and reports in one resumable command; see experiments/study_small.toml.",
        (Section("", study_config.StudySpec, skip=("training", "sampling", "evolution"),
                 filled=(("name", "the file's name less .toml"),)),
         Section("training", study_config.TrainingSection),
         Section("sampling", study_config.SamplingSection),
         Section("evolution", study_config.EvolutionSection, skip=("run", "selection")),
         Section("evolution.run", experiment_spec.CellDefaults),
         Section("evolution.selection", config.SelectionConfig, "As in evolve.toml.", skip=("map_elites",))))
    problem_file = FileReference(
        "problem.toml (a problem folder)",
        "Unknown keys are errors, named with the file and the key; `evolve check` validates a folder.",
        (Section("", problem.ProblemFile, skip=("score", "solved", "limits", "map_elites", "prompt", "cascade")),
         Section("objectives = {count, name}", objectives.ObjectiveCount, objectives.ObjectiveCount.__doc__ or ""),
         Section("objectives = {pattern}", objectives.ObjectivePattern, objectives.ObjectivePattern.__doc__ or ""),
         Section("score", problem.ScoreSection), Section("solved", problem.SolvedSection),
         Section("limits", problem.LimitsSection, "For each run of the candidate in the sandbox."),
         Section("map_elites", problem.MapElitesSection), Section("prompt", problem.PromptSection),
         Section("[[cascade]]", cascade.CascadeStageSection, cascade.CascadeStageSection.__doc__ or "")))
    train = FileReference(
        "Training settings (`evolve train --set KEY=VALUE`)",
        "`evolve train` takes these keys through its flags and `--set` (for example `--set lora.r=8`); a study's "
        "`[training.settings]` takes them too, less the keys the study sets itself.",
        (Section("", train_config.TrainConfig, skip=("lora",)), Section("lora", train_config.LoraSettings)))
    return run_config, experiment, study, problem_file, train


def config_reference() -> str:
    """The configuration reference page, from the pydantic models."""
    lines = ["# Configuration reference", "",
             "Generated from the pydantic models that read each file (`scripts/dev/gen_reference.py`), so it lists "
             "exactly the keys the code accepts, with the defaults it applies.", ""]
    for reference in file_references():
        lines += render_file(reference)
    return "\n".join(lines)


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser's subcommands by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(sorted(action.choices.items()))
    return {}


def option_rows(parser: argparse.ArgumentParser) -> Iterator[str]:
    """A table of a parser's arguments: spelling, value, default, help (hidden aliases left out)."""
    yield "| argument | value | default | meaning |"
    yield "|---|---|---|---|"
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
            continue
        spelling = ", ".join(f"`{option}`" for option in action.option_strings) or f"`{action.dest}`"
        if action.choices is not None:
            value = " | ".join(f"`{choice}`" for choice in action.choices)
        elif action.nargs == 0:
            value = ""
        else:
            value = f"`{action.metavar or action.dest.upper()}`"
        default = action.default
        shown = "" if default in (None, False, [], argparse.SUPPRESS) or action.nargs == 0 else f"`{default}`"
        yield f"| {spelling} | {cell(value)} | {cell(shown)} | {cell(action.help or '')} |"


def usage(parser: argparse.ArgumentParser) -> str:
    """The parser's usage line, wrapped at 100 columns whatever the terminal."""
    formatter = argparse.HelpFormatter(prog=parser.prog, width=100)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def command_section(name: str, parser: argparse.ArgumentParser) -> list[str]:
    """One subcommand: what it does, its usage, its arguments, its examples."""
    lines = [f"## evolve {name}", "", " ".join((parser.description or "").split()), "",
             "```text", usage(parser), "```", "", *option_rows(parser), ""]
    if parser.epilog:
        lines += ["```text", parser.epilog.strip(), "```", ""]
    return lines


def cli_reference() -> str:
    """The command-line reference page, from `evolve`'s argument parser."""
    from evolve.cli.main import _parser

    parser = _parser()
    lines = ["# Command-line reference", "",
             "Generated from the argument parser of `evolve` (`scripts/dev/gen_reference.py`); `evolve COMMAND --help` "
             "prints the same. `python -m evolve` is the same as `evolve`.", "",
             "```text", usage(parser), "```", "", *option_rows(parser), ""]
    for name, command in subcommands(parser).items():
        lines += command_section(name, command)
    return "\n".join(lines)


def on_files(files: Any, config: Any) -> Any:
    """MkDocs hook: add the generated pages to the site's files (nothing is written into docs/)."""
    from mkdocs.structure.files import File

    for page, render in ((CONFIG_PAGE, config_reference), (CLI_PAGE, cli_reference)):
        # the configuration tables have six columns: that page gives the site navigation's room to them
        front = "---\nhide:\n  - navigation\n---\n" if page == CONFIG_PAGE else ""
        files.append(File.generated(config, page, content=front + render()))
    return files


def on_page_content(content: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs hook: the configuration reference in div.config-reference, which docs/stylesheets/reference.css lays
    out (its six columns fit the page and the meaning wraps)."""
    if page.file.src_uri == CONFIG_PAGE:
        return f'<div class="{CONFIG_CLASS}">\n{content}\n</div>'
    return content


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True, help="folder to write reference/config.md and cli.md to")
    args = parser.parse_args()
    for page, render in ((CONFIG_PAGE, config_reference), (CLI_PAGE, cli_reference)):
        path = args.out / page
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render())
        print(path)


if __name__ == "__main__":
    main()
