"""Loading the C++ glue (``routing.cc`` + ``glue.cc``): compiled once, cached between runs.

Why: ``from ns import ns`` makes cling parse every ns-3 module's headers (about 10 s of a run's start, 42
``cppyy.include`` calls), then ``cppyy.cppdef`` compiles the glue (2 s) and cling JITs each method at its first
call (seconds more, inside the first run). None of that is kept between processes. So when a C++ compiler is
found (``$CXX``, else ``c++``, ``g++`` or ``clang++`` on the PATH), the glue is compiled once, with a thin
``extern "C"`` layer (:data:`API`), into a shared library linked against the ``ns3`` package's own ns-3
libraries, and loaded with :mod:`ctypes`: no cppyy, no ns-3 headers parsed, no JIT in a run.

Cache: ``$ASTRA_NS3_CACHE``, else ``$XDG_CACHE_HOME/astra-sim/ns3``, else ``~/.cache/astra-sim/ns3``; one
``glue-<key>.so`` per key, the SHA-256 of the compiled source (the glue files, the header prelude and the C
layer), the compiler command (compiler, flags, the ns-3 include and library folders) and the ``ns3`` package's
version: a changed glue or another ns-3 compiles again, never loads a stale library. Written atomically (built
under a temporary name in the folder, then renamed): concurrent first runs both compile and write the same
bytes, and a reader sees a whole library or none. The file ends with the SHA-256 of the library: a file that
does not match it (truncated, overwritten) is compiled again, never loaded. The folder keeps the :data:`KEEP`
newest libraries.

Without a compiler (or when it fails, which is said on one line), cppyy compiles the glue in every process, after
parsing the headers of only the ns-3 modules it uses (:data:`NS3_MODULES`); ``ASTRA_NS3_GLUE=cppyy`` asks for
that path.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import hashlib
import importlib.metadata
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import types

from astra_sim.errors import ConfigError

_HERE = os.path.dirname(os.path.abspath(__file__))
#: the glue's C++ files, in the order they are compiled (routing.cc defines what glue.cc installs)
SOURCES = ("routing.cc", "glue.cc")
#: the ns-3 modules the glue uses: their headers are included, their libraries linked
NS3_MODULES = ("core", "network", "internet", "point-to-point", "traffic-control")
#: compiled libraries kept in the cache folder (the newest by modification time; older glue versions go)
KEEP = 8
CXX_FLAGS = ("-std=c++20", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-w")

#: ``Net``'s methods that Python calls: (name, C return type, C argument types). The C layer
#: (:func:`c_layer`) and the ctypes signatures are both made from this one table.
API = (
    ("ConfigureDcqcn", "void", ("double",) * 7 + ("uint32_t", "bool", "double")),
    ("Configure", "void", ("int", "uint32_t", "double", "uint32_t")),
    ("AddNodes", "void", ("int",)),
    ("MarkSwitch", "void", ("int",)),
    ("AddLink", "void", ("int", "int", "uint64_t", "uint64_t", "bool", "uint64_t", "uint64_t", "double", "uint64_t",
                         "uint64_t", "uint64_t", "double", "uint64_t")),
    ("Finish", "void", ()),
    ("Send", "void", ("int", "int", "uint64_t", "uint64_t", "int64_t")),
    ("ScheduleLinkDown", "void", ("int", "int", "int64_t", "int")),
    ("CutLink", "int", ()),
    ("CutSrc", "int", ()),
    ("CutDst", "int", ()),
    ("FailureDrops", "uint64_t", ("int",)),
    ("RunSlice", "void", ("int64_t",)),
    ("NowNs", "int64_t", ()),
    ("DoneCount", "size_t", ()),
    ("DoneId", "uint64_t", ("size_t",)),
    ("DoneNs", "int64_t", ("size_t",)),
    ("DoneSport", "uint16_t", ("size_t",)),
    ("ClearDone", "void", ()),
    ("PortTxBytes", "uint64_t", ("size_t",)),
    ("PortTxPackets", "uint64_t", ("size_t",)),
    ("PortPeakQueue", "uint32_t", ("size_t",)),
    ("PortDrops", "uint64_t", ("size_t",)),
    ("PortMarks", "uint64_t", ("size_t",)),
    ("HostIp", "uint32_t", ("int",)),
    ("Drops", "uint64_t", ()),
    ("Cnps", "uint64_t", ()),
)
_CTYPES = {"void": None, "int": ctypes.c_int, "bool": ctypes.c_bool, "double": ctypes.c_double,
           "uint16_t": ctypes.c_uint16, "uint32_t": ctypes.c_uint32, "uint64_t": ctypes.c_uint64,
           "int64_t": ctypes.c_int64, "size_t": ctypes.c_size_t}

_GLUE = None


def load_glue():
    """The glue (an object whose ``Net()`` makes a network), loaded once per process: the cached compiled
    library when a compiler is found, else cppyy's JIT (which imports ns-3: ~10 s)."""
    global _GLUE
    if _GLUE is None:
        from astra_sim.progress import phase

        choice = os.environ.get("ASTRA_NS3_GLUE", "compiled").strip().lower()
        if choice not in ("compiled", "cppyy"):
            raise ConfigError(f"ASTRA_NS3_GLUE: expected 'compiled' or 'cppyy', got {choice!r}")
        compiler = find_compiler() if choice == "compiled" else None
        if choice == "compiled" and compiler is None and os.environ.get("CXX"):
            print(f"ns3 network: CXX={os.environ['CXX']!r} is not a command on the PATH; using cppyy's JIT instead",
                  file=sys.stderr)
        if compiler is not None:
            try:
                _GLUE = _load_compiled(_ns3_install(), compiler, phase)
            except _BuildFailed as exc:
                print(f"ns3 network: compiling the glue with {' '.join(compiler)} failed ({exc}); using cppyy's JIT "
                      "instead (set ASTRA_NS3_GLUE=cppyy to skip the attempt)", file=sys.stderr)
        if _GLUE is None:
            phase("loading ns-3 and compiling its C++ glue with cppyy (once per process: about 6 s of CPU; a C++ "
                  "compiler on the PATH makes it a one-time cost)")
            _GLUE = _load_cppyy()
    return _GLUE


