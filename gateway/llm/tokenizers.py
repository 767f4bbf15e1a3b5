"""Tokenizers the gateway uses when the model does not report token counts.

A profile names one (``tokenizer: words``). ``words`` is exact for models whose tokens are
whitespace-separated words (tiny_llm); its ids are a stable hash of the word text (not a model
vocabulary id), documented in docs/mindie.md. ``hf:<directory>`` is the model's own Hugging Face
tokenizer (gateway/llm/hf.py: ``tokenizer.json`` and ``tokenizer_config.json``), loaded once per
directory: exact counts and ids, and it decodes ids (``decode``, ``Detokenizer``).
"""

from __future__ import annotations

import zlib
from typing import Protocol

from gateway.core.errors import invalid


class Tokenizer(Protocol):
    name: str

    def count(self, text: str) -> int: ...

    def ids(self, text: str) -> tuple[int, ...]: ...

    def prompt_count(self, text: str) -> int: ...


class WordTokenizer:
    name = "words"
    vocab = 32000

    def count(self, text: str) -> int:
        return len(text.split())

    prompt_count = count

    def ids(self, text: str) -> tuple[int, ...]:
        return tuple([zlib.crc32(w.encode()) % self.vocab for w in text.split()])


class CharTokenizer:
    """A rough fallback (one token per 4 characters) for models whose tokenizer is unknown."""

    name = "chars4"

    def count(self, text: str) -> int:
        return (len(text) + 3) // 4

    prompt_count = count

    def ids(self, text: str) -> tuple[int, ...]:
        return tuple(zlib.crc32(text[i : i + 4].encode()) % 32000 for i in range(0, len(text), 4))


TOKENIZERS: dict[str, Tokenizer] = {t.name: t for t in (WordTokenizer(), CharTokenizer())}


HF_PREFIX = "hf:"


def tokenizer(name: str) -> Tokenizer:
    """The tokenizer a model's settings name: ``words``, ``chars4`` or ``hf:<directory>``."""
    if name.startswith(HF_PREFIX):
        from .hf import load  # the tokenizers library only where a model has its own tokenizer

        return load(name[len(HF_PREFIX):])
    return named(TOKENIZERS, name, "tokenizer")


def named(table: dict, name: str, what: str):
    """``table[name]``, or INVALID_ARGUMENT naming what is known (tokenizers, model profiles)."""
    hit = table.get(name)
    if hit is None:
        raise invalid(f"unknown {what} {name!r}; known: {sorted(table)}")
    return hit
