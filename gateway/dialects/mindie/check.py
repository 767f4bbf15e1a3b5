"""``gateway check`` for the MindIE-style LLM families: every served model, alias and the default
model, resolved by the LLM ServedModels requests use and encoded by its profile (``profile.encode`` on a
one-token placeholder request; nothing is sent), plus the PD role when one is configured.

Errors: a configured model, alias target or default model that Triton does not have, a text
family pointed at a model that is not decoupled or has no text_input/text_output, a model that
does not fit its profile. Warnings: no LLM served at all; a prefill role over a model that cannot
split phases; a PD coordinator's peer that does not accept connections.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from gateway.core.errors import ErrorKind, GatewayError
from gateway.llm import profiles
from gateway.llm.served import ServedModels
from gateway.llm.types import GenerateRequest
from gateway.ops.findings import CheckContext, Finding, ios

from .config import MindieConfig
from .pd.config import split_host_port


async def check(ctx: CheckContext) -> list:
    cfg: MindieConfig = ctx.config
    if cfg.pd.role == "coordinator":
        return await _coordinator(ctx, cfg)
    catalog = ServedModels(ctx.upstream, cfg)
    served = await catalog.served()
    out: list = []
    names = [*served, *(m for m in cfg.models if m not in served)]
    for name in names:
        out += await _model(ctx, catalog, cfg, name, "profile {}, tokenizer {}")
    for alias, target in cfg.aliases.items():
        found = await _model(ctx, catalog, cfg, alias, f"alias of {target}; profile {{}}, tokenizer {{}}")
        if "aliases" not in cfg.model_fields_set:  # the built-in llama2_7b -> tiny_llm, not the operator's
            found = [replace(f, level="warning") if isinstance(f, Finding) else f for f in found]
        out += found
    if not served:
        out.append(ctx.warning("*", "no text LLM is served (a decoupled Triton model with text_input and "
                                    "text_output): every MindIE route answers 404"))
    elif cfg.default_model and cfg.default_model not in names and cfg.default_model not in cfg.aliases:
        out += await _model(ctx, catalog, cfg, cfg.default_model, "default_model; profile {}, tokenizer {}")
    if cfg.pd.role != "standard":
        out.append(ctx.row(f"pd:{cfg.pd.role}", "", detail=_pd_detail(cfg)))
    return out


async def _model(ctx: CheckContext, catalog: ServedModels, cfg: MindieConfig, name: str, detail: str) -> list:
    target = cfg.aliases.get(name, name)
    try:
        resolved = await catalog.resolve(name)
    except GatewayError as e:
        if e.kind is not ErrorKind.NOT_FOUND:
            raise
        return [ctx.error(name, await _why(ctx, name, target))]
    meta = resolved.meta
    if not profiles.is_text_llm(meta):  # expose: listed takes the model as configured
        return [ctx.error(name, await _why(ctx, name, target))]
    out: list = [ctx.row(name, target, "", ios(meta.inputs), ios(meta.outputs),
                         detail.format(resolved.profile.name, resolved.spec.tokenizer))]
    try:
        resolved.profile.encode(GenerateRequest(name, "check", 1), target, meta, 0)
    except GatewayError as e:
        out.append(ctx.error(name, f"profile {resolved.profile.name}: {e.message}"))
    if cfg.pd.role == "prefill" and cfg.pd.phase_split and not resolved.profile.can_split(meta):
        out.append(ctx.warning(name, f"role prefill: model '{target}' cannot split phases (profile "
                                     f"{resolved.profile.name}, no context_phase_params): P runs the whole "
                                     "generation and relays it"))
    return out


async def _why(ctx: CheckContext, name: str, target: str) -> str:
    """Why the ServedModels refuses ``name``: the model is missing, not decoupled or not text in / text out."""
    via = f"'{name}' (alias of '{target}')" if name != target else f"'{name}'"
    try:
        meta = await ctx.upstream.model_metadata(target)
    except GatewayError:
        return f"{via}: Triton has no model '{target}'; requests get 'Model {name} not found.'"
    missing = [t for t, specs in (("text_input", meta.inputs), ("text_output", meta.outputs))
               if not any(s.name == t for s in specs)]
    if not meta.decoupled:
        return (f"{via}: Triton model '{target}' is not decoupled; the text families (native, TGI, vLLM, "
                "OpenAI, Triton generate) need a decoupled model (model_transaction_policy { decoupled: true })")
    return f"{via}: Triton model '{target}' has no {' / '.join(missing)}; it is not a text LLM"


def _pd_detail(cfg: MindieConfig) -> str:
    pd = cfg.pd
    if pd.role == "prefill":
        return f"prefill, phase_split {str(pd.phase_split).lower()}, D port {pd.d_port}"
    if pd.role == "decode":
        return f"decode, heartbeat {pd.heartbeat_s:g} s"
    return (f"coordinator: prefill {', '.join(pd.prefill) or '-'}; decode {', '.join(pd.decode) or '-'}; "
            f"standard {', '.join(pd.standard) or '-'}")


async def _coordinator(ctx: CheckContext, cfg: MindieConfig) -> list:
    """A coordinator serves no model itself: its peers are listed and probed (TCP connect)."""
    out: list = [ctx.row("pd:coordinator", "", detail=_pd_detail(cfg))]
    for role, peers in (("prefill", cfg.pd.prefill), ("decode", cfg.pd.decode), ("standard", cfg.pd.standard)):
        for peer in peers:
            host, port = split_host_port(peer)
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection(host, port),
                                                   cfg.pd.connect_timeout_s)
                writer.close()
            except (OSError, asyncio.TimeoutError) as e:
                out.append(ctx.warning(f"pd:{role}", f"{peer} does not accept connections ({e}); "
                                                     "requests routed there fail over to others"))
    return out
