"""What each iteration of a run uses: its policy among the run's [[policies]] (drawn by weights or by a bandit on
the gain each brought) and, with [prompt_evolution], its system instruction; rebuilt on resume from the store.

A run with one policy and no prompt evolution always gets that policy and the template's own prompt, drawing
nothing. The draws are seeded from (run seed, iteration), and the statistics grow only as iterations commit, so a
resume that records the stored iterations again in commit order (`restore`) holds the uninterrupted state.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from evolve.config import RunConfig
from evolve.policies.base import Policy
from evolve.policy_config import PolicySection
from evolve.problems.problem import ProblemPrompt
from evolve.records import MutationRequest
from evolve.search.bandit import Bandit
from evolve.search.instructions import InstructionPopulation, with_instruction
from evolve.search.prompt_templates import PromptTemplate, load_template
from evolve.search.prompts import Prompt, PromptOptions, build_prompt
from evolve.seeds import ENSEMBLE, derive
from evolve.store.choice_scans import IterationChoice


@dataclass(frozen=True)
class Choice:
    """One iteration's policy, how it is prompted, and the instruction key (None without prompt evolution)."""

    name: str
    policy: Policy
    section: PolicySection
    options: PromptOptions
    template: PromptTemplate
    requests: int  # policy requests per iteration: run.answers_per_iteration / answers (at least 1)
    instruction: str | None

    def prompt(self, request: MutationRequest, problem: ProblemPrompt) -> Prompt:
        prompt = build_prompt(request, self.options, self.template, problem)
        if self.instruction is None:
            return prompt
        return with_instruction(prompt, self.instruction, self.template, self.options.api)


class SearchChoices:
    """The run's policies (name -> backend) and the rules that pick one, and an instruction, per iteration."""

    def __init__(self, config: RunConfig, policies: Mapping[str, Policy]) -> None:
        self.config = config
        self.sections = {section.name: section for section in config.ensemble_policies()}
        missing = set(self.sections) - set(policies)
        if missing:
            raise ValueError(f"no backend for the policies {sorted(missing)}")
        self.policies = dict(policies)
        self.options = {name: PromptOptions.from_policy(section) for name, section in self.sections.items()}
        self.templates = {name: load_template(section.template) for name, section in self.sections.items()}
        self.names = list(self.sections)
        ensemble = config.ensemble
        rule = "weights" if ensemble.choice == "weights" else ensemble.bandit
        self.bandit = Bandit(rule, {name: section.weight for name, section in self.sections.items()},
                             ensemble.exploration)
        evolution = config.prompt_evolution
        self.instructions = (InstructionPopulation(evolution, config.run.seed, ensemble.bandit, ensemble.exploration)
                             if evolution.enabled else None)

    def choose(self, iteration: int) -> Choice:
        name = self.bandit.choose(self.names, random.Random(derive(self.config.run.seed, ENSEMBLE, iteration)))
        section = self.sections[name]
        requests = max(1, self.config.run.answers_per_iteration // section.answers)
        instruction = self.instructions.choose(iteration) if self.instructions is not None else None
        return Choice(name, self.policies[name], section, self.options[name], self.templates[name], requests,
                      instruction)

    def needs_history(self) -> bool:
        """Whether a choice reads what earlier iterations brought (a bandit among several policies, or prompt
        evolution); fixed weights and a single policy read nothing, so a resume skips the scan."""
        return (len(self.names) > 1 and self.bandit.rule != "weights") or self.instructions is not None

    def record(self, policy: str, instruction: str | None, gain: float) -> None:
        """One committed iteration: what it chose and the gain it brought."""
        if policy in self.sections:  # a policy the run no longer has (a stored iteration of an older config)
            self.bandit.record(policy, gain)
        if self.instructions is not None:
            self.instructions.record(instruction, gain)

    def restore(self, stored: Iterable[IterationChoice]) -> None:
        """Record the stored iterations again, in commit order."""
        for choice in stored:
            self.record(choice.policy, choice.prompt_variant, choice.gain)
