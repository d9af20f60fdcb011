PYTHON ?= python3
PIP ?= $(PYTHON) -m pip

.PHONY: install install-test run test bench warm

# the package, the plots and every export: the Chakra protobuf schema (chakra / astra-sim exports) comes with
# --no-deps because its metadata pulls in JupyterLab, and it needs only protobuf (OR-Tools brings it).
# No numba kernel is compiled here: each compiles on its first use, before the clock of that run starts
# (the summary line prints the cost once), and is cached next to the sources for every later run.
install:
	$(PIP) install -q -e ".[plots]"
	$(PIP) install -q --no-deps "mlc-chakra==1.0.0"

# compile every numba kernel into numba's cache now (about a minute on 2 cores) instead of on first use
warm:
	$(PYTHON) -m tacos_bench.runner.warmup

# the tests exercise every kernel: compile them once here rather than in each test worker
install-test:
	$(PIP) install -q -e ".[test,plots]"
	$(PIP) install -q --no-deps "mlc-chakra==1.0.0"
	$(PYTHON) -m tacos_bench.runner.warmup

# First Quickstart command: install, then synthesize All-Gather on a 4x4 mesh with the greedy.
run: install
	$(PYTHON) run.py solver=greedy topo=mesh4x4 hydra.run.dir=outputs/quickstart

# Second Quickstart command: install with test extras, then run the test suite.
# the tests, the doctests of the package and the layer contracts, on two workers
test: install-test
	$(PYTHON) -m pytest -q -p no:cacheprovider -n 2 --dist worksteal --doctest-modules tacos_bench solvers tests

bench: install
	$(PYTHON) experiments/bench_greedy.py
