"""Chat templates: conversations rendered the way a model was trained to read them.

A Hugging Face model ships its conversation format as a Jinja template, the
`chat_template` of its `tokenizer_config.json` (or a `chat_template.jinja` file beside
it). `ChatTemplate` renders it with the Jinja engine (`jinja2`, not a hand-written
one), in the environment `transformers`' `apply_chat_template` uses, so a conversation
becomes the same text, byte for byte: a sandboxed, immutable environment (templates
come with downloaded models: they may not touch Python objects), `trim_blocks` and
`lstrip_blocks`, the `loopcontrols` extension, a `tojson` filter that keeps non-ASCII
characters, and the `raise_exception` and `strftime_now` globals; a template's
`{% generation %}` blocks render their body.

Conversations are lists of messages, `{"role": "system" | "user" | "assistant" |
"tool", "content": str, ...}` (assistant messages may carry `tool_calls`), plus
optional `tools` (JSON schemas, as `transformers` passes them). `tokenize_chat` gives
the token ids and the mask of the assistant's tokens, the ones a fine-tuning loss trains
on: each assistant message's span is what rendering it adds after the generation prompt
of the conversation before it (its content and end-of-turn marker, without trailing
white space), which needs a template that renders a conversation's prefix as a prefix
of its rendering (a template that rewrites earlier turns, e.g. one that drops earlier
reasoning, is refused with the message that says which turn).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from jaxrl.config import ConfigError

Message = Mapping[str, Any]


class _GenerationTracker:
    """Where a render's `{% generation %}` blocks landed: the chunks emitted so far (while
    a tracked render runs) and the `(start, end)` spans of the blocks' output."""

    def __init__(self) -> None:
        self.chunks: list[str] | None = None
        self.spans: list[tuple[int, int]] = []


