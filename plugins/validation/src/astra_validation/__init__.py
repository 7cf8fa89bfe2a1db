"""``astra validate``: published measurements against astra-sim-py's simulation (see docs/validation.md).

``Case``, ``load_cases`` and ``run_case`` load on first use: loading the plugin (every ``astra`` command, every run)
stays cheap."""

_PUBLIC = {"Case": "registry", "load_cases": "registry", "run_case": "runner"}


def __getattr__(name):
    if name in _PUBLIC:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_PUBLIC[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_PUBLIC)
