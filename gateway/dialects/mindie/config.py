"""The ``dialects.mindie`` YAML section, declared as a strict pydantic model.

    dialects:
      mindie:
        expose: all                   # all text LLMs in Triton, or `listed` (only `models`)
        default_model: ""             # for routes without a model name ("" = first exposed)
        aliases: {llama2_7b: tiny_llm}
        models:
          tiny_llm: {profile: trtllm, tokenizer: words, max_tokens: 512, max_new_tokens: 20,
                     chat_template: "{% for m in messages %}..."}
        pd: {role: standard}          # PD roles (prefill/decode/coordinator): gateway/dialects/mindie/pd/config.py

A request's deadline is the listener's (``listeners.mindie_http.timeout_s``, 600 s like MindIE's
e2eTimeout; ``limits.stream_timeout_s`` for streams), shortened by the request's own ``timeout``.
"""

from __future__ import annotations

from gateway.cutover.settings import LegacySettings
from gateway.llm.served import ServedModelsSettings

from .pd.config import PdConfig


class MindieConfig(ServedModelsSettings):
    """The LLM catalogue's settings at the top level of the section, and the PD role (``pd``)."""

    pd: PdConfig = PdConfig()
    legacy: LegacySettings | None = None  # the MindIE server behind the gateway (docs/migration.md)

    def single_worker_reason(self) -> str | None:
        """Why this section cannot run with several workers (gateway/process/shared.py), or None."""
        reason = self.pd.single_worker_reason()
        return f"pd.{reason}" if reason else None
