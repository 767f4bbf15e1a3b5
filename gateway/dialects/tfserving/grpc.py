"""TensorFlow Serving gRPC listener (8500): PredictionService and ModelService.

Thin: each RPC decodes its protobuf (``protocodec``), calls the shared ``Service`` and encodes the
answer. Predict takes the request's bytes: one shaped like a request it parsed before is read by
that request's learned form (``predictform``), any other is parsed here. The edge wraps every RPC:
GatewayError becomes TF Serving's status code and message, anything unexpected is logged and
answered INTERNAL, and the client's deadline (when shorter than the listener's) is forwarded to
Triton.
"""

from __future__ import annotations

from types import SimpleNamespace

import grpc
from google.protobuf.message import DecodeError

from gateway._proto.tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)
from gateway.call import current
from gateway.core.bounded import clip
from gateway.core.errors import invalid, unimplemented
from gateway.cutover import grpcroute
from gateway.edge import Edge
from gateway.process import offload

from . import cutover_grpc, protocodec
from .codec import tf_type
from .errors import Unparsable
from .mapping import ServableRef, Target
from .predictform import Forms
from .service import Service


def _model_name(request) -> str:
    spec = getattr(request, "model_spec", None)
    return spec.name if spec is not None else ""


def _spec(request) -> ServableRef:
    if not request.HasField("model_spec"):
        raise invalid("Missing ModelSpec")
    return protocodec.spec_from_proto(request.model_spec)


def _check_type(types: dict[str, str], i: int, alias: str, v2: str) -> None:
    want = types.get(alias)  # alias -> the V2 type clients send
    if want is not None and want != v2:
        raise invalid(f"Expects arg[{i}] to be {tf_type(want)} but {tf_type(v2)} is provided")


