"""`evolve train`: VPO / GRPO / Multi-RLVR / Max@K post-training of a local HF model on the engine's own prompts.

One step: sample G completions for each of `prompts_per_step` prompts (rollouts.py; vllm_rollouts.py with
`rollouts = "vllm"`), turn each group's rewards into advantages (estimators.compute_advantages), take `epochs` passes
of `minibatches` AdamW steps each on the dual-clip PPO loss plus k3 KL to the reference (loss.py), append the step's
statistics (objective_logs.py) to OUT/train_log.jsonl. Checkpoints OUT/step_N/ and OUT/final/ are full HF folders
(LoRA merged) that `evolve run --set policy.model=OUT/final` loads; OUT/final/adapter/ holds the LoRA adapter alone
(for vLLM's `policy.lora`). Every checkpoint folder (and its adapter/) holds its own evolve_training.json: the
training problems, algorithm, seed, base model, the held-out test problems training was checked against and the
hashes of its weights (checkpoints.py). OUT/resume/state.pt (checkpoints.py) lets `evolve train --resume OUT` go on
after a kill.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from evolve.engine.offspring import ChildScorer
from evolve.policies.cpu import cpu_threads
from evolve.policies.provenance import TRAIN_CONFIG_FILE, TrainingProvenance
from evolve.problems.evaluation import resolve_objectives
from evolve.problems.evaluator_pool import EvaluatorPool
from evolve.problems.problem import load_problem
from evolve.rl.checkpoints import (
    HELD_OUT_FILE,
    load_state,
    save_checkpoint,
    save_held_out,
    save_state,
    stored_held_out,
)
from evolve.rl.estimators import compute_advantages
from evolve.rl.loss import completion_logprobs, rl_loss
from evolve.rl.objective_logs import step_stats
from evolve.rl.rollouts import Group, Task, collect, collect_sampled, make_task, parents_store, stored_parents
from evolve.rl.train_config import ESTIMATOR_NAMES, TrainConfig
from evolve.search.prompt_templates import PromptTemplate, load_template
from evolve.search.prompts import PromptOptions
from evolve.seeds import MODEL_INIT, ROLLOUT_SAMPLING, VPO_WEIGHTS, derive
from evolve.stop_signals import cancelled_by_signals


def load_model(config: TrainConfig) -> tuple[Any, Any, Path]:
    """Tokenizer and trainable model (LoRA-wrapped unless full fine-tuning), in `dtype` on `device`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as transformers_logging

    from evolve.policies.model_files import resolve_model

    transformers_logging.disable_progress_bar()
    path = resolve_model(config.base, None)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, config.dtype))
    if config.lora.enabled:
        from peft import LoraConfig, get_peft_model

        lora = config.lora
        model = get_peft_model(model, LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                                 target_modules=list(lora.target_modules), task_type="CAUSAL_LM"))
    model.to(config.torch_device)
    model.eval()  # no dropout: the log-probs of the loss are those of the sampling distribution
    return tokenizer, model, path


def reference_scope(model: Any, frozen: Any | None) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """A context factory yielding the reference model: the base with LoRA disabled, or the frozen copy."""
    @contextlib.contextmanager
    def scope() -> Iterator[Any]:
        if frozen is not None:
            yield frozen
        else:
            with model.disable_adapter():
                yield model
    return scope


def group_advantages(config: TrainConfig, group: Group, step: int, index: int) -> np.ndarray:
    """Advantages ``[G]`` of one group with the configured estimator; the seed is that group's at that step."""
    return compute_advantages(ESTIMATOR_NAMES[config.algo], group.estimator_input(), config.estimator_settings,
                              derive(config.seed, VPO_WEIGHTS, step, index))


Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def group_batch(group: Group, device: torch.device) -> Batch:
    """prompt [P], completions [G, C] right-padded with token 0, mask [G, C], on `device`."""
    width = max(1, max(len(r.completion_ids) for r in group.rollouts))
    ids = torch.zeros(len(group.rollouts), width, dtype=torch.long)
    mask = torch.zeros(len(group.rollouts), width)
    for row, rollout in enumerate(group.rollouts):
        ids[row, :len(rollout.completion_ids)] = torch.tensor(rollout.completion_ids, dtype=torch.long)
        mask[row, :len(rollout.completion_ids)] = 1.0
    return torch.tensor(group.task.prompt_ids, dtype=torch.long).to(device), ids.to(device), mask.to(device)


