"""grpc.health.v1.Health on every gRPC listener (gateway/ops/grpchealth.py): SERVING per service and for
the whole server while the worker serves and Triton is ready; NOT_SERVING while Triton is away or not
ready and while draining (Watch hears it before the listeners stop); the V2 passthrough answers it
itself. A real Worker runs in-process in front of a scripted gRPC server standing in for Triton.
"""

from __future__ import annotations

import asyncio
import inspect

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import service_pb2

from tests.fakes import fake_triton
from tests.support import free_port, running_worker

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICES = {
    "v2_grpc": ("", "inference.GRPCInferenceService"),
    "tfserving_grpc": ("", "tensorflow.serving.PredictionService", "tensorflow.serving.ModelService"),
    "grps_grpc": ("", "grps.protos.v1.GrpsService"),
}


class FakeTriton(grpc.GenericRpcHandler):
    """Answers ServerReady with ``ready``; records every method it is asked."""

    def __init__(self):
        self.ready = True
        self.methods: list[str] = []

    def service(self, details):
        if not details.method.endswith("/ServerMetadata"):  # not the worker's start-up version read
            self.methods.append(details.method)

        async def answer(_request: bytes, _context):
            return service_pb2.ServerReadyResponse(ready=self.ready).SerializeToString()

        return grpc.unary_unary_rpc_method_handler(answer)


@pytest.fixture
async def stack():
    fake = FakeTriton()
    ports = {name: free_port() for name in SERVICES}
    async with fake_triton(fake) as (triton, target), \
            running_worker(ports, target, UPSTREAM__CACHE_TTL_S="0") as (worker, _):
        channels = {name: grpc.aio.insecure_channel(f"127.0.0.1:{port}") for name, port in ports.items()}
        yield fake, triton, worker, {n: health_pb2_grpc.HealthStub(c) for n, c in channels.items()}
        for channel in channels.values():
            await channel.close()


async def _statuses(stubs) -> dict[tuple[str, str], int]:
    return {(listener, name): (await stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)).status
            for listener, stub in stubs.items() for name in SERVICES[listener]}


async def test_every_grpc_listener_is_serving_per_service_and_as_a_whole(stack):
    fake, _, _, stubs = stack
    assert set((await _statuses(stubs)).values()) == {SERVING}
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stubs["tfserving_grpc"].Check(health_pb2.HealthCheckRequest(service="no.Such"), timeout=5)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    # the V2 passthrough answered it itself: Triton was only asked whether it is ready
    assert fake.methods and set(fake.methods) == {"/inference.GRPCInferenceService/ServerReady"}


async def test_not_serving_while_triton_is_not_ready_or_down(stack):
    fake, triton, _, stubs = stack
    fake.ready = False
    assert set((await _statuses(stubs)).values()) == {NOT_SERVING}
    fake.ready = True
    assert set((await _statuses(stubs)).values()) == {SERVING}
    await triton.stop(None)  # Triton away
    assert set((await _statuses(stubs)).values()) == {NOT_SERVING}


async def test_watchers_hear_not_serving_when_the_worker_drains(stack):
    _, _, worker, stubs = stack
    await _statuses(stubs)  # Check refreshes the status (the poll may not have run yet)
    watch = stubs["grps_grpc"].Watch(health_pb2.HealthCheckRequest(service="grps.protos.v1.GrpsService"))
    assert (await watch.read()).status == SERVING
    stopping = asyncio.ensure_future(worker.stop(grace=0.5))
    assert (await asyncio.wait_for(watch.read(), 5)).status == NOT_SERVING
    await stopping


async def test_watchers_hear_triton_going_away_and_coming_back(stack):
    fake, _, _, stubs = stack
    watch = stubs["tfserving_grpc"].Watch(health_pb2.HealthCheckRequest(service=""))
    assert (await watch.read()).status == SERVING  # Watch asks Triton first
    fake.ready = False
    assert (await asyncio.wait_for(watch.read(), 10)).status == NOT_SERVING  # the poll, while watched
    fake.ready = True
    assert (await asyncio.wait_for(watch.read(), 10)).status == SERVING
    watch.cancel()


def test_listeners_add_generic_handlers_only():
    """Registered methods make every call on a grpc.aio server dearer (grpchealth.ServiceNames): what
    a generated ``add_*Servicer_to_server`` adds through ServiceNames is its generic handler, and
    the service's name is noted for the health statuses."""
    from grpc_health.v1 import health

    from gateway.ops.grpchealth import ServiceNames

    class Server:
        def __init__(self):
            self.generic, self.registered = [], []

        def add_generic_rpc_handlers(self, handlers):
            self.generic.extend(handlers)

        def add_registered_method_handlers(self, name, _handlers):
            self.registered.append(name)

    server = Server()
    names = ServiceNames(server)
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), names)
    assert server.registered == [] and len(server.generic) == 1
    assert names.names == ["grpc.health.v1.Health"]


async def test_tritons_methods_are_its_stubs_unregistered():
    """gateway.upstream.client.methods: every RPC of Triton's generated stub, of the same kind."""
    from tritonclient.grpc import service_pb2_grpc

    from gateway.h2 import client as h2call
    from gateway.upstream.client import methods
    from gateway.upstream.unary import over_h2

    channel = grpc.aio.insecure_channel("127.0.0.1:1")  # never called
    try:
        h2 = h2call.Channel([("127.0.0.1", 1)])
        ours = vars(methods(channel, lambda *a: over_h2(h2, *a)))
        stub = vars(service_pb2_grpc.GRPCInferenceServiceStub(channel))
        assert sorted(ours) == sorted(stub)
        for name, multicallable in stub.items():  # unary: the h2 client's call (gateway/upstream/unary.py)
            if isinstance(multicallable, grpc.aio.UnaryUnaryMultiCallable):
                assert inspect.iscoroutinefunction(ours[name]), name
            else:
                assert type(ours[name]) is type(multicallable), name
    finally:
        await channel.close()
