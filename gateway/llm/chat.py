"""Chat messages -> prompt, with a per-model jinja2 template (sandboxed, compiled once)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from gateway.core.errors import invalid

# A plain role-prefixed transcript ending with the assistant's turn; works with any text model.
DEFAULT_TEMPLATE = (
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)

_env = ImmutableSandboxedEnvironment(trim_blocks=False, keep_trailing_newline=True)


class ChatTemplate:
    def __init__(self, source: str = DEFAULT_TEMPLATE):
        try:
            self._tpl = _env.from_string(source)
        except TemplateError as e:
            raise invalid(f"chat template does not compile: {e}") from None

    def render(self, messages: Sequence[Mapping], /, **kwargs) -> str:
        taken = sorted({"messages", "add_generation_prompt"} & kwargs.keys())
        if taken:  # a client's chat_template_kwargs may not replace the request's own values
            raise invalid(f"chat_template_kwargs may not set {', '.join(taken)}")
        try:
            return self._tpl.render(messages=messages, add_generation_prompt=True, **kwargs)
        except (TemplateError, TypeError, ValueError, LookupError, AttributeError) as e:  # a template over a client's values
            raise invalid(f"chat template failed: {str(e)[:256]}") from None


def content_text(content) -> str:
    """OpenAI message content: a string or a list of parts; only text parts are supported."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if not isinstance(p, Mapping) or p.get("type") != "text" or not isinstance(p.get("text"), str):
                raise invalid("only text content parts are supported")
            parts.append(p["text"])
        return "".join(parts)
    raise invalid("message content must be a string or a list of text parts")
