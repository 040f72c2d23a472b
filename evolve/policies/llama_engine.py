"""Continuous batching over llama.cpp: one decode loop in a thread; a request joins at the next step, leaves when done.

Every request of one model in one process goes through one `LlamaEngine` (or one of the `engines` of an EnginePool,
evolve/policies/engine_pool.py, each its share of the requests): each step is a single `llama_decode` of
one token per generating sequence plus prompt tokens of the newly admitted ones (chunked to `batch_tokens`), so a
short answer never waits for a long one and a new prompt never waits for a batch to drain. A slot keeps its last
sequence's cache when it frees: a new request goes to the free slot whose cached tokens share the longest prefix
with its prompt and prefills only the rest (the engine's prompts share their instructions and problem statement,
about three quarters of their tokens). Requests whose prompts are identical and are admitted together (a training
group, several answers to one parent) prefill once and copy the cache. Each request samples with its own llama.cpp
sampler chain (temperature, top-p, its own seed), so its tokens do not depend on which other requests share its
steps beyond the float noise of batched matrix products.

With `draft_tokens` > 0, a generating sequence may add a draft to its row: the tokens that followed its last few
tokens where they stand earlier in its prompt or answer (evolve/policies/prompt_lookup.py), each with its own
logits row. The sampler then draws token after token as it would without drafts, from the logits of the rows in
order, and stops at the first token that differs from the draft; the rows after it are dropped from the cache.
Every token is thus drawn by the same sampler, from the logits of the same prefix, with the same random draw as
without drafts: the answers are those of the plain engine (up to the float noise of batching), at any
temperature; a draft only lets several tokens come out of one step.

Token ids in, token ids out: rendering, tokenising and stop strings belong to the caller (`stop` sees the tokens so
far after every token). Only `llama_cpp.llama_cpp` (the raw ctypes API of llama-cpp-python) is used.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evolve.policies.cpu import cpu_threads, threads_given
from evolve.policies.engine_requests import (
    EngineError,
    EngineStats,
    FinishReason,
    GenerationRequest,
    GenerationResult,
    Ticket,
)
from evolve.policies.engine_slots import Slot, common_prefix
from evolve.policies.llama_backend import load_llama
from evolve.policies.prompt_lookup import DraftLength, PromptLookup
from evolve.policies.thread_choice import ThreadChoice, thread_candidates

__all__ = ["EngineError", "EngineStats", "GenerationRequest", "GenerationResult", "LlamaEngine", "Ticket"]


_COPY_AT_LEAST = 32  # prompt tokens a copy from another slot's cache must save over the slot's own


class LlamaEngine:
    """A GGUF model in llama.cpp with `slots` sequences generated together; thread-safe `submit`."""

    def __init__(self, gguf: Path | str, slots: int = 16, context_per_slot: int = 2048, threads: int = 0,
                 batch_tokens: int = 512, lora: Path | str | None = None, lora_scale: float = 1.0,
                 draft_tokens: int = 0, draft_budget: int = 0) -> None:
        """threads: 0 chooses, as the engine runs, between the cores this process may use and fewer (ThreadChoice),
        unless $EVOLVE_THREADS fixes it; draft_tokens: the longest draft of one sequence (0: no drafting);
        draft_budget: the most draft tokens of all sequences in one step (0: batch_tokens // 4)."""
        if slots < 1 or context_per_slot < 16 or batch_tokens < slots or draft_tokens < 0 or draft_budget < 0:
            raise ValueError("slots >= 1, context_per_slot >= 16, batch_tokens >= slots and draft_tokens >= 0 "
                             "are needed")
        self.draft_tokens = draft_tokens
        self.draft_budget = min(draft_budget or batch_tokens // 4, batch_tokens - slots)
        self._llama = llama = load_llama()
        self.slots_count = slots
        self.context_per_slot = context_per_slot
        self.batch_tokens = batch_tokens
        model_params = llama.llama_model_default_params()
        self._model = llama.llama_model_load_from_file(str(gguf).encode(), model_params)
        if not self._model:
            raise EngineError(f"llama.cpp cannot load the model file {gguf} (missing, truncated or not a GGUF "
                              "model of an architecture it knows)")
        self._vocab = llama.llama_model_get_vocab(self._model)
        self.vocab_size = llama.llama_vocab_n_tokens(self._vocab)
        params = llama.llama_context_default_params()
        params.n_ctx = slots * context_per_slot
        params.n_seq_max = slots
        params.n_batch = params.n_ubatch = batch_tokens
        params.n_threads = params.n_threads_batch = self._threads_now = cpu_threads(threads)
        self.thread_choice = None if threads_given(threads) else ThreadChoice(thread_candidates(self._threads_now))
        params.flash_attn_type = 0  # off: faster decode batches on CPU here, and closer to transformers
        params.kv_unified = False  # a stream per sequence: attention spans its own tokens, not every slot's
        params.no_perf = True
        self._context = llama.llama_init_from_model(self._model, params)
        if not self._context:
            llama.llama_model_free(self._model)
            raise EngineError(f"llama.cpp cannot create a context of {slots} x {context_per_slot} tokens for {gguf}")
        self._memory = llama.llama_get_memory(self._context)
        self._adapter = None
        if lora is not None:
            self.set_lora(lora, lora_scale)
        self._batch = llama.llama_batch_init(batch_tokens, 0, 1)
        self._slots = [Slot(index) for index in range(slots)]
        self._waiting: deque[Ticket] = deque()
        self._wake = threading.Condition()
        self._closed = False
        self._steps = self._generated = self._prefilled = self._reused = self._shared = self._max_active = 0
        self._drafted = self._accepted = 0
        self._thread = threading.Thread(target=self._run, name="llama-engine", daemon=True)
        self._thread.start()

    # -- public ---------------------------------------------------------------------------------------------------

    def submit(self, request: GenerationRequest,
               done: Callable[[GenerationResult | Exception], None]) -> Ticket:
        """Queue a request; `done` gets its result (or an EngineError) in the engine's thread."""
        ticket = Ticket(request, done)
        need = len(request.prompt_ids) + request.max_new_tokens
        if not request.prompt_ids or request.max_new_tokens < 1:
            ticket.finish(EngineError("a request needs at least one prompt token and max_new_tokens >= 1"))
        elif need > self.context_per_slot:
            ticket.finish(EngineError(f"prompt ({len(request.prompt_ids)} tokens) + max_new_tokens "
                                      f"({request.max_new_tokens}) exceed the {self.context_per_slot} tokens of a "
                                      "slot (raise policy.context)"))
        elif any(not 0 <= token < self.vocab_size for token in request.prompt_ids):
            ticket.finish(EngineError(f"a prompt token id is outside the model's vocabulary of {self.vocab_size}"))
        else:
            with self._wake:
                if self._closed:
                    ticket.finish(EngineError("the engine is closed"))
                else:
                    self._waiting.append(ticket)
                    self._wake.notify()
        return ticket

    def set_lora(self, adapter_path: Path | str | None, scale: float = 1.0) -> None:
        """Apply a GGUF LoRA adapter (None: none) from the next step on; call between requests for exact rollouts."""
        llama = self._llama
        adapter = None
        if adapter_path is not None:
            adapter = llama.llama_adapter_lora_init(self._model, str(adapter_path).encode())
            if not adapter:
                raise EngineError(f"llama.cpp cannot load the LoRA adapter {adapter_path}")
        with self._wake:
            if adapter is None:
                llama.llama_set_adapters_lora(self._context, None, 0, None)
            else:
                llama.llama_set_adapters_lora(self._context, (llama.llama_adapter_lora_p_ctypes * 1)(adapter), 1,
                                              (ctypes.c_float * 1)(scale))
            if self._adapter is not None:
                llama.llama_adapter_lora_free(self._adapter)
            self._adapter = adapter
            llama.llama_memory_clear(self._memory, True)  # caches made with the old weights are not theirs
            for slot in self._slots:
                slot.cached = []

    def stats(self) -> EngineStats:
        return EngineStats(self._steps, self._generated, self._prefilled, self._reused, self._shared, self._max_active,
                           self._drafted, self._accepted, self._threads_now)

    def close(self) -> None:
        """Stop after the current step; every request not finished gets an EngineError. Idempotent."""
        with self._wake:
            if self._closed:
                return
            self._closed = True
            self._wake.notify()
        self._thread.join()
        llama = self._llama
        for ticket in self._waiting:
            ticket.finish(EngineError("the engine was closed"))
        for slot in self._slots:
            if slot.ticket is not None:
                slot.ticket.finish(EngineError("the engine was closed"))
            self._free_sampler(slot)
        llama.llama_batch_free(self._batch)
        if self._adapter is not None:
            llama.llama_adapter_lora_free(self._adapter)
        llama.llama_free(self._context)
        llama.llama_model_free(self._model)

    # -- the decode loop ------------------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._closed and not self._waiting and all(s.ticket is None for s in self._slots):
                    self._wake.wait()
                if self._closed:
                    return
                self._admit()
            try:
                self._step()
            except Exception as exc:  # a failed decode fails the requests in it, not the engine
                for slot in self._slots:
                    if slot.ticket is not None:
                        self._release(slot, EngineError(f"llama.cpp decode failed: {exc}"))

    def _admit(self) -> None:
        """Move waiting requests into free slots: the one whose cache shares the longest prefix with the prompt;
        identical prompts admitted together share one prefill."""
        free = [slot for slot in self._slots if slot.ticket is None]
        leaders: dict[tuple[int, ...], Slot] = {}
        copied: set[int] = set()
        lent: set[int] = set()
        for slot in self._slots:
            if slot.ticket is not None and not slot.tokens and slot.leader is None:
                leaders[slot.ticket.request.prompt_ids] = slot
        while free and self._waiting:
            ticket = self._waiting.popleft()
            if ticket.cancelled:
                ticket.finish(GenerationResult((), "cancelled", len(ticket.request.prompt_ids), 0.0))
                continue
            prompt = ticket.request.prompt_ids
            slot = max(free, key=lambda candidate: common_prefix(candidate.cached, prompt))
            free.remove(slot)
            slot.ticket, slot.tokens = ticket, []
            slot.sampler = self._sampler(ticket.request)
            if self.draft_tokens > 0:
                slot.lookup = PromptLookup(history=list(prompt))
                slot.draft_length = DraftLength(longest=self.draft_tokens, current=min(4, self.draft_tokens),
                                                shortest=min(2, self.draft_tokens))
            slot.leader = leaders.get(prompt)
            if slot.leader is None:
                leaders[prompt] = slot
                self._reuse_prefix(slot, prompt, copied, lent)

    def _reuse_prefix(self, slot: Slot, prompt: tuple[int, ...], copied: set[int], lent: set[int]) -> None:
        """Keep the longest prefix of the prompt found in this slot's cache, or copy a longer one from any other
        slot's (a whole-stream copy, then its tail dropped); the last prompt token is always decoded (its logits)."""
        # copies run lazily before the next decode: a slot that receives one this round is no donor, and a donor
        # receives none, so no copy can read a stream another copy is about to overwrite
        donors = [other for other in self._slots if other.index not in copied]
        donor = max(donors, key=lambda other: common_prefix(other.cached, prompt))
        own = common_prefix(slot.cached, prompt)
        if (donor is not slot and slot.index not in lent
                and common_prefix(donor.cached, prompt) > own + _COPY_AT_LEAST):
            self._llama.llama_memory_seq_cp(self._memory, donor.index, slot.index, -1, -1)
            slot.cached, own = list(donor.cached), common_prefix(donor.cached, prompt)
            copied.add(slot.index)
            lent.add(donor.index)
        kept = min(own, len(prompt) - 1)
        self._llama.llama_memory_seq_rm(self._memory, slot.index, kept, -1)
        slot.fed, slot.cached = kept, list(prompt[:kept])
        self._reused += kept

    def _sampler(self, request: GenerationRequest) -> Any:
        llama = self._llama
        chain = llama.llama_sampler_chain_init(llama.llama_sampler_chain_default_params())
        if request.temperature <= 0:
            llama.llama_sampler_chain_add(chain, llama.llama_sampler_init_greedy())
        else:
            llama.llama_sampler_chain_add(chain, llama.llama_sampler_init_temp(request.temperature))
            if request.top_p < 1.0:
                llama.llama_sampler_chain_add(chain, llama.llama_sampler_init_top_p(request.top_p, 1))
            llama.llama_sampler_chain_add(chain, llama.llama_sampler_init_dist(request.seed & 0xFFFFFFFF))
        return chain

    def _step(self) -> None:
        llama = self._llama
        for slot in self._slots:
            if slot.ticket is not None and slot.ticket.cancelled:
                self._release(slot, None, "cancelled")
        batch, count, budget = self._batch, 0, self.batch_tokens
        active = [slot for slot in self._slots if slot.ticket is not None]

        def add(token: int, position: int, seq: int, wants_logits: bool) -> int:
            nonlocal count
            batch.token[count], batch.pos[count], batch.n_seq_id[count] = token, position, 1
            batch.seq_id[count][0], batch.logits[count] = seq, wants_logits
            count += 1
            return count - 1

        for slot in active:  # one token for every generating sequence first: decoding never waits for prefill
            slot.output_index, slot.drafts, slot.draft_rows = -1, [], []
            if slot.tokens:
                slot.output_index = add(slot.tokens[-1], len(slot.cached), slot.index, True)
                slot.cached.append(slot.tokens[-1])
                budget -= 1
        drafting = min(self.draft_budget, budget)
        for slot in active:  # then the drafts, as the budget allows
            if slot.output_index >= 0 and drafting > 0:
                slot.drafts = self._draft(slot, drafting)
                slot.draft_rows = [add(token, len(slot.cached) + offset, slot.index, True)
                                   for offset, token in enumerate(slot.drafts)]
                slot.cached.extend(slot.drafts)
                drafting -= len(slot.drafts)
                budget -= len(slot.drafts)
        prefilling = [slot for slot in active if not slot.tokens and slot.leader is None]
        prompt_rows = 0
        for slot in prefilling:
            prompt = slot.ticket.request.prompt_ids  # type: ignore[union-attr]
            take = min(len(prompt) - slot.fed, budget)
            if take <= 0:
                break
            for offset in range(take):
                position = slot.fed + offset
                add(prompt[position], position, slot.index, position == len(prompt) - 1)
            slot.cached.extend(prompt[slot.fed:slot.fed + take])
            slot.fed += take
            budget -= take
            prompt_rows += take
            self._prefilled += take
            if slot.fed == len(prompt):
                slot.output_index = count - 1
        if count == 0:
            return
        batch.n_tokens = count
        choice = self.thread_choice
        if choice is not None and choice.threads() != self._threads_now:
            self._threads_now = choice.threads()
            llama.llama_set_n_threads(self._context, self._threads_now, self._threads_now)
        started = time.perf_counter()
        status = llama.llama_decode(self._context, batch)
        if status != 0:
            raise EngineError(f"llama_decode returned {status}")
        if choice is not None:
            choice.record(self._threads_now, time.perf_counter() - started, count, prompt_rows == 0)
        self._steps += 1
        self._max_active = max(self._max_active, sum(1 for slot in active if slot.tokens))
        for slot in active:  # followers of a leader whose prompt just went in copy its cache and its logits row
            leader = slot.leader
            if leader is not None and leader.ticket is not None and leader.output_index >= 0 and not leader.tokens:
                llama.llama_memory_seq_cp(self._memory, leader.index, slot.index, -1, -1)
                slot.fed, slot.output_index, slot.leader = leader.fed, leader.output_index, None
                slot.cached = list(leader.cached)
                self._shared += 1
        for slot in active:
            if slot.output_index >= 0 and slot.ticket is not None:
                self._sample(slot)

    def _draft(self, slot: Slot, budget: int) -> list[int]:
        """This step's draft for a generating slot: what its lookup proposes, as long as its DraftLength says, within
        the budget, the request's token cap and the slot's context."""
        if slot.lookup is None or slot.draft_length is None:
            return []
        request = slot.ticket.request  # type: ignore[union-attr]
        room = min(budget, request.max_new_tokens - len(slot.tokens) - 1, self.context_per_slot - len(slot.cached))
        if room <= 0:
            return []
        length = slot.draft_length.next()
        return slot.lookup.draft(min(length, room)) if length > 0 else []

    def _sample(self, slot: Slot) -> None:
        """Draw the slot's next token from its row, then, while each drawn token is the draft's, the next from the
        draft's next row; drop the rows of the draft after the first token that differs."""
        llama = self._llama
        request = slot.ticket.request  # type: ignore[union-attr]
        drafts, base = slot.drafts, len(slot.cached) - len(slot.drafts)
        accepted, finish = 0, None
        for row, logits_row in enumerate([slot.output_index, *slot.draft_rows]):
            token = int(llama.llama_sampler_sample(slot.sampler, self._context, logits_row))
            slot.tokens.append(token)
            if slot.lookup is not None:
                slot.lookup.extend((token,))
            self._generated += 1
            if llama.llama_vocab_is_eog(self._vocab, token) or (request.stop is not None and request.stop(slot.tokens)):
                finish = "stop"
            elif len(slot.tokens) >= request.max_new_tokens:
                finish = "length"
            if finish is not None or row == len(drafts) or token != drafts[row]:
                break
            accepted += 1
        if drafts:
            llama.llama_memory_seq_rm(self._memory, slot.index, base + accepted, -1)
            del slot.cached[base + accepted:]
            self._drafted += len(drafts)
            self._accepted += accepted
            if slot.draft_length is not None and finish is None:
                slot.draft_length.taken(len(drafts), accepted)
        if finish is not None:
            self._release(slot, None, finish)  # type: ignore[arg-type]

    def _release(self, slot: Slot, error: Exception | None, reason: FinishReason = "stop") -> None:
        """Free the slot; its cache stays for the next prompt that shares a prefix, unless the request failed or was
        cancelled (its cache may hold a prefill that never ran)."""
        ticket = slot.ticket
        assert ticket is not None
        if error is not None or reason == "cancelled" or slot.leader is not None:
            self._llama.llama_memory_seq_rm(self._memory, slot.index, -1, -1)
            slot.cached = []
        self._free_sampler(slot)
        tokens, slot.ticket, slot.tokens, slot.fed, slot.leader, slot.output_index = slot.tokens, None, [], 0, None, -1
        slot.drafts, slot.draft_rows, slot.lookup, slot.draft_length = [], [], None, None
        for other in self._slots:  # followers waiting on this slot's prefill prefill on their own
            if other.leader is slot:
                other.leader = None
                self._llama.llama_memory_seq_rm(self._memory, other.index, -1, -1)
                other.fed, other.cached = 0, []
        ticket.finish(error if error is not None else GenerationResult(
            tuple(tokens), reason, len(ticket.request.prompt_ids), time.monotonic() - ticket.submitted))

    def _free_sampler(self, slot: Slot) -> None:
        if slot.sampler is not None:
            self._llama.llama_sampler_free(slot.sampler)
            slot.sampler = None
