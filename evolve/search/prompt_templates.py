"""Prompt templates: editable Jinja files that word a mutation request as chat messages or as one raw text."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from evolve.errors import UserError

BUILTIN_DIR = Path(__file__).parent / "templates"
MESSAGES_FILE = "prompt.jinja"
COMPLETION_FILE = "completion.jinja"
_ROLE_LINE = re.compile(r"^<\|(system|user|assistant)\|>[ \t]*$", re.MULTILINE)


class TemplateError(UserError):
    """A prompt template cannot be found, parsed or rendered; one line naming the file and the fault."""


def builtin_templates() -> list[str]:
    return sorted(path.name for path in BUILTIN_DIR.iterdir() if (path / MESSAGES_FILE).is_file())


def split_messages(text: str, source: str) -> list[dict[str, str]]:
    """Rendered template text -> chat messages; each `<|role|>` line starts one."""
    starts = list(_ROLE_LINE.finditer(text))
    if not starts:
        raise TemplateError(f"{source}: no message; start one with a line <|system|>, <|user|> or <|assistant|>")
    if text[: starts[0].start()].strip():
        raise TemplateError(f"{source}: text before the first <|role|> line: {text[:starts[0].start()].strip()[:60]!r}")
    messages = []
    for index, start in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else len(text)
        messages.append({"role": start.group(1), "content": text[start.end():end].strip("\n")})
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
        source = str(self.folder / MESSAGES_FILE)
        return split_messages(_render(self.messages_template, source, context), source)

    def completion_text(self, messages: list[dict[str, str]], prefill: str) -> str:
        source = str(self.folder / COMPLETION_FILE)
        return _render(self.completion_template, source, {"messages": messages, "prefill": prefill})


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