def _environment(tracker: _GenerationTracker) -> Any:
    """The Jinja environment of Hugging Face chat templates (see the module docstring),
    with `{% generation %}` blocks reporting their output's span to `tracker`."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        """`{% generation %}...{% endgeneration %}` renders its body and, during a
        tracked render, records where that output starts and ends: the tokens a
        template marks as the assistant's."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            call = self.call_method("_record", [], lineno=lineno)
            return jinja2.nodes.CallBlock(call, [], [], body, lineno=lineno)

        def _record(self, caller: Any) -> str:
            text = caller()
            if tracker.chunks is not None:  # the chunks emitted before this block
                start = sum(len(chunk) for chunk in tracker.chunks)
                tracker.spans.append((start, start + len(text)))
            return text

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value: Any, ensure_ascii: bool = False, indent: Any = None, **kwargs: Any):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, **kwargs)

    def strftime_now(format: str) -> str:
        return datetime.datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[Generation, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


@dataclasses.dataclass(frozen=True)
class ChatTemplate:
    """A compiled chat template and the special tokens it refers to (`bos_token`,
    `eos_token`, as the tokenizer config names them). Invalid Jinja is a `ConfigError`
    here, when the template is loaded, not at the first render."""

    source: str
    bos_token: str = ""
    eos_token: str = ""
    name: str = "chat_template"
    _compiled: Any = dataclasses.field(default=None, repr=False, compare=False)
    _tracker: Any = dataclasses.field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        import jinja2

        if not isinstance(self.source, str) or not self.source.strip():
            raise ConfigError(f"invalid {self.name}: a chat template must be non-empty text")
        tracker = _GenerationTracker()
        object.__setattr__(self, "_tracker", tracker)
        try:
            compiled = _environment(tracker).from_string(self.source)
        except jinja2.exceptions.TemplateSyntaxError as err:
            raise ConfigError(
                f"invalid {self.name}: not a valid Jinja template (line {err.lineno}: "
                f"{err.message})"
            ) from None
        object.__setattr__(self, "_compiled", compiled)

    @classmethod
    def from_pretrained(cls, path: str | pathlib.Path, which: str = "default") -> ChatTemplate:
        """The template of a model directory (or its `tokenizer_config.json`): the
        `chat_template` entry (a string, or a list of named templates, of which `which`),
        else a `chat_template.jinja` file beside it."""
        path = pathlib.Path(path)
        directory = path if path.is_dir() else path.parent
        config_path = directory / "tokenizer_config.json" if path.is_dir() else path
        config = json.loads(config_path.read_text()) if config_path.exists() else {}
        template = config.get("chat_template")
        if isinstance(template, list):
            named = {entry.get("name"): entry.get("template") for entry in template}
            if which not in named:
                raise ConfigError(
                    f"invalid chat_template={which!r}: {config_path} has {sorted(named)}"
                )
            template = named[which]
        if template is None and (directory / "chat_template.jinja").exists():
            template = (directory / "chat_template.jinja").read_text()
        if template is None:
            raise ConfigError(
                f"invalid model={str(directory)!r}: it has no chat template (no "
                "chat_template in tokenizer_config.json, no chat_template.jinja)"
            )
        return cls(
            template,
            bos_token=_token_text(config.get("bos_token")),
            eos_token=_token_text(config.get("eos_token")),
            name=f"chat_template of {directory}",
        )

    def render(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        **variables: Any,
    ) -> str:
        """The conversation as the model reads it; with `add_generation_prompt`, followed
        by the header of the assistant's next turn. Extra `variables` reach the template
        (e.g. `enable_thinking=False` for templates that read it). A template's own
        `raise_exception` (a role it does not know, ...) is a `ConfigError`."""
        return self._render(messages, tools, add_generation_prompt, variables)[0]

    def _render(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None,
        add_generation_prompt: bool,
        variables: Mapping[str, Any],
    ) -> tuple[str, list[tuple[int, int]]]:
        """The rendering and the spans of its `{% generation %}` blocks, from the
        template's output chunks as they are produced (the blocks' positions)."""
        import jinja2

        _check_messages(messages)
        tracker = self._tracker
        tracker.chunks, tracker.spans = [], []
        try:
            for chunk in self._compiled.generate(
                messages=[dict(m) for m in messages],
                tools=None if tools is None else [dict(t) for t in tools],
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                **variables,
            ):
                tracker.chunks.append(chunk)
            return "".join(tracker.chunks), list(tracker.spans)
        except jinja2.exceptions.TemplateError as err:
            raise ConfigError(f"invalid conversation for {self.name}: {err}") from None
        finally:
            tracker.chunks = None

    def assistant_spans(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **variables: Any,
    ) -> tuple[str, list[tuple[int, int]]]:
        """The rendered conversation and the `(start, end)` character span of each
        assistant message: the template's `{% generation %}` blocks when it has them,
        else by prefix (see the module docstring)."""
        text, generation = self._render(messages, tools, False, variables)
        if generation:
            return text, generation
        spans = []
        for i, message in enumerate(messages):
            if message.get("role") != "assistant":
                continue
            prompt = self.render(messages[:i], tools=tools, add_generation_prompt=True, **variables)
            upto = self.render(messages[: i + 1], tools=tools, **variables)
            if not (upto.startswith(prompt) and text.startswith(upto)):
                raise ConfigError(
                    f"invalid {self.name}: rendering message {i} (assistant) does not extend "
                    "the rendering of the conversation before it, so its tokens cannot be "
                    "told apart (the template rewrites earlier turns); mark the assistant's "
                    "text with {% generation %} blocks"
                )
            content = upto[len(prompt) :].rstrip()
            spans.append((len(prompt), len(prompt) + len(content)))
        return text, spans

    def check_generation_prompt(self) -> None:
        """Raises `ConfigError` unless `add_generation_prompt` adds something to a user
        turn: a template without it cannot prompt the model for its answer."""
        user = [{"role": "user", "content": "x"}]
        if self.render(user, add_generation_prompt=True) == self.render(user):
            raise ConfigError(
                f"invalid {self.name}: add_generation_prompt adds nothing, so the model "
                "could not be prompted to answer; use a template with a generation prompt"
            )


def _token_text(token: Any) -> str:
    """A special token of a tokenizer config: a string or `{"content": ...}`."""
    if isinstance(token, Mapping):
        token = token.get("content")
    return token if isinstance(token, str) else ""


def _check_messages(messages: Sequence[Message]) -> None:
    """A clear error for what is not a conversation, before the template sees it."""
    roles = ("system", "user", "assistant", "tool")
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") not in roles:
            raise ConfigError(
                f"invalid message {i}: must be a mapping with 'role' in {list(roles)}, got "
                f"{message!r:.80}"
            )


def token_offsets(tokenizer: Any, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """Token ids of `text` (no special tokens added: the template wrote them) and each
    token's character span. Hugging Face tokenizers report offsets; a character-level
    tokenizer's token i is character i."""
    backend = getattr(tokenizer, "backend", None)
    if backend is not None:
        encoding = backend.encode(text, add_special_tokens=False)
        return list(encoding.ids), [tuple(o) for o in encoding.offsets]
    ids = tokenizer.encode(text)
    if len(ids) != len(text):
        raise TypeError(f"{type(tokenizer).__name__} reports no offsets and is not one per char")
    return ids, [(i, i + 1) for i in range(len(text))]


def tokenize_chat(
    template: ChatTemplate,
    tokenizer: Any,
    messages: Sequence[Message],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    max_tokens: int | None = None,
    **variables: Any,
) -> tuple[list[int], list[int]]:
    """`(ids, assistant_mask)` of a conversation: the rendered text's tokens, and 1 on
    the tokens that lie in an assistant message's span (`ChatTemplate.assistant_spans`).
    A conversation longer than `max_tokens` (a model's context) is a `ConfigError`."""
    text, spans = template.assistant_spans(messages, tools=tools, **variables)
    ids, offsets = token_offsets(tokenizer, text)
    if max_tokens is not None and len(ids) > max_tokens:
        raise ConfigError(
            f"invalid conversation: it renders to {len(ids)} tokens, more than the "
            f"{max_tokens} of the model's context"
        )
    mask = [int(any(a < span_end and b > span_start for span_start, span_end in spans))
            for a, b in offsets]  # fmt: skip
    return ids, mask
