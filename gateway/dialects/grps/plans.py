"""Plan: a plain gtensors predict's request-independent part, worked out once per model and input layout.

What ``mapping.gtensors_request`` makes of a plain request (``gtensors.tensors``) depends only on
the target, the model's metadata and the inputs' names, types and shapes: its checks, the default
inputs it adds. A ``Plan`` keeps that outcome as the request bytes ``serialize_request`` would write
around the inputs' raw contents (the header, and the default inputs' entries), so a request is its
arrays after that header (``request``: a ``wire.Planned``, which the upstream writes with the
call's id). From an answer it learns the answer's form (``wire.AnswerForm``: the outputs Triton
sends, their types, shapes and order, and the metadata's order) and the text around its values
(``answer.layout``), and reads later answers of that form as arrays over their raw contents
without parsing them (``decode_response``'s arrays); an answer of any other form is decoded by
``decode_response`` as before, and its form learned. No plan is made for a layout the general path
refuses (its error is raised, every time), for parameters, or for an input shared memory would
take. tests/unit/grps/test_plain.py holds it to the general path. Nothing here does I/O.
"""

from __future__ import annotations

import numpy as np

from gateway.core.tensors import InferResponse, ModelMetadata, Tensor
from gateway.upstream import wire

from . import answer, mapping
from .config import GrpsSettings

MAX_PLANS = 1024  # per worker: the layouts clients send


class Plan:
    __slots__ = ("meta", "model", "header", "defaults", "dtypes", "pretty", "form", "order", "layout")

    def __init__(self, meta: ModelMetadata, model: str, header: bytes, defaults: bytes, dtypes: tuple,
                 pretty: bool):
        self.meta = meta  # the metadata object it was worked out under (a new one: a new plan)
        self.model = model  # the Triton model
        self.header = header  # wire.header(...) of the request: the client's inputs, then the defaults
        self.defaults = defaults  # the default inputs' raw contents entries
        self.dtypes = dtypes  # the numpy type each client input is sent as
        self.pretty = pretty  # grps.pretty_json: how the answer is written
        self.form: wire.AnswerForm | None = None  # the form of the last answer read, once learned
        self.order: tuple[int, ...] = ()  # its outputs' indices in the metadata's order (mapping.ordered)
        self.layout: answer.Layout | None = None  # the answer's text around their values (answer.layout)

    def request(self, inputs: list[Tensor]) -> wire.Planned:
        """The request as ``Upstream.infer_bytes`` takes it: written with the call's id, it is
        ``serialize_request`` of ``gtensors_request``'s request."""
        arrays = [t.data if t.data.dtype == want else t.data.astype(want)
                  for t, want in zip(inputs, self.dtypes, strict=True)]
        return wire.Planned(self.header, arrays, self.defaults)

    def read(self, data: bytes) -> list[np.ndarray] | None:
        """The answer's outputs in the metadata's order, as ``answer.write_laid`` takes them with
        ``layout``, when the answer has the form learned last (``wire.AnswerForm``), else None:
        ``learn`` from ``decode_response``'s answer."""
        form = self.form
        arrays = form.read(data) if form is not None else None
        if arrays is None:
            return None
        return [arrays[i] for i in self.order]

    def learn(self, data: bytes, resp: InferResponse) -> None:
        """Remember the form of an answer (its bytes, decoded) ``answer.write`` writes: fixed-size
        types only, each with its raw contents; of any other answer, nothing."""
        outs = resp.outputs
        self.form = None
        if not outs or any(t.datatype not in wire.RAW_NUMPY or not answer.answerable(t.name, t.datatype)
                           or type(t.data) is not np.ndarray for t in outs):
            return
        at = {id(t): i for i, t in enumerate(outs)}
        self.order = tuple(at[id(t)] for t in mapping.ordered(outs, self.meta))
        self.layout = answer.layout([(outs[i].name, outs[i].datatype, outs[i].data.shape) for i in self.order],
                                   self.pretty)
        if self.layout is not None:
            self.form = wire.AnswerForm.learn(data, [t.data for t in outs], resp.version)


def make(inputs: list[Tensor], meta: ModelMetadata, target: mapping.Target, cfg: GrpsSettings,
         shared_from: int | None) -> Plan | None:
    """The plan of these inputs' layout (``gtensors_request``'s refusals raise); None for a request
    the wire cannot carry as written here (parameters, or an input of ``shared_from`` bytes or more,
    which ``Upstream.infer`` sends through shared memory)."""
    req = mapping.gtensors_request(list(inputs), meta, target, cfg)
    if req.parameters or req.outputs or any(t.parameters for t in req.inputs):
        return None
    if any(t.datatype not in wire.RAW_NUMPY for t in inputs):
        return None
    defaults = [wire.raw_entry(t) for t in req.inputs[len(inputs):]]
    sizes = [t.data.nbytes for t in inputs] + [len(entry) for entry in defaults]  # an entry: a bit over its size
    if shared_from is not None and any(size >= shared_from for size in sizes):
        return None
    header = wire.header(req.model, req.version, [(t.name, t.datatype, t.data.shape) for t in req.inputs])
    dtypes = tuple(np.dtype(wire.RAW_NUMPY[t.datatype]) for t in inputs)
    return Plan(meta, req.model, header, b"".join(defaults), dtypes, cfg.pretty_json)
