"""The only package that knows KServe V2 and tritonclient."""

from .client import TritonUpstream, Upstream
from .factory import from_settings

__all__ = ["Upstream", "TritonUpstream", "from_settings"]