class PredictionServicer(prediction_service_pb2_grpc.PredictionServiceServicer):
    def __init__(self, service: Service):
        self.service = service
        self.content = service.conf.tensor_content_outputs
        self.forms = Forms()  # Predict requests read by their learned form (predictform.py)

    def _resolved_spec(self, target: Target, version: str):
        return protocodec.model_spec(target.model, version or target.version, target.signature.name)

    async def Predict(self, data: bytes, context):
        """Predict, from the request's bytes: read by a learned form when it has one, else parsed."""
        form = self.forms.match(data)
        if form is not None:
            current().model = form.spec.name
            target = await self.service.resolve(form.spec, grpc=True, method="predict")
            _check_type(target.signature.client_types, 0, form.alias, form.v2)
            inputs, output_filter = {form.alias: form.values(data)}, form.output_filter
        else:
            target, inputs, output_filter = await self._parsed(data)
        version, outs = await self.service.predict(target, inputs, output_filter)
        spec = (target.model, version or target.version, target.signature.name)  # the answer's model_spec
        if len(outs) == 1 and not self.content:  # one float output: its answer's bytes, no message built
            ((alias, (arr, v2)),) = outs.items()
            if offload.inline(arr.nbytes):
                data = protocodec.predict_answer(alias, arr, v2, spec)
                if data is not None:
                    return data
        resp = predict_pb2.PredictResponse()
        protocodec.model_spec(*spec, into=resp.model_spec)
        for alias, (arr, v2) in outs.items():
            if offload.inline(arr.nbytes):  # written into the answer's own entry: no copy of a finished proto
                protocodec.tensor_to_proto(arr, v2, self.content, into=resp.outputs[alias])
            else:  # large: built in a thread, copied in
                tp = await offload.run(arr.nbytes, protocodec.tensor_to_proto, arr, v2, self.content)
                resp.outputs[alias].CopyFrom(tp)
        return resp

    async def _parsed(self, data: bytes):
        """(target, inputs, output filter) of a request without a form: parsed and checked, and its
        form learned when it has one."""
        try:
            request = predict_pb2.PredictRequest.FromString(data)
        except DecodeError:
            raise Unparsable("tensorflow.serving.PredictRequest") from None
        spec = _spec(request)
        current().model = spec.name
        target = await self.service.resolve(spec, grpc=True, method="predict")
        types = target.signature.client_types
        inputs = {}
        given = request.inputs
        for i, alias in enumerate(sorted(given)):  # the names sorted, then each entry (half the cost of items())
            tp = given[alias]
            size = tp.ByteSize()
            if offload.inline(size):
                arr, v2 = protocodec.tensor_from_proto(tp, alias)
            else:  # large: a thread
                arr, v2 = await offload.run(size, protocodec.tensor_from_proto, tp, alias)
            _check_type(types, i, alias, v2)
            inputs[alias] = arr
        output_filter = request.output_filter[:]  # sliced: a list, at once
        if len(inputs) == 1:
            self.forms.learn(data, tp, spec, alias, arr, v2, output_filter)
        return target, inputs, output_filter

    async def _examples(self, request, method: str, context):
        target = await self.service.resolve(_spec(request), grpc=True, method=method)
        exs, ctx = protocodec.examples_from_input(request.input)
        version, result = await self.service.run_examples(target, method, exs, ctx)
        return self._resolved_spec(target, version), result

    async def Classify(self, request: classification_pb2.ClassificationRequest, context):
        spec, result = await self._examples(request, "classify", context)
        return classification_pb2.ClassificationResponse(model_spec=spec, result=_classification(result))

    async def Regress(self, request: regression_pb2.RegressionRequest, context):
        spec, values = await self._examples(request, "regress", context)
        return regression_pb2.RegressionResponse(model_spec=spec, result=_regression(values))

    async def MultiInference(self, request: inference_pb2.MultiInferenceRequest, context):
        if not request.tasks:
            raise invalid("Expected at least one task")
        names = {t.model_spec.name for t in request.tasks}
        if len(names) > 1:
            raise invalid("All ModelSpecs in a MultiInferenceRequest must access the same model name.")
        exs, ctx = protocodec.examples_from_input(request.input)
        resp = inference_pb2.MultiInferenceResponse()
        seen = set()
        for task in request.tasks:
            method = task.method_name.rsplit("/", 1)[-1]
            if method not in ("classify", "regress"):
                raise unimplemented(f"Unsupported signature method_name: {clip(task.method_name)}")
            target = await self.service.resolve(protocodec.spec_from_proto(task.model_spec), grpc=True)
            if target.signature.name in seen:
                raise invalid(f"Duplicate evaluation of signature: {target.signature.name}")
            seen.add(target.signature.name)
            version, result = await self.service.run_examples(target, method, exs, ctx)
            item = resp.results.add(model_spec=self._resolved_spec(target, version))
            if method == "classify":
                item.classification_result.CopyFrom(_classification(result))
            else:
                item.regression_result.CopyFrom(_regression(result))
        return resp

    async def GetModelMetadata(self, request: get_model_metadata_pb2.GetModelMetadataRequest, context):
        spec = _spec(request)
        if not request.metadata_field:
            raise invalid("GetModelMetadataRequest must specify at least one metadata_field")
        for f in request.metadata_field:
            if f != "signature_def":
                raise invalid(f"Metadata field {clip(f)} is not supported")
        version, sigs = await self.service.metadata(spec)
        resp = get_model_metadata_pb2.GetModelMetadataResponse(model_spec=protocodec.model_spec(spec.name, version))
        resp.metadata["signature_def"].Pack(protocodec.signature_def_map(sigs))
        return resp


def _classification(result) -> classification_pb2.ClassificationResult:
    labels, scores = result
    out = classification_pb2.ClassificationResult()
    for labs, row in zip(labels, scores.tolist(), strict=True):
        c = out.classifications.add()
        for lab, score in zip(labs, row, strict=True):
            c.classes.add(label=lab, score=score)
    return out


def _regression(values) -> regression_pb2.RegressionResult:
    out = regression_pb2.RegressionResult()
    for v in values.tolist():
        out.regressions.add(value=v)
    return out


class ModelServicer(model_service_pb2_grpc.ModelServiceServicer):
    def __init__(self, service: Service):
        self.service = service

    async def GetModelStatus(self, request, context):
        rows = await self.service.status(_spec(request))
        return protocodec.status_response(rows)

    async def HandleReloadConfigRequest(self, request, context):
        raise unimplemented("HandleReloadConfigRequest is not supported: models are managed by Triton")


def _behind(edge: Edge, servicer, methods: tuple[str, ...]) -> SimpleNamespace:
    """The servicer's RPCs wrapped by the edge (route = the RPC name, model from model_spec)."""
    return SimpleNamespace(**{m: edge.unary(m, getattr(servicer, m), _model_name) for m in methods})


