"""Which exceptions are the user's to fix, worded as one line, rather than the engine's bugs."""

from __future__ import annotations

import importlib

# (module, class) pairs: errors whose message is already a complete line for the user.
_USER_ERRORS = (
    ("evolve.problems.problem", "ProblemError"),
    ("evolve.cli.runner", "RunError"),
    ("evolve.engine.controller", "SeedProgramError"),
    ("evolve.store.program_store", "StoreError"),
    ("evolve.policies.model_files", "ModelFileError"),
    ("evolve.policies.base", "PolicyError"),
    ("evolve.search.prompt_templates", "TemplateError"),
    ("evolve.rl.vllm_rollouts", "RolloutEngineError"),
    ("evolve.rl.checkpoints", "ResumeError"),
)


def user_facing(exc: BaseException) -> str | None:
    """The one-line message for an error the user can fix, or None for anything else."""
    for module_name, class_name in _USER_ERRORS:
        try:
            error_type = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            continue
        if isinstance(exc, error_type):
            return str(exc)
    return None
