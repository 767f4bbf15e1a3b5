"""The ``dialects.grps`` settings section, declared as a strict pydantic model.

    dialects:
      grps:
        default_model: grps_echo-1       # used when a request names no model
        start_online: false              # as GRPS: /ready fails until /online (true: online at start)
        http_error_status: false         # as the C++ server: errors with HTTP 200, the code in the body
                                         #   (true: the code as the HTTP status, as GRPS's py server)
        pretty_json: true                # JSON text byte-identical to the C++ server (false: compact)
        server_metadata_config: false    # true: ServerMetadata also returns this section (as GRPS
                                         #   returns its yml files); false: version, online, models
        default_max_tokens: 64           # for models with a max_tokens input (tiny_llm)
        streaming:
          ctrl_mode: query_param         # query_param | header_param | body_param
          ctrl_key: streaming
          res_content_type: application/octet-stream
        models:                          # optional, keyed by the GRPS name (name-version) or name
          your_model-1.0.0:
            triton_model: saved_model_half_plus_three
            triton_version: "123"
            str_input: text              # input for str_data / bin_data
            str_output: text_out
            ndarray_input: x
            ndarray_output: y
            inputs: {max_tokens: 16}     # constant inputs added to every request
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from gateway.cutover.settings import LegacySettings
from gateway.settings import Strict

CTRL_MODES = ("query_param", "header_param", "body_param")


def _version_text(value: Any) -> Any:
    """``triton_version: 123`` and ``"123"`` mean the same version."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class Streaming(Strict):
    ctrl_mode: Literal["query_param", "header_param", "body_param"] = "query_param"
    ctrl_key: str = "streaming"
    res_content_type: str = "application/octet-stream"


class ModelRule(Strict):
    """How GRPS payloads map onto one Triton model; empty fields are derived from its metadata."""

    triton_model: str = ""
    triton_version: Annotated[str, BeforeValidator(_version_text)] = ""
    str_input: str = ""
    str_output: str = ""
    ndarray_input: str = ""
    ndarray_output: str = ""
    inputs: dict[str, Any] = {}


class GrpsSettings(Strict):
    default_model: str = "grps_echo-1"
    start_online: bool = False
    http_error_status: bool = False
    pretty_json: bool = True
    server_metadata_config: bool = False  # ServerMetadata shows this section only when true
    default_max_tokens: Annotated[int, Field(ge=1)] = 64
    streaming: Streaming = Streaming()
    models: dict[str, ModelRule] = {}
    legacy: LegacySettings | None = None  # the GRPS server behind the gateway (docs/migration.md)

    def as_dict(self) -> dict[str, Any]:
        """Plain data, for the server metadata answer (fields left at their empty default omitted)."""
        out = self.model_dump(mode="json", exclude={"models", "legacy"})
        out["models"] = {k: r.model_dump(mode="json", exclude_defaults=True) for k, r in self.models.items()}
        return out
