"""astra serve: an LLM inference-serving simulator on top of astra-sim-py's step simulator.

From Python: ``report, requests = astra_serving.serve(ServeSpec(model="llama3-8b", platform="hgx-h100", qps=5))``
(or ``ServeSpec.from_mapping({...})`` with ``astra serve``'s option names); ``requests_frame(requests)`` gives one
row per request as a pandas DataFrame. The names load on first use: loading the plugin (every ``astra`` command,
every run) stays cheap."""

_PUBLIC = {"serve": "deployment", "ServeSpec": "spec", "requests_frame": "requests"}


def __getattr__(name):
    if name in _PUBLIC:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_PUBLIC[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_PUBLIC)
