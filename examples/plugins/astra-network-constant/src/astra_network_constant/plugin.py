"""The plugin module: the entry point ``network_constant`` points here.

Three hook implementations:

* ``astra_register_network_backends`` registers the ``constant`` backend (the
  only one a network plugin needs);
* ``astra_add_run_options`` adds ``--constant-summary`` to ``astra run``;
* ``astra_run_finish`` prints one summary line to stderr at the end of a run
  that used the ``constant`` network, when ``--constant-summary`` or the
  environment variable ``ASTRA_NETWORK_CONSTANT_SUMMARY=1`` asks for it.
  It is quiet by default.
"""

import os
import sys

from astra_sim import hookimpl

from astra_network_constant.network import ConstantNetwork

#: Environment variable that turns the end-of-run summary line on.
SUMMARY_ENV = "ASTRA_NETWORK_CONSTANT_SUMMARY"


@hookimpl
def astra_register_network_backends(registry):
    registry.network_backend(
        "constant",
        ConstantNetwork.from_context,
        "every message takes latency_ns + ceil(size / bandwidth_bytes_per_ns) ns (example plugin)",
    )


@hookimpl
def astra_add_run_options(parser):
    parser.add_argument(
        "--constant-summary",
        action="store_true",
        default=False,
        help="(network_constant) print one summary line to stderr when a run on the constant network ends",
    )


def summary_enabled(options):
    """Whether the option or the environment variable asks for the summary line."""
    if options.get("constant_summary"):
        return True
    return os.environ.get(SUMMARY_ENV, "").strip().lower() in ("1", "true", "yes", "on")


@hookimpl
def astra_run_finish(run, report):
    network = run.network
    if not isinstance(network, ConstantNetwork) or not summary_enabled(run.options):
        return
    print(
        f"network_constant: {len(report.ranks)} NPUs, {report.stats.get('messages', 0)} messages, "
        f"latency {network.latency_ns} ns, {network.bandwidth_bytes_per_ns} bytes/ns; "
        f"max finish {report.max_finish_ns} ns",
        file=sys.stderr,
    )
