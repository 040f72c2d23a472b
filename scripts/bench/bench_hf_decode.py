"""How long one decode step of transformers' generate() takes for a SmolLM2-135M-shaped model: plain, with LoRA
adapters (training rollouts), and with a static cache compiled (what the hf backend could use on a GPU).

The weights are random (the shape decides the time; no model file is needed, so it runs on a bare GPU machine):
    python scripts/bench/bench_hf_decode.py --device cuda [--batches 1 12 48] [--tokens 128]
Prints one line per setting: milliseconds per decode step (median of --repeats generate() calls, each forced to
--tokens new tokens), and answers of 384 tokens a minute that rate gives at that batch.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

SMOLLM2_135M = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                    num_key_value_heads=3, vocab_size=49152, max_position_embeddings=8192, tie_word_embeddings=True,
                    rms_norm_eps=1e-5, rope_theta=100000.0)


def step_ms(model: torch.nn.Module, batch: int, prompt: int, tokens: int, repeats: int, device: str,
            cache_implementation: str | None = None) -> float:
    """Median milliseconds per new token of generate() at this batch, prefill included once per call."""
    ids = torch.randint(100, 40000, (batch, prompt), device=device)
    config = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, max_new_tokens=tokens, min_new_tokens=tokens,
                              pad_token_id=0, eos_token_id=2, cache_implementation=cache_implementation)
    times = []
    for _ in range(repeats + 1):  # the first call warms up (and compiles, where asked)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        started = time.perf_counter()
        with torch.no_grad():
            model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times[1:]) / tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 12, 48])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--prompt", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--settings", nargs="+", default=["plain", "static-compiled", "lora"])
    args = parser.parse_args()
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**SMOLLM2_135M)).to(args.device, dtype).eval()
    name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu"
    print(f"{name}, torch {torch.__version__}, prompt {args.prompt} tokens, {args.tokens} new tokens per call")
    for setting in args.settings:
        subject, cache = model, None
        if setting == "lora":
            from peft import LoraConfig, get_peft_model

            # training's defaults (evolve.rl.train_config.LoraSettings) written out: this script runs on a bare GPU
            # machine, without evolve's dependencies (pydantic); a fresh model, since peft wraps its model in place
            subject = get_peft_model(LlamaForCausalLM(LlamaConfig(**SMOLLM2_135M)).to(args.device, dtype).eval(),
                                     LoraConfig(r=16, lora_alpha=32, target_modules=[
                                         "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
        elif setting == "static-compiled":
            cache = "static"
        for batch in args.batches:
            try:
                ms = step_ms(subject, batch, args.prompt, args.tokens, args.repeats, args.device, cache)
            except Exception as exc:  # a setting this torch/transformers lacks: say so, go on with the others
                print(f"{setting:16} batch {batch:3}: failed: {type(exc).__name__}: {str(exc)[:160]}")
                continue
            print(f"{setting:16} batch {batch:3}: {ms:7.1f} ms per decode step, "
                  f"{batch * 60_000 / (ms * 384):8.0f} answers of 384 tokens a minute", flush=True)


if __name__ == "__main__":
    main()
