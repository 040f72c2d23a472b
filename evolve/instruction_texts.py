"""The texts of prompt evolution's instructions and their keys ("L0", "L2+h1+h5" <-> lead sentence + hints): what
search/instructions.py evolves and what the report shows beside each key, in one place both may import (the
report never imports search/).

An instruction is a lead sentence plus up to MAX_HINTS hints, drawn from the fixed lists below, and is named by a
key: the key alone rebuilds its text, so the store records only the key with every iteration. Lead 0 is the
template's own system message. Changing or reordering these lists changes what the keys of stored runs mean:
only append.
"""

from __future__ import annotations

from dataclasses import dataclass

LEADS: tuple[str, ...] = (
    "",  # the template's own system message
    "You are a careful Python programmer. You improve one function at a time, step by step.",
    "You write short, correct Python functions that score well.",
    "You are an expert at numerical code and mathematical formulas in Python.",
)
HINTS: tuple[str, ...] = (
    "Make one small, careful change and keep what already works.",
    "Try a clearly different approach from the current code.",
    "Keep the code short and simple.",
    "Handle edge cases: avoid division by zero, overflow and invalid inputs.",
    "Look at the weakest scores first and fix what they measure.",
    "Use the math module where a formula helps.",
    "Reuse the best ideas of the better version when one is shown.",
    "Answer with valid Python only: no explanations, no placeholders.",
)
MAX_HINTS = 3
BASE_KEY = "L0"
TEMPLATE_SYSTEM = "[the template's own system message]"  # how a report shows lead 0, whose text is the template's


@dataclass(frozen=True)
class Instruction:
    lead: int  # index in LEADS
    hints: tuple[int, ...]  # indices in HINTS, sorted

    @property
    def key(self) -> str:
        return "+".join([f"L{self.lead}", *(f"h{hint}" for hint in self.hints)])

    @classmethod
    def from_key(cls, key: str) -> Instruction:
        lead, *hints = key.split("+")
        return cls(int(lead[1:]), tuple(sorted(int(hint[1:]) for hint in hints)))

    def text(self, original: str) -> str:
        """The system message: the lead (or the template's `original`) and the hints."""
        return " ".join(part for part in (LEADS[self.lead] or original, *(HINTS[h] for h in self.hints)) if part)


def instruction_text(key: str) -> str:
    """The text a stored key stands for, lead 0 shown as TEMPLATE_SYSTEM; a key this version cannot read (another
    version's lists) is shown as '(unknown instruction KEY)'."""
    try:
        instruction = Instruction.from_key(key)
        if not key.startswith("L") or instruction.lead < 0 or any(hint < 0 for hint in instruction.hints):
            raise ValueError(key)
        return instruction.text(TEMPLATE_SYSTEM)
    except (ValueError, IndexError):
        return f"(unknown instruction {key})"
