"""A study's results as Markdown (STUDY/report/results.md), from its study_report.json: the arms and the paired
comparison with intervals and p-values, the cracked count per problem and policy with its exact interval,
evolution against plain sampling, tokens, time per stage, and the report's figures embedded. A README's
"Results" section is this text with the figures' folder given from the README's place."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from evolve.report.cell_status import parts_text

# the charts embedded, by figures/ file name, with their captions (figures.py names them)
FIGURES = (
    ("cracked_share-iterations.svg", "Share of test problems cracked against iterations (mean over evolution seeds, "
                                     "pointwise band)"),
    ("best_score-iterations.svg", "Best score so far against iterations, mean over test problems"),
    ("cracked_share-tokens.svg", "Share cracked against generated tokens"),
    ("cracked_share-arms-answers.svg", "Share of test problems cracked against candidate answers, one line per arm, "
                                       "its checkpoints pooled (equal answers)"),
    ("training-reward.svg", "Training: mean reward per step, one line per training run"),
    ("training-kl.svg", "Training: KL to the base per step"),
)


README_FIGURES = ("cracked_share-iterations.svg", "cracked_share-tokens.svg")


def results_markdown(document: Mapping[str, Any], figures: str = "figures",
                     present: Iterable[str] | None = None, whole: str | None = None) -> str:
    """The Markdown of a study_report.json `document`; `figures` is the figures/ folder as the reader's page links
    it; `present`: the figure file names that exist (a figure not among them is left out; None: all).

    `whole`: where the reader's page finds the whole results (results.md): then this is the README's shorter form,
    the arms, their paired differences, sampling, budget and training reward with two curves, and a link to
    `whole` for each problem's cells, the wall time and every figure."""
    shown = set(present) if present is not None else None
    parts = [_interim(document), _redone(document), _arms(document), _differences(document),
             "" if whole else _per_problem(document), _sampling(document), _tokens(document),
             _reward_change(document), "" if whole else _seconds(document)]
    pictures = [f"![{caption}]({figures.rstrip('/')}/{name})" for name, caption in FIGURES
                if (shown is None or name in shown) and (whole is None or name in README_FIGURES)]
    if pictures:
        parts.append("### Curves\n\n" + "\n\n".join(pictures))
    notes = document.get("arm_notes") or []
    if notes:
        parts.append("### Notes\n\n" + "\n".join(f"- {note}" for note in notes))
    if whole:
        parts.append(f"Each problem's cells, the wall time and every figure: [the whole results]({whole}).")
    return "\n\n".join(part for part in parts if part) + "\n"


def _interim(document: Mapping[str, Any]) -> str:
    interim = document.get("interim")
    if not interim:
        return ""
    pieces = interim.get("pieces", 1)
    parts = interim.get("parts", [[1, seed] for seed in interim["seeds"]])  # a report written before parts
    unit = "whole seeds" if pieces == 1 else "same problems and seeds"
    return (f"**Interim results, the study under way: {parts_text(parts, pieces)} finished for every arm "
            f"({interim['cells_counted']} of {interim['cells']} cells).** Every evolution number below compares the "
            f"arms on those {unit} only; the final report replaces these.")


