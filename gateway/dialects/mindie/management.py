"""The routes MindIE-MS's controller drives an instance with, from the gateway's own state.

MindIE Server (``http_handler.cpp`` ``InitializeServiceMgmtV1/V2``, ``dmi_role.cpp``), as the
controller reads them (MindIE-Motor ``controller/request_handler/ServerRequestHandler.cpp``):

    GET  /v1/config          {"modelName", "maxSeqLen", "npuMemSize", "cpuMemSize", "worldSize",
                             "maxOutputLen", "cacheBlockSize"}
    GET  /v1/status          {"service": {"roleStatus", "currentRole"}, "resource": {availSlotsNum,
                             availBlockNum, waitingRequestNum, runningRequestNum, swappedRequestNum,
                             freeNpuBlockNums, freeCpuBlockNums, totalNpuBlockNums, totalCpuBlockNums},
                             "linkStatus": {"peers": [{"target": <instance id>, "link": "ok"}]}}
    GET  /v2/status          the same resource keys plus totalAvailNpuSlotsNum, totalAvailNpuBlockNum,
                             dpInstMap, maxAvailNpuBlockNum
    POST /v1/role/{prefill|decode|flex}, /v2/role/{prefill|decode}
                             {"result": "ok"}; a body MindIE refuses: 422 ``Req body converts to json
                             fail. Reset to previous node status.``; on a standard instance 200
                             ``{"result": "Can't assign DMI role because status is switching."}``

What stands in for the engine: slots are the worker set's admission limits less the requests in
flight (as ``getSlotCount``), KV blocks are slots x ``ceil(max_tokens / 128)`` (MindIE's default
block size), nothing waits or is swapped. A P or D instance's role is its configuration's
(``dialects.mindie.pd.role``): asked for the other role (or ``flex``), it answers MindIE's own
refusal, 503 ``Update pd info failed. Reset to previous node status.``; asked for its own role it
records the peers the controller names (their ids are ``linkStatus``'s targets, ``ok``: the
hand-off to a peer is an HTTP call made when a request needs it, so there is no link to be down).
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

import orjson
from sanic import Request

from gateway.edge import Edge, httpbody
from gateway.process import shared

from .ops import blocks_per_sequence, envelope, stopped_answer
from .triton_meta import slot_counts

ROLE_REFUSED_BODY = "Req body converts to json fail. Reset to previous node status."
PEERS_FILE = "mindie-peers.json"
MAX_SLOTS = 5000  # the controller accepts availSlotsNum in [0, 5000]


def _json(obj, status: int = 200):
    return httpbody.raw(orjson.dumps(obj), status=status, content_type="application/json")


def _ip(value) -> bool:
    if not isinstance(value, str):
        return False
    try:
        ipaddress.ip_address(value)
        return True
    except ValueError:
        return False


def _uint(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def peers_v1(body) -> list[int] | None:
    """A /v1/role body (``CheckPDRoleReqJson``): ``local`` an object with ``server_ip`` and ``id``,
    ``peers`` (optional) objects alike. The peers' ids, or None when MindIE refuses the body."""
    if not isinstance(body, dict):
        return None
    nodes = [body.get("local")]
    peers = body.get("peers")
    if isinstance(peers, list):
        nodes += peers
    for node in nodes:
        if not isinstance(node, dict) or not _ip(node.get("server_ip")) or not _uint(node.get("id")):
            return None
        if "device" in node and not isinstance(node["device"], list):
            return None
    return [p["id"] for p in peers] if isinstance(peers, list) else []


