"""The Python entry points behind `evolve run`, `evolve experiment` and `evolve report`: each does what its command
does (same output on the console, same store writes) and returns what happened instead of an exit code."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from rich.console import Console

if TYPE_CHECKING:
    from evolve.config import RunConfig
    from evolve.engine.events import Event, Observer
    from evolve.engine.experiment import ExperimentOutcome
    from evolve.engine.experiment_spec import ExperimentSpec
    from evolve.engine.run_driver import RunOutcome
    from evolve.report.results import ExperimentResults


def run(config: RunConfig | str | Path | None = None, *, overrides: Mapping[str, Any] | None = None,
        resume: int | None = None, on_event: Observer | None = None, progress: bool = False,
        blame: Mapping[str, str] | None = None) -> RunOutcome:
    """Run an evolution to its end (or resume run `resume` in the config's store) and return its outcome: run_id,
    status ('finished', 'interrupted' or 'policy_unavailable'; a resumable run either way), stats and db (the
    store the run is in, wherever the config put it: open it with `evolve.ProgramStore(outcome.db, mode="read")`).

    config: a RunConfig, an evolve.toml path (its relative paths, programs_dir and the store, are read from the
    file's folder), or None for the defaults; overrides: {'section.key': value} applied on top of a path or the
    defaults. With `resume`, the config (and an override of run.db) only says where the store is: the other
    overrides apply to the run's stored config, checked against its own policy's backend (run.problem, run.seed,
    run.iterations and policy.name stay as stored); a new run stores its programs_dir as an absolute path, one
    stored relative (before) is read from the config file's folder, and a problem folder that now declares other
    objectives than the run was scored on is refused. blame: {'section.key': how the user wrote it} for the error
    lines. Nothing is printed unless progress=True, which draws the run on the terminal as `evolve run` does (the
    live panel, or plain lines when stdout is no terminal, then the best program); on_event, if given, is called
    with every event of the run (evolve.engine.events: requests, evaluations, committed iterations). A mistake in
    the config, the problem or the store raises a UserError."""
    from evolve.config import ConfigError, RunConfig
    from evolve.engine.run_driver import run_evolution

    given = {key: value for key, value in (overrides or {}).items() if value is not None}
    located = {key: value for key, value in given.items() if key == "run.db" or resume is None}
    config_file = None if isinstance(config, RunConfig) else config  # a resumed run's programs_dir is read beside it
    if isinstance(config, RunConfig):
        if resume is None and given:
            raise ConfigError("evolve.run: overrides apply to a config file or the defaults; "
                              "change a RunConfig with model_copy(update=...) instead")
        if "run.db" in located:
            config = config.model_copy(update={"run": config.run.model_copy(update={"db": located["run.db"]})})
    else:
        config = load_run_config(config, located, blame)
    settled: RunConfig = config  # narrowed, for the function below

    def start(observe: Observer | None) -> RunOutcome:
        return run_evolution(settled, resume=resume, overrides=given if resume is not None else None, blame=blame,
                             on_event=observe, config_file=config_file)

    if not progress:
        return start(on_event)
    from evolve.report.run_drawing import draw_run

    return draw_run(lambda drawing: start(drawing if on_event is None else _both(drawing, on_event)))


def _both(first: Observer, second: Observer) -> Observer:
    """An observer that passes every event to `first`, then to `second`."""
    def observe(event: Event) -> None:
        first(event)
        second(event)

    return observe


def load_run_config(path: str | Path | None, overrides: Mapping[str, Any] | None = None,
                    blame: Mapping[str, str] | None = None) -> RunConfig:
    """A config file (or the defaults when path is None) with `overrides` ({'section.key': value}; None values are
    skipped) as load_config reads it, its relative paths then read from its own folder (see _beside_file): the
    config every command that takes an evolve.toml reads, so that they all find the store `evolve run` wrote."""
    from evolve.config import load_config

    given = {key: value for key, value in (overrides or {}).items() if value is not None}
    return _beside_file(load_config(path, given, dict(blame or {})), path, given)


def _beside_file(config: RunConfig, path: str | Path | None, given: Mapping[str, Any]) -> RunConfig:
    """The file's relative paths (run.programs_dir, a SQLite run.db) read from the file's folder, as a user who
    wrote them there means them; overrides stay relative to the working directory, where they were typed."""
    if path is None:
        return config
    folder = Path(path).parent
    update: dict[str, str] = {}
    if "run.programs_dir" not in given and not Path(config.run.programs_dir).is_absolute():
        update["programs_dir"] = str(folder / config.run.programs_dir)
    if "run.db" not in given and "://" not in config.run.db and not Path(config.run.db).is_absolute():
        update["db"] = str(folder / config.run.db)
    return config.model_copy(update={"run": config.run.model_copy(update=update)}) if update else config


def experiment_file(name_or_path: str | Path) -> Path:
    """An experiment file: a path, or a name that stands for experiments/NAME.toml."""
    path = Path(name_or_path)
    if path.suffix != ".toml" and not path.exists():
        path = Path("experiments") / f"{name_or_path}.toml"
    return path


def load_experiment_file(experiment: str | Path | ExperimentSpec, db: str | None = None,
                         overrides: Mapping[str, Any] | None = None) -> ExperimentSpec:
    """An ExperimentSpec as given, or read from a file (see experiment_file) with its store replaced by db and
    `overrides` applied to the file's keys ({"iterations": 4, "policies.*.temperature": 1.0}, as --set does)."""
    from evolve.config import ConfigError
    from evolve.engine.experiment_spec import ExperimentSpec, load_experiment

    if isinstance(experiment, ExperimentSpec):
        if overrides:
            raise ConfigError("overrides apply to an experiment file's keys: pass the file, not an ExperimentSpec")
        return experiment if db is None else experiment.model_copy(update={"db": db})
    return load_experiment(experiment_file(experiment), db, overrides)


def run_experiment(experiment: str | Path | ExperimentSpec, *, db: str | None = None, cluster: str | None = None,
                   overrides: Mapping[str, Any] | None = None, on_event: Observer | None = None,
                   pieces: Sequence[int] | None = None) -> ExperimentOutcome:
    """Run (or resume: finished cells are kept) every cell of an experiment: policies x problems x seeds.
    The outcome holds each cell's status, the errors met, and whether it finished or was interrupted.
    cluster="ray": each cell is a Ray task on the cluster at RAY_ADDRESS, or a local one (evolve/cluster/).
    An experiment of several pieces (`pieces = N` in its file) runs them in order, each into its own store;
    `pieces` runs those numbers only. Nothing is printed: on_event, if given, is called with every event
    (evolve.engine.events: the cells planned, each cell started and ended, the events of each cell's run, the
    experiment ended; once per piece)."""
    from evolve.engine.experiment import run_pieces

    spec = load_experiment_file(experiment, db, overrides)
    executor = None
    if cluster is not None:
        from evolve.cluster import cell_executor

        executor = cell_executor(cluster)
    return run_pieces(spec, pieces, on_event=on_event, executor=executor)


@dataclass(frozen=True)
class Report:
    """An experiment's report: every number (results) and the files written (HTML, JSON, CSV, the figures/ folder
    of standalone SVG charts)."""

    results: ExperimentResults
    files: tuple[Path, ...]


def experiment_report(experiment: str | Path | ExperimentSpec, *, db: str | None = None, out: str | Path | None = None,
           pairs: Literal["all", "first"] = "all", score_range: tuple[float, float] = (0.0, 1.0),
           console: Console | None = None, arms: Sequence[str] | None = None) -> Report:
    """Which problems each policy cracked, written to out (default reports/NAME/) as report.html, report.json and
    CSV files, and shown on `console` if one is given. An experiment file (or name) is reported with the design the
    experiment ran with, as its store keeps it (a file changed since is said so on the console, both designs
    named); an ExperimentSpec is reported as given. `arms`: those arms only, in that order (their comparisons are
    then the whole Holm family). StoreError when the experiment never ran in its store."""
    from rich.markup import escape

    from evolve.engine.experiment_pieces import piece_stores, stored_design
    from evolve.report.design import only_arms, report_design
    from evolve.report.report_files import write_report
    from evolve.report.results import collect
    from evolve.report.terminal import render_report
    from evolve.store.program_store import StoreError

    spec = load_experiment_file(experiment, db)
    stored = stored_design(spec)
    if stored is None:
        named = experiment if isinstance(experiment, str | Path) else spec.name
        raise StoreError(f"no experiment '{spec.name}' in {spec.db}; run `evolve experiment {named}` first")
    if isinstance(experiment, str | Path):
        design = report_design(experiment_file(experiment), stored, db)
        spec = design.spec
        if design.note and console is not None:
            color = "yellow" if design.severity == "warning" else "dim"
            console.print(f"[{color}]{design.severity}:[/] {escape(design.note)}", highlight=False, soft_wrap=True)
    if arms:
        spec = only_arms(spec, arms)
    stores = piece_stores(spec)
    try:
        results = collect(stores, spec, score_range=score_range, pairs=pairs)
    finally:
        for store in stores:
            store.close()
    files = write_report(results, Path(out or Path("reports") / spec.name))
    if console is not None:
        render_report(results, console)
        console.print("wrote " + ", ".join(str(path) for path in files), highlight=False)
    return Report(results, files)