def redone_lines(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line per reason the study ran some evolution cells again (`evolve study --redo`): how many, whose, why."""
    by_reason: dict[str, list[Mapping[str, Any]]] = {}
    for record in records:
        by_reason.setdefault(str(record.get("reason", "")), []).append(record)
    return [f"{len(cells)} evolution cell{'s' * (len(cells) != 1)} run again "
            f"({', '.join(sorted({str(r.get('policy')) + ' seed ' + str(r.get('seed')) for r in cells}))}; the first "
            f"runs kept in the store as NAME~redone-K): {reason}" for reason, cells in by_reason.items()]


def _redone(document: Mapping[str, Any]) -> str:
    lines = redone_lines(document.get("redone") or [])
    return "**Cells run again.**\n\n" + "\n".join(f"- {line}" for line in lines) if lines else ""


def _num(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _interval(interval: Mapping[str, Any] | None, digits: int = 3) -> str:
    if not interval:
        return "–"
    return f"[{interval['low']:.{digits}f}, {interval['high']:.{digits}f}]"


def _p(value: float | None) -> str:
    if value is None:
        return "–"
    return "< 0.001" if value < 0.001 else f"{value:.3f}"


def _table(head: list[str], rows: list[list[str]], align: list[str] | None = None) -> str:
    align = align or ["---"] + ["---:"] * (len(head) - 1)
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _arms(document: Mapping[str, Any]) -> str:
    arms: Mapping[str, Any] = document.get("arms") or {}
    if not arms:
        return ""
    rows = []
    for name, arm in arms.items():
        pooled = arm["pooled"]
        seeds = "; ".join(f"t{seed}: {_num(share['crack_share'])}" for seed, share in arm["per_training_seed"].items())
        spread = arm.get("spread")
        rows.append([f"`{name}`", _num(pooled["crack_share"]), _interval(pooled["interval"]),
                     f"{pooled['cracked_cells']}/{pooled['cells']}", _interval(pooled["cells_interval"]),
                     f"{pooled['problems_cracked']}/{pooled['problems']}", seeds or "–",
                     _num(spread["range"]) if spread else "–"])
    seeds = document.get("training_seeds") or []
    claim = document.get("claim", "checkpoints")
    lead = (f"Claim: **{claim}** ({len(seeds)} training seed{'s' * (len(seeds) != 1)} per trained algorithm). "
            "Crack share: per test problem the share of its cells (one per evolution seed and checkpoint that ran "
            "it) that cracked it, "
            "then the mean over problems with its betting interval; cells: cracked cells / cells with the exact "
            "Clopper-Pearson interval.")
    return "### Arms\n\n" + lead + "\n\n" + _table(
        ["arm", "crack share", "interval", "cells cracked", "interval", "problems cracked", "per training seed",
         "spread"], rows)


def _difference_rows(differences: list[Mapping[str, Any]]) -> str:
    rows = []
    for d in differences:
        mean = d["mean"]
        rows.append([f"`{d['policy_a']}` − `{d['policy_b']}`", _num(mean["estimate"]), _interval(mean),
                     _num(mean["width"]), f"{d['wins']}/{d['losses']}/{d['ties']}", _p(d["permutation_p"]),
                     _p(d["permutation_p_holm"]), "yes" if d["significant"] else "no"])
    return _table(["pair", "mean difference", "interval", "width", "wins/losses/ties", "p", "p (Holm)",
                   "significant"], rows)


def _differences(document: Mapping[str, Any]) -> str:
    differences = document.get("arm_differences") or []
    if not differences:
        return ""
    alpha = differences[0].get("alpha", 0.05)
    family = differences[0].get("family", len(differences))
    over = (f"the {family} registered comparisons (the study's `comparisons`, the primary first)"
            if document.get("arm_differences_registered") else f"the {family} pairs")
    text = ("### Paired comparisons\n\n"
            f"Per test problem the difference of the two arms' crack shares, paired across problems; the mean with "
            f"its {1 - alpha:.0%} betting interval (and width), wins/losses/ties over problems, the sign-flip "
            f"permutation p-value raw and Holm-adjusted over {over}; significant means Holm-adjusted p <= "
            f"{alpha:g}.\n\n" + _difference_rows(differences))
    exploratory = document.get("arm_differences_exploratory") or []
    if exploratory:
        count = len(exploratory)
        text += ("\n\n### Other pairs of arms (exploratory, not registered)\n\n"
                 f"The same measures for the {count} pair{'s' * (count != 1)} the study did not register, "
                 "Holm-adjusted among themselves; no headline rests on them.\n\n" + _difference_rows(exploratory))
    return text


def _per_problem(document: Mapping[str, Any]) -> str:
    cracked: Mapping[str, Any] = (document.get("evolution") or {}).get("cracked") or {}
    if not cracked:
        return ""
    policies = list(cracked)
    problems = sorted({problem for summary in cracked.values() for problem in summary["per_problem"]})
    rows = []
    for problem in problems:
        cells = []
        for policy in policies:
            row = cracked[policy]["per_problem"].get(problem)
            cells.append("–" if row is None else f"{row['cracked_seeds']}/{row['seeds_run']} "
                                                 f"{_interval(row['interval'], 2)}")
        rows.append([problem.rsplit("/", 1)[-1], *cells])
    return ("### Cracked per problem\n\nEvolution seeds that cracked the problem out of those run, with the exact "
            "95 % Clopper-Pearson interval.\n\n" + _table(["problem", *[f"`{p}`" for p in policies]], rows))


def _sampling(document: Mapping[str, Any]) -> str:
    sampling: Mapping[str, Any] = document.get("sampling") or {}
    cracked: Mapping[str, Any] = (document.get("evolution") or {}).get("cracked") or {}
    evolution = document.get("evolution") or {}
    if not sampling:
        return ""
    rows = []
    for policy, problems in sampling.items():
        if not problems:
            continue
        n = max(row["n"] for row in problems.values())
        solved = sum(row["c"] > 0 for row in problems.values())
        pass1 = sum(row["pass@1"] for row in problems.values()) / len(problems)
        evolved = cracked.get(policy)
        ran = evolved and any(row["seeds_run"] for row in (evolved.get("per_problem") or {}).values())
        rows.append([f"`{policy}`", str(n), f"{pass1:.3f}", f"{solved}/{len(problems)}",
                     f"{evolved['problems_cracked']}/{evolved['problems']}" if ran else "– (no cell run yet)"])
    answers = (evolution.get("iterations") or 0) * (evolution.get("answers_per_iteration") or 0)
    return ("### Evolution against plain sampling\n\n"
            f"Plain sampling: n answers per test problem from the seed prompt, pass@1 averaged over problems, and "
            f"the problems some answer solved; evolution: problems some evolution seed cracked within "
            f"{answers or 'its'} answers per cell. The budgets differ: a problem's n sampled answers stand against "
            f"up to {answers or 'its'} answers in each of its evolution cells, so this table is no comparison at "
            f"equal answers.\n\n"
            + _table(["policy", "n", "pass@1", "solved by sampling", "cracked by evolution"], rows))


def _tokens(document: Mapping[str, Any]) -> str:
    evolution: Mapping[str, Any] = (document.get("evolution") or {}).get("tokens") or {}
    sampling: Mapping[str, Any] = document.get("sampling_tokens") or {}
    if not evolution and not sampling:
        return ""
    rows = []
    for policy in dict.fromkeys([*evolution, *sampling]):
        e, s = evolution.get(policy) or {}, sampling.get(policy) or {}
        rows.append([f"`{policy}`", str(e.get("answers", "–")), _evaluated(e.get("evaluations"), e.get("answers")),
                     str(e.get("completion_tokens", "–")),
                     _num(e.get("tokens_per_answer"), 1), ", ".join(map(str, e.get("max_new_tokens") or [])) or "–",
                     _num(s.get("tokens_per_answer"), 1)])
    return ("### Budget\n\nAnswers asked for and generated tokens per arm in evolution (the cap is per answer: an "
            "m-answer completion may write m times it), the programs evaluated (answers that became a new child: "
            "an answer missing from its completion, unusable or a duplicate is not evaluated, so an arm that writes "
            "fewer usable answers searches with fewer programs for the same answers), and tokens per answer in "
            "plain sampling.\n\n"
            + _table(["policy", "answers", "programs evaluated", "tokens", "tokens per answer", "cap per answer",
                      "tokens per answer (sampling)"], rows))


def _evaluated(evaluations: int | None, answers: int | None) -> str:
    """Programs evaluated with their share of the answers asked for; "–" for a report written before they were."""
    if evaluations is None:
        return "–"
    return f"{evaluations} ({evaluations / answers:.0%})" if answers else str(evaluations)


def _reward_change(document: Mapping[str, Any]) -> str:
    changes = document.get("training_reward_change") or []
    if not changes:
        return ""
    rows = [[c["run"], str(c["steps"]), str(c["problems"]), f"{_num(c['first'])} → {_num(c['last'])}",
             "–" if c.get("change") is None else f"{c['change']:+.3f}", f"{c['up']} / {c['down']}",
             _p(c["p_value"]), _flat_groups(c)] for c in changes]
    return ("### Did the training reward move?\n\n" + f"{document.get('training_reward_change_method', '')}.\n\n"
            + _table(["training run", "steps", "train problems", "reward first → last quarter", "change",
                      "up / down", "p", "groups without spread"], rows))


def _flat_groups(change: Mapping[str, Any]) -> str:
    """"106 / 200"; "–" for a report written before groups were counted."""
    return f"{change['flat_groups']} / {change['groups']}" if change.get("groups") else "–"


def _seconds(document: Mapping[str, Any]) -> str:
    seconds: Mapping[str, float] = document.get("stage_seconds") or {}
    if not seconds:
        return ""
    rows = [[stage, f"{value / 3600:.2f}"] for stage, value in seconds.items()]
    return "### Wall time\n\n" + _table(["stage", "hours"], rows)
