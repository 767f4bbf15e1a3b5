"""Which fast paths the installed sanic, grpcio and prometheus-client leave on (gateway/observe/fastpaths.py).

    python -m gateway.tools.fastpaths      (`make test-latest` runs it with the pins lifted)
"""

from __future__ import annotations

from importlib.metadata import version

from gateway.edge import sanicx  # noqa: F401  (each fence declares its paths on import)
from gateway.h2 import client, server  # noqa: F401
from gateway.observe import fastpaths, metrics  # noqa: F401


def main() -> int:
    print("versions:", ", ".join(f"{p} {version(p)}" for p in ("sanic", "grpcio", "prometheus-client")))
    for path, missing in sorted(fastpaths.paths().items()):
        print(f"{path:24} {'on' if not missing else 'off: ' + ', '.join(missing) + ' missing'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
