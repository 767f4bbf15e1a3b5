"""tests/acceptance.py against the session's gateway: the checks `make compose-test` runs against the
compose stack's published ports, run here against the gateway the contract tests start (the same
assertions, so that what compose is held to is what the gateway is tested for)."""

from __future__ import annotations

import pytest

from tests.acceptance import CHECKS, Endpoints


@pytest.mark.parametrize("name", list(CHECKS))
def test_acceptance_check(gateway, name):
    CHECKS[name](Endpoints(dict(gateway.ports)))
