"""PD metrics (admin listener ``/metrics``), beyond MindIE's own.

Coordinator: outstanding requests per P and per D instance (the load it balances on), the
hand-off time it sees (P's answer -> D's first record), retries, and requests by path taken.
P: the hand-off call to D. D: generations running, pending /dresult records, connections.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

_TIME = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

P_QUEUE = Gauge("pd_prefill_queue_depth", "Requests outstanding on each P instance (coordinator)", ["instance"],
                multiprocess_mode="livesum")
D_QUEUE = Gauge("pd_decode_queue_depth", "Requests outstanding on each D instance (coordinator)", ["instance"],
                multiprocess_mode="livesum")
HANDOFF = Histogram("pd_handoff_seconds", "Hand-off time: P's hand-off call to D (role=prefill); a stream's P "
                    "answer relayed -> D's first record (role=coordinator)", ["role"], buckets=_TIME)
ROUTED = Counter("pd_requests", "Requests by the path the coordinator gave them", ["path"])
RETRIES = Counter("pd_retries", "Requests the coordinator sent again (retry record or D lost)", ["reason"])
D_RUNNING = Gauge("pd_decode_running", "Generation phases running on this D instance", multiprocess_mode="livesum")
D_PENDING = Gauge("pd_dresult_pending_records", "Records waiting for a /dresult connection",
                  multiprocess_mode="livesum")
D_CONNECTIONS = Counter("pd_dresult_connections", "GET /dresult connections accepted")
TAKEN_OVER = Counter("pd_dresult_taken_over", "Times another client took over the coordinator's /dresult link to a D "
                     "(the D leaves the rotation for a back-off)", ["instance"])
IN_ROTATION = Gauge("pd_decode_in_rotation", "1 while the coordinator has a /dresult link to this D and sends it "
                    "requests, else 0 (lost, or taken over)", ["instance"], multiprocess_mode="livemax")
