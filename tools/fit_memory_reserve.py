"""Fit the caching allocator's reserve (``memory_terms.RESERVE_FRACTION``): max_memory_reserved over
max_memory_allocated, less one, in training.

torchtitan publishes two runs that differ only in the number of FSDP ranks (docs/performance.md at commit
eaea6f6a, Tables 1 and 3: Llama 3.1 8B, local batch 2, selective op AC, no torch.compile; 8 GPUs: 82.4 GiB, 128
GPUs: 67.0 GiB reserved). Their activations, logits and buffers are the same; what differs is the sharded model
state, which the estimate knows exactly. So the reserve share is the measured difference over the estimated
allocated difference, less one -- one number from two published measurements, none of the estimate's other terms
tuned. Run::

    .venv/bin/python tools/fit_memory_reserve.py        # prints the fraction to put in memory_terms.py
"""

from __future__ import annotations

import os
import sys

import yaml

CASES = os.path.join(os.path.dirname(__file__), "..", "plugins", "validation", "src", "astra_validation", "cases",
                     "memory.yaml")
PAIR = ("torchtitan-llama3.1-8b-fsdp8-sac-bs2", "torchtitan-llama3.1-8b-fsdp128-sac-bs2")


def fit(cases_path=CASES) -> float:
    """The reserve fraction the pair of cases gives (rounded to 3 decimals)."""
    from astra_workload_generators.llm import LlmSpec, peak_memory

    cases = {c["name"]: c for c in yaml.safe_load(open(cases_path))["cases"]}
    allocated, measured = [], []
    for name in PAIR:
        case = cases[name]
        dims, cfg = LlmSpec.from_argv(case["workload"]).resolve(on_warning=lambda line: None)
        allocated.append(peak_memory(dims, cfg).allocated_bytes)
        measured.append(case["measured"]["peak_bytes"])
    return round((measured[0] - measured[1]) / (allocated[0] - allocated[1]) - 1, 3)


if __name__ == "__main__":
    print(f"RESERVE_FRACTION = {fit(sys.argv[1] if len(sys.argv) > 1 else CASES)}")
