"""The upstream client: every dialect but the V2 one (which forwards V2 bytes itself, gateway/dialects/v2)
reaches Triton through this package, in neutral terms; start-up probes (gateway/startup.py) ask
Triton's readiness with tritonclient's stubs directly."""

from .client import TritonUpstream, Upstream
from .factory import from_settings, h2_off

__all__ = ["Upstream", "TritonUpstream", "from_settings", "h2_off"]
