"""Benchmark: peak memory and time of one group's completion log-probs, forward and backward, on the real model.

Runs `evolve.rl.loss.completion_logprobs` on SmolLM2-135M (LoRA, as `evolve train` does) for a random prompt
and G random completions, then backward through them, each configuration in a fresh process so that its peak
resident memory (ru_maxrss) is its own. `--loss-file` compares another version of evolve/rl/loss.py (e.g. one
written by `git show REV:evolve/rl/loss.py > old_loss.py`) against the current one.

    .venv/bin/python scripts/bench/bench_logprobs.py [--rows 4] [--tokens 384] [--prompt 300] [--loss-file old_loss.py]
    .venv/bin/python scripts/bench/bench_logprobs.py --lengths 384,60,95,40,120,70,55,88,30,101,64,77

`--lengths` gives each row's real tokens (the rest right padding, as a training group of capped and short answers):
the current version runs the padded batch whole, then in length buckets (`lengths=`, what `evolve train` passes).

`--vocab 151936` measures instead a random 2-layer Llama (hidden 256) with that vocabulary (Qwen2.5's), where the
[G, C, vocab] logits, not the decoder's activations, decide the peak: the regime the chunked projection is for.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

CHILD = "--child"


def tiny_llama(vocab: int) -> object:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096)
    return LlamaForCausalLM(config).eval()


def measure(loss_file: str | None, rows: int, tokens: int, prompt_tokens: int, vocab: int,
            lengths: list[int] | None = None) -> dict[str, float]:
    import torch

    from evolve.rl.trainer import TrainConfig, load_model

    torch.manual_seed(0)
    torch.set_num_threads(2)
    if loss_file:
        spec = importlib.util.spec_from_file_location("loss_under_test", loss_file)
        assert spec is not None and spec.loader is not None
        loss = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = loss  # its dataclasses look their module up
        spec.loader.exec_module(loss)
    else:
        import evolve.rl.loss as loss
    model = tiny_llama(vocab) if vocab else load_model(TrainConfig())[1]
    vocab = model.get_output_embeddings().out_features
    prompt = torch.randint(0, vocab, (prompt_tokens,))
    completions = torch.randint(0, vocab, (rows, tokens))
    row_lengths = torch.tensor(lengths) if lengths else None
    if row_lengths is not None:
        completions = completions * (torch.arange(tokens)[None, :] < row_lengths[:, None])
    loaded_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    started = time.perf_counter()
    extra = {"lengths": row_lengths} if row_lengths is not None else {}
    logp, _ = loss.completion_logprobs(model, prompt, completions, 1.0, with_entropy=True, **extra)
    logp.mean().backward()
    seconds = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": seconds, "peak_mb": peak_mb, "over_loaded_mb": peak_mb - loaded_mb}


def main() -> None:
    if sys.argv[1:2] == [CHILD]:
        loss_file, rows, tokens, prompt_tokens, vocab = sys.argv[2] or None, *map(int, sys.argv[3:7])
        lengths = [int(n) for n in sys.argv[7].split(",")] if len(sys.argv) > 7 else None
        print(json.dumps(measure(loss_file, rows, tokens, prompt_tokens, vocab, lengths)))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=384)
    parser.add_argument("--prompt", type=int, default=300)
    parser.add_argument("--loss-file", default=None, help="another loss.py to compare with the current one")
    parser.add_argument("--vocab", type=int, default=0, help="a random 2-layer Llama with this vocabulary instead")
    parser.add_argument("--lengths", default=None, help="comma-separated real tokens per row: padded vs buckets")
    args = parser.parse_args()
    versions = ([("given", str(Path(args.loss_file).resolve()))] if args.loss_file else []) + [("current", "")]
    tail: list[str] = []
    if args.lengths:
        lengths = [int(n) for n in args.lengths.split(",")]
        args.rows, args.tokens = len(lengths), max(lengths)
        versions = [("padded", ""), ("buckets", "")]
        tail = [",".join(map(str, lengths))]
    model = f"random 2-layer Llama, vocabulary {args.vocab:,}" if args.vocab else "SmolLM2-135M with LoRA"
    print(f"completion_logprobs + backward, {model}, G = {args.rows}, C = {args.tokens}, prompt {args.prompt} tokens")
    for name, path in versions:
        out = subprocess.run([sys.executable, __file__, CHILD, path, str(args.rows), str(args.tokens),
                              str(args.prompt), str(args.vocab), *(tail if name == "buckets" else [])],
                             capture_output=True, text=True, check=True).stdout
        figures = json.loads(out.strip().splitlines()[-1])
        print(f"{name:>8}: peak RSS {figures['peak_mb']:7.0f} MB ({figures['over_loaded_mb']:6.0f} MB over the "
              f"loaded model), {figures['seconds']:6.2f} s")


if __name__ == "__main__":
    main()
