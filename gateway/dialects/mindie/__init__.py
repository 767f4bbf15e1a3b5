"""MindIE-style LLM dialects on one port: native, TGI, vLLM, OpenAI, Triton generate."""

from gateway.dialect import Dialect, ListenerSpec

from .config import MindieConfig

DIALECT = Dialect(
    name="mindie",
    listeners=(
        # MindIE's e2eTimeout defaults to 600 s; a request's own `timeout` shortens it
        ListenerSpec("mindie_http", 1025, "http",
                     "MindIE-style LLM HTTP (native, TGI, vLLM, OpenAI, Triton generate)",
                     "gateway.dialects.mindie.roles:attach", timeout_s=600.0),
    ),
    open="gateway.dialects.mindie.roles:open",
    config=MindieConfig,
    check="gateway.dialects.mindie.check:check",
)
