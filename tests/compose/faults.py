"""Faults in a running compose stack, under a light loopback load (soak/clients.py's clients, one
thread per dialect, each request bounded by a client timeout so that a hang is seen as one).

kill_triton_under_load  `docker compose kill triton` (Docker counts it as a manual stop: Triton stays
                        down until `docker compose start`), then a crash (Triton's process SIGKILLed
                        from the host), which its restart policy restarts; meanwhile every request
                        succeeds or is answered in its dialect's envelope (503 / UNAVAILABLE / GRPS
                        FAILURE) within the client timeout; the gateway recovers by itself (its
                        container neither restarted nor replaced)
stop_gateway_drains     streams in flight when `docker compose stop gateway` sends SIGTERM (seen as
                        the gateway's gRPC health turning NOT_SERVING) finish, and the gateway exits
                        by itself within compose's stop grace period

Each returns a list of problems (empty: passed) and prints what it measured.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict

import numpy as np
import tritonclient.grpc as grpcclient

from soak import clients as soak_clients
from tests.compose.stack import Stack

KINDS = ("tf_rest", "tf_grpc", "grps_http", "grps_grpc", "openai_stream", "v2_grpc", "v2_http")
CLIENT_TIMEOUT = 10.0  # no answer within this is a hang
PAUSE = 0.05  # between one thread's requests: light load on a shared machine


def _health(ports: dict[str, int]) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ports['admin_http']}/health", timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


class Load:
    def __init__(self, ports: dict[str, int]):
        soak_clients.TIMEOUT = CLIENT_TIMEOUT
        self.clients = soak_clients.Clients(ports, oversize=0)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.phase = "before"
        self.outcomes: dict[tuple[str, str], Counter] = defaultdict(Counter)  # (phase, kind) -> outcome counts
        self.lost: list[str] = []
        self.slowest = 0.0
        self.threads = [threading.Thread(target=self._loop, args=(k,), daemon=True) for k in KINDS]

    def _loop(self, kind: str) -> None:
        fn = getattr(self.clients, kind)
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                got = fn()
                outcome, detail = got if isinstance(got, tuple) else (got, "")
            except Exception as e:  # noqa: BLE001 (no answer: reset, refused, a client timeout)
                outcome, detail = soak_clients.LOST, f"{type(e).__name__}: {str(e)[:200]}"
            took = time.monotonic() - t0
            with self.lock:
                self.outcomes[(self.phase, kind)][outcome] += 1
                self.slowest = max(self.slowest, took)
                if outcome == soak_clients.LOST and len(self.lost) < 20:
                    self.lost.append(f"{self.phase} {kind} after {took:.1f} s: {detail}")
            time.sleep(PAUSE)

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def set_phase(self, phase: str) -> None:
        with self.lock:
            self.phase = phase

    def correct_since(self, phase: str) -> set[str]:
        with self.lock:
            return {k for (p, k), c in self.outcomes.items() if p == phase and c[soak_clients.CORRECT]}

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=CLIENT_TIMEOUT + 5)
        self.clients.close()


def _kill_process(pid: int) -> None:
    """SIGKILL a container's main process from the host, as a crash or the OOM killer would."""
    if os.geteuid() == 0:
        os.kill(pid, signal.SIGKILL)
    else:
        subprocess.run(["sudo", "kill", "-KILL", str(pid)], check=True)