class _Handlers:
    """Stands in for the server while a generated ``add_*Servicer_to_server`` registers: keeps its handlers."""

    def add_generic_rpc_handlers(self, _handlers) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: dict) -> None:
        self.service, self.handlers = service, dict(handlers)


def _message_bytes(answer) -> bytes:
    """Predict's answer serializer: a message, or the bytes ``protocodec.predict_answer`` wrote."""
    return answer if answer.__class__ is bytes else answer.SerializeToString()


def _parsing(fn, cls):
    """``fn(request, context)`` as a handler of the request's bytes (the cutover's handlers take bytes)."""
    async def handler(data: bytes, context):
        try:
            request = cls.FromString(data)
        except DecodeError:
            raise Unparsable(cls.DESCRIPTOR.full_name) from None
        return await fn(request, context)
    return handler


_REQUESTS = {"Classify": classification_pb2.ClassificationRequest, "Regress": regression_pb2.RegressionRequest,
             "MultiInference": inference_pb2.MultiInferenceRequest,
             "GetModelMetadata": get_model_metadata_pb2.GetModelMetadataRequest,
             "GetModelStatus": get_model_status_pb2.GetModelStatusRequest}


def _cutover(edge: Edge, service: Service, cut) -> dict:
    """Every RPC behind the cutover's routes (``dialects.tfserving.legacy.grpc`` set): each takes
    its request's bytes, which the legacy route relays unchanged (gateway/cutover/grpcroute.py)."""
    prediction, models = PredictionServicer(service), ModelServicer(service)
    own = {"Predict": prediction.Predict, "GetModelStatus": _parsing(models.GetModelStatus, _REQUESTS["GetModelStatus"])}
    for m in ("Classify", "Regress", "MultiInference", "GetModelMetadata"):
        own[m] = _parsing(getattr(prediction, m), _REQUESTS[m])
    wrapped = {m: edge.unary(m, cut.unary(m, cutover_grpc.path(m), fn)) for m, fn in own.items()}
    wrapped["HandleReloadConfigRequest"] = edge.unary("HandleReloadConfigRequest", models.HandleReloadConfigRequest,
                                                      _model_name)
    return wrapped


def _raw(handlers: dict, methods) -> None:
    for m in methods:  # bytes in, a message or bytes out
        handlers[m] = handlers[m]._replace(request_deserializer=None, response_serializer=_message_bytes)


def attach(server: grpc.aio.Server, edge: Edge, service: Service) -> None:
    cut = grpcroute.for_listener(service, cutover_grpc.answer, service.errors.grpc,
                                 cutover_grpc.model_of, edge.keys)
    if cut is not None:
        wrapped = _cutover(edge, service, cut)
        prediction = SimpleNamespace(**{m: wrapped[m] for m in ("Predict", "Classify", "Regress", "MultiInference",
                                                                "GetModelMetadata")})
        models = SimpleNamespace(GetModelStatus=wrapped["GetModelStatus"],
                                 HandleReloadConfigRequest=wrapped["HandleReloadConfigRequest"])
    else:
        prediction = _behind(edge, PredictionServicer(service),
                             ("Predict", "Classify", "Regress", "MultiInference", "GetModelMetadata"))
        models = _behind(edge, ModelServicer(service), ("GetModelStatus", "HandleReloadConfigRequest"))
    kept = _Handlers()  # the generated handlers, Predict's serializer taking bytes too
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(prediction, kept)
    # Predict takes the request's bytes (it parses those without a learned form itself) and answers
    # a message or the bytes ``protocodec.predict_answer`` wrote; under the cutover every RPC does
    _raw(kept.handlers, kept.handlers if cut is not None else ("Predict",))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(kept.service, kept.handlers),))
    if cut is not None:
        kept_models = _Handlers()
        model_service_pb2_grpc.add_ModelServiceServicer_to_server(models, kept_models)
        _raw(kept_models.handlers, ("GetModelStatus",))
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(kept_models.service,
                                                                              kept_models.handlers),))
    else:
        model_service_pb2_grpc.add_ModelServiceServicer_to_server(models, server)


__all__ = ["attach"]