def minibatch_groups(count: int, minibatches: int) -> list[list[int]]:
    """Group indices split in order into `minibatches` runs of near-equal length (none empty)."""
    bounds = np.linspace(0, count, min(minibatches, count) + 1).round().astype(int)
    return [list(range(start, stop)) for start, stop in zip(bounds[:-1], bounds[1:], strict=True)]


def optimise(model: Any, reference: Callable[[], contextlib.AbstractContextManager[Any]], batches: list[Batch],
             advantages: list[np.ndarray], config: TrainConfig,
             optimizer: torch.optim.Optimizer) -> dict[str, float | None]:
    """`epochs` passes over the step's groups, each `minibatches` AdamW steps (groups split in order).

    The old log-probs of every group are the policy's before the step's first update: the first minibatch's are
    taken from its first forward (nothing has moved yet), every later minibatch's are computed up front without
    gradients. Each update's loss is the token mean over its minibatch; the logged terms are the last pass's,
    token-weighted over the step. With `kl_coef` 0 the reference is never run, so `kl` is None (not 0: unknown).
    """
    device = config.torch_device
    total = float(sum(mask.sum() for _, _, mask in batches))
    refs: list[torch.Tensor | None] = [None] * len(batches)
    autocast = config.autocast_dtype
    computed = (lambda: torch.autocast(device.type, dtype=autocast)) if autocast else contextlib.nullcontext
    if config.kl_coef > 0:
        with torch.no_grad(), reference() as ref_model, computed():
            refs = [completion_logprobs(ref_model, p, c, config.temperature, lengths=m.sum(1))[0]
                    for p, c, m in batches]
    runs = minibatch_groups(len(batches), config.minibatches)
    olds: list[torch.Tensor | None] = [None] * len(batches)
    if config.epochs * len(runs) > 1:
        with torch.no_grad(), computed():
            for index in (i for run in runs[1:] for i in run):
                prompt, completion, mask = batches[index]
                olds[index] = completion_logprobs(model, prompt, completion, config.temperature,
                                                  lengths=mask.sum(1))[0]
    sums = {"pg_loss": 0.0, "kl": 0.0, "clip_frac": 0.0, "dual_clip_frac": 0.0, "ppo_kl": 0.0, "entropy": 0.0}
    params = [p for p in model.parameters() if p.requires_grad]
    grad_norm = 0.0
    for epoch in range(config.epochs):
        for run in runs:
            run_tokens = float(sum(batches[i][2].sum() for i in run))
            for index in run:
                prompt, completion, mask = batches[index]
                with computed():  # the backward pass runs in the dtypes its forward chose
                    logp, entropy = completion_logprobs(model, prompt, completion, config.temperature,
                                                        with_entropy=epoch == 0, lengths=mask.sum(1),
                                                        entropy_grad=config.entropy_coef > 0)
                old = olds[index]
                if old is None:  # the first minibatch of the first pass: the parameters have not moved yet
                    old = olds[index] = logp.detach()
                adv = torch.as_tensor(advantages[index], dtype=torch.float32, device=device)
                parts = rl_loss(logp, old, refs[index], adv, mask, config.clip, config.kl_coef, denom=run_tokens,
                                clip_ratio_c=config.clip_ratio_c, entropy=entropy, entropy_coef=config.entropy_coef)
                parts.loss.backward()
                if epoch == config.epochs - 1:
                    for key in ("pg_loss", "kl", "clip_frac", "dual_clip_frac", "ppo_kl"):
                        sums[key] += getattr(parts, key) * parts.tokens / max(total, 1.0)
                if entropy is not None and epoch == 0:
                    sums["entropy"] += float((entropy.detach() * mask).sum()) / max(total, 1.0)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, config.grad_clip))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    return sums | {"grad_norm": grad_norm, "kl": sums["kl"] if config.kl_coef > 0 else None}


async def training_tasks(config: TrainConfig, tokenizer: Any, options: PromptOptions,
                         template: PromptTemplate) -> list[Task]:
    """Each problem's seed prompt, then (with `parents_db`) prompts for its best evolved programs in that store."""
    problems = [await resolve_objectives(load_problem(name, Path(config.programs_dir))) for name in config.problems]
    tasks = [await make_task(problem, tokenizer, options, template) for problem in problems]
    if config.parents_db:
        store = parents_store(config.parents_db)
        for problem in problems:
            for parent in stored_parents(store, problem, config.parents_per_problem):
                tasks.append(await make_task(problem, tokenizer, options, template, parent))
    return tasks


