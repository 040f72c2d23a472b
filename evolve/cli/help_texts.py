"""The description and examples `evolve COMMAND --help` prints for every subcommand, applied in one place so that
each command reads the same way; the help of flags several commands share; argparse's errors as one line."""

from __future__ import annotations

import argparse
import difflib
import sys
import textwrap
from dataclasses import dataclass
from typing import NoReturn

# The help of a flag that a command declared without one, by its dest: the same words wherever it appears.
SHARED_FLAG_HELP = {
    "config": "TOML config the store is read from with --db unset (default: ./evolve.toml if present)",
    "db": "SQLite file or SQLAlchemy URL (default: from config)",
}


@dataclass(frozen=True)
class CommandHelp:
    description: str
    examples: tuple[str, ...]


COMMAND_HELP: dict[str, CommandHelp] = {
    "run": CommandHelp(
        "Run an evolution: the policy proposes children of selected parents, the problem's evaluator scores them, "
        "the store keeps every program and attempt. Settings come from ./evolve.toml (or --config), then the flags, "
        "then every --set. A killed run continues with --resume.",
        ("evolve run --problem fizzbuzz --iterations 20",
         "evolve run --set run.stop_when_solved=true --set policy.temperature=1.0",
         "evolve run --resume 3 --db evolve.db")),
    "runs": CommandHelp(
        "List the runs in a store: problem, policy, seed, status, iterations done, programs and best scalar.",
        ("evolve runs", "evolve runs --db results/default.db | cat")),
    "show": CommandHelp(
        "One run at a glance (best programs, first solve, failures, throughput), or one of its programs. Programs "
        "are numbered 1..N within their run in the order they were stored (1 is the seed): RUN:N or --run RUN N "
        "shows program N of run RUN; --id ID shows a program by its store-wide id. --code prints a program's code "
        "alone and -o FILE writes it to a file: with RUN alone, the run's best program.",
        ("evolve show 3", "evolve show 3:12", "evolve show --run 3 12", "evolve show --id 4711",
         "evolve show 3 --json", "evolve show 3 -o best.py", "evolve show 3:12 --code | less")),
    "lineage": CommandHelp(
        "Replay a program's ancestry from the seed: each step's diff and the objectives it gained or lost. The "
        "program is numbered within the run (as `evolve show` prints it); --id takes a store-wide id.",
        ("evolve lineage 3", "evolve lineage 3 12", "evolve lineage 3 --id 4711",
         "evolve lineage 3 --out lineage.html")),
    "export": CommandHelp(
        "The whole run as JSONL, one record per policy call: parent, prompt, completion, child and scores.",
        ("evolve export 3 > run3.jsonl", "evolve export 3 --out run3.jsonl")),
    "experiment": CommandHelp(
        "Run (or resume) every cell of an experiment file: policies x problems x seeds, each cell a run in one "
        "store. Run it again after a kill and it continues. --set KEY=VALUE overrides a key of the experiment file: "
        "top-level keys (iterations=2), tables (run.concurrency=2, selection.islands=2) and a policy's keys by "
        "index, name or * for all (policies.0.max_new_tokens=64, policies.*.temperature=1.0).",
        ("evolve experiment experiments/default.toml",
         "evolve experiment experiments/default.toml --set iterations=4 --set run.concurrency=2",
         "evolve experiment experiments/default.toml --plain | tee experiment.log")),
    "report": CommandHelp(
        "Which problems each policy of an experiment cracked, with intervals and paired differences: printed, and "
        "written as report.html, report.json and CSV files.",
        ("evolve report default", "evolve report experiments/default.toml --out reports/default",
         "evolve report default --pairs first --score-range 0,1")),
    "problems": CommandHelp(
        "List the problems in a programs folder: objectives, how the vector reduces to a scalar, when it is solved.",
        ("evolve problems", "evolve problems --programs-dir programs/humaneval | cat")),
    "check": CommandHelp(
        "Validate a problem folder (problem.toml, initial.py, evaluator.py) and score its initial program; with "
        "--solution, score that file instead (exit code 1 unless it is solved); with --prompt, also print the "
        "prompt the policy gets for the initial program.",
        ("evolve check fizzbuzz", "evolve check programs/my_problem", "evolve check fizzbuzz --prompt",
         "evolve check fizzbuzz --solution tests/solutions/fizzbuzz.py")),
    "new-problem": CommandHelp(
        "Scaffold a working problem folder whose comments teach the contract: problem.toml, initial.py, "
        "evaluator.py, driver.py; --template io-tests writes tests as data instead (tests.toml: input/expected "
        "pairs, one objective per test).",
        ("evolve new-problem my_problem", "evolve new-problem my_problem --template io-tests",
         "evolve new-problem my_problem --programs-dir ~/problems")),
    "import": CommandHelp(
        "Turn a benchmark into problem folders (humaneval: 164 problems, one objective per test; generated: seeded "
        "compositions of list and string operations, --difficulty of them, 12 hidden tests each).",
        ("evolve import humaneval", "evolve import humaneval --ids 0-19,32 --out programs/he20",
         "evolve import generated --count 50 --difficulty 2 --seed 0")),
    "train": CommandHelp(
        "RL-train a policy (VPO, GRPO, Multi-RLVR, Max@K) on problems' own evaluators, LoRA by default; the "
        "checkpoint is a model folder a run's policy.model can name. --set KEY=VALUE reaches any training key.",
        ("evolve train --algo vpo --problems fizzbuzz --steps 20 --out checkpoints/vpo",
         "evolve train --config train.toml --set lora.r=8",
         "evolve train --resume checkpoints/vpo --steps 40")),
    "sample": CommandHelp(
        "Plain sampling without evolution: n answers per problem from the seed program, pass@k and best@k per "
        "problem, and the hard problems (best@k = 0).",
        ("evolve sample --problems fizzbuzz,lis -n 10 -k 1,10",
         "evolve sample --problems-file hard.txt --set policy.temperature=1.0 --out sample.json",
         "evolve sample --problems fizzbuzz -n 4 --hard-out hard.txt")),
    "study": CommandHelp(
        "A whole study in one resumable command: train policies with equal budgets, sample and evolve with each "
        "and the base model on held-out problems, and report. Run it again after a kill and it continues.",
        ("evolve study experiments/study_small.toml", "evolve study experiments/study_small.toml --until sample",
         "evolve study experiments/study_small.toml --status")),
    "serve": CommandHelp(
        "A read-only web view of a store: runs and experiments, each run's program tree drawn live, a program's "
        "code, diff, prompt and scores. Binds 127.0.0.1 unless told otherwise.",
        ("evolve serve", "evolve serve --db results/default.db --port 8765")),
}


