"""MindIE's Triton token inference, ``POST /v2/models/{m}/infer`` (token ids in, token ids out).

Body: exactly one input ``{"name", "shape": [N] or [1, N], "datatype": "UINT32", "data": [N ids]}``,
``outputs`` with as many entries (each with a string ``name``), optional ``id``
(``^[a-zA-Z0-9_-]{1,256}$``) and ``parameters`` (MindIE reads them from ``inputs[0].parameters``,
its documentation shows them top-level: both are read, the input's win). Checked in MindIE Server's
order with its messages (``single_req_triton_token_infer_interface.cpp``); always answered whole:
``{"id", "outputs": [{"name": <requested name or "output0">, "shape": [1, K], "datatype": "UINT32",
"data": [K generated ids]}]}``. The ids travel to the model as TensorRT-LLM's ``input_ids`` and come
back as its ``output_ids`` (``gateway/llm/profiles.py``).
"""

from __future__ import annotations

import re
from typing import Any

from gateway.llm.served import ServedModels
from gateway.llm.types import Done, GenerateRequest, Token

from . import validate as v
from .common import Encoder, Plan, sampling_tgi

MAX_TOKENS_NUM = v.MAX_TOKENS_NUM
_ID = re.compile(r"^[a-zA-Z0-9_-]{1,256}$")
BAD_ID = ("The id can contain only digits, letters, underscores(_), hyphens(-) and no more than 256 "
          "words in length.")


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _input(body: dict[str, Any]) -> tuple[str, list[int]]:
    inputs = body.get("inputs")
    if not isinstance(inputs, list):
        raise v.invalid("Req should contain 'inputs' and the type should be array.")
    if len(inputs) != 1:
        raise v.invalid("Inputs count must be 1.")
    item = inputs[0]
    if not isinstance(item, dict):
        raise v.invalid("Check triton token req parameter error")
    name = item.get("name")
    if not isinstance(name, str):
        raise v.invalid("Cannot find name in inputs or its type is not string")
    if len(name.encode()) > 256:
        raise v.invalid("The length of name set in inputs exceeds 256.")
    shape = item.get("shape")
    if not isinstance(shape, list):
        raise v.invalid("Cannot find shape in inputs or its type is not array")
    if not all(_is_int(d) and d >= 0 for d in shape):
        raise v.invalid("Shape element must be integer type.")
    if not (len(shape) == 1 or (len(shape) == 2 and shape[0] == 1 and 0 < shape[1] <= MAX_TOKENS_NUM)):
        raise v.invalid("Shape must be at most two-dimensional, and the last element's value must be in "
                        f"(0,{MAX_TOKENS_NUM}].")
    datatype = item.get("datatype")
    if not isinstance(datatype, str):
        raise v.invalid("Cannot find datatype in inputs or its type is not string")
    if datatype != "UINT32":
        raise v.invalid(f"Unsupported datatype, got {datatype[:256]}.")
    data = item.get("data")
    if not isinstance(data, list):
        raise v.invalid("Cannot find data in inputs or its type is not array")
    if len(data) > MAX_TOKENS_NUM:
        raise v.invalid(f"Data element must be no more than max token id length, which is {MAX_TOKENS_NUM}.")
    if len(data) != shape[-1]:
        raise v.invalid(f"Data size should be {shape[-1]}, got {len(data)}.")
    if not all(_is_int(t) for t in data):
        raise v.invalid("Data element must be integer type.")
    return name, v.token_ids(data)


def _request_id(body: dict[str, Any]) -> str | None:
    req_id = body.get("id")
    if req_id is None:
        return None
    if not isinstance(req_id, str):
        raise v.invalid("id must be string type.")
    if not _ID.match(req_id):
        raise v.invalid(BAD_ID)
    return req_id


def _output_name(body: dict[str, Any]) -> str:
    outputs = body.get("outputs")
    if not isinstance(outputs, list):
        raise v.invalid("Req should contain 'outputs' and the type should be array.")
    if len(outputs) != 1:
        raise v.invalid(f"Outputs size should be 1, got {len(outputs)}.")
    if not isinstance(outputs[0], dict) or not isinstance(outputs[0].get("name"), str):
        raise v.invalid("Outputs name must be non-empty string.")
    return outputs[0]["name"] or "output0"


async def plan(body: dict[str, Any], catalog: ServedModels, rid: str, path_model: str | None = None) -> Plan:
    _, ids = _input(body)
    req_id = _request_id(body)
    out_name = _output_name(body)
    p = {**v.obj(body, "parameters"), **v.obj(body["inputs"][0], "parameters")}
    v.number(p, "priority", 1, 5, integer=True)
    v.positive_int(p, "batch_size")
    v.boolean(p, "details")
    model = await catalog.resolve(path_model)
    v.token_model(model)
    req = GenerateRequest(
        model=model.name,
        prompt="",
        prompt_ids=tuple(ids),
        max_tokens=v.positive_int(p, "max_new_tokens") or model.spec.max_new_tokens,
        sampling=sampling_tgi(p, top_k_zero_ok=True),
        timeout=v.timeout_s(p),
        request_id=rid,
    )
    return Plan(req, model, TokenEncoder(req_id or rid, out_name))


class TokenEncoder(Encoder):
    """Answered whole (MindIE sends the body only at the end); never a stream."""

    content_type = "application/json"

    def __init__(self, rid: str, output_name: str):
        self.rid, self.output_name = rid, output_name

    def token(self, tok: Token) -> bytes:
        return b""

    def body(self, done: Done) -> dict:
        ids = list(done.token_ids)
        return {"id": self.rid, "outputs": [{"name": self.output_name, "shape": [1, len(ids)],
                                             "datatype": "UINT32", "data": ids}]}
