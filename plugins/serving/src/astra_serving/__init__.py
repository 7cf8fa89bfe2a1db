"""astra serve: an LLM inference-serving simulator on top of astra-sim-py's step simulator.

From Python: ``report, requests = astra_serving.serve(ServeSpec(model="llama3-8b", platform="hgx-h100", qps=5))``
(or ``ServeSpec.from_mapping({...})`` with ``astra serve``'s option names); ``requests_frame(requests)`` gives one
row per request as a pandas DataFrame."""

from .deployment import serve
from .requests import requests_frame
from .spec import ServeSpec

__all__ = ["ServeSpec", "serve", "requests_frame"]
