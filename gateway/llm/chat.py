"""Chat messages -> prompt, with a per-model jinja2 template (sandboxed, compiled once).

A gateway-configured template renders in a plain sandbox. A model's own template (its tokenizer
directory's ``chat_template``, ``hf=True``) renders as Hugging Face's ``apply_chat_template``
renders it: ``trim_blocks`` and ``lstrip_blocks``, the loop-controls extension, a ``tojson``
filter that keeps non-ASCII text, ``raise_exception`` and ``strftime_now``, and the variables
``messages``, ``tools`` (None when the request has none), ``add_generation_prompt`` and the
tokenizer's special tokens (``bos_token``, ``eos_token``, ...).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime

from jinja2 import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from gateway.core.errors import invalid

# A plain role-prefixed transcript ending with the assistant's turn; works with any text model.
DEFAULT_TEMPLATE = (
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)

_env = ImmutableSandboxedEnvironment(trim_blocks=False, keep_trailing_newline=True)


def _raise_exception(message):
    raise TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


_hf_env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
_hf_env.filters["tojson"] = _tojson
_hf_env.globals["raise_exception"] = _raise_exception
_hf_env.globals["strftime_now"] = _strftime_now


class ChatTemplate:
    def __init__(self, source: str = DEFAULT_TEMPLATE, *, hf: bool = False, special_tokens: Mapping | None = None):
        try:
            self._tpl = (_hf_env if hf else _env).from_string(source)
        except TemplateError as e:
            raise invalid(f"chat template does not compile: {e}") from None
        self._fixed = dict(special_tokens or {})

    def render(self, messages: Sequence[Mapping], /, *, request_tools: Sequence[Mapping] | None = None,
               **kwargs) -> str:
        """``kwargs``: a client's chat_template_kwargs; ``request_tools``: the request's ``tools``."""
        taken = sorted(({"messages", "add_generation_prompt", "tools"} | self._fixed.keys()) & kwargs.keys())
        if taken:  # a client's chat_template_kwargs may not replace the request's own values
            raise invalid(f"chat_template_kwargs may not set {', '.join(taken)}")
        try:
            return self._tpl.render(messages=messages, add_generation_prompt=True, tools=request_tools or None,
                                    **self._fixed, **kwargs)
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
