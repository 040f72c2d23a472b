"""Prompt templates: editable Jinja files that word a mutation request as chat messages or as one raw text."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from evolve.errors import UserError

BUILTIN_DIR = Path(__file__).parent / "templates"
MESSAGES_FILE = "prompt.jinja"
COMPLETION_FILE = "completion.jinja"
_MARK = "<|"  # how every role line starts; hidden in the substituted values while the text is split
_ROLE_LINE = re.compile(r"^<\|(system|user|assistant)\|>[ \t]*$", re.MULTILINE)


class TemplateError(UserError):
    """A prompt template cannot be found, parsed or rendered; one line naming the file and the fault."""


def builtin_templates() -> list[str]:
    return sorted(path.name for path in BUILTIN_DIR.iterdir() if (path / MESSAGES_FILE).is_file())


def split_messages(text: str, source: str, hidden: str = "") -> list[dict[str, str]]:
    """Rendered template text -> chat messages; each `<|role|>` line starts one.

    `hidden` is the placeholder that stood in for `<|` in the substituted values while the template was rendered
    (see PromptTemplate.messages); it is turned back into `<|` in each message, after the split, so only the
    template's own text can start a message."""

    def shown(piece: str) -> str:
        return piece.replace(hidden, _MARK) if hidden else piece

    starts = list(_ROLE_LINE.finditer(text))
    if not starts:
        raise TemplateError(f"{source}: no message; start one with a line <|system|>, <|user|> or <|assistant|>")
    if text[: starts[0].start()].strip():
        before = shown(text[: starts[0].start()].strip())
        raise TemplateError(f"{source}: text before the first <|role|> line: {before[:60]!r}")
    messages = []
    for index, start in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else len(text)
        messages.append({"role": start.group(1), "content": shown(text[start.end():end].strip("\n"))})
    if messages[-1]["role"] != "user":
        raise TemplateError(f"{source}: the last message must be the user's request, not {messages[-1]['role']}")
    return messages


@dataclass(frozen=True)
class PromptTemplate:
    """A template folder: prompt.jinja (the messages) and completion.jinja (messages + prefill as one text)."""

    folder: Path
    messages_template: jinja2.Template
    completion_template: jinja2.Template

    def messages(self, **context: Any) -> list[dict[str, str]]:
        """The chat messages the template words for `context`. The values (the parent's code, an inspiration, the
        evaluator's feedback) are rendered with each `<|` in them replaced by a placeholder that none of them holds,
        which split_messages turns back into `<|` inside each message: a line `<|assistant|>` in a program stays a
        line of the program, in the message the template put it in. Values without `<|` render as they are."""
        source = str(self.folder / MESSAGES_FILE)
        hidden = _placeholder(context)
        text = _render(self.messages_template, source, {name: _hide(value, hidden) for name, value in context.items()})
        return split_messages(text, source, hidden)

    def completion_text(self, messages: list[dict[str, str]], prefill: str) -> str:
        source = str(self.folder / COMPLETION_FILE)
        return _render(self.completion_template, source, {"messages": messages, "prefill": prefill})


def _map_strings(value: Any, change: Callable[[str], str]) -> Any:
    """`value` with `change` applied to every string in it: itself, or the keys and items of the dicts, lists and
    tuples it nests; other values are passed as they are."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {_map_strings(key, change): _map_strings(item, change) for key, item in value.items()}
    if isinstance(value, list):
        return [_map_strings(item, change) for item in value]
    if isinstance(value, tuple):
        return tuple(_map_strings(item, change) for item in value)
    return value


def _placeholder(context: dict[str, Any]) -> str:
    """A stand-in for `<|` that no string of the context holds (it holds no `<|` and no line break itself)."""
    texts: list[str] = []

    def seen(text: str) -> str:
        texts.append(text)
        return text

    _map_strings(list(context.values()), seen)
    number = 0
    while any(f"\ue000evolve-role-mark-{number}\ue000" in text for text in texts):
        number += 1
    return f"\ue000evolve-role-mark-{number}\ue000"


def _hide(value: Any, token: str) -> Any:
    """`value` with every `<|` in its strings (nested in dicts, lists, tuples too) replaced by `token`."""
    return _map_strings(value, lambda text: text.replace(_MARK, token))


def _render(template: jinja2.Template, source: str, context: dict[str, Any]) -> str:
    try:
        return template.render(**context)
    except jinja2.TemplateError as exc:
        line = getattr(exc, "lineno", None) or _template_line(exc, template.filename)
        where = f"{source} line {line}" if line else source
        raise TemplateError(f"{where}: {exc}") from None


def _template_line(exc: BaseException, filename: str | None) -> int | None:
    """The template line a render error came from (Jinja rewrites tracebacks to point into the template)."""
    line, tb = None, exc.__traceback__
    while tb is not None:
        if filename and tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def load_template(spec: str) -> PromptTemplate:
    """The built-in template named `spec` ("default"), or the template folder at path `spec`.

    A folder without completion.jinja takes the default one (ChatML)."""
    folder = BUILTIN_DIR / spec if "/" not in spec and (BUILTIN_DIR / spec).is_dir() else Path(spec).expanduser()
    if not folder.is_dir():
        names = ", ".join(builtin_templates())
        raise TemplateError(f"template '{spec}': no such folder (built-in templates: {names})")
    environment = ImmutableSandboxedEnvironment(
        loader=jinja2.FileSystemLoader([str(folder), str(BUILTIN_DIR / "default")]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    templates = []
    for name in (MESSAGES_FILE, COMPLETION_FILE):
        if name == MESSAGES_FILE and not (folder / name).is_file():
            raise TemplateError(f"{folder / name}: missing (a template folder needs {MESSAGES_FILE})")
        try:
            templates.append(environment.get_template(name))
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(f"{exc.filename or folder / name} line {exc.lineno}: {exc.message}") from None
    return PromptTemplate(folder, templates[0], templates[1])
