"""Faults in a running compose stack, under a light loopback load (soak/clients.py's clients, one
thread per dialect, each request bounded by a client timeout so that a hang is seen as one).

kill_triton_under_load  `docker compose kill triton` (SIGKILL); Triton comes back by its restart
                        policy; meanwhile every request succeeds or is answered in its dialect's
                        envelope (503 / UNAVAILABLE / GRPS FAILURE); the gateway recovers by itself
                        (its container neither restarted nor replaced)
stop_gateway_drains     streams in flight when `docker compose stop gateway` sends SIGTERM finish,
                        and the gateway exits by itself within compose's stop grace period

Each returns a list of problems (empty: passed) and prints what it measured.
"""

from __future__ import annotations

import queue
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


def kill_triton_under_load(stack: Stack, ports: dict[str, int]) -> list[str]:
    problems: list[str] = []
    gw_before = stack.container("gateway")
    tr_before = stack.container("triton")["State"]["StartedAt"]
    load = Load(ports)
    load.start()
    time.sleep(3)
    load.set_phase("down")
    t_kill = time.monotonic()
    stack.compose("kill", "triton")
    print("docker compose kill triton (SIGKILL) under load on every dialect", flush=True)
    restarted = healthy = answering = None
    deadline = t_kill + 180
    while time.monotonic() < deadline:
        state = stack.container("triton")["State"]
        if restarted is None and state["Running"] and state["StartedAt"] != tr_before:
            restarted = time.monotonic() - t_kill
        if restarted is not None and state.get("Health", {}).get("Status") == "healthy":
            healthy = time.monotonic() - t_kill
            break
        time.sleep(0.25)
    if restarted is None:
        problems.append("Triton was not restarted by its restart policy within 180 s of `docker compose kill`")
    elif healthy is None:
        problems.append("Triton restarted but did not become healthy within 180 s")
    else:
        load.set_phase("after")
        t_after = time.monotonic()
        while time.monotonic() - t_after < 60:
            if _health(ports) == 200 and load.correct_since("after") == set(KINDS):
                answering = time.monotonic() - t_kill
                break
            time.sleep(0.25)
        if answering is None:
            problems.append(f"the gateway did not answer every dialect again within 60 s of Triton's return: "
                            f"correct so far {sorted(load.correct_since('after'))}")
        time.sleep(2)
    load.finish()
    gw_after = stack.container("gateway")
    if (gw_after["Id"], gw_after["State"]["StartedAt"], gw_after["RestartCount"]) != (
            gw_before["Id"], gw_before["State"]["StartedAt"], gw_before["RestartCount"]):
        problems.append("the gateway's container was restarted or replaced")
    for (phase, kind), counts in sorted(load.outcomes.items()):
        print(f"  {phase:6} {kind:14} " + " ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print(f"  Triton restarted {restarted and round(restarted, 1)} s after the kill, healthy at "
          f"{healthy and round(healthy, 1)} s, every dialect answered correctly again at "
          f"{answering and round(answering, 1)} s; slowest request {load.slowest:.2f} s "
          f"(client timeout {CLIENT_TIMEOUT} s); the gateway was not restarted", flush=True)
    if load.lost:
        problems.append("requests lost or hung (neither answered correctly nor in the dialect's envelope):\n    "
                        + "\n    ".join(load.lost))
    if not load.correct_since("before") >= set(KINDS):
        problems.append(f"before the kill not every dialect answered: {sorted(load.correct_since('before'))}")
    return problems


def _stream(target: str, max_tokens: int, out: queue.Queue) -> None:
    """One tiny_llm stream over V2 gRPC read to its final flag: (tokens, final, end time, error)."""
    text = grpcclient.InferInput("text_input", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([[b"drain me"]], dtype=object))
    mt = grpcclient.InferInput("max_tokens", [1, 1], "INT32")
    mt.set_data_from_numpy(np.array([[max_tokens]], dtype=np.int32))
    stream = grpcclient.InferInput("stream", [1, 1], "BOOL")
    stream.set_data_from_numpy(np.array([[True]], dtype=bool))
    got: queue.Queue = queue.Queue()
    c = grpcclient.InferenceServerClient(target)
    tokens, final, error = 0, False, None
    try:
        c.start_stream(callback=lambda result, err: got.put((result, err)), stream_timeout=30)
        c.async_stream_infer("tiny_llm", [text, mt, stream], enable_empty_final_response=True)
        while not final:
            result, err = got.get(timeout=30)
            if err is not None:
                error = str(err)
                break
            resp = result.get_response()
            tokens += bool(resp.outputs)
            final = resp.parameters["triton_final_response"].bool_param
    except Exception as e:  # noqa: BLE001
        error = f"{type(e).__name__}: {e}"
    finally:
        try:
            c.stop_stream()
            c.close()
        except Exception:  # noqa: BLE001
            pass
    out.put((tokens, final, time.monotonic(), error))


def stop_gateway_drains(stack: Stack, ports: dict[str, int], streams: int = 4, max_tokens: int = 120) -> list[str]:
    problems: list[str] = []
    grace = 20.0  # compose.yaml's stop_grace_period for the gateway
    results: queue.Queue = queue.Queue()
    threads = [threading.Thread(target=_stream, args=(f"127.0.0.1:{ports['v2_grpc']}", max_tokens, results))
               for _ in range(streams)]
    for t in threads:
        t.start()
    time.sleep(0.6)  # the streams are under way (tiny_llm: one token every 15 ms)
    t_term = time.monotonic()
    stack.compose("stop", "gateway", timeout=grace + 30)
    stopped = time.monotonic() - t_term
    for t in threads:
        t.join(timeout=40)
    state = stack.container("gateway")["State"]
    done = [results.get_nowait() for _ in range(results.qsize())]
    print(f"  docker compose stop gateway with {streams} streams in flight: stopped in {stopped:.1f} s "
          f"(grace {grace:.0f} s), exit code {state['ExitCode']}; streams: "
          + ", ".join(f"{n} tokens{' + final' if f else ''}{' ERROR ' + e if e else ''} "
                      f"ended {end - t_term:+.2f} s after SIGTERM" for n, f, end, e in done), flush=True)
    if len(done) != streams:
        problems.append(f"only {len(done)} of {streams} streams ended")
    for n, final, end, error in done:
        if error or not final:
            problems.append(f"a stream in flight at SIGTERM did not finish: {n} tokens, final {final}, {error}")
        elif end <= t_term:
            problems.append("a stream ended before SIGTERM: it was not in flight (raise max_tokens)")
    if stopped >= grace or state["ExitCode"] == 137:
        problems.append(f"the gateway did not exit by itself within the grace period ({stopped:.1f} s, "
                        f"exit {state['ExitCode']})")
    return problems