# ---------------------------------------------------------------------------------------------- the compiled glue
class _BuildFailed(Exception):
    """The compiler could not build the glue (its first error line)."""


def find_compiler():
    """The compiler's command as a list: ``$CXX`` (split as a shell would: ``ccache g++`` works), else the first
    of ``c++``, ``g++``, ``clang++`` on the PATH; None when there is none."""
    if os.environ.get("CXX"):
        words = shlex.split(os.environ["CXX"])
        path = shutil.which(words[0]) if words else None
        return [path, *words[1:]] if path else None
    for name in ("c++", "g++", "clang++"):
        path = shutil.which(name)
        if path:
            return [path]
    return None


def cache_folder(env=None):
    """Where the compiled libraries live (see the module docstring)."""
    env = os.environ if env is None else env
    if env.get("ASTRA_NS3_CACHE"):
        return env["ASTRA_NS3_CACHE"]
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "astra-sim", "ns3")


def _ns3_install():
    """(prefix folder, library folder, library name prefix such as ``ns3.44``, version) of the ns3 package."""
    spec = importlib.util.find_spec("ns3")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("the ns3 network backend needs the ns3 package (pip install 'ns3==3.44.post0')")
    prefix = list(spec.submodule_search_locations)[0]
    for sub in ("lib64", "lib"):
        cores = sorted(glob.glob(os.path.join(prefix, sub, "libns3*-core.so")))
        if cores:
            stem = os.path.basename(cores[0])[len("lib"):-len("-core.so")]
            return prefix, os.path.join(prefix, sub), stem, importlib.metadata.version("ns3")
    raise ConfigError(f"the ns3 package at {prefix} has no libns3*-core.so under lib64/ or lib/ (reinstall it)")


