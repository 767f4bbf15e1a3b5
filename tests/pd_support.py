"""Helpers for the PD contract tests: gateway instances in a role, and a /dresult reader."""

from __future__ import annotations

import re
import threading
import time

import orjson
import requests

from gateway.dialects import LISTENERS
from gateway.dialects.mindie.pd.records import Record, parse_chunk
from tests.support import free_port, gateway_config, start_gateway

MINDIE = {"aliases": {"llama2_7b": "tiny_llm"},
          "models": {"tiny_llm": {"profile": "trtllm", "tokenizer": "words"}}}


def p_answer(r: requests.Response) -> dict:
    """P's envelope, read from its bytes: 200, ``application/json``, ``isLastResp`` a JSON bool in
    every answer (seed 004's table 2 marks it required, stream or not)."""
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json"), r.content
    assert re.search(rb'"isLastResp":(?:true|false)[,}]', r.content), r.content
    return orjson.loads(r.content)


def start_role(triton_target: str, tmp, pd: dict, *, triton: str | None = None, workers: int = 1, **extra):
    ports = {name: free_port() for name in LISTENERS}
    cfg = gateway_config(triton or triton_target, ports,
                         {"dialects": {"mindie": {**MINDIE, "pd": pd}}, "workers": workers, **extra})
    return start_gateway(cfg, tmp)


class DResultReader:
    """Reads a D instance's GET /dresult in a thread; records parsed as they come."""

    def __init__(self, url: str):
        self.resp = requests.get(url + "/dresult", stream=True, timeout=(5, 60))
        self.status = self.resp.status_code
        self.headers = self.resp.headers
        self.raw = bytearray()
        self.chunks: list[tuple[float, bytes]] = []
        self.records: list[Record] = []
        self.ended = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        try:
            for chunk in self.resp.iter_content(None):
                with self.lock:
                    self.raw += chunk
                    self.chunks.append((time.monotonic(), chunk))
                    self.records.extend(parse_chunk(chunk))
        except Exception:  # noqa: BLE001 - the connection was closed under us
            pass
        finally:
            self.ended.set()

    def wait(self, predicate, timeout: float = 20.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                got = predicate(list(self.records))
            if got:
                return got
            if self.ended.is_set():
                break
            time.sleep(0.02)
        with self.lock:
            raise AssertionError(f"condition not met; records so far: {self.records!r}")

    def of(self, req_id: str) -> list[Record]:
        with self.lock:
            return [r for r in self.records if r.req_id == req_id]

    def finished(self, req_id: str, timeout: float = 20.0) -> list[Record]:
        self.wait(lambda rs: any(r.req_id == req_id and r.kind in ("lastData", "error", "retry") for r in rs), timeout)
        return self.of(req_id)

    def close(self):
        self.resp.close()


_VOLATILE = [(re.compile(rb'"id":"\d+"'), b'"id":"<id>"'), (re.compile(rb'"created":\d+'), b'"created":<created>'),
             (re.compile(rb'"seed":\d+'), b'"seed":<seed>'),
             (re.compile(rb'"(prefill_time|decode_time|queue_wait_time)":(\d+|\[[\d,]*\])'), rb'"\1":<time>')]


def normalise(raw: bytes) -> bytes:
    for pattern, repl in _VOLATILE:
        raw = pattern.sub(repl, raw)
    return raw