def peers_v2(body) -> list[int] | None:
    """A /v2/role body (``CheckPDRoleV2ReqJson``): ``local`` an array of nodes with ``server_ip`` and
    ``dp_inst_list`` (``dp_inst_id``), ``peers`` arrays of such nodes. Peer instance ids (dp id / 10000)."""
    if not isinstance(body, dict) or not isinstance(body.get("local"), list):
        return None
    peers = body.get("peers")
    if not isinstance(peers, list):
        return []

    def ok(node) -> bool:
        insts = node.get("dp_inst_list") if isinstance(node, dict) else None
        return (_ip(node.get("server_ip")) and isinstance(insts, list)
                and all(isinstance(i, dict) and _uint(i.get("dp_inst_id")) for i in insts))

    if not all(ok(n) for n in body["local"]) or not all(isinstance(g, list) and all(ok(n) for n in g) for g in peers):
        return None
    ids = {i["dp_inst_id"] // 10000 for g in peers for n in g for i in n["dp_inst_list"]}
    return sorted(ids)


class Management:
    def __init__(self, h, ops):
        self.h, self.ops = h, ops
        directory = os.environ.get(shared.ENV)
        self._file = Path(directory) / PEERS_FILE if directory else None
        self._peers: list[int] = []

    @property
    def role(self) -> str:
        return self.h.role if self.h.role in ("prefill", "decode") else "none"

    def peers(self) -> list[int]:
        if self._file is not None:
            try:
                return orjson.loads(self._file.read_bytes())
            except (OSError, orjson.JSONDecodeError):
                return []
        return self._peers

    def _record(self, peers: list[int]) -> None:
        if self._file is not None:  # every worker answers /v1/status with them
            tmp = self._file.with_name(f".{PEERS_FILE}.{os.getpid()}")
            tmp.write_bytes(orjson.dumps(peers))
            os.replace(tmp, self._file)
        else:
            self._peers = peers

    async def config(self, _request: Request):
        name = await self.h.catalog.default_name()
        spec = (await self.h.catalog.resolve(name)).spec
        return _json({"modelName": name, "maxSeqLen": spec.max_tokens, "npuMemSize": -1, "cpuMemSize": 0,
                      "worldSize": 1, "maxOutputLen": spec.max_tokens, "cacheBlockSize": 128})

    async def _resource(self) -> tuple[dict, int, int]:
        spec = (await self.h.catalog.resolve(None)).spec
        bps = blocks_per_sequence(spec.max_tokens)
        total, free = await slot_counts(self.h.bus)
        running = sum(w["running"] for w in await self.h.bus.load())
        slots = min(free, MAX_SLOTS)
        return {"availSlotsNum": slots, "availBlockNum": free * bps, "waitingRequestNum": 0,
                "runningRequestNum": running, "swappedRequestNum": 0, "freeNpuBlockNums": free * bps,
                "freeCpuBlockNums": 0, "totalNpuBlockNums": total * bps, "totalCpuBlockNums": 0}, slots, free * bps

    def _service(self) -> dict:
        return {"roleStatus": "RoleReady", "currentRole": self.role}

    def _links(self) -> dict:
        return {"peers": [{"target": p, "link": "ok"} for p in self.peers()]}

    async def status_v1(self, _request: Request):
        if self.ops.stopped.get():
            return stopped_answer()
        resource, _slots, _blocks = await self._resource()
        return _json({"service": self._service(), "resource": resource, "linkStatus": self._links()})

    async def status_v2(self, _request: Request):
        if self.ops.stopped.get():
            return stopped_answer()
        resource, slots, blocks = await self._resource()
        resource.update({"totalAvailNpuSlotsNum": slots, "totalAvailNpuBlockNum": blocks, "dpInstMap": {},
                         "maxAvailNpuBlockNum": 0})
        return _json({"service": self._service(), "resource": resource, "linkStatus": self._links()})

    async def role_v1(self, request: Request, role: str):
        return self._role(request, role, peers_v1, "Update pd info failed. Reset to previous node status.")

    async def role_v2(self, request: Request, role: str):
        return self._role(request, role, peers_v2, "Parse req json failed. Reset to previous node status.")

    def _role(self, request: Request, role: str, parse, refused: str):
        if self.role == "none":  # MindIE: a standard instance takes no role
            return _json({"result": "Can't assign DMI role because status is switching."})
        try:
            body = orjson.loads(request.body or b"")
        except orjson.JSONDecodeError:
            body = None
        peers = parse(body)
        if peers is None:
            return envelope(ROLE_REFUSED_BODY, "Input validation error", 422)
        if role != self.role:
            return envelope(refused, "Service Unavailable", 503)
        self._record(peers)
        return _json({"result": "ok"})


def attach(app, edge: Edge, h, ops) -> None:
    m = Management(h, ops)
    edge.route(app, m.config, "/v1/config", ["GET"], "mgmt_config", admit=False)
    edge.route(app, m.status_v1, "/v1/status", ["GET"], "mgmt_status_v1", admit=False)
    edge.route(app, m.status_v2, "/v2/status", ["GET"], "mgmt_status_v2", admit=False)
    edge.route(app, m.role_v1, "/v1/role/<role:prefill|decode|flex>", ["POST"], "mgmt_role_v1", admit=False)
    edge.route(app, m.role_v2, "/v2/role/<role:prefill|decode>", ["POST"], "mgmt_role_v2", admit=False)
