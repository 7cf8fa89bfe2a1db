"""One CLI vocabulary (docs/usage.md, "The CLI vocabulary"), checked on the real ``astra`` parser with every
installed plugin, for every sub-command, so that a new command or flag cannot drift from it:

- ``--json`` never takes a value (it prints JSON on stdout); ``-o``/``--output`` always takes one (it writes a
  file) and are one option; a flag that writes the command's JSON (``--report-json``, ...) is ``-o/--output``
  itself, under another name;
- the model, platform and executor flags are the shared helpers' (one set of choices, one metavar);
- list-valued layout flags (``--tp 1,2,4``) only in the commands that search;
- the deprecated aliases print the one-line deprecation message and still work.

(A test may walk argparse's internals; plugin code may not.)
"""

from __future__ import annotations

import argparse
import re

import pytest

from astra_sim.cli import build_parser, main
from astra_sim.plugins import make_plugin_manager

#: the commands whose layout flags take lists: they search over them
SEARCHING = {"search", "serve-search"}
LAYOUT = {"--tp", "--pp", "--dp", "--ep", "--cp", "--vp", "--virtual-stages", "--mbs", "--micro-batch-size",
          "--micro-batches", "--zero", "--replicas", "--virtual-engines", "--batch-size", "--nodes", "--gpus"}
#: every command the vocabulary table documents (a missing one means the table and the parser disagree)
DOCUMENTED = {"run", "plugins", "platforms", "serve", "serve-search", "validate", "workload systolic",
              "workload convert-text", "workload micro", "workload scale", "workload compare",
              "workload convert-pytorch", "workload llm", "workload expand", "compute systolic", "systolic",
              "msccl to-chakra", "plot", "sweep", "search", "infragraph"}


def _commands(parser, path=()):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs and path:
        yield " ".join(path), parser
    for action in subs:
        for name, child in action.choices.items():
            yield from _commands(child, (*path, name))


@pytest.fixture(scope="module")
def commands():
    return dict(_commands(build_parser(make_plugin_manager())))


def _options(parser):
    return [a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]


def _takes_value(action):
    return action.nargs != 0


def test_every_command_is_in_the_vocabulary_table(commands):
    from pathlib import Path

    assert set(commands) >= DOCUMENTED
    usage = Path(__file__).resolve().parents[3] / "docs" / "usage.md"
    if not usage.exists():
        pytest.skip("docs/ not in this checkout")
    table = usage.read_text(encoding="utf-8").split("## The CLI vocabulary", 1)[1].split("\n## ", 1)[0]
    missing = [name for name in commands if f"`astra {name}`" not in table]
    assert not missing, f"commands missing from docs/usage.md's vocabulary table: {missing}"


def test_json_prints_and_output_writes(commands):
    problems = []
    for name, parser in commands.items():
        by_flag = {flag: action for action in _options(parser) for flag in action.option_strings}
        json_flag = by_flag.get("--json")
        if json_flag is not None and _takes_value(json_flag):
            problems.append(f"astra {name}: --json takes a value (it must print JSON on stdout; -o/--output writes)")
        short, long = by_flag.get("-o"), by_flag.get("--output")
        if (short is None) != (long is None) or (short is not None and short is not long):
            problems.append(f"astra {name}: -o and --output must be one option")
        if long is not None and not _takes_value(long):
            problems.append(f"astra {name}: -o/--output must take the PATH it writes")
        for action in _options(parser):
            names = " ".join(action.option_strings)
            writes_json = re.search(r"\bwrit\w*\b.*\bJSON\b|\bJSON\b.*\bto PATH\b", action.help or "")
            named_json = any("json" in flag and flag != "--json" for flag in action.option_strings)
            if (named_json or (writes_json and _takes_value(action))) and action is not long:
                problems.append(f"astra {name}: {names} writes JSON: make it -o/--output (an alias is fine)")
    assert not problems, "\n".join(problems)


def test_model_platform_and_executor_flags_are_the_shared_ones(commands):
    llm = commands["workload llm"]
    presets = next(a.choices for a in _options(llm) if "--preset" in a.option_strings)
    problems = []
    for name, parser in commands.items():
        by_flag = {flag: action for action in _options(parser) for flag in action.option_strings}
        if "--preset" in by_flag or "--model" in by_flag:
            preset, model = by_flag.get("--preset"), by_flag.get("--model")
            if preset is None or model is None or preset.choices != presets or model.metavar != "CONFIG":
                problems.append(f"astra {name}: --preset/--model are not add_model_flags'")
        if "--platform" in by_flag and by_flag["--platform"].metavar != "NAME":
            problems.append(f"astra {name}: --platform is not add_platform_flags'")
        executors = {"--jobs", "--dask", "--executor"} & set(by_flag)
        if executors and executors != {"--jobs", "--dask", "--executor"}:
            problems.append(f"astra {name}: executor flags {sorted(executors)} without the others (add_executor_flags)")
    assert not problems, "\n".join(problems)


def test_list_valued_layout_flags_only_in_commands_that_search(commands):
    found = [f"astra {name} {flag}" for name, parser in commands.items() if name not in SEARCHING
             for action in _options(parser) for flag in action.option_strings
             if flag in LAYOUT and "," in str(action.metavar or "")]
    assert not found, found


@pytest.mark.parametrize("argv,canonical", [
    (["serve-search", "--help"], "astra search --serve"),
    (["systolic", "--help"], "astra compute systolic"),
])
def test_deprecated_aliases_say_so_in_their_help(argv, canonical, capsys):
    with pytest.raises(SystemExit):
        main(argv)
    assert f"Deprecated alias of {canonical}" in " ".join(capsys.readouterr().out.split())
