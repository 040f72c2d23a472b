"""Which design an experiment's report follows: the one the experiment ran with, as its store keeps it (the file
with the --set flags it ran with), and a note when the file has changed since, naming both designs."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from evolve.config import ConfigError
from evolve.engine.experiment_spec import ExperimentSpec, design_changes, load_experiment


@dataclass(frozen=True)
class ReportDesign:
    """The spec to report, and what to tell the user about it ("" and severity "" for nothing)."""

    spec: ExperimentSpec
    note: str = ""
    severity: Literal["", "note", "warning"] = ""


def set_flags(overrides: Mapping[str, Any]) -> str:
    """The --set flags that give `overrides`, as a user would write them."""
    return " ".join(f"--set {key}={json.dumps(value)}" for key, value in overrides.items())


def report_design(path: Path, stored_json: str | None, db: str | None = None,
                  asked: Mapping[str, Any] | None = None, labels: Mapping[str, str] | None = None) -> ReportDesign:
    """The design a report of the experiment file at `path` follows, given the spec its store keeps (`stored_json`,
    None when it never ran: then the file's, and the report says it never ran).

    Without `asked` (the report's own --set), the stored design: the one the cells ran with, whatever the file says
    now; a note when the file no longer gives it with the --set the experiment ran with (both designs named). With
    `asked`, the file and those --set, as asked; a warning naming both when that is not what ran."""
    now = load_experiment(path, db, asked or None, labels)
    if stored_json is None:
        return ReportDesign(now)
    try:
        ran = ExperimentSpec.model_validate(json.loads(stored_json) | {"db": now.db})
    except ValueError as exc:  # written by another version of evolve: a key this one lacks or refuses
        reason = str(exc).splitlines()[0]
        return ReportDesign(now, f"the design experiment {now.name} ran with is not readable here ({reason}); the "
                                 f"report follows {path}", "warning")
    if asked:
        changes = design_changes(ran, now)
        if not changes:
            return ReportDesign(ran)
        return ReportDesign(now, f"experiment {now.name} ran with another design than {path} with "
                                 f"{set_flags(asked)}; the report follows the file and the --set asked for (cells "
                                 f"they do not name are left out, new ones show as not run): ran -> asked: "
                                 f"{'; '.join(changes)}", "warning")
    try:
        then = load_experiment(path, db, ran.overrides or None)
    except ConfigError as exc:
        return ReportDesign(ran, f"{path} changed since experiment {ran.name} last ran (with the --set it ran with "
                                 f"it now reads: {exc}); the report follows the design it ran with", "warning")
    changes = design_changes(ran, then)
    flags = f" with {set_flags(ran.overrides)}" if ran.overrides else ""
    if changes:
        return ReportDesign(ran, f"{path} changed since experiment {ran.name} last ran{flags}; the report follows "
                                 f"the design it ran with, not the file's: ran -> the file now: {'; '.join(changes)}",
                            "warning")
    if ran.overrides:
        return ReportDesign(ran, f"experiment {ran.name} ran{flags}; the report follows that design", "note")
    return ReportDesign(ran)


def only_arms(spec: ExperimentSpec, arms: Sequence[str]) -> ExperimentSpec:
    """The design with only `arms`, in that order (the first is `--pairs first`'s): a report of some of the arms,
    whose Holm family is their comparisons alone (a registered primary comparison beside exploratory ablations).
    ConfigError for an unknown arm, or an ensemble without every one of its members."""
    unknown = [arm for arm in arms if arm not in spec.arm_names()]
    if unknown or not arms or len(set(arms)) != len(arms):
        raise ConfigError(f"--arms {','.join(arms)}: name distinct arms of experiment {spec.name} "
                          f"({', '.join(spec.arm_names())})" + (f"; not among them: {', '.join(unknown)}"
                                                                 if unknown else ""))
    policies = {policy.name for policy in spec.policies}
    is_policy = [arm in policies for arm in arms]
    if is_policy != sorted(is_policy, reverse=True):  # a policy after an ensemble
        raise ConfigError(f"--arms {','.join(arms)}: name the policies before the ensembles (a report lists them so)")
    data = spec.model_dump()
    data["answers_per_iteration"] = spec.answers_per_iteration_of_cells()  # as the cells ran, whichever arms remain
    ensembles = [entry for arm in arms for entry in data["ensembles"] if entry["name"] == arm]
    for entry in ensembles:
        missing = [member for member in entry["members"] if member not in arms]
        if missing:
            raise ConfigError(f"--arms: ensemble {entry['name']} needs its members among the arms too "
                              f"(add {', '.join(missing)})")
    data["policies"] = [entry for arm in arms for entry in data["policies"] if entry["name"] == arm]
    data["ensembles"] = ensembles
    for key in ("arm_seeds", "arm_selection", "arm_budget"):
        data[key] = {arm: value for arm, value in data[key].items() if arm in arms}
    try:
        return ExperimentSpec.model_validate(data)
    except ValueError as exc:
        raise ConfigError(f"--arms {','.join(arms)}: {str(exc).splitlines()[0]}") from None
