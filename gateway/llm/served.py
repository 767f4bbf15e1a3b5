"""Which LLMs are served, under which names, with which profile, tokenizer and chat template.

By default every ready, decoupled Triton model with a text contract is exposed under its own name
(profile guessed from its inputs); explicit ``models`` entries add settings and ``aliases`` map
extra names (``llama2_7b -> tiny_llm``). ``expose: listed`` hides undeclared models.

A model with its own tokenizer names the directory (``tokenizer_dir``): counts, ids and decoding
come from it, and its ``chat_template`` is the chat template unless ``chat_template`` is set. A
model whose token-id contract is another Triton model (TensorRT-LLM's ``ensemble`` takes text; its
``tensorrt_llm`` step takes ``input_ids``) names that model as ``token_model``: token-id prompts go
there, and their ids are decoded with the model's tokenizer where a family answers text.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from gateway.core.errors import ErrorKind, GatewayError
from gateway.core.tensors import ModelMetadata
from gateway.settings import Strict
from gateway.upstream import Upstream

from . import profiles, tokenizers, tools
from .chat import DEFAULT_TEMPLATE, ChatTemplate

log = logging.getLogger("gateway.llm")


@dataclass(frozen=True, slots=True)
class ServedModel:
    name: str  # the Triton model
    profile: str = ""  # "" = guess from the model's inputs
    tokenizer: str = "words"
    chat_template: str = ""  # "" = the tokenizer directory's, else DEFAULT_TEMPLATE
    max_tokens: int = 512  # default for OpenAI/vLLM max_tokens (MindIE's maxIterTimes)
    max_new_tokens: int = 20  # default for native/TGI/Triton max_new_tokens (MindIE's default)
    tokenizer_dir: str = ""  # a Hugging Face tokenizer directory: the tokenizer is then hf:<dir>
    token_model: str = ""  # the Triton model token-id prompts go to ("" = this one)
    max_seq_len: int = 0  # prompt + generated tokens the model takes (MindIE's maxSeqLen); 0 = not checked
    tool_parser: str = ""  # how tool calls are read from its text (gateway/llm/tools.py); "" = no tools


@dataclass(frozen=True, slots=True)
class Resolved:
    name: str  # the name the client used
    spec: ServedModel
    meta: ModelMetadata
    profile: profiles.Profile
    tokenizer: tokenizers.Tokenizer
    template: ChatTemplate
    token_meta: ModelMetadata | None = None  # the token_model's metadata, when one is set

    @property
    def token_target(self) -> tuple[str, ModelMetadata]:
        """(Triton model, metadata) a token-id prompt goes to."""
        if self.spec.token_model and self.token_meta is not None:
            return self.spec.token_model, self.token_meta
        return self.spec.name, self.meta


class ModelOptions(Strict):
    """``models.<triton name>``: what a served LLM needs beyond Triton's metadata."""

    profile: str = ""  # "" = guess from the model's inputs
    tokenizer: str = "words"
    chat_template: str = ""  # "" = the tokenizer directory's (tokenizer_dir), else the default transcript
    max_tokens: Annotated[int, Field(ge=1)] = 512
    max_new_tokens: Annotated[int, Field(ge=1)] = 20
    tokenizer_dir: str = ""  # the model's Hugging Face tokenizer directory (tokenizer.json, tokenizer_config.json)
    token_model: str = ""  # the Triton model that takes token ids (TensorRT-LLM: tensorrt_llm)
    max_seq_len: Annotated[int, Field(ge=0)] = 0  # prompt + output tokens (the engine's max_seq_len); 0 = not checked
    tool_parser: str = ""  # hermes | llama3_json | mistral: tools go into the template, calls are read back

    @field_validator("tool_parser", "profile", "tokenizer", "chat_template")
    @classmethod
    def _known(cls, value: str, info: ValidationInfo) -> str:
        build, checked_when_empty = _OPTION_CHECKS[info.field_name]
        if value or checked_when_empty:
            _settings_check(build, value)
        return value

    def spec(self, name: str) -> ServedModel:
        values = self.model_dump()
        if self.tokenizer_dir:
            values["tokenizer"] = tokenizers.HF_PREFIX + self.tokenizer_dir
        return ServedModel(name=name, **values)


# ModelOptions' names checked at load: the builder that must take the value, and whether "" is checked too
_OPTION_CHECKS = {
    "tool_parser": (tools.check, True),
    "profile": (profiles.profile, False),  # "" = guessed from the model's inputs
    "tokenizer": (tokenizers.tokenizer, True),
    "chat_template": (ChatTemplate, False),  # "" = the tokenizer directory's, else the default transcript
}


def _settings_check(build, value: str) -> None:
    """Run a runtime constructor at settings time; its GatewayError becomes a settings error."""
    try:
        build(value)
    except GatewayError as e:
        raise ValueError(e.message) from None


class ServedModelsSettings(Strict):
    models: dict[str, ModelOptions] = {}
    aliases: dict[str, str] = {"llama2_7b": "tiny_llm"}
    expose: Literal["all", "listed"] = "all"  # "all": every text LLM in Triton; "listed": only `models`
    default_model: str = ""  # for routes without a model name; "" = first exposed

    @model_validator(mode="after")
    def _listed_needs_models(self):
        if self.expose == "listed" and not self.models:
            raise ValueError("expose: listed needs at least one entry in models")
        return self


