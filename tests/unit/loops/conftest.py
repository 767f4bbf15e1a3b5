"""Tests here run on both event loops: asyncio's and uvloop, which the gateway's workers run on
(a test that reaches into the transport, as gateway/edge/httpbody.py does, can differ between them).
Tests elsewhere run on asyncio's loop only."""

from __future__ import annotations

import asyncio

import uvloop


def pytest_asyncio_loop_factories(config, item):
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