def _outage(stack: Stack, ports: dict[str, int], load: Load, name: str, kill, restart=None) -> list[str]:
    """Kill Triton (``kill``), let it come back (by ``restart``, else by its restart policy), and
    wait for every dialect to answer correctly again; print the times from the kill."""
    problems: list[str] = []
    before = stack.container("triton")["State"]["StartedAt"]
    load.set_phase(f"{name}:down")
    t_kill = time.monotonic()
    kill()
    if restart is not None:
        while stack.container("triton")["State"]["Running"] and time.monotonic() - t_kill < 30:
            time.sleep(0.2)
        time.sleep(3)  # Triton away: every request meanwhile is answered in its envelope
        if stack.container("triton")["State"]["StartedAt"] != before:
            problems.append(f"{name}: Triton came back by itself after `docker compose kill`")
        restart()
    restarted = healthy = answering = None
    while time.monotonic() - t_kill < 180:
        state = stack.container("triton")["State"]
        if restarted is None and state["Running"] and state["StartedAt"] != before:
            restarted = time.monotonic() - t_kill
        if restarted is not None and state.get("Health", {}).get("Status") == "healthy":
            healthy = time.monotonic() - t_kill
            break
        time.sleep(0.25)
    if restarted is None:
        return [f"{name}: Triton was not restarted within 180 s"]
    if healthy is None:
        return [f"{name}: Triton restarted but was not healthy within 180 s"]
    load.set_phase(f"{name}:after")
    t_after = time.monotonic()
    while time.monotonic() - t_after < 60:
        if _health(ports) == 200 and load.correct_since(f"{name}:after") == set(KINDS):
            answering = time.monotonic() - t_kill
            break
        time.sleep(0.25)
    if answering is None:
        problems.append(f"{name}: the gateway did not answer every dialect again within 60 s of Triton's return: "
                        f"correct so far {sorted(load.correct_since(f'{name}:after'))}")
    print(f"  {name}: Triton running again {restarted:.1f} s after the kill, healthy at {healthy:.1f} s, "
          f"every dialect answered correctly again at {answering and round(answering, 1)} s", flush=True)
    time.sleep(2)
    return problems


def kill_triton_under_load(stack: Stack, ports: dict[str, int]) -> list[str]:
    """Two outages under load: `docker compose kill triton`, which Docker counts as a manual stop
    (the restart policy leaves it down: the operator starts it again, `docker compose start`),
    then a crash (SIGKILL of Triton's process from outside Docker's API), which the restart policy
    (`unless-stopped`) restarts by itself. The gateway is never restarted."""
    problems: list[str] = []
    gw_before = stack.container("gateway")
    load = Load(ports)
    load.start()
    time.sleep(3)
    if not load.correct_since("before") >= set(KINDS):
        problems.append(f"before the kill not every dialect answered: {sorted(load.correct_since('before'))}")
    print("docker compose kill triton under load on every dialect; Docker leaves it down; docker compose start",
          flush=True)
    problems += _outage(stack, ports, load, "compose-kill", lambda: stack.compose("kill", "triton"),
                        restart=lambda: stack.compose("start", "triton"))
    print("Triton's process SIGKILLed (a crash); its restart policy brings it back", flush=True)
    problems += _outage(stack, ports, load, "crash",
                        lambda: _kill_process(stack.container("triton")["State"]["Pid"]))
    load.finish()
    gw_after = stack.container("gateway")
    if (gw_after["Id"], gw_after["State"]["StartedAt"], gw_after["RestartCount"]) != (
            gw_before["Id"], gw_before["State"]["StartedAt"], gw_before["RestartCount"]):
        problems.append("the gateway's container was restarted or replaced")
    for (phase, kind), counts in sorted(load.outcomes.items()):
        print(f"  {phase:18} {kind:14} " + " ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print(f"  slowest request {load.slowest:.2f} s (client timeout {CLIENT_TIMEOUT:.0f} s); "
          f"the gateway's container: same id, start time and restart count", flush=True)
    if load.lost:
        problems.append("requests lost or hung (neither answered correctly nor in the dialect's envelope):\n    "
                        + "\n    ".join(load.lost))
    return problems


LONG_PROMPT = "drain 47"  # one of the prompts tiny_llm answers at its longest (24 tokens, 15 ms each)


def _stream(target: str) -> tuple[float | None, float, bool, str | None]:
    """One tiny_llm stream over V2 gRPC read to its final flag: (first token's time, end time,
    final flag seen, error)."""
    text = grpcclient.InferInput("text_input", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([[LONG_PROMPT.encode()]], dtype=object))
    mt = grpcclient.InferInput("max_tokens", [1, 1], "INT32")
    mt.set_data_from_numpy(np.array([[100]], dtype=np.int32))
    stream = grpcclient.InferInput("stream", [1, 1], "BOOL")
    stream.set_data_from_numpy(np.array([[True]], dtype=bool))
    got: queue.Queue = queue.Queue()
    first, final, error = None, False, None
    c = grpcclient.InferenceServerClient(target)
    try:
        c.start_stream(callback=lambda result, error: got.put((result, error)), stream_timeout=30)
        c.async_stream_infer("tiny_llm", [text, mt, stream], enable_empty_final_response=True)
        while not final:
            result, err = got.get(timeout=30)
            if err is not None:
                error = str(err)
                break
            resp = result.get_response()
            if resp.outputs and first is None:
                first = time.monotonic()
            final = resp.parameters["triton_final_response"].bool_param
    except Exception as e:  # noqa: BLE001
        error = f"{type(e).__name__}: {e}"
    finally:
        try:
            c.stop_stream()
            c.close()
        except Exception:  # noqa: BLE001
            pass
    return first, time.monotonic(), final, error


