"""Prompt evolution: a small population of system instructions, each scored by the gain of the iterations that
used it, the weakest replaced now and then by a mutant of the strongest.

An instruction is a lead sentence plus up to MAX_HINTS hints, drawn from fixed lists, and is named by a key
("L0", "L2+h1+h5"): the key alone rebuilds its text, so the store records only the key with every iteration. Lead
0 is the template's own system message. The lists and keys live in evolve/instruction_texts.py, which the report
reads too. The mutation operators are fixed (add a hint, drop one, swap one for
another, change the lead), not written by the policy: a 135M policy asked to rewrite its own instruction mostly
answers with code. Which instruction an iteration uses is a Bandit draw (bandit.py); every `replace_every`
committed iterations, among the instructions tried at least `min_uses` times, the one with the lowest mean gain is
replaced by a mutant of the one with the highest. Every draw comes from seeds.PROMPT_EVOLUTION, so a resume that
records the stored iterations again in commit order holds the same population.
"""

from __future__ import annotations

import dataclasses
import random

from evolve.config import PromptEvolutionSection
from evolve.instruction_texts import BASE_KEY, HINTS, LEADS, MAX_HINTS, Instruction
from evolve.search.bandit import Bandit, Rule
from evolve.search.prompt_templates import PromptTemplate
from evolve.search.prompts import Prompt
from evolve.seeds import PROMPT_EVOLUTION, derive

_CHOICE, _MUTATION = 0, 1  # the two streams under seeds.PROMPT_EVOLUTION


def mutate(parent: Instruction, rng: random.Random) -> Instruction:
    """One fixed operator applied to `parent`: add a hint, drop one, swap one, or change the lead."""
    absent = [hint for hint in range(len(HINTS)) if hint not in parent.hints]
    operators = ["lead"]
    if len(parent.hints) < MAX_HINTS and absent:
        operators.append("add")
    if parent.hints:
        operators.append("drop")
        if absent:
            operators.append("swap")
    operator = rng.choice(operators)
    hints = list(parent.hints)
    if operator == "add":
        hints.append(rng.choice(absent))
    elif operator == "drop":
        hints.remove(rng.choice(hints))
    elif operator == "swap":
        hints[rng.randrange(len(hints))] = rng.choice(absent)
    else:
        return dataclasses.replace(parent, lead=rng.choice([lead for lead in range(len(LEADS)) if lead != parent.lead]))
    return Instruction(parent.lead, tuple(sorted(hints)))


class InstructionPopulation:
    """The live instructions, their statistics, and the replacement schedule."""

    def __init__(self, settings: PromptEvolutionSection, seed: int, rule: Rule = "ucb1",
                 exploration: float = 1.0) -> None:
        self.settings = settings
        self.seed = seed
        self.bandit = Bandit(rule if rule != "weights" else "ucb1", exploration=exploration)
        self.generations = 0  # mutants made so far
        self.committed = 0  # iterations recorded so far
        self.alive: list[str] = [BASE_KEY]
        while len(self.alive) < settings.population:
            self.alive.append(self._mutant(Instruction.from_key(BASE_KEY)).key)

    def _mutant(self, parent: Instruction) -> Instruction:
        """A mutant of `parent` not alive now (the generation's own rng: the same in every replay)."""
        rng = random.Random(derive(self.seed, PROMPT_EVOLUTION, _MUTATION, self.generations))
        self.generations += 1
        child = mutate(parent, rng)
        for _ in range(64):
            if child.key not in self.alive:
                break
            child = mutate(child, rng)
        return child

    def choose(self, iteration: int) -> str:
        """The key of the instruction iteration `iteration` uses."""
        return self.bandit.choose(self.alive, random.Random(derive(self.seed, PROMPT_EVOLUTION, _CHOICE, iteration)))

    def record(self, key: str | None, gain: float) -> None:
        """One committed iteration that used `key` (None: an iteration stored without one, counted only)."""
        if key is not None:
            self.bandit.record(key, gain)
        self.committed += 1
        if self.committed % self.settings.replace_every == 0:
            self._replace()

    def _replace(self) -> None:
        tried = [key for key in self.alive if self.bandit.of(key).pulls >= self.settings.min_uses]
        if len(tried) < 2:
            return
        def rank(key: str) -> tuple[float, float, str]:
            stats = self.bandit.of(key)
            return stats.mean_gain, stats.improved / stats.pulls, key
        weakest, strongest = min(tried, key=rank), max(tried, key=rank)
        if rank(weakest)[:2] == rank(strongest)[:2]:
            return  # no evidence that one is better
        self.alive[self.alive.index(weakest)] = self._mutant(Instruction.from_key(strongest)).key


def with_instruction(prompt: Prompt, key: str, template: PromptTemplate, api: str) -> Prompt:
    """`prompt` with its system message replaced by instruction `key` (the completion text rendered again)."""
    messages = [dict(message) for message in prompt.messages]
    if not messages or messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": ""})
    messages[0]["content"] = Instruction.from_key(key).text(messages[0]["content"])
    text = template.completion_text(messages, prompt.prefill) if api == "completions" else None
    return dataclasses.replace(prompt, messages=messages, text=text)
