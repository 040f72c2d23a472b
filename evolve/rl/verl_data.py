"""veRL training data: a parquet file of evolve's mutation prompts, one row per (prompt, copy), for veRL's RLHFDataset.

Each row is what `evolve run` would ask for the problem's seed program (the prompt `evolve train` trains on), in the
layout veRL's RLHFDataset and reward loop read: ``prompt`` (chat messages), ``data_source``, ``ability``,
``reward_model.ground_truth`` (the problem name) and ``extra_info`` (the settings evolve.rl.verl_reward reads:
problem, answers, edit_format, answer_tag, programs_dir, parent_code). With ``--parents-db`` the best unsolved
evolved programs of each problem in an evolve store get prompts too, as in `evolve train`. veRL renders the chat
template itself and cannot open the assistant turn, so the prompts are built without the engine's prefill. A row is
repeated ``copies`` times because veRL draws whole batches of rows (``data.train_batch_size``) and drops an
incomplete last one.

    python -m evolve.rl.verl_data --problems fizzbuzz lis --answers 3 --copies 64 --out data/evolve_train.parquet

Needs pyarrow (veRL installs it).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from evolve.config import ConfigError
from evolve.engine.offspring import SeedProgramError
from evolve.policy_config import HFPolicySection
from evolve.problems.problem import ProblemError, load_problem
from evolve.rl.rollouts import parent_prompt, parents_store, refuse_tested_parents, seed_prompt, stored_parents
from evolve.rl.verl_reward import programs_dir
from evolve.search.prompt_templates import load_template
from evolve.search.prompts import PromptOptions

DATA_SOURCE = "evolve"


async def dataset_rows(
    problems: Sequence[str],
    answers: int = 1,
    edit_format: Literal["rewrite", "diff"] = "rewrite",
    answer_tag: str = "response",
    template: str = "default",
    copies: int = 1,
    programs: Path | None = None,
    parents_db: str = "",
    parents_per_problem: int = 4,
) -> list[dict[str, Any]]:
    """One row per prompt and copy, prompts interleaved (copy 0 of each, then copy 1, ...). A prompt per problem's
    seed, and with `parents_db` per evolved parent (evolve.rl.rollouts.stored_parents), its code in `parent_code`."""
    folder = programs_dir(programs)
    # veRL renders the chat template and cannot open the assistant turn: no prefill. Unchecked, as before
    policy = HFPolicySection.model_construct(edit_format=edit_format, answers=answers, answer_tag=answer_tag,
                                             template=template, prefill=False)
    options = PromptOptions.from_policy(policy)
    chosen = load_template(policy.template)
    if parents_db:
        refuse_tested_parents(parents_db, problems)
    store = parents_store(parents_db) if parents_db else None
    prompts: list[tuple[str, list[dict[str, str]], str]] = []
    for name in problems:
        problem = load_problem(name, folder)
        seed, prompt = await seed_prompt(problem, options, chosen)
        parents = stored_parents(store, problem, parents_per_problem) if store is not None else []
        prompts.append((problem.name, prompt.messages, seed.code))
        prompts += [(problem.name, parent_prompt(problem, parent, options, chosen).messages, parent.code)
                    for parent in parents]
    return [
        {
            "data_source": f"{DATA_SOURCE}/{name}",
            "prompt": [dict(message) for message in messages],
            "ability": "code",
            "reward_model": {"style": "rule", "ground_truth": name},
            "extra_info": {"problem": name, "answers": answers, "edit_format": edit_format, "answer_tag": answer_tag,
                           "programs_dir": str(folder.resolve()), "parent_code": parent_code,
                           "index": copy * len(prompts) + position},
        }
        for copy in range(copies)
        for position, (name, messages, parent_code) in enumerate(prompts)
    ]


def write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise SystemExit(f"writing parquet needs pyarrow ({exc}): pip install pyarrow, or use veRL's venv") from exc
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evolve.rl.verl_data", description=__doc__.splitlines()[0])
    parser.add_argument("--problems", nargs="+", required=True, help="problem names under programs/, or folders")
    parser.add_argument("--answers", type=int, default=1, help="m answers per completion (VPO: 3)")
    parser.add_argument("--edit-format", choices=["rewrite", "diff"], default="rewrite")
    parser.add_argument("--answer-tag", default="response")
    parser.add_argument("--template", default="default", help="prompt template name or folder")
    parser.add_argument("--copies", type=int, default=1, help="rows per problem")
    parser.add_argument("--programs-dir", type=Path, default=None)
    parser.add_argument("--parents-db", default="", help="an evolve store: also prompts for its runs' best unsolved "
                        "programs of each problem (as `evolve train --parents-db`)")
    parser.add_argument("--parents-per-problem", type=int, default=4)
    parser.add_argument("--out", type=Path, required=True, help="the parquet file to write")
    args = parser.parse_args(argv)
    if args.answers < 1 or args.copies < 1:
        parser.error("--answers and --copies must be at least 1")
    try:
        rows = asyncio.run(dataset_rows(args.problems, args.answers, args.edit_format, args.answer_tag,
                                        args.template, args.copies, args.programs_dir, args.parents_db,
                                        args.parents_per_problem))
    except (ProblemError, SeedProgramError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_parquet(rows, args.out)
    print(f"wrote {len(rows)} rows ({len(rows) // args.copies} prompts x {args.copies} copies) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
