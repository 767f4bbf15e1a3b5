"""MindIE's prefill/decode (PD) disaggregation: P, D and coordinator roles (docs/mindie.md, "PD").

    config.py       dialects.mindie.pd (pydantic): role, instance lists, timeouts
    records.py      the /dresult record stream (framing and parsing)
    headers.py      the P request headers, checked with MindIE's messages
    instance.py     P and D roles on the MindIE listener: P's envelope, the hand-off, D's /dresult
    coordinator.py  the coordinator role: MindIE's user routes in front of P and D instances
    metrics.py      PD metrics (queue depths, hand-off time)
    fanin.py        D with several workers: records carried to the worker holding /dresult
    peers.py        PD peers on real networks: host names, TLS/mTLS to peers, trusted peers by name
"""
