"""Reading the user's files safely and writing outputs whole (:func:`atomic_output`). Every input may be hostile or
broken (a truncated copy, a fuzzer's output): each failure is a ConfigError naming the file, and every size is
bounded before it is allocated (files, gunzipped data, JSON/YAML nesting, YAML aliases: the "billion laughs" bomb).
YAML uses PyYAML's *safe* loader; other formats build on :func:`read_bytes` (``astra_collectives_msccl.safe_xml``).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import reprlib
import shutil
import tempfile
import time
import zlib

from astra_sim.errors import ConfigError

#: Largest configuration file read (system/network/memory/groups JSON, YAML, XML, text workloads).
MAX_CONFIG_BYTES = int(os.environ.get("ASTRA_MAX_CONFIG_BYTES", 256 << 20))
#: Largest input after decompression (a gzip-compressed trace or JSON).
MAX_INPUT_BYTES = int(os.environ.get("ASTRA_MAX_INPUT_BYTES", 8 << 30))
#: Most nodes a YAML document may have once its aliases are expanded.
MAX_YAML_NODES = 1_000_000
#: Deepest nesting of lists and mappings accepted in JSON and YAML.
MAX_NESTING = 200

_brief = reprlib.Repr()
_brief.maxstring = 80
_brief.maxother = 80
_brief.maxlist = _brief.maxtuple = _brief.maxdict = _brief.maxset = 6
_brief.maxlevel = 3


def _named(path, what):
    """``"<what> file <path>"``, or the path alone when ``what`` is empty."""
    return f"{what} file {os.fspath(path)}" if what else os.fspath(path)


def brief(value) -> str:
    """A short repr of ``value`` for error messages (a hostile value can be huge or deeply nested)."""
    return _brief.repr(value)


# ---------------------------------------------------------------------------------------------- reading
def read_bytes(path, what="", limit=None) -> bytes:
    """The bytes of ``path``, at most ``limit`` (default :data:`MAX_CONFIG_BYTES`); ConfigError otherwise."""
    limit = MAX_CONFIG_BYTES if limit is None else limit
    name = os.fspath(path)
    try:
        with open(name, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > limit:
                raise ConfigError(f"{_named(name, what)}: {size:,} bytes, more than the {limit:,} accepted")
            data = handle.read(limit + 1)
    except FileNotFoundError:
        raise ConfigError(f"{_named(repr(name), what)} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"{_named(repr(name), what)} is a directory") from None
    except OSError as exc:
        raise ConfigError(f"{_named(name, what)}: cannot read: {exc.strerror or exc}") from None
    except ValueError:  # a NUL character in the name
        raise ConfigError(f"{_named(repr(name), what)} is not a valid file name") from None
    if len(data) > limit:  # grew while read, or a device/pipe without a size
        raise ConfigError(f"{_named(name, what)}: more than the {limit:,} bytes accepted")
    return data


def read_text(path, what="", limit=None) -> str:
    """:func:`read_bytes` decoded as UTF-8 (a leading BOM is dropped); ConfigError on other encodings."""
    return decode_utf8(read_bytes(path, what, limit), path, what)


def decode_utf8(data: bytes, path, what="") -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{_named(path, what)}: not UTF-8 text (byte offset {exc.start}: "
                          f"{data[exc.start:exc.start + 1]!r})") from None


GZIP_MAGIC = b"\x1f\x8b"


def gunzip(data: bytes, path, what="", limit=None, error=None) -> bytes:
    """Decompress gzip ``data`` (one or more members) to at most ``limit`` bytes (default :data:`MAX_INPUT_BYTES`), in
    bounded steps; corrupt, truncated or too large input raises ``error(message, compressed offset)`` (ConfigError)."""
    limit = MAX_INPUT_BYTES if limit is None else limit
    name = os.fspath(path)
    kind = f"gzip-compressed {what or 'file'}"
    error = error or (lambda message, offset: ConfigError(message))
    out = []
    total = 0
    pos = 0
    step = 1 << 22
    view = memoryview(data)
    while pos < len(data):
        if bytes(view[pos:pos + 2]) != GZIP_MAGIC:
            if out and not bytes(view[pos:]).strip(b"\0"):
                break  # trailing zero padding, as gzip(1) accepts
            raise error(f"{name}: byte offset {pos}: {kind} is corrupt: not the start of a gzip member", pos)
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        feed = view[pos:]
        while True:
            try:
                chunk = inflater.decompress(feed, step)  # at most ``step`` bytes out per call
            except zlib.error as exc:
                raise error(f"{name}: gzip member at byte offset {pos}: {kind} is corrupt: {exc}", pos) from None
            feed = inflater.unconsumed_tail
            total += len(chunk)
            if total > limit:
                raise error(f"{name}: {kind} expands to more than {limit:,} bytes "
                            "(a gzip bomb? ASTRA_MAX_INPUT_BYTES raises the limit)", pos)
            out.append(chunk)
            if inflater.eof:
                break
            if not feed and not chunk:
                raise error(f"{name}: byte offset {len(data)}: {kind} is truncated "
                            f"(after {total:,} decompressed bytes)", len(data))
        pos = len(data) - len(inflater.unused_data)
    return b"".join(out)


def _depth_error(path, what):
    return ConfigError(f"{_named(path, what)}: nested more than {MAX_NESTING} levels deep")


def _nesting_ok(value, limit=MAX_NESTING) -> bool:
    """Whether JSON ``value`` nests at most ``limit`` levels (so recursive walkers keep their stack), iteratively."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth >= limit:
            return False
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, (list, dict)))
    return True