def c_layer():
    """The ``extern "C"`` functions over ``astra_ns3::Net`` that ctypes calls (made from :data:`API`)."""
    out = ['extern "C" {', "#define ASTRA_API __attribute__((visibility(\"default\")))",
           "ASTRA_API void* astra_ns3_new() { return new astra_ns3::Net(); }",
           "ASTRA_API void astra_ns3_delete(void* net) { delete static_cast<astra_ns3::Net*>(net); }"]
    for name, ret, args in API:
        params = "".join(f", {t} a{i}" for i, t in enumerate(args))
        call = ", ".join(f"a{i}" for i in range(len(args)))
        body = f"static_cast<astra_ns3::Net*>(net)->{name}({call})"
        out.append(f"ASTRA_API {ret} astra_ns3_{name}(void* net{params}) {{ {'' if ret == 'void' else 'return '}{body}; }}")
    out.append("}")
    return "\n".join(out) + "\n"


def compile_unit():
    """The whole C++ translation unit: the ns-3 headers the glue uses, the glue's files, the C layer."""
    parts = [f'#include "ns3/{module}-module.h"\n' for module in NS3_MODULES]
    for name in SOURCES:
        with open(os.path.join(_HERE, name), encoding="utf-8") as handle:
            parts.append(f"// ---- {name}\n" + handle.read())
    parts.append(c_layer())
    return "".join(parts)


def compile_command(compiler, ns3):
    """The compiler's arguments, reading the unit on stdin; the output path goes last."""
    prefix, libdir, stem, _version = ns3
    libs = [f"-l{stem}-{module}" for module in NS3_MODULES]
    return [*compiler, *CXX_FLAGS, "-I", os.path.join(prefix, "include"), "-x", "c++", "-", "-x", "none",
            "-L", libdir, *libs, f"-Wl,-rpath,{libdir}", "-Wl,-z,defs", "-o"]


def cache_key(unit, command, version):
    """SHA-256 (hex) of what decides the library's bytes: the source, the command, the ns3 package's version."""
    digest = hashlib.sha256()
    for part in (unit, "\0".join(command), version, sys.platform):
        digest.update(part.encode("utf-8") + b"\0\0")
    return digest.hexdigest()


def cached_library(folder, key, build):
    """(the loaded library cached under ``key``, whether it was built now); ``build(path)`` writes a library at
    ``path``. The file ends with the SHA-256 of the bytes before it (the loader ignores bytes past the ELF's
    contents): a file that does not match is built again, never loaded (a truncated library can crash the loader
    with SIGBUS). The new file replaces the old one atomically."""
    path = os.path.join(folder, f"glue-{key}.so")
    if _intact(path):
        with contextlib.suppress(OSError):  # whole but unloadable (another machine's file): built again below
            return ctypes.CDLL(path), False
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".glue-", suffix=".so.tmp")
    os.close(fd)
    try:
        build(tmp)
        seal(tmp)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    _prune(folder, keep=path)
    return ctypes.CDLL(path), True


def seal(path):
    """Append the SHA-256 of the library at ``path`` (what :func:`_intact` checks)."""
    with open(path, "rb") as handle:
        digest = hashlib.sha256(handle.read()).digest()
    with open(path, "ab") as handle:
        handle.write(digest)


