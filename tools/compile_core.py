"""Compile the kernel's event loop with mypyc (issue 37), opt-in: a tree that, put first on ``PYTHONPATH``, makes
``import astra_sim`` load the compiled modules and the pure-Python ones for the rest.

The pure-Python kernel stays the default and the reference (``tests/test_compiled_core.py`` checks that both give
the same ns); nothing in a normal install needs a compiler. This needs mypy (``pip install mypy``: it brings
mypyc) and a C compiler.

    python tools/compile_core.py [--out build/compiled] [--module astra_sim.engine ...] [--opt-level 3]
    PYTHONPATH=build/compiled astra run ...

The tree is a copy of ``core/astra_sim`` (the modules not compiled are its pure-Python files) plus one extension
per compiled module and mypyc's shared runtime. A plugin's module (the default list has the folded run's matcher
and the native collectives) brings its package into the tree too, found there before the installed one. The tree
is a snapshot: compile again after editing ``core/`` or those packages (``COMPILED.json`` names the modules and the
digest of the sources).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from astra_sim.safeio import write_text_atomic

ROOT = Path(__file__).resolve().parents[1]
#: where the packages of the modules to compile live: the kernel, and each plugin's src/ (opt-in: --module)
SOURCE_ROOTS = (ROOT / "core", *sorted(ROOT.glob("plugins/*/src")))
DEFAULT_OUT = ROOT / "build" / "compiled"
MARKER = "COMPILED.json"

#: What an unfolded run spends its event loop in: the engine, the system layer, the matcher, the workload, the
#: collectives' base (Algorithm) and the native collectives' packet state machines (a quarter of an unfolded
#: all-reduce's time), the folded run's matcher (it subclasses the kernel's, and an interpreted class cannot
#: subclass a compiled one), and the congestion backend's link queues (astra_network_congestion.links: its hot path,
#: kept apart from the network's setup and report). Algorithm and the native collectives are declared
#: mypyc_attr(allow_interpreted_subclasses) (other plugins subclass them); the engine's attributes, the link queues'
#: and the hot ones of Sys and the matcher are typed (native ints and containers), the rest compiles untyped; the
#: ring's packets reach Sys and the matcher through typed references (native calls), while an int that only goes to
#: Python calls stays untyped (typed, it is boxed anew for each: +2 % instructions on congestion-ring-128); a ring's
#: matcher channels (astra_collectives_native.channel) match its messages natively. The logical topologies
#: (astra_sim.system.topology) are asked for a ring's neighbours and a dimension's ring at every phase: compiled,
#: -1.2 % of the instructions of a 128-rank training step's loop.
DEFAULT_MODULES = (
    "astra_sim.engine",
    "astra_sim.system.sys",
    "astra_sim.system.frontend",
    "astra_sim.system.collectives",
    "astra_sim.system.topology",
    "astra_sim.workload.workload",
    "astra_sim.workload.host",
    "astra_folding.matcher",
    "astra_collectives_native.ring",
    "astra_collectives_native.channel",
    "astra_collectives_native.halving_doubling",
    "astra_collectives_native.double_binary_tree",
    "astra_network_congestion.links",
)

#: mypy's options for the compile: the modules are mostly untyped; what they import from modules not compiled is
#: not read (typed Any), which keeps the compile to the listed modules.
MYPY_FLAGS = ("--ignore-missing-imports", "--follow-imports=skip", "--no-warn-no-return",
              "--disable-error-code=var-annotated")


class CompileError(Exception):
    """The compile cannot start or failed (a one-line reason; the compiler's output was printed)."""


def module_path(tree, module):
    """``astra_sim.system.sys`` -> ``<tree>/astra_sim/system/sys.py``."""
    return Path(tree, *module.split(".")).with_suffix(".py")


def package_source(module):
    """The source folder of ``module``'s top-level package (``astra_sim`` -> core/astra_sim), or None."""
    top = module.split(".")[0]
    return next((root / top for root in SOURCE_ROOTS if (root / top / "__init__.py").is_file()), None)


def packages(modules):
    """The top-level packages the compiled tree copies: the kernel's and those of the modules compiled."""
    return sorted({"astra_sim", *(m.split(".")[0] for m in modules)})


def source_digest(modules):
    """A digest of the copied packages' sources (what the compiled modules were compiled against) and the module
    list."""
    digest = hashlib.sha256(" ".join(modules).encode())
    for top in packages(modules):
        source = package_source(top)
        for path in sorted(source.rglob("*.py")):
            digest.update(str(path.relative_to(source.parent)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def compile_core(out=DEFAULT_OUT, modules=DEFAULT_MODULES, opt_level="3", quiet=False):
    """Build the compiled tree in ``out`` (replaced if it holds an earlier one); returns its path."""
    out = Path(out).resolve()
    for root in SOURCE_ROOTS:
        if out == root or root in out.parents or out in root.parents:
            raise CompileError(f"--out {out}: must be outside the source trees (core/, plugins/*/src/)")
    bad = [m for m in modules if package_source(m) is None or not module_path(package_source(m).parent, m).is_file()]
    if bad:
        raise CompileError(f"--module {', '.join(bad)}: no such module under core/ or plugins/*/src/")
    if out.exists() and (not out.is_dir() or any(out.iterdir()) and not (out / MARKER).is_file()):
        raise CompileError(f"--out {out}: exists and is not a compiled tree (no {MARKER}); give an empty folder")
    if importlib.util.find_spec("mypyc") is None:
        raise CompileError("mypyc is not installed: pip install mypy (it brings mypyc); a C compiler is needed too")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    digest = source_digest(modules)
    write_text_atomic(out / MARKER, json.dumps({"modules": list(modules), "complete": False}) + "\n")  # ours, if it fails
    for top in packages(modules):
        shutil.copytree(package_source(top), out / top, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    paths = [str(module_path("", m)) for m in modules]
    setup = (
        "from setuptools import setup\n"
        "from mypyc.build import mypycify\n"
        f"setup(name='astra_sim_compiled', ext_modules=mypycify({list(MYPY_FLAGS) + paths!r}, "
        f"opt_level={str(opt_level)!r}))\n"
    )
    (out / "setup_compiled.py").write_text(setup)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "setup_compiled.py", "build_ext", "--inplace", "--build-temp", ".build"],
                          cwd=out, capture_output=quiet, text=True)
    if done.returncode:
        if quiet:
            sys.stderr.write(done.stdout + done.stderr)
        raise CompileError(f"mypyc failed on {', '.join(modules)} (exit status {done.returncode}; output above)")
    shutil.rmtree(out / ".build", ignore_errors=True)
    shutil.rmtree(out / "build", ignore_errors=True)  # mypyc's generated C
    (out / "setup_compiled.py").unlink()
    write_text_atomic(out / MARKER, json.dumps({
        "modules": list(modules), "complete": True, "source_digest": digest, "opt_level": str(opt_level),
        "python": sys.version.split()[0], "compile_s": round(time.perf_counter() - started, 1)}, indent=1) + "\n")
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(DEFAULT_OUT), help=f"the compiled tree (default {DEFAULT_OUT})")
    parser.add_argument("--module", action="append", dest="modules", metavar="NAME",
                        help=f"a module to compile (repeat; default: {', '.join(DEFAULT_MODULES)})")
    parser.add_argument("--opt-level", default="3", choices=["0", "1", "2", "3"], help="the C compiler's -O level")
    args = parser.parse_args(argv)
    modules = tuple(args.modules or DEFAULT_MODULES)
    started = time.perf_counter()
    try:
        out = compile_core(args.out, modules, args.opt_level)
    except CompileError as exc:
        print(f"compile_core: {exc}", file=sys.stderr)
        return 2
    print(f"compiled {len(modules)} modules into {out} in {time.perf_counter() - started:.0f} s; use it with "
          f"PYTHONPATH={out} (compile again after editing core/)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
