# astra-sim-py: set up, demo, test. Everything lives in .venv (created on demand).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PLUGINS := plugins/collectives_native plugins/folding plugins/workload_compact plugins/network_analytical plugins/memory_analytical plugins/network_congestion plugins/collectives_msccl plugins/workload_generators plugins/gpu_model plugins/compute_systolic plugins/validation plugins/executor_dask plugins/sweep plugins/plots plugins/network_ns3 plugins/serving plugins/analysis plugins/cluster plugins/energy
STAMP := $(VENV)/.installed

.PHONY: install demo test fuzz benchmark proto clean compiled

install: $(STAMP)

# Step 4 builds the 21 local projects with the hatchling of step 3 (--no-build-isolation): pip would otherwise make a
# throw-away environment and install hatchling into it twice per project (42 times; 129 s -> 47 s for the whole install).
# ns3 (the range plugins/network_ns3/pyproject.toml asks for) is installed in step 3 with pip's build isolation: with pip
# 26 its cppyy-backend and CPyCppyy sdists fail under --no-build-isolation (cppyy-cling, their build dependency, absent).
$(STAMP): pyproject.toml testing/pyproject.toml $(addsuffix /pyproject.toml,$(PLUGINS))
	@echo "make install [1/4]: a virtual environment in $(VENV)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "make install [2/4]: the newest pip"
	$(BIN)/python -m pip install -q --upgrade pip
	@echo "make install [3/4]: the build backend (hatchling, editables) and the test tools (pytest, pytest-xdist, hypothesis,"
	@echo "                    HolisticTraceAnalysis, mypy's mypyc)"
	$(BIN)/python -m pip install -q hatchling editables pytest pytest-xdist hypothesis holistictraceanalysis mypy
	@echo "                    and ns-3's cppyy, whose backend and CPyCppyy come as sources only: they build in pip's own"
	@echo "                    isolated environment (with cppyy-cling, their build dependency), which step 4 turns off (1-2 min)"
	$(BIN)/python -m pip install -q "ns3>=3.44,<3.45"
	@echo "make install [4/4]: the kernel and its $(words $(PLUGINS)) plugins with their dependencies (numpy, pandas, dask and"
	@echo "                    ns-3, about 1.4 GB installed: 3-5 minutes the first time; pip names each package)"
	$(BIN)/python -m pip install --progress-bar off --no-build-isolation -e . -e testing $(addprefix -e ,$(PLUGINS))
	touch $(STAMP)
	@echo "make install: done; the command is $(BIN)/astra (docs/first-day.md walks through a first day)"

demo: install
	$(BIN)/astra run \
		--workload-configuration examples/data_parallel/trace/dp \
		--system-configuration examples/data_parallel/system.json \
		--network-configuration examples/data_parallel/network.yml \
		--remote-memory-configuration examples/data_parallel/memory.json \
		-o demo.report.json

# Every suite, on one worker per core (pytest-xdist; at most 4), so CI's 2 cores both run tests. The few tests
# that time themselves leave room for a busy machine (they pass beside other jobs at a load of 10 and more).
test: install
	$(BIN)/python -m pytest -n auto --maxprocesses 4 --dist worksteal

# The event loop compiled with mypyc, opt-in (build/compiled; the pure kernel stays the default and the reference):
# PYTHONPATH=build/compiled .venv/bin/astra run ... loads it; tests/test_compiled_core.py checks it gives the same ns.
compiled: install
	$(BIN)/python tools/compile_core.py

# The fuzz tests (tests/test_fuzz_*.py) with 50 x the examples `make test` runs (about 225,000), random
# instead of reproducible; failures are printed with the input that caused them (keep it in tests/fuzz_corpus).
FUZZ_SCALE ?= 50
fuzz: install
	ASTRA_FUZZ_SCALE=$(FUZZ_SCALE) $(BIN)/python -m pytest -q -p no:cacheprovider tests/test_fuzz_chakra.py \
		tests/test_fuzz_configs.py tests/test_fuzz_workloads.py tests/test_fuzz_readers.py \
		plugins/folding/tests/test_fuzz_folding.py

benchmark: install
	$(BIN)/python benchmarks/bench_engine.py
	$(BIN)/python benchmarks/bench_scale.py all
	$(BIN)/python benchmarks/bench_ready_queue.py
	$(BIN)/python benchmarks/bench_serve.py
	$(BIN)/python benchmarks/bench_ns3.py

proto:
	scripts/gen_chakra_proto.sh

clean:
	rm -rf $(VENV) .pytest_cache demo.report.json build/compiled