def _watch_not_serving(target: str, seen: list[float]) -> None:
    """grpc.health.v1 Watch on the gateway: the time it turns NOT_SERVING, which it does on SIGTERM
    before its listeners stop (gateway/ops/grpchealth.py)."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(target) as ch:
        try:
            for msg in health_pb2_grpc.HealthStub(ch).Watch(health_pb2.HealthCheckRequest(), timeout=60):
                if msg.status == health_pb2.HealthCheckResponse.NOT_SERVING:
                    seen.append(time.monotonic())
                    return
        except grpc.RpcError:
            return


def stop_gateway_drains(stack: Stack, ports: dict[str, int], clients: int = 4) -> list[str]:
    """Streams back to back on ``clients`` threads; `docker compose stop gateway` in the middle. Those
    under way when the gateway heard SIGTERM (first token before, end after) must finish."""
    problems: list[str] = []
    grace = 20.0  # compose.yaml's stop_grace_period for the gateway
    target = f"127.0.0.1:{ports['v2_grpc']}"
    records: list[tuple[float | None, float, bool, str | None, float]] = []
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            t0 = time.monotonic()
            records.append((*_stream(target), t0))
            if records[-1][3]:
                time.sleep(0.1)  # refused (the gateway is going away): no busy loop

    sigterm: list[float] = []
    watcher = threading.Thread(target=_watch_not_serving, args=(target, sigterm), daemon=True)
    watcher.start()
    threads = [threading.Thread(target=loop, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    t_stop = time.monotonic()
    stack.compose("stop", "gateway", timeout=grace + 30)
    stopped = time.monotonic() - t_stop
    stop.set()
    for t in threads:
        t.join(timeout=40)
    watcher.join(timeout=5)
    state = stack.container("gateway")["State"]
    t_sig = sigterm[0] if sigterm else None
    if t_sig is None:
        problems.append("the gateway's gRPC health never turned NOT_SERVING on SIGTERM")
        t_sig = t_stop
    in_flight = [r for r in records if r[0] is not None and r[0] < t_sig < r[1]]
    after = [r for r in records if r[4] > t_sig]
    hung = [r for r in records if r[1] - r[4] > 25]
    print(f"  docker compose stop gateway: stopped in {stopped:.1f} s (grace {grace:.0f} s), exit code "
          f"{state['ExitCode']}; SIGTERM heard {t_sig - t_stop:.2f} s after the command; {len(in_flight)} "
          f"streams in flight then, of which {sum(1 for r in in_flight if r[2] and not r[3])} finished "
          f"(last {max((r[1] - t_sig for r in in_flight), default=0):.2f} s after SIGTERM); "
          f"{len(after)} started after it ({sum(1 for r in after if r[3])} refused)", flush=True)
    if not in_flight:
        problems.append("no stream was in flight at SIGTERM: nothing drained was seen")
    for _first, _end, final, error, _ in in_flight:
        if error or not final:
            problems.append(f"a stream in flight at SIGTERM did not finish: final {final}, {error}")
    if hung:
        problems.append(f"{len(hung)} streams hung (no end within 25 s)")
    if stopped >= grace or state["ExitCode"] == 137:
        problems.append(f"the gateway did not exit by itself within the grace period ({stopped:.1f} s, "
                        f"exit {state['ExitCode']})")
    return problems


def gateway_start_to_ready(stack: Stack, ports: dict[str, int]) -> list[str]:
    """`docker compose start gateway` (Triton up) to the first 200 from admin /health on the host."""
    t0 = time.monotonic()
    stack.compose("start", "gateway")
    while time.monotonic() - t0 < 60:
        if _health(ports) == 200:
            print(f"  docker compose start gateway: /health 200 after {time.monotonic() - t0:.1f} s", flush=True)
            return []
        time.sleep(0.1)
    return ["the gateway did not answer /health 200 within 60 s of `docker compose start gateway`"]