def apply_help(commands: argparse._SubParsersAction) -> None:
    """Give each subcommand its description and an examples epilog (kept where a command set its own)."""
    for name, parser in commands.choices.items():
        entry = COMMAND_HELP.get(name)
        if entry is None:
            continue
        parser.description = parser.description or textwrap.fill(entry.description, 100)
        if not parser.epilog:
            parser.epilog = "examples:\n" + "\n".join(f"  {line}" for line in entry.examples)
        parser.formatter_class = argparse.RawDescriptionHelpFormatter


def fill_flag_help(parser: argparse.ArgumentParser) -> None:
    """Give every flag of `parser` and its subcommands declared without help the shared words (SHARED_FLAG_HELP)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                fill_flag_help(sub)
        elif action.help is None and action.dest in SHARED_FLAG_HELP:
            action.help = SHARED_FLAG_HELP[action.dest]


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, `evolve CMD: error: ...`, and a hint line pointing at
    `evolve CMD --help` (with a guess for a mistyped subcommand), instead of the whole usage block."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        print(f"hint: {self._guess(message)}see `{self.prog} --help`", file=sys.stderr)
        raise SystemExit(2)

    def _guess(self, message: str) -> str:
        """'did you mean `evolve runs`? ' for an invalid subcommand close to one; '' otherwise."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and "invalid choice: " in message:
                typed = message.split("invalid choice: ", 1)[1].split(" (", 1)[0].strip("'\"")
                close = difflib.get_close_matches(typed, list(action.choices), n=1)
                if close:
                    return f"did you mean `{self.prog} {close[0]}`? "
        return ""