def _intact(path):
    """Whether ``path`` holds a library followed by its SHA-256 (False when it is missing or damaged)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return False
    return len(data) > 32 and hashlib.sha256(data[:-32]).digest() == data[-32:]


def _prune(folder, keep):
    """Delete all but the :data:`KEEP` newest libraries (another process's loaded library stays mapped), and the
    temporary files of builds killed over an hour ago (a build under way is younger)."""
    for path in glob.glob(os.path.join(folder, ".glue-*.so.tmp")):
        with contextlib.suppress(OSError):
            if os.stat(path).st_mtime < time.time() - 3600:
                os.unlink(path)
    entries = []
    for path in glob.glob(os.path.join(folder, "glue-*.so")):
        with contextlib.suppress(OSError):
            entries.append((os.stat(path).st_mtime, path))
    for _mtime, path in sorted(entries, reverse=True)[KEEP:]:
        if path != keep:
            with contextlib.suppress(OSError):
                os.unlink(path)


def _load_compiled(ns3, compiler, phase):
    unit = compile_unit()
    command = compile_command(compiler, ns3)
    folder = cache_folder()

    def build(path):
        phase(f"compiling the ns-3 glue with {os.path.basename(compiler[0])} (once per glue and ns-3 version; "
              f"cached in {folder})")
        done = subprocess.run([*command, path], input=unit, capture_output=True, text=True)
        if done.returncode != 0:
            lines = [line for line in done.stderr.splitlines() if "error" in line] or done.stderr.splitlines()
            raise _BuildFailed(lines[0].strip() if lines else f"exit status {done.returncode}")

    phase("loading the compiled ns-3 glue")
    try:
        lib, built = cached_library(folder, cache_key(unit, command, ns3[3]), build)
    except OSError as exc:  # an unwritable cache folder, a library that will not load even when fresh
        raise _BuildFailed(str(exc)) from None
    return _compiled_namespace(lib, built)


def _compiled_namespace(lib, built):
    """An object with ``Net`` (a class whose methods call the library's C layer), ``library`` (its path) and
    ``built`` (whether this process compiled it)."""
    new, delete = lib.astra_ns3_new, lib.astra_ns3_delete
    new.restype, new.argtypes = ctypes.c_void_p, []
    delete.restype, delete.argtypes = None, [ctypes.c_void_p]

    class Net:
        """``astra_ns3::Net`` in the compiled library (the methods of :data:`API`)."""

        def __init__(self):
            self._ptr = new()

        def __del__(self):
            if getattr(self, "_ptr", None):
                delete(self._ptr)
                self._ptr = None

    for name, ret, args in API:
        fn = getattr(lib, f"astra_ns3_{name}")
        fn.restype = _CTYPES[ret]
        fn.argtypes = [ctypes.c_void_p] + [_CTYPES[t] for t in args]
        setattr(Net, name, lambda self, *a, _fn=fn: _fn(self._ptr, *a))

    return types.SimpleNamespace(Net=Net, library=lib._name, built=built)


# ---------------------------------------------------------------------------------------------- cppyy's JIT
def _load_cppyy():
    """cling parses the headers of :data:`NS3_MODULES` (not the ``ns`` package's 42 modules: a third of the
    time), loads their libraries, then compiles the glue; its methods are JIT-compiled at their first call."""
    ns3 = _ns3_install()
    try:
        import cppyy
    except ImportError as exc:
        raise ConfigError(f"the ns3 network backend needs cppyy, which the ns3 package brings (pip install "
                          f"'ns3==3.44.post0'): {exc}") from None

    with _quiet_static_init():
        cppyy.add_include_path(os.path.join(ns3[0], "include"))
        for module in NS3_MODULES:
            cppyy.include(f"ns3/{module}-module.h")
        for module in NS3_MODULES:
            cppyy.load_library(os.path.join(ns3[1], f"lib{ns3[2]}-{module}.so"))
    for name in SOURCES:
        with open(os.path.join(_HERE, name), encoding="utf-8") as handle:
            cppyy.cppdef(handle.read())
    return cppyy.gbl.astra_ns3


#: What cling prints on stderr for every ns-3 import: a header's static initialiser (``g_timeInitHelper``) that
#: the ns-3 libraries have already run. Harmless, and dropped; anything else on stderr is passed on.
_CLING_NOISE = "[runStaticInitializersOnce]: Failed to materialize symbols"


@contextlib.contextmanager
def _quiet_static_init():
    """Capture file descriptor 2 while ns-3 loads; write back every line but cling's known static-init notice."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            text = capture.read().decode("utf-8", "replace")
            kept = [line for line in text.splitlines() if line and not line.startswith(_CLING_NOISE)]
            if kept:
                print("\n".join(kept), file=sys.stderr)
