"""Configurations a plugin generates for one run (``--platform``): held in memory, never left behind.

A platform's ``resolve`` may give a :class:`GeneratedFile` instead of a path; it is written into a private temporary
folder only while the run reads it (:func:`materialized`), removed however the run ends, so that a sweep of 10,000
runs leaves nothing behind; the report keeps the configuration itself (:func:`inline_settings`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass

#: The ``astra run`` inputs a plugin may generate, by option name (any of its ``options`` too).
CONFIG_KEYS = ("system_configuration", "network_configuration", "remote_memory_configuration",
               "comm_group_configuration")


@dataclass(frozen=True)
class GeneratedFile:
    """A configuration file's ``name`` (its suffix tells readers the format), ``text`` and ``origin`` (what made it)."""

    name: str
    text: str
    origin: str = ""

    def content(self):
        """What the report records: the parsed object for JSON, else the text."""
        if self.name.endswith(".json"):
            with contextlib.suppress(ValueError):
                return json.loads(self.text)
        return self.text


def write_generated(files, directory):
    """``{key: GeneratedFile}`` written atomically into ``directory`` -> ``{key: path}`` (kept: ``--output``)."""
    from astra_sim.safeio import write_text_atomic

    paths = {}
    for key, generated in files.items():
        path = os.path.join(os.path.normpath(directory), os.path.basename(generated.name) or key)
        if path in paths.values():  # two generated files of one name
            path = os.path.join(os.path.dirname(path), f"{len(paths)}-{os.path.basename(path)}")
        write_text_atomic(path, generated.text)
        paths[key] = path
    return paths


@contextlib.contextmanager
def materialized(files):
    """``{key: GeneratedFile}`` -> ``{key: path}`` in a fresh :func:`private_folder`, removed however the block ends."""
    if not files:
        yield {}
        return
    with private_folder("astra-run-") as folder:
        yield write_generated(files, folder)


@contextlib.contextmanager
def private_folder(prefix):
    """A fresh private temporary folder ``<prefix><pid>.<host>-<random>``, removed when the block ends; one a killed
    process left is removed by the next process making one with the same prefix (:func:`reclaim_leftovers`)."""
    reclaim_leftovers(tempfile.gettempdir(), prefix)
    folder = tempfile.mkdtemp(prefix=owned(prefix))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


_RECLAIMED = set()
#: this machine, in leftovers' names: a pid means something only on its machine (an NFS or shared TMPDIR)
_HOST = hashlib.blake2b(os.uname().nodename.encode(), digest_size=3).hexdigest()  # (gethostname without socket)


def owned(prefix):
    """``<prefix><pid>.<host>-``: a temporary name :func:`reclaim_leftovers` can trace to its process."""
    return f"{prefix}{os.getpid()}.{_HOST}-"


def reclaim_leftovers(folder, prefix):
    """Remove ``folder``'s :func:`owned` entries with ``prefix`` of this user and machine whose process no longer runs
    (a killed run's folder or half-written file), once per process, folder and prefix; returns how many."""
    if (folder, prefix) in _RECLAIMED:
        return 0
    _RECLAIMED.add((folder, prefix))
    removed = 0
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    for entry in entries:
        tag = entry.name[len(prefix):].partition("-")[0] if entry.name.startswith(prefix) else ""
        pid, _, host = tag.partition(".")
        if host != _HOST or not pid.isdigit() or int(pid) in (0, os.getpid()):
            continue
        try:
            if entry.stat(follow_symlinks=False).st_uid != os.getuid() or _running(int(pid)):
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
            removed += 1
        except OSError:
            continue  # gone meanwhile (another process reclaimed it), or not ours to remove
    return removed


#: the names :func:`owned` gives: ``astra-<kind>-<pid>.<host>-...`` folders and ``.tmp-<pid>.<host>-...`` files
_OWNED_NAME = re.compile(r"^(astra-[a-z0-9]+-|\.tmp-)\d+\.[0-9a-f]+-")


def reclaim_all_leftovers(folder):
    """:func:`reclaim_leftovers` for every kind of owned name: the next command cleans up after any killed one."""
    try:
        kinds = {m.group(1) for entry in os.scandir(folder) if (m := _OWNED_NAME.match(entry.name))}
    except OSError:
        return 0
    return sum(reclaim_leftovers(folder, kind) for kind in sorted(kinds))


def _running(pid):
    """Whether ``pid`` is a live process: a killed worker not yet reaped (a zombie) has stopped writing."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it runs, as another user
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):  # no /proc (macOS): kill(pid, 0) said it exists
        return True


def inline_settings(settings, files, paths=None):
    """Replace a generated file's path in a report's ``settings`` by ``{"generated_by", "file", "content"}``: under its
    own key, and wherever else the settings name its temporary path (``paths``, from :func:`materialized`)."""
    inline = {key: {"generated_by": generated.origin, "file": generated.name, "content": generated.content()}
              for key, generated in files.items()}
    settings.update({key: value for key, value in inline.items() if key in settings})
    by_path = {path: inline[key] for key, path in (paths or {}).items()}
    if by_path:
        _replace_paths(settings, by_path)
    return settings


def _replace_paths(value, by_path):
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in list(items):
        if isinstance(item, str) and item in by_path:
            value[key] = by_path[item]
        elif isinstance(item, (dict, list)):
            _replace_paths(item, by_path)


def generated_options(options):
    """``{"option:<name>": GeneratedFile}`` of the generated run options, materialized with the configurations."""
    return {f"option:{name}": value for name, value in options.items() if isinstance(value, GeneratedFile)}
