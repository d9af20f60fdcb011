PYTHON ?= python3
PIP ?= $(PYTHON) -m pip

.PHONY: install install-test run test bench

install:
	$(PIP) install -q -e ".[plots]"
	# compile the numba kernels once into numba's cache, so no run pays for it (see tacos_bench/runner/warmup.py)
	$(PYTHON) -m tacos_bench.runner.warmup

install-test:
	$(PIP) install -q -e ".[test,plots]"
	# the Chakra protobuf schema; --no-deps because its metadata pulls in JupyterLab, and it needs only protobuf
	$(PIP) install -q --no-deps "mlc-chakra==1.0.0"
	$(PYTHON) -m tacos_bench.runner.warmup

# First Quickstart command: install, then synthesize All-Gather on a 4x4 mesh with the greedy.
run: install
	$(PYTHON) run.py solver=greedy topo=mesh4x4 hydra.run.dir=outputs/quickstart

# Second Quickstart command: install with test extras, then run the test suite.
# the tests, the doctests of the package and the layer contracts, on two workers
test: install-test
	$(PYTHON) -m pytest -q -p no:cacheprovider -n 2 --doctest-modules tacos_bench solvers tests

bench: install
	$(PYTHON) experiments/bench_greedy.py
