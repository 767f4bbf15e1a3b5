"""A model's own Hugging Face tokenizer: a directory with ``tokenizer.json`` and
``tokenizer_config.json`` (special tokens, ``chat_template``), as models ship them.

Loaded with the ``tokenizers`` library (no ``transformers``): exact token ids and counts,
``decode`` as Hugging Face decodes, and ``Detokenizer`` for streams: text is handed out only once
the ids decode to whole characters, so a character whose bytes span several tokens is never cut
across two stream events. The chat template is rendered by gateway/llm/chat.py as Hugging Face
renders it.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from tokenizers import Tokenizer as _Fast

from gateway.core.errors import ErrorKind, GatewayError

REPLACEMENT = "\ufffd"
# Longer texts are encoded by ``encode_batch``, which lets go of the GIL while it works (``encode``
# holds it throughout): a long prompt tokenized in gateway.process.offload's pool then no longer
# stops the worker's event loop. Shorter ones by ``encode``, cheaper per call.
RELEASE_GIL_CHARS = 8192


def _content(token) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or an AddedToken object."""
    return token.get("content") if isinstance(token, dict) else token


class HfTokenizer:
    def __init__(self, directory: str):
        path = Path(directory)
        try:
            self._tok = _Fast.from_file(str(path / "tokenizer.json"))
            config = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
        except Exception as e:  # OSError, JSON errors, and the tokenizers library's own Exception
            # the deployment's fault, not the client's; loaded at the model's first request (and by
            # `gateway check`), so settings stay valid where the directory is mounted later
            raise GatewayError(ErrorKind.FAILED_PRECONDITION,
                               f"tokenizer directory {directory!r} cannot be loaded: {str(e)[:200]}") from None
        self.name = f"hf:{directory}"
        self.directory = directory
        self.chat_template: str | None = config.get("chat_template") if isinstance(config.get("chat_template"), str) \
            else None
        # what Hugging Face passes a chat template besides the messages
        self.special_tokens = {k: _content(config.get(k)) for k in ("bos_token", "eos_token", "pad_token", "unk_token")
                               if _content(config.get(k)) is not None}
        eos = self.special_tokens.get("eos_token")
        self.eos_id: int | None = self._tok.token_to_id(eos) if eos else None

    def _encode(self, text: str, special: bool):
        if len(text) > RELEASE_GIL_CHARS:
            return self._tok.encode_batch([text], add_special_tokens=special)[0]
        return self._tok.encode(text, add_special_tokens=special)

    def count(self, text: str) -> int:
        """Tokens of generated text (no special tokens added)."""
        return len(self._encode(text, False).ids)

    def prompt_count(self, text: str) -> int:
        """Tokens of a prompt as the model's preprocessing encodes it (special tokens added, as
        TensorRT-LLM's preprocessing and vLLM do by default)."""
        return len(self._encode(text, True).ids)

    def ids(self, text: str) -> tuple[int, ...]:
        return tuple(self._encode(text, False).ids)

    def prompt_ids(self, text: str) -> tuple[int, ...]:
        return tuple(self._encode(text, True).ids)

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def pieces(self, text: str) -> list[str]:
        """Each token of ``text`` decoded on its own (MindIE's ``/v1/tokenizer`` with ``do_decode``):
        a token that holds part of a character decodes to U+FFFD, as the tokenizer decodes it."""
        return [self._tok.decode([i], skip_special_tokens=False) for i in self._tok.encode(text, add_special_tokens=False).ids]

    def detokenizer(self) -> Detokenizer:
        return Detokenizer(self)


class Detokenizer:
    """Ids in, text out, a stream at a time. Each call decodes the ids since the last text handed
    out (from where the previous window began, so a tokenizer that drops a leading space at the
    start of a decode drops it on both sides of the difference); text ending in U+FFFD (a
    character not yet complete) is held back until the next ids complete it."""

    __slots__ = ("_tok", "_ids", "_prefix", "_read")

    def __init__(self, tok: HfTokenizer):
        self._tok = tok
        self._ids: list[int] = []
        self._prefix = 0  # where the decoding window starts
        self._read = 0  # ids up to here have been handed out as text

    def feed(self, ids) -> str:
        self._ids.extend(int(i) for i in ids)
        before = self._tok.decode(self._ids[self._prefix:self._read])
        now = self._tok.decode(self._ids[self._prefix:])
        if len(now) <= len(before) or now.endswith(REPLACEMENT):
            return ""
        self._prefix, self._read = self._read, len(self._ids)
        return now[len(before):]

    def flush(self) -> str:
        """What is left at the end of the stream (an incomplete character as U+FFFD, as HF decodes it)."""
        before = self._tok.decode(self._ids[self._prefix:self._read])
        now = self._tok.decode(self._ids[self._prefix:])
        self._prefix = self._read = len(self._ids)
        return now[len(before):] if len(now) > len(before) else ""


@functools.lru_cache(maxsize=16)
def load(directory: str) -> HfTokenizer:
    return HfTokenizer(directory)