# An index like the last one keeps the list; it is worked out again at least this often all the same
# (a model reloaded in place, with another signature, keeps its row in the index)
RELIST_AT_LEAST_S = 60.0


class ServedModels:
    def __init__(self, upstream: Upstream, settings: ServedModelsSettings):
        self.upstream = upstream
        self.settings = settings
        self._specs = {n: o.spec(n) for n, o in settings.models.items()}
        self._templates: dict[tuple[str, str], ChatTemplate] = {}
        self._listed: tuple[object, list[str]] | None = None  # (the repository index it was worked out from, served)
        self._relisting: asyncio.Future | None = None  # the background relist of a newer index
        self._listed_at = 0.0  # time.monotonic() when the list was last worked out

    async def served(self) -> list[str]:
        """Triton names of the exposed LLMs, sorted. Worked out once per repository index the
        upstream hands out (it keeps one for ``upstream.cache_ttl_s``), so a request on a route
        without a model name does not look up every model's metadata. When the index fetched anew
        differs (a model loaded, unloaded, changing state; or the list is ``RELIST_AT_LEAST_S``
        old), the models' metadata are fetched together in the background and the request is
        answered from the list worked out from the previous index (the first list is waited for):
        no request waits for a round trip per model."""
        if self.settings.expose == "listed":
            return sorted(self.settings.models)
        index = await self.upstream.repository_index()
        listed = self._listed
        if listed is None:
            return await self._relist(index)
        if listed[0] is not index and (self._relisting is None or self._relisting.done()):
            if index == listed[0] and time.monotonic() - self._listed_at < RELIST_AT_LEAST_S:
                # the same models in the same states: the list stands (working it out again asked
                # Triton for every model's metadata and config, each time the index was fetched)
                self._listed = (index, listed[1])
            else:
                self._relisting = asyncio.ensure_future(self._relist_behind(index, listed[1]))
        return listed[1]

    async def _relist_behind(self, index, last: list[str]) -> None:
        """``_relist`` in the background. Its lookups answer None for a model they cannot read, so
        a failure is a bug: logged once, and the last list kept for this index."""
        try:
            await self._relist(index)
        except Exception:
            log.exception("served models: the list could not be worked out again")
            self._listed = (index, last)

    async def _relist(self, index) -> list[str]:
        names = list(dict.fromkeys(e.name for e in index if e.state == "READY"))
        metas = await asyncio.gather(*(self._metadata_or_none(n) for n in names))
        out = sorted(n for n, meta in zip(names, metas, strict=True) if meta is not None and profiles.is_text_llm(meta))
        self._listed, self._listed_at = (index, out), time.monotonic()
        return out

    async def _metadata_or_none(self, name: str) -> ModelMetadata | None:
        try:
            return await self.upstream.model_metadata(name)
        except GatewayError:
            return None

    async def aliases(self) -> dict[str, str]:
        served = set(await self.served())
        return {a: t for a, t in self.settings.aliases.items() if t in served}

    async def default_name(self) -> str:
        if self.settings.default_model:
            return self.settings.default_model
        served = await self.served()
        if not served:
            raise GatewayError(ErrorKind.NOT_READY, "no LLM is being served")
        return served[0]

    async def resolve(self, name: str | None) -> Resolved:
        """The model a request names, checked on its own (no listing of every model per request)."""
        name = name or await self.default_name()
        target = self.settings.aliases.get(name, name)
        meta = await self._served_metadata(name, target)
        spec = self._specs.get(target) or ServedModel(name=target)
        prof = profiles.profile(spec.profile or profiles.guess_profile(meta))
        tok = tokenizers.tokenizer(spec.tokenizer)
        token_meta = await self.upstream.model_metadata(spec.token_model) if spec.token_model else None
        return Resolved(name, spec, meta, prof, tok, self._template(spec, tok), token_meta)

    async def _served_metadata(self, name: str, target: str) -> ModelMetadata:
        missing = GatewayError(ErrorKind.NOT_FOUND, f"Model {name[:256]} not found.")
        if self.settings.expose == "listed":
            if target not in self.settings.models:
                raise missing
            return await self.upstream.model_metadata(target)
        try:
            meta = await self.upstream.model_metadata(target)  # fails for unknown or unloaded models
        except GatewayError as e:
            if e.kind is not ErrorKind.NOT_FOUND:
                # Triton unreachable or the model unavailable (503), a deadline (504), its internal
                # error: Triton said nothing of an unknown model. (make soak, again: Triton restarting
                # refused the metadata call, was ready a moment later, and the request got the 422.)
                raise
            if not await self.upstream.server_ready():
                # up and still loading its models after a restart (not ready until they are): 503
                raise GatewayError(ErrorKind.NOT_READY, f"Model {name[:256]} is not ready.") from None
            raise missing from None
        if not profiles.is_text_llm(meta):
            raise missing
        return meta

    def _template(self, spec: ServedModel, tok: tokenizers.Tokenizer) -> ChatTemplate:
        """The configured template; else the tokenizer's own (rendered as Hugging Face does); else
        the default transcript."""
        own = None if spec.chat_template else getattr(tok, "chat_template", None)
        key = (spec.chat_template, tok.name if own else "")
        tpl = self._templates.get(key)
        if tpl is None:
            if own:
                tpl = ChatTemplate(own, hf=True, special_tokens=getattr(tok, "special_tokens", {}))
            else:
                tpl = ChatTemplate(spec.chat_template or DEFAULT_TEMPLATE)
            self._templates[key] = tpl
        return tpl
