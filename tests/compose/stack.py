"""A running compose project, asked through the `docker` CLI (no Docker SDK dependency)."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent.parent


@dataclass
class Stack:
    project: str
    files: list[str]

    def compose(self, *args: str, timeout: float = 120, check: bool = True) -> str:
        cmd = ["docker", "compose", "-p", self.project]
        for f in self.files:
            cmd += ["-f", f]
        run = subprocess.run([*cmd, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        if check and run.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd + list(args))} failed ({run.returncode}): {run.stderr.strip()}")
        return run.stdout

    def gateway_ports(self) -> dict[str, int]:
        """listener name -> the host port on 127.0.0.1 that compose published for it."""
        cfg = yaml.safe_load((ROOT / "config" / "docker.yaml").read_text())
        out = {}
        for name, listener in cfg["listeners"].items():
            published = self.compose("port", "gateway", str(listener["port"])).strip()
            host, _, port = published.rpartition(":")
            assert host == "127.0.0.1", f"{name} is published on {published}, not on loopback"
            out[name] = int(port)
        return out

    def container(self, service: str) -> dict:
        cid = self.compose("ps", "-a", "-q", service).strip()
        assert cid, f"no container for {service}"
        return json.loads(subprocess.run(["docker", "inspect", cid], capture_output=True, text=True,
                                         check=True).stdout)[0]

    def wait_healthy(self, service: str, timeout: float) -> float:
        """Seconds until ``service``'s container is running and healthy; raises past ``timeout``."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            state = self.container(service)["State"]
            if state["Running"] and state.get("Health", {}).get("Status") == "healthy":
                return time.monotonic() - t0
            time.sleep(0.5)
        raise TimeoutError(f"{service} not healthy within {timeout} s: {self.container(service)['State']}")
