"""Helpers for the PD contract tests: gateway instances in a role, and a /dresult reader."""

from __future__ import annotations

import threading
import time

import requests

from gateway.dialects.mindie.pd.records import Record, parse_chunk
from gateway.settings import LISTENERS
from tests.support import free_port, gateway_config, start_gateway

MINDIE = {"request_timeout_s": 60, "aliases": {"llama2_7b": "tiny_llm"},
          "models": {"tiny_llm": {"profile": "trtllm", "tokenizer": "words"}}}


def start_role(triton_target: str, tmp, pd: dict, *, triton: str | None = None):
    ports = {name: free_port() for name in LISTENERS}
    cfg = gateway_config(triton or triton_target, ports, {"dialects": {"mindie": {**MINDIE, "pd": pd}}})
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
