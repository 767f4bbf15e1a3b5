"""The first N mismatches of each model, one JSON line each, in a bounded and rotated file.

    <mismatches.path>/<dialect>-mismatches.jsonl        (and .jsonl.1, the file before the last rotation)

A line: time, dialect, model, route, outcome, request digest (SHA-256 of the request's bytes),
which outputs differ and their max abs / rel error, both statuses and error words; the request and
both answers' bytes (base64) only with ``record_payloads: true``. At most ``per_model`` lines per
model over the gateway's life (counted across workers: the counts sit next to the file and are
updated under an exclusive ``flock``, as the line is appended); the file is rotated when it passes
``max_bytes``. A worker that saw a model's quota full stops asking (no lock taken after that).
Writing runs in the background task of the comparison, never on a client's path; a write that
fails is logged once and the recorder stops.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import logging
import os
import time
from pathlib import Path

from .compare import Answer, Comparison
from .settings import MismatchLog

log = logging.getLogger("gateway.cutover")


def digest(request: bytes) -> str:
    return hashlib.sha256(request).hexdigest()[:32]


class Recorder:
    def __init__(self, dialect: str, conf: MismatchLog):
        self.dialect = dialect
        self.conf = conf
        self.path = Path(conf.path) / f"{dialect}-mismatches.jsonl"
        self._counts_path = Path(conf.path) / f".{dialect}-mismatches.counts"
        self._full: set[str] = set()
        self._broken = conf.per_model == 0

    def record(self, model: str, route: str, cmp: Comparison, request: bytes, legacy: Answer | None,
               triton: Answer | None) -> bool:
        """Append one line unless ``model`` has its ``per_model`` lines; True when written."""
        if self._broken or model in self._full:
            return False
        line = {"time": round(time.time(), 3), "dialect": self.dialect, "model": model, "route": route,
                "outcome": cmp.outcome, "request_digest": digest(request),
                "outputs": {name: d.as_dict() for name, d in cmp.outputs.items() if d.reason},
                "note": cmp.note}
        for side, ans in (("legacy", legacy), ("triton", triton)):
            if ans is not None:
                line[f"{side}_status"] = ans.status
                if ans.error:
                    line[f"{side}_error"] = ans.error[:1024]
        if self.conf.record_payloads:
            line["request_b64"] = base64.b64encode(request).decode()
            for side, ans in (("legacy", legacy), ("triton", triton)):
                if ans is not None:
                    line[f"{side}_b64"] = base64.b64encode(ans.body).decode()
        data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
        try:
            return self._append(model, data)
        except OSError as exc:
            log.warning("mismatch log %s: %s; no more lines are written by this worker", self.path, exc)
            self._broken = True
            return False

    def _append(self, model: str, data: bytes) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._counts_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.pread(fd, 1 << 20, 0)
            try:
                counts = json.loads(raw) if raw else {}
            except ValueError:
                counts = {}
            seen = counts.get(model, 0)
            if seen >= self.conf.per_model:
                self._full.add(model)
                return False
            if self.path.exists() and self.path.stat().st_size + len(data) > self.conf.max_bytes:
                os.replace(self.path, self.path.with_name(self.path.name + ".1"))
            with open(self.path, "ab") as f:
                f.write(data)
            counts[model] = seen + 1
            if len(counts) <= 4096:
                text = json.dumps(counts).encode()
                os.ftruncate(fd, 0)
                os.pwrite(fd, text, 0)
            if seen + 1 >= self.conf.per_model:
                self._full.add(model)
            return True
        finally:
            os.close(fd)  # releases the lock


def read(path: str | os.PathLike, dialect: str | None = None) -> list[dict]:
    """The lines of the mismatch files under ``path`` (rotated ones first), for the report."""
    out = []
    root = Path(path)
    if not root.is_dir():
        return out
    names = sorted(root.glob("*-mismatches.jsonl.1")) + sorted(root.glob("*-mismatches.jsonl"))
    for f in names:
        if dialect and not f.name.startswith(dialect + "-"):
            continue
        for line in f.read_text(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out