async def sample_step(config: TrainConfig, step: int, tasks: list[Task], model: Any, tokenizer: Any,
                      sampler: Any, scorer: ChildScorer) -> list[Group]:
    """The step's groups: `prompts_per_step` tasks in turn, G rollouts each, from vLLM or the model."""
    chosen = [tasks[((step - 1) * config.prompts_per_step + i) % len(tasks)] for i in range(config.prompts_per_step)]
    seeds = [derive(config.seed, ROLLOUT_SAMPLING, step, i) for i in range(len(chosen))]
    if sampler is not None:  # vLLM or llama.cpp, sampling with the adapter as it is now
        sampler.sync(model, step)
        return await collect_sampled(sampler, chosen, config.group_size, seeds, scorer, config.temperature)
    return await collect(model, tokenizer, chosen, config.group_size, seeds, scorer, config.temperature)


def llamacpp_sampler(config: TrainConfig, out: Path, base_path: Path, model: Any, tasks: list[Task]) -> Any:
    """The llama.cpp rollout engine on the base model's GGUF (the embedded file, or one converted from the folder),
    in a process of its own, its slots sized to the longest training prompt plus its token budget."""
    from evolve.policies.llamacpp import model_files
    from evolve.rl.llamacpp_rollouts import LlamaCppSampler

    files = model_files(config.base)
    longest = max(len(task.prompt_ids) + task.prompt.max_new_tokens for task in tasks)
    return LlamaCppSampler(files.gguf, out / "rollout_adapter", base_path, model.config, config.lora.alpha,
                           slots=config.rollout_slots, context=max(256, longest + 16), threads=config.threads,
                           engines=config.rollout_engines)


def training_provenance(config: TrainConfig, problem_names: tuple[str, ...],
                        held_out: tuple[str, ...] = ()) -> TrainingProvenance:
    """The record every checkpoint of this run carries (its `steps` set per checkpoint): the problems by name."""
    return TrainingProvenance(problems=problem_names, algo=config.algo, steps=config.steps, base=config.base,
                              seed=config.seed, held_out=held_out)


def step_line(record: dict[str, Any], steps: int) -> str:
    return (f"step {record['step']}/{steps}: reward {record['reward']:.3f}  scored {record['scored_answers']:.2f}  "
            f"diversity {record['diversity']:.2f}  adv_std {record['adv_std']:.2f}  "
            f"kl {'-' if record['kl'] is None else format(record['kl'], '.2e')}  "
            f"entropy {record['entropy']:.2f}  {record['tokens']} tokens  {record['seconds']:.0f}s")


def keep_step(config: TrainConfig, out: Path, step: int, model: Any, tokenizer: Any, optimizer: torch.optim.Optimizer,
              records: list[dict[str, Any]], provenance: TrainingProvenance) -> None:
    """After step `step`: its periodic checkpoint OUT/step_N (`save_every`), then the resume state, then its log line.

    In this order a kill anywhere leaves the resume state at the last step whose files are all written: a kill before
    the state is saved makes the resumed run redo step N (same seeds, same samples) and write step_N again. The other
    way round, a kill between the two left the state at N and no step_N, which the resumed run never wrote. A kill
    before the log line is harmless: a resumed run writes the log afresh from the state's records.
    """
    if config.save_every and step % config.save_every == 0 and step < config.steps:
        save_checkpoint(model, tokenizer, out / f"step_{step}", config.lora.enabled,
                        provenance.model_copy(update={"steps": step}))
    save_state(out, model, optimizer, step, records)
    with (out / "train_log.jsonl").open("a") as log:
        log.write(json.dumps(records[-1]) + "\n")


