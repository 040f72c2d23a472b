"""`evolve check --prompt`: the mutation prompt a problem's seed program gets, printed as the policy sees it."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from evolve.problems.check import CheckReport
from evolve.records import MutationRequest, Program
from evolve.search.prompt_templates import load_template
from evolve.search.prompts import Prompt, PromptOptions, build_prompt

_DEFAULT_OPTIONS = PromptOptions()


def seed_prompt_of(report: CheckReport, options: PromptOptions = _DEFAULT_OPTIONS, template: str = "default",
                   ) -> Prompt | None:
    """The prompt for the checked problem's initial program, scored as the check scored it; None when the check
    could not score it."""
    problem, evaluation = report.problem, report.initial
    if problem is None or evaluation is None or not evaluation.ok:
        return None
    parent = Program(id=0, run_id=0, code=problem.initial_code, parent_id=None, island=0, iteration=0, policy="",
                     edit="", scores=evaluation.scores, scalar=problem.scalar(evaluation.scores),
                     solved=problem.is_solved(evaluation.scores), artifacts=evaluation.artifacts)
    request = MutationRequest(iteration=1, island=0, parent=parent, inspirations=(),
                              problem_description=problem.description, objective_names=problem.objectives)
    return build_prompt(request, options, load_template(template), problem.prompt)


def prompt_text(prompt: Prompt) -> str:
    """The prompt as plain text: each chat message under a rule naming its role, then the prefill the answer
    continues, the stop strings and the token budget."""
    parts = [f"--- {message['role']} ---\n{message['content']}" for message in prompt.messages]
    parts.append(f"--- assistant (prefilled; the policy continues it) ---\n{prompt.prefill}")
    stops = [repr(stop) for stop in prompt.stop]
    shown = ", ".join(stops[:6]) + (f" and {len(stops) - 6} more (a new top-level line)" if len(stops) > 6 else "")
    parts.append(f"--- stops at {shown}; at most {prompt.max_new_tokens} new tokens ---")
    return "\n".join(parts)


def print_seed_prompt(report: CheckReport, console: Console) -> None:
    prompt = seed_prompt_of(report)
    if prompt is None:
        console.print("no prompt shown: the initial program could not be scored", highlight=False)
        return
    console.print("the prompt for initial.py (template 'default', the default policy's prompting; the problem's "
                  "[prompt] table applies):", highlight=False, markup=False)
    console.print(escape(prompt_text(prompt)), highlight=False, soft_wrap=True)
