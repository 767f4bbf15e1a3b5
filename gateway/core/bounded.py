"""Bounded work on client input (issue 13): the process's limits, and error texts from prefixes.

``LIMITS`` holds the ``limits:`` values that pure decoding functions read (tensor bytes, JSON
depth, prompt length, the offload threshold); the worker sets them once from its settings
(``configure``). A message is built for every refused request: rendering a 100 MB name, shape or
document into it would cost what parsing it did, so every dialect cuts what it quotes (``clip``,
``clip_repr``, ``dims_text``). What is worked out once per client-given key (a layout, a path, a
model spec) is kept in a dict of bounded size (``keep``); what is worked out once per request
shape, in a ``Plans``.
"""

from __future__ import annotations

from types import SimpleNamespace

# the defaults of gateway.settings.Limits (a test checks they agree)
LIMITS = SimpleNamespace(max_tensor_bytes=256 << 20, max_json_depth=1 << 20, max_prompt_chars=40 << 20,
                         max_name_chars=1024, offload_bytes=64 << 10, offload_threads=2)


def keep(cache: dict, key, value, most: int):
    """``cache[key] = value``, the cache emptied first when it holds ``most`` entries (its keys come
    from clients: a worker must not grow it without bound); ``value``."""
    if len(cache) >= most:
        cache.clear()
    cache[key] = value
    return value


class Plans(dict):
    """What is worked out once per request shape and kept by it: a plan (a request's header, an
    answer's layout, a learned form, a predict's checks), whatever its dialect. A dict (``get``,
    ``in``) that ``keep`` bounds: emptied first when it holds ``most`` plans, for the shapes are the
    clients'. A refusal is raised where the plan is made, every time, and never kept."""

    __slots__ = ("most",)

    def __init__(self, most: int):
        super().__init__()
        self.most = most

    def keep(self, key, value):
        """``self[key] = value`` within the bound; ``value``."""
        return keep(self, key, value, self.most)


def configure(limits) -> None:
    """Take the values of ``limits`` (a gateway.settings.Limits) for this process."""
    for key in vars(LIMITS):
        setattr(LIMITS, key, getattr(limits, key))


def check_name(text: str, what: str) -> str:
    """A name a client sends (model, signature, tensor, feature): at most limits.max_name_chars
    characters, before it is looked up, forwarded to Triton or quoted in an error."""
    if len(text) > LIMITS.max_name_chars:
        from gateway.core.errors import invalid

        raise invalid(f"{what} is {len(text)} characters long, more than the {LIMITS.max_name_chars} allowed "
                      "(limits.max_name_chars)")
    return text


def json_deeper(doc, limit: int) -> bool:
    """Whether a parsed JSON document nests lists/objects more than ``limit`` levels (a walk over
    its containers; scalars are skipped a list at a time, at C speed)."""
    stack = [(doc, 1)] if isinstance(doc, list | dict) else []
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return True
        items = value.values() if isinstance(value, dict) else value
        kinds = set(map(type, items))
        if list in kinds or dict in kinds:
            stack.extend((v, depth + 1) for v in items if isinstance(v, list | dict))
    return False

TEXT = 256  # characters of a quoted string (TF Serving cuts its JSON excerpts at 256 bytes too)
DIMS = 16  # dimensions of a quoted shape


def clip(text, most: int = TEXT) -> str:
    """``text`` (any object's str) cut to ``most`` characters, ``...`` marking a cut."""
    if not isinstance(text, str):
        text = text.decode("utf-8", "replace") if isinstance(text, bytes | bytearray) else str(text)
    return text if len(text) <= most else text[:most] + "..."


def clip_repr(value, most: int = TEXT) -> str:
    """``repr(value)`` of a bounded prefix of it: a long string or list is cut before ``repr`` runs."""
    if isinstance(value, str | bytes) and len(value) > most:
        return repr(value[:most]) + "..."
    if isinstance(value, list | tuple | dict) and len(value) > DIMS:
        return f"<{type(value).__name__} of {len(value)} items>"
    return clip(repr(value), most)


def dims_text(dims, most: int = DIMS) -> str:
    """A shape as ``[a, b, ...]``, cut after ``most`` dimensions."""
    dims = [int(d) for d in list(dims[: most + 1])]
    if len(dims) > most:
        return "[" + ", ".join(str(d) for d in dims[:most]) + ", ...]"
    return str(dims)
