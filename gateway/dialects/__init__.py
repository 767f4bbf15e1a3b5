"""The catalogue: every dialect the gateway speaks (and the admin listener), in start-up order.

Adding a dialect is one package under ``gateway/dialects/`` declaring ``DIALECT`` and one line
here; settings, the worker, metrics and the admin listener all read this tuple.
"""

from gateway.dialect import Dialect
from gateway.ops import admin

from . import grps, mindie, tfserving, v2

CATALOGUE: tuple[Dialect, ...] = (v2.DIALECT, tfserving.DIALECT, grps.DIALECT, mindie.DIALECT, admin.DIALECT)

LISTENERS = {spec.name: spec for d in CATALOGUE for spec in d.listeners}
