"""A persistent, content-addressed cache of simulated batch-shape step times, shared by runs and processes.

Why: a serving run times 300-400 distinct grid corners at about 0.15 s each, which dominates a run that the
event loop alone finishes in seconds; the same deployment run again (a QPS sweep over processes, a second
``astra serve``) simulates the same corners.

An entry's key is the SHA-256 of everything that decides a corner's time: the replica layout (model options,
platform name, TP/PP/EP, every ``astra run`` option of the steps, GPUs per node), the content of any file a run
option names, the shape (prefill tokens, decode sequences, context, prefill done, CUDA graph), the versions of
astra-sim and of every installed plugin, and a fingerprint of their installed code and data files (path, size,
modification time: an editable install's edits change it, so a changed preset or model never reads a stale
time; of this plugin only steptime.py and stepcache.py count, the code that makes a step from a shape, so that
an edit of the engine's scheduler keeps the cache) and the entries' :data:`FORMAT`. Its value is the stage times
(int ns) and the step's energy (:class:`StepEnergy`: the simulated nodes' IT energy in int mJ and their idle IT
power in int mW, or null when the run has no ``stats.energy``), one small JSON file per key under
``<folder>/<2 hex>/<key>.json``,
written atomically (a temporary name, then a rename: concurrent writers of one key write the same bytes, and a
reader sees a whole file or none). A file that does not parse, does not hold ``pp`` non-negative ints or has
no well-formed ``energy`` is ignored (and simulated again). The folder holds at most
``ASTRA_CACHE_MAX_ENTRIES`` entries (default
:data:`MAX_ENTRIES`): the first write of a process over the bound deletes the oldest entries (by modification
time) down to 90 % of it.

Folder: ``$ASTRA_CACHE_DIR``, else ``$XDG_CACHE_HOME/astra-sim/steps``, else ``~/.cache/astra-sim/steps``.
``ASTRA_CACHE=0`` (or ``astra serve --no-cache``) turns it off.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
from typing import NamedTuple

from astra_sim.errors import ConfigError

#: the entries' format, part of every key: 2 added the step's energy (a format-1 entry, times only, is never read)
FORMAT = 2
#: default bound on the entries kept (about 100 bytes each, one file system block each on disk)
MAX_ENTRIES = 50_000
#: this plugin's files a step's time depends on (the engine, router and metrics do not change it)
_OWN_STEP_CODE = ("steptime.py", "stepcache.py")
_FINGERPRINT = []  # the installed code's fingerprint, computed once per process


class StepEnergy(NamedTuple):
    """What a simulated step says about energy (its ``stats.energy``), for the serving run's accounting."""

    it_energy_mj: int     # the step's IT energy on every simulated GPU (the replica's DP copies included)
    gpus: int             # the GPUs simulated
    idle_it_mw: int       # their IT power when idle: each GPU's idle power and the rest of the system beside it

    @classmethod
    def of_stats(cls, stats):
        """From a run's ``stats`` (None when it has no ``energy``: a GPU without power data)."""
        e = (stats or {}).get("energy")
        if not e:
            return None
        per_gpu_w = e["class_power_w"]["idle"] + sum(e["system_power_w_per_gpu"].values())
        return cls(int(e["it_energy_mj"]), int(e["gpus"]), int(round(per_gpu_w * 1000)) * int(e["gpus"]))


def _energy_or_bad(value):
    """A :class:`StepEnergy` (or None) from an entry's ``energy``; False when it is malformed."""
    if value is None:
        return None
    if (not isinstance(value, list) or len(value) != 3 or not all(type(v) is int and v >= 0 for v in value)
            or value[1] < 1):
        return False
    return StepEnergy(*value)


def cache_folder(env=None):
    """The cache's folder, or None when ``ASTRA_CACHE`` turns it off (0, off, no, false)."""
    env = os.environ if env is None else env
    if env.get("ASTRA_CACHE", "1").strip().lower() in ("0", "off", "no", "false"):
        return None
    if env.get("ASTRA_CACHE_DIR"):
        return env["ASTRA_CACHE_DIR"]
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "astra-sim", "steps")


def max_entries(env=None):
    """``ASTRA_CACHE_MAX_ENTRIES`` (a positive int) or :data:`MAX_ENTRIES`."""
    env = os.environ if env is None else env
    text = env.get("ASTRA_CACHE_MAX_ENTRIES")
    if text is None:
        return MAX_ENTRIES
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"ASTRA_CACHE_MAX_ENTRIES: expected a positive integer, got {text!r}")
    return value


