"""The ``dialects.mindie`` YAML section, parsed once into a frozen dataclass.

    dialects:
      mindie:
        request_timeout_s: 600        # MindIE tokenTimeout/e2eTimeout; a request's `timeout` is capped by it
        expose: all                   # all text LLMs in Triton, or `listed` (only `models`)
        default_model: ""             # for routes without a model name ("" = first exposed)
        aliases: {llama2_7b: tiny_llm}
        models:
          tiny_llm: {profile: trtllm, tokenizer: words, max_tokens: 512, max_new_tokens: 20,
                     chat_template: "{% for m in messages %}..."}
        pd: {role: standard}          # PD roles (prefill/decode/coordinator): gateway/dialects/mindie/pd/config.py
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from gateway.core.errors import GatewayError
from gateway.llm.catalog import CatalogSettings
from gateway.settings import SettingsError

from .pd.config import PdConfig


@dataclass(frozen=True, slots=True)
class MindieConfig:
    catalog: CatalogSettings = field(default_factory=CatalogSettings)
    request_timeout_s: float = 600.0
    pd: PdConfig = field(default_factory=PdConfig)

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> MindieConfig:
        unknown = set(raw) - {"request_timeout_s", "expose", "default_model", "aliases", "models", "pd"}
        if unknown:
            raise SettingsError(f"dialects.mindie: unknown keys {sorted(unknown)}")
        try:
            catalog = CatalogSettings.parse(raw)
        except (GatewayError, TypeError) as e:
            raise SettingsError(f"dialects.mindie: {e}") from None
        try:
            pd = PdConfig.model_validate(dict(raw.get("pd") or {}))
        except ValidationError as e:
            raise SettingsError(f"dialects.mindie.pd: {e}") from None
        return cls(catalog=catalog, request_timeout_s=float(raw.get("request_timeout_s", 600.0)), pd=pd)