def parse_json(text, path, what=""):
    """``text`` as JSON, else a ConfigError naming ``path``, line and column (``NaN`` is read: range checks name it)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{_named(path, what)}: invalid JSON at line {exc.lineno}, column {exc.colno}: "
                          f"{exc.msg}") from None
    except RecursionError:
        raise _depth_error(path, what) from None
    except ValueError as exc:  # e.g. an integer literal too long to convert
        raise ConfigError(f"{_named(path, what)}: invalid JSON: {exc}") from None
    if isinstance(value, (list, dict)) and not _nesting_ok(value):
        raise _depth_error(path, what)
    return value


def load_json(path, what="", limit=None):
    """Read ``path`` as JSON (bounded, UTF-8); every failure a ConfigError naming it."""
    return parse_json(read_text(path, what, limit), os.fspath(path), what)


@functools.lru_cache(maxsize=None)
def _yaml_loader():
    import yaml

    class BoundedSafeLoader(yaml.SafeLoader):
        """PyYAML's safe loader, checking the composed document (:func:`_check_yaml_size`) before building it."""

        def construct_document(self, node):
            _check_yaml_size(node, self.name)
            return super().construct_document(node)

    return BoundedSafeLoader


class _YamlTooLarge(Exception):
    pass


def _check_yaml_size(root, name):
    """Count the document's nodes with aliases expanded, memoised per shared node (a bomb is measured without being
    expanded); refuse cycles and deep nesting."""
    import yaml

    sizes = {}
    on_path = set()
    stack = [(root, 0, False)]
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            total = 1
            for child in _yaml_children(node, yaml):
                total += sizes[id(child)]
            if total > MAX_YAML_NODES:
                raise _YamlTooLarge(f"its aliases expand it to more than {MAX_YAML_NODES:,} nodes "
                                    "(an alias bomb?)")
            sizes[key] = total
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise _YamlTooLarge("an alias refers to a node that contains it (a recursive structure)")
        if depth >= MAX_NESTING:
            raise _YamlTooLarge(f"nested more than {MAX_NESTING} levels deep")
        on_path.add(key)
        stack.append((node, depth, True))
        for child in _yaml_children(node, yaml):
            if id(child) not in sizes:
                stack.append((child, depth + 1, False))


def _yaml_children(node, yaml):
    if isinstance(node, yaml.SequenceNode):
        return node.value
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return ()