def code_fingerprint():
    """Versions of astra-sim and every plugin, and (path, size, mtime) of their package files: what the
    simulated time of a step depends on besides its inputs."""
    if _FINGERPRINT:
        return _FINGERPRINT[0]
    from astra_sim.plugins import available_plugins  # the entry points the plugin manager read (cached)

    digest = hashlib.sha256()
    packages = {"astra_sim"}
    for _, ep in sorted(available_plugins().items()):
        packages.add(ep.value.split(":")[0].split(".")[0])
        digest.update(f"{ep.name}={ep.dist.name if ep.dist else ''}:{ep.dist.version if ep.dist else ''}\n".encode())
    try:
        digest.update(f"astra-sim={importlib.metadata.version('astra-sim')}\n".encode())
    except importlib.metadata.PackageNotFoundError:
        pass
    for name in sorted(packages):
        spec = importlib.util.find_spec(name)
        for root in sorted(spec.submodule_search_locations or []) if spec else []:
            for folder, dirs, files in os.walk(root):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                for file in sorted(files):
                    if file.endswith((".pyc", ".pyo")) or (name == "astra_serving" and file not in _OWN_STEP_CODE):
                        continue
                    path = os.path.join(folder, file)
                    try:
                        st = os.stat(path)
                    except OSError:
                        continue
                    digest.update(f"{os.path.relpath(path, root)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    _FINGERPRINT.append(digest.hexdigest())
    return _FINGERPRINT[0]


def _files_named(options):
    """SHA-256 of the content of every run option value that names an existing file (a network config, a
    GPU file, ...): its time depends on what the file says, not on its name."""
    out = {}
    for key, value in sorted(options.items()):
        if isinstance(value, str) and value and os.path.isfile(value):
            with open(value, "rb") as handle:
                out[key] = hashlib.sha256(handle.read()).hexdigest()
    return out


class StepCache:
    """The entries of one replica layout (``layout_key``: :meth:`Layout.key`) with ``pp`` pipeline stages."""

    def __init__(self, folder, layout_key, run_options, pp):
        self.folder = folder
        self.pp = pp
        self.namespace = json.dumps([FORMAT, layout_key, _files_named(run_options), code_fingerprint()])
        self.limit = max_entries()  # read now: a bad ASTRA_CACHE_MAX_ENTRIES is an error before any step
        self.hits = 0
        self.writes = 0
        self._pruned = False

    def _path(self, shape):
        key = hashlib.sha256(json.dumps([self.namespace, list(shape)]).encode()).hexdigest()
        return os.path.join(self.folder, key[:2], key + ".json")

    def get(self, shape):
        """``(stage times, StepEnergy or None)`` stored for ``shape`` (times: a tuple of int ns), or None (absent,
        unreadable or malformed)."""
        try:
            with open(self._path(shape), "rb") as handle:
                value = json.loads(handle.read())
        except (OSError, ValueError):
            return None
        times = value.get("stages_ns") if isinstance(value, dict) else None
        if (not isinstance(times, list) or len(times) != self.pp
                or not all(type(t) is int and t >= 0 for t in times) or "energy" not in value):
            return None
        energy = _energy_or_bad(value["energy"])
        if energy is False:
            return None
        self.hits += 1
        return tuple(times), energy

    def put(self, shape, times, energy=None):
        """Store ``times`` and ``energy`` (a :class:`StepEnergy` or None) for ``shape`` (atomically); a cache
        that cannot be written is skipped, not an error
        (the run's result does not depend on it)."""
        from astra_sim.safeio import atomic_output

        path = self._path(shape)
        data = json.dumps({"shape": list(shape), "stages_ns": [int(t) for t in times],
                           "energy": None if energy is None else [int(v) for v in energy]}).encode()
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with atomic_output(path) as handle:
                handle.write(data)
        except OSError:
            return
        self.writes += 1
        if not self._pruned:
            self._pruned = True
            prune(self.folder, self.limit)


def prune(folder, limit):
    """Delete the oldest entries of ``folder`` (by modification time) down to 90 % of ``limit`` when it holds
    more than ``limit``; the number deleted."""
    entries = []
    try:
        subdirs = [d for d in os.scandir(folder) if d.is_dir() and len(d.name) == 2]
    except OSError:
        return 0
    for sub in subdirs:
        try:
            for entry in os.scandir(sub.path):
                if entry.name.endswith(".json"):
                    try:
                        entries.append((entry.stat().st_mtime_ns, entry.path))
                    except OSError:
                        pass
        except OSError:
            pass
    if len(entries) <= limit:
        return 0
    entries.sort()
    deleted = 0
    for _, path in entries[:len(entries) - int(limit * 0.9)]:
        try:
            os.unlink(path)
            deleted += 1
        except OSError:
            pass
    return deleted
