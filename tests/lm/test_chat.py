"""Chat templates (issue 33, item 1): conversations rendered with the model's Jinja
template, the assistant's tokens masked, and clear errors for templates and conversations
that cannot work. Parity with `transformers`' `apply_chat_template` on the same templates
is in test_chat_parity.py (the optional tier: it needs transformers)."""

from __future__ import annotations

import json
import pathlib

import pytest

from jaxrl.config import ConfigError
from jaxrl.lm.chat import ChatTemplate, tokenize_chat
from jaxrl.lm.tokenizer import CharTokenizer

TEMPLATES = pathlib.Path(__file__).parent / "fixtures" / "chat_templates"

CASES = json.loads((TEMPLATES / "conversations.json").read_text())
CONVERSATION, TOOLS, TOOL_CONVERSATION = (
    CASES["conversation"],
    CASES["tools"],
    CASES["tool_conversation"],
)


def template(name: str) -> ChatTemplate:
    return ChatTemplate((TEMPLATES / f"{name}.jinja").read_text(), bos_token="<|begin_of_text|>")


def test_qwen_style_renders_the_conversation_and_the_generation_prompt():
    qwen = template("qwen25_style")
    text = qwen.render(CONVERSATION[:2], add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+3?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert qwen.render(CONVERSATION).endswith("<|im_start|>assistant\n8<|im_end|>\n")


def test_tools_render_as_json_keeping_non_ascii_and_tool_calls_and_results():
    text = template("qwen25_style").render(TOOL_CONVERSATION, tools=TOOLS)
    assert json.dumps(TOOLS[0], ensure_ascii=False) in text  # "—" kept, not \u2014
    assert '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>' in text
    assert "<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n" in text


def test_assistant_mask_covers_each_answer_and_its_end_of_turn_only():
    qwen = template("qwen25_style")
    text, spans = qwen.assistant_spans(CONVERSATION)
    assert [text[a:b] for a, b in spans] == ["5<|im_end|>", "8<|im_end|>"]
    tokenizer = CharTokenizer("".join(sorted(set(text))))
    ids, mask = tokenize_chat(qwen, tokenizer, CONVERSATION)
    assert len(ids) == len(mask) == len(text)
    masked = "".join(c for c, m in zip(text, mask, strict=True) if m)
    assert masked == "5<|im_end|>8<|im_end|>"


def test_generation_blocks_mark_the_assistant_even_where_earlier_turns_are_rewritten():
    """A Qwen3-style template drops the reasoning of earlier turns, so a conversation's
    prefix does not render as a prefix; its {% generation %} blocks say where the
    assistant's text is."""
    qwen3 = template("qwen3_style")
    turns = [
        {"role": "user", "content": "2+3?"},
        {"role": "assistant", "content": "<think>\nadd\n</think>\n\n5"},
        {"role": "user", "content": "4+4?"},
        {"role": "assistant", "content": "<think>\nadd again\n</think>\n\n8"},
    ]
    text, spans = qwen3.assistant_spans(turns)
    assert [text[a:b] for a, b in spans] == [
        "5<|im_end|>",  # earlier reasoning dropped
        "<think>\nadd again\n</think>\n\n8<|im_end|>",
    ]
    no_thinking = qwen3.render(turns[:1], add_generation_prompt=True, enable_thinking=False)
    assert no_thinking.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_a_template_that_rewrites_earlier_turns_without_generation_blocks_is_refused():
    source = (TEMPLATES / "qwen3_style.jinja").read_text()
    source = source.replace("{%- generation %}", "").replace("{%- endgeneration %}", "")
    turns = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "<think>x</think>b"},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": "d"},
    ]
    with pytest.raises(ConfigError, match=r"message 1 \(assistant\) does not extend .* generation"):
        ChatTemplate(source).assistant_spans(turns)


def test_llama_style_with_bos_and_tools():
    llama = template("llama3_style")
    text = llama.render(CONVERSATION[:2], tools=TOOLS, add_generation_prompt=True)
    assert text.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n")
    assert (
        "Environment: ipython\n" in text
        and json.dumps(TOOLS[0], indent=4, ensure_ascii=False) in text
    )
    assert text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_from_pretrained_reads_the_tokenizer_config_and_its_named_templates(tmp_path):
    source = (TEMPLATES / "qwen25_style.jinja").read_text()
    config = {"chat_template": [{"name": "default", "template": source}], "eos_token": "<|im_end|>"}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    loaded = ChatTemplate.from_pretrained(tmp_path)
    assert loaded.source == source and loaded.eos_token == "<|im_end|>"
    with pytest.raises(ConfigError, match=r"invalid chat_template='tool_use': .* \['default'\]"):
        ChatTemplate.from_pretrained(tmp_path, which="tool_use")
    (tmp_path / "tokenizer_config.json").write_text("{}")
    with pytest.raises(ConfigError, match="it has no chat template"):
        ChatTemplate.from_pretrained(tmp_path)
    (tmp_path / "chat_template.jinja").write_text(source)
    assert ChatTemplate.from_pretrained(tmp_path).source == source


# ---------------------------------------------------------------------- bad input
def test_invalid_jinja_is_refused_when_loaded_naming_the_line():
    with pytest.raises(ConfigError, match=r"not a valid Jinja template \(line 2: "):
        ChatTemplate("{% for m in messages %}\n{{ m.content }\n{% endfor %}")
    with pytest.raises(ConfigError, match="must be non-empty text"):
        ChatTemplate("  ")


def test_a_template_without_a_generation_prompt_is_refused():
    plain = ChatTemplate("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}")
    with pytest.raises(ConfigError, match="add_generation_prompt adds nothing"):
        plain.check_generation_prompt()
    template("qwen25_style").check_generation_prompt()


def test_the_templates_own_errors_and_bad_messages_are_config_errors():
    strict = ChatTemplate(
        "{% for m in messages %}{% if m.role == 'tool' %}"
        "{{ raise_exception('tool messages are not supported') }}{% endif %}{% endfor %}"
    )
    with pytest.raises(ConfigError, match="tool messages are not supported"):
        strict.render([{"role": "tool", "content": "x"}])
    with pytest.raises(ConfigError, match=r"invalid message 1: must be a mapping with 'role'"):
        strict.render([{"role": "user", "content": "x"}, {"role": "robot", "content": "y"}])


def test_templates_run_sandboxed():
    """A template comes with a downloaded model: it cannot reach Python's internals."""
    hostile = ChatTemplate("{{ messages.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(ConfigError, match="invalid conversation"):
        hostile.render([{"role": "user", "content": "x"}])


def test_a_conversation_longer_than_the_context_is_refused():
    qwen = template("qwen25_style")
    text = qwen.render(CONVERSATION)
    tokenizer = CharTokenizer("".join(sorted(set(text))))
    with pytest.raises(ConfigError, match=rf"renders to {len(text)} tokens, more than the 64 "):
        tokenize_chat(qwen, tokenizer, CONVERSATION, max_tokens=64)
