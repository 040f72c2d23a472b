"""`evolve sample`: plain sampling without evolution; pass@k and best@k per problem, and the hard problems."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from evolve.cli.conventions import add_out_flag, add_set_flag


def add_commands(commands: argparse._SubParsersAction) -> None:
    sample = commands.add_parser("sample", help="n answers per problem without evolution: pass@k, best@k, the hard "
                                 "problems (best@k = 0)")
    which = sample.add_mutually_exclusive_group(required=True)
    which.add_argument("--problems", help="comma-separated problem names (in --programs-dir) or folders")
    which.add_argument("--problems-file", metavar="FILE", help="one problem per line ('#' comments)")
    sample.add_argument("--config", "-c", default=None, help="TOML config whose [policy] samples "
                        "(default: ./evolve.toml if present)")
    add_set_flag(sample, "policy.temperature=1.0")
    sample.add_argument("-n", type=int, default=10, help="answers per problem (default 10); an m-answer policy "
                        "makes ceil(n / m) requests")
    sample.add_argument("-k", default="1,10", help="comma-separated k for pass@k and best@k (default 1,10)")
    sample.add_argument("--db", help="store for the sampling runs (default: the config's run.db)")
    sample.add_argument("--seed", type=int, help="seed: each problem samples on a seed derived from it and the "
                        "problem's name (never the streams of that problem's experiment cells)")
    sample.add_argument("--programs-dir", help="where problem folders live (default: the config's, programs)")
    sample.add_argument("--parallel", type=int, default=2, help="problems sampled at once, sharing the policy")
    add_out_flag(sample, "also write every figure as JSON to FILE", old=("--json",), metavar="FILE")
    sample.add_argument("--hard-out", metavar="FILE", help="write the hard problems, one per line")
    sample.add_argument("--hard-by", choices=["best", "pass"], default="best",
                        help="hard means best@K = 0 (default) or pass@K = 0, K the largest k")


def problem_list(args: argparse.Namespace) -> list[str]:
    """The problems named on the command line or in --problems-file, in order, each once."""
    from evolve.config import ConfigError

    if args.problems_file:
        try:
            lines = Path(args.problems_file).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ConfigError(f"--problems-file {args.problems_file}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"--problems-file {args.problems_file}: not UTF-8 text (byte {exc.start} is "
                              f"{exc.object[exc.start:exc.start + 1].hex()}); write one problem name per line as "
                              "UTF-8") from None
        names = [line.split("#", 1)[0].strip() for line in lines]
    else:
        names = [name.strip() for name in args.problems.split(",")]
    names = list(dict.fromkeys(name for name in names if name))
    if not names:
        raise ConfigError(f"{args.problems_file or '--problems'}: no problem named")
    return names


def cmd_sample(args: argparse.Namespace, console: Console) -> int:
    from evolve.cli.common import check_output_path, run_config, write_output
    from evolve.config import ConfigError
    from evolve.engine.sampling import plan_samples, problem_sample, requests_for, run_samples
    from evolve.stats.passk import EstimatorError, check_k, parse_ks
    from evolve.store.program_store import ProgramStore, shown_store

    try:
        ks = parse_ks(args.k)
        if args.n < 1:
            raise EstimatorError(f"-n {args.n}: sample at least one answer per problem")
        check_k(args.n, ks[-1])
    except EstimatorError as exc:
        raise ConfigError(str(exc)) from None
    if args.parallel < 1:
        raise ConfigError(f"--parallel {args.parallel}: sample at least one problem at a time")
    for path in (args.out, args.hard_out):  # before the sampling, not after it: written only once it is done
        if path:
            check_output_path(path)
    overrides: dict[str, Any] = {"run.db": args.db, "run.seed": args.seed, "run.programs_dir": args.programs_dir}
    base = run_config(args, overrides)
    problems = problem_list(args)
    store = ProgramStore(base.run.db)
    plans = plan_samples(store, base, problems, args.n)
    m = base.policy.answers
    requests = requests_for(args.n, m)
    per_request = "1 answer per request"
    if m > 1:
        per_request = f"m = {m} answers per request, so n = {args.n} answers is {requests} requests per problem"
        if requests * m != args.n:
            per_request += f" ({requests * m} answers, all used in the estimates)"
    todo = sum(not plan.finished for plan in plans)
    console.print(f"sample: policy [bold]{base.policy.name}[/] ({base.policy.backend}: {base.policy.model or 'default'}"
                  f"), {per_request}; {len(plans)} problems ({len(plans) - todo} already sampled), store "
                  f"{shown_store(base.run.db)}", highlight=False, soft_wrap=True)

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    progress = Progress(*columns, console=console, transient=True)
    bar = progress.add_task("requests", total=sum(plan.config.run.iterations for plan in plans))
    requests_done = {plan.config.run.name: plan.config.run.iterations for plan in plans if plan.finished}

    def moved(plan: Any, done: int) -> None:
        requests_done[plan.config.run.name] = done
        progress.update(bar, completed=sum(requests_done.values()))

    def finished(plan: Any, run_id: int) -> None:
        result = problem_sample(store, plan, run_id, args.n)
        progress.console.print(f"  {plan.problem.name}: {result.c}/{result.n} answers solved, best "
                               f"{max(result.scalars):.3f}, {result.completion_tokens:,} tokens "
                               f"({result.tokens_per_answer:,.1f} per answer) (run {run_id})", highlight=False)

    with progress:
        progress.update(bar, completed=sum(requests_done.values()))
        outcome = run_samples(store, plans, args.parallel, finished, moved)
    for error in outcome.errors:
        console.print(f"[red]error:[/] {error}", highlight=False)
    samples = [problem_sample(store, plan, outcome.finished[plan.config.run.name], args.n) for plan in plans
               if plan.config.run.name in outcome.finished]
    render_table(console, samples, ks, base.policy.name, base.policy.max_new_tokens)
    rerun = "the runs are saved; the same command resumes them"
    if outcome.interrupted or len(samples) < len(plans):
        missing = len(plans) - len(samples)
        console.print(f"{missing} problem{'s' * (missing != 1)} not sampled to the end; {rerun}", highlight=False)
    hard = hard_problems(samples, ks[-1], args.hard_by)
    if args.hard_out:
        write_output(args.hard_out, "".join(f"{name}\n" for name in hard))
        console.print(f"wrote {len(hard)} hard problem{'s' * (len(hard) != 1)} ({args.hard_by}@{ks[-1]} = 0) "
                      f"to {args.hard_out}", highlight=False)
    if args.out:
        document = sample_json(samples, ks, base, args.n, hard, args.hard_by)
        write_output(args.out, json.dumps(document, indent=1) + "\n")
        console.print(f"wrote {args.out}", highlight=False)
    if outcome.interrupted:
        return 130
    return 0 if len(samples) == len(plans) else 1


def hard_problems(samples: list[Any], k: int, by: str) -> list[str]:
    """The problems whose best@k (or pass@k) is 0 at this k."""
    return [s.problem for s in samples if (s.best_at(k) <= 0.0 if by == "best" else s.pass_at(k) == 0.0)]


def means(samples: list[Any], ks: tuple[int, ...]) -> dict[str, dict[str, float]]:
    if not samples:
        return {"pass@k": {}, "best@k": {}}
    return {"pass@k": {str(k): sum(s.pass_at(k) for s in samples) / len(samples) for k in ks},
            "best@k": {str(k): sum(s.best_at(k) for s in samples) / len(samples) for k in ks}}


def render_table(console: Console, samples: list[Any], ks: tuple[int, ...], policy: str,
                 cap: int | None = None) -> None:
    """n answers in `req` requests, c of them solved, `err` requests failed; `seed` is the seed program's scalar;
    `tokens` generated, `tok/ans` per answer (`cap`: the policy's per-answer token cap, named below the table)."""
    from evolve.report.study_report import sample_tokens

    table = Table(title=f"plain sampling: {policy}")
    table.add_column("problem", overflow="fold")
    for column in ("seed", "n", "req", "c", *[f"pass@{k}" for k in ks], *[f"best@{k}" for k in ks], "err",
                   "tokens", "tok/ans"):
        table.add_column(column, justify="right", no_wrap=True)
    for s in samples:
        table.add_row(s.problem, f"{s.seed_scalar:.3f}", str(s.n), str(s.requests), str(s.c),
                      *[f"{s.pass_at(k):.3f}" for k in ks], *[f"{s.best_at(k):.3f}" for k in ks],
                      str(s.failed_requests), f"{s.completion_tokens:,}", f"{s.tokens_per_answer:,.1f}")
    if samples:
        mean, total = means(samples, ks), sample_tokens(samples)
        table.add_section()
        table.add_row(f"mean ({len(samples)})", "", "", "", "", *[f"{mean['pass@k'][str(k)]:.3f}" for k in ks],
                      *[f"{mean['best@k'][str(k)]:.3f}" for k in ks], "", "", "")
        table.add_row(f"total ({len(samples)})", "", str(total["answers"]), str(sum(s.requests for s in samples)),
                      str(sum(s.c for s in samples)), *[""] * (2 * len(ks)),
                      str(sum(s.failed_requests for s in samples)), f"{total['completion_tokens']:,}",
                      "-" if total["tokens_per_answer"] is None else f"{total['tokens_per_answer']:,.1f}")
    console.print(table)
    capped = f" (the cap is {cap:,} per answer: a request for m answers may generate m times it)" if cap else ""
    console.print("n answers in req requests, c solved, err failed requests; seed: the seed program's scalar (an "
                  "answer that leaves it unchanged, fails, or is missing scores 0); tokens generated by the "
                  f"requests, tok/ans per answer{capped}", highlight=False)


def sample_json(samples: list[Any], ks: tuple[int, ...], base: Any, n: int, hard: list[str],
                hard_by: str) -> dict[str, Any]:
    """Every figure; per problem and in "total" the generated tokens and tokens per answer."""
    from evolve.report.study_report import sample_tokens

    return {
        "policy": base.policy.model_dump(mode="json"),
        "seed": base.run.seed,
        "n": n,
        "answers_per_request": base.policy.answers,
        "k": list(ks),
        "problems": [{"problem": s.problem, "run_id": s.run_id, "seed_scalar": s.seed_scalar, "n": s.n,
                      "requests": s.requests, "c": s.c,
                      "failed_requests": s.failed_requests, "completion_tokens": s.completion_tokens,
                      "tokens_per_answer": s.tokens_per_answer,
                      "distinct_programs": s.distinct_programs, "distinct_patterns": s.distinct_patterns,
                      "pass@k": {str(k): s.pass_at(k) for k in ks}, "best@k": {str(k): s.best_at(k) for k in ks},
                      "scalars": list(s.scalars)} for s in samples],
        "mean": means(samples, ks),
        "total": sample_tokens(samples) | {"requests": sum(s.requests for s in samples),
                                           "failed_requests": sum(s.failed_requests for s in samples),
                                           "max_new_tokens_per_answer": base.policy.max_new_tokens},
        "hard": {"by": f"{hard_by}@{ks[-1]} = 0", "problems": hard},
    }