def parse_yaml(text, path, what=""):
    """``text`` as YAML (bounded safe loader), else a ConfigError naming ``path`` and the line."""
    import yaml

    try:
        return yaml.load(text, Loader=_yaml_loader())  # noqa: S506 - a SafeLoader subclass
    except _YamlTooLarge as exc:
        raise ConfigError(f"{_named(path, what)}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
        raise ConfigError(f"{_named(path, what)}: not valid YAML{at}: {problem}") from None
    except RecursionError:
        raise _depth_error(path, what) from None
    except (ValueError, OverflowError, TypeError) as exc:  # e.g. a timestamp or number PyYAML cannot build
        raise ConfigError(f"{_named(path, what)}: unreadable value: {exc}") from None


#: texts :func:`parse_yaml_once` parsed, at most ``_PARSED_YAML_MAX`` (cleared when full)
_PARSED_YAML = {}
_PARSED_YAML_MAX = 64


def parse_yaml_once(text, path, what=""):
    """:func:`parse_yaml`, a text parsed before not parsed again; each caller gets its own copy. For readers that see
    the same file many times in one process (a serving run's batch shapes each resolve its GPU and network files)."""
    if text not in _PARSED_YAML:
        data = parse_yaml(text, path, what)
        if len(_PARSED_YAML) >= _PARSED_YAML_MAX:
            _PARSED_YAML.clear()
        _PARSED_YAML[text] = data
    return copy.deepcopy(_PARSED_YAML[text])


def load_yaml(path, what="", limit=None):
    """Read ``path`` as YAML (bounded, UTF-8, safe loader); every failure a ConfigError naming it."""
    return parse_yaml(read_text(path, what, limit), os.fspath(path), what)


# ------------------------------------------------------------------ writing: whole files or nothing
def ensure_parent_dir(path):
    """Create the folder ``path`` goes into (every ``-o`` does), else a ConfigError naming it."""
    parent = os.path.dirname(os.path.abspath(os.fspath(path)))
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the output folder {parent}: {exc.strerror or exc}") from None


def write_text_atomic(path, text):
    """Write ``text`` (UTF-8) to ``path`` atomically (:func:`write_bytes_atomic`)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path, data):
    """Write ``data`` to ``path`` whole (:func:`atomic_output`), creating the folder if needed."""
    ensure_parent_dir(path)
    with atomic_output(path) as handle:
        handle.write(data)


@contextlib.contextmanager
def atomic_output(path):
    """A binary file writing ``path`` through a temporary file in its folder, renamed over ``path`` when the block
    ends without an error (removed otherwise): readers see the old file or the whole new one, and a killed writer
    leaves no part. It gets the permissions ``open()`` would give (``mkstemp`` makes 0600)."""
    from astra_sim.generated import owned, reclaim_leftovers

    folder = os.path.dirname(os.path.abspath(os.fspath(path)))
    reclaim_leftovers(folder, ".tmp-")  # a SIGKILLed writer's part, once per folder (its pid in the name)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=owned(".tmp-"), suffix=os.path.basename(os.fspath(path)))
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ------------------------------------------------------- a write that fails late: keep the result, say where
def write_or_recover(path, produce, command, flag):
    """Write ``path`` atomically through ``produce(handle)`` (or these bytes); a write failing late (a full disk, a
    folder removed) does not lose the result (:func:`recover`)."""
    write = produce if callable(produce) else lambda handle: handle.write(produce)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(os.fspath(path))), exist_ok=True)
        with atomic_output(path) as handle:
            return write(handle)
    except OSError as exc:
        failed = f"{command}: could not write {flag} {os.fspath(path)} ({exc.strerror or exc})"
    recover(failed, os.path.basename(os.fspath(path)), write, command, flag)


def recover(failed, name, produce, command, flag, folder=False):
    """Write the result again, ``produce(handle)`` into a new file (``folder``: ``produce(path)`` into a new folder)
    ``<time>-<command>-<flag>-<random>-<name>`` in ``$ASTRA_RECOVERED_DIR``, ``$XDG_CACHE_HOME/astra-sim/recovered``
    or the temp dir; the ConfigError says where."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    stem = f"{time.strftime('%Y%m%d-%H%M%S')}-{'-'.join(w.strip('-') for w in command.split()[1:] + [flag])}-"
    tried = []
    for place in (os.environ.get("ASTRA_RECOVERED_DIR") or os.path.join(cache, "astra-sim", "recovered"),
                  tempfile.gettempdir()):
        kept = None
        try:  # mkstemp and mkdtemp never reuse a name, even for two failures in one second
            os.makedirs(place, exist_ok=True)
            if folder:
                kept = tempfile.mkdtemp(prefix=stem, suffix=f"-{name}", dir=place)
                produce(kept)
            else:
                handle, kept = tempfile.mkstemp(prefix=stem, suffix=f"-{name}", dir=place)
                with os.fdopen(handle, "wb") as out:
                    produce(out)
        except OSError as exc:
            tried.append(f"{place}: {exc.strerror or exc}")
            if kept:  # no part of a result is left
                with contextlib.suppress(OSError):
                    shutil.rmtree(kept) if folder else os.unlink(kept)
            continue
        raise ConfigError(f"{failed}; kept it {'in' if folder else 'as'} {kept}")
    raise ConfigError(f"{failed}; could not keep it anywhere either ({'; '.join(tried)}), so it is lost")