async def _train(config: TrainConfig, console: Console, resume: bool, held_out: tuple[str, ...]) -> Path:
    if config.parents_db:  # before the model loads: a wrong path is one line at once
        parents_store(config.parents_db)
    torch.set_num_threads(cpu_threads(config.threads))
    torch.manual_seed(derive(config.seed, MODEL_INIT))
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / TRAIN_CONFIG_FILE).write_text(config.model_dump_json(indent=2) + "\n")
    tokenizer, model, base_path = load_model(config)
    frozen = None if config.lora.enabled else copy.deepcopy(model).requires_grad_(False)
    reference = reference_scope(model, frozen)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    done, records = load_state(out, model, optimizer) if resume else (0, [])
    log_path = out / "train_log.jsonl"
    log_path.write_text("".join(json.dumps(record) + "\n" for record in records))
    if resume:
        console.print(f"resuming {out} after step {done} of {config.steps}", highlight=False)
    options = PromptOptions.from_policy(config.prompt_policy)
    template = load_template(config.template)
    tasks = await training_tasks(config, tokenizer, options, template)
    if held_out:
        save_held_out(out, held_out)
    elif resume:
        held_out = stored_held_out(out) or ()
    else:
        (out / HELD_OUT_FILE).unlink(missing_ok=True)  # a list left by an earlier run in OUT is not this one's
    provenance = training_provenance(config, tuple(dict.fromkeys(task.problem.name for task in tasks)), held_out)
    # one cache for the run (each child is evaluated once), on warm evaluator processes closed when training ends
    scorer = ChildScorer(config.eval_workers, pool=EvaluatorPool(config.eval_workers))
    sampler: Any = None
    if config.rollout_engine == "vllm":
        from evolve.rl.vllm_rollouts import VllmSampler

        sampler = VllmSampler(base_path, out / "rollout_adapter", config.lora.r, config.seed,
                              config.vllm_gpu_memory, config.vllm_max_model_len, config.vllm_dtype)
    elif config.rollout_engine == "llamacpp":
        sampler = llamacpp_sampler(config, out, base_path, model, tasks)
    computed = f", matmuls {config.matmul_dtype}" if config.autocast_dtype else ""
    kind = (f"LoRA r={config.lora.r}" if config.lora.enabled else "full fine-tuning") + \
        f", {config.dtype}{computed} on {config.torch_device}"
    prompts = f"{len(tasks)} prompt{'s' * (len(tasks) != 1)}"
    console.print(f"train {config.algo}: {base_path} ({kind}, {sum(p.numel() for p in params):,} trainable), "
                  f"rollouts {config.rollout_engine}, problems {', '.join(config.problems)} ({prompts}), "
                  f"G={config.group_size}, m={config.m}, {config.steps} steps -> {out}",
                  highlight=False, soft_wrap=True)
    try:
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with cancelled_by_signals(), Progress(*columns, console=console) as progress:
            bar = progress.add_task(f"{config.algo} steps", total=config.steps, completed=done)
            for step in range(done + 1, config.steps + 1):
                started = time.monotonic()
                groups = await sample_step(config, step, tasks, model, tokenizer, sampler, scorer)
                rollout_s = time.monotonic() - started
                advantages = [group_advantages(config, group, step, i) for i, group in enumerate(groups)]
                batches = [group_batch(group, config.torch_device) for group in groups]
                trained = optimise(model, reference, batches, advantages, config, optimizer)
                seconds = time.monotonic() - started
                record = {"step": step, "algo": config.algo, **step_stats(config, groups, advantages), **trained,
                          "gen_s": sum(g.seconds_generating for g in groups), "rollout_s": rollout_s,
                          "train_s": seconds - rollout_s, "seconds": seconds, "evaluations": scorer.evaluations,
                          "matmul_dtype": config.matmul_dtype}
                records.append(record)
                keep_step(config, out, step, model, tokenizer, optimizer, records, provenance)
                progress.console.print(step_line(record, config.steps), highlight=False, soft_wrap=True)
                progress.update(bar, advance=1, description=f"{config.algo} reward {record['reward']:.3f}")
    finally:
        if sampler is not None:
            sampler.close()
        if scorer.pool is not None:
            await scorer.pool.close()
    final = out / "final"
    save_checkpoint(model, tokenizer, final, config.lora.enabled, provenance)
    console.print(f"saved {final} (evolve run --set policy.model={final})", highlight=False, soft_wrap=True)
    return final


def train(config: TrainConfig, console: Console | None = None, resume: bool = False,
          held_out: tuple[str, ...] = ()) -> Path:
    """Run the training loop to its step budget (with `resume`, from OUT's saved state); the final checkpoint.
    SIGINT or SIGTERM stops it at the step under way's next await (a backward pass under way finishes first), its
    rollout process closed, as KeyboardInterrupt; every step logged is in the resume state.
    `held_out`: the test problems the training problems were checked against (recorded in each checkpoint; a
    resumed run given none keeps those it started with)."""
    from evolve.policies.model_files import offline_hub

    offline_hub()
    try:
        return asyncio.run(_train(config, console or Console(), resume, tuple(held_out)))
    except asyncio.CancelledError:  # SIGINT or SIGTERM (stop_signals): the steps saved so far are the resume state
        raise KeyboardInterrupt from None
