PYTHON ?= python3
PIP ?= $(PYTHON) -m pip

.PHONY: install install-test run test bench

install:
	$(PIP) install -q -e ".[plots]"

install-test:
	$(PIP) install -q -e ".[test,plots]"
	# the Chakra protobuf schema; --no-deps because its metadata pulls in JupyterLab, and it needs only protobuf
	$(PIP) install -q --no-deps "mlc-chakra==1.0.0"

# First Quickstart command: install, then synthesize All-Gather on a 4x4 mesh with the greedy.
run: install
	$(PYTHON) run.py solver=greedy topo=mesh4x4 hydra.run.dir=outputs/quickstart

# Second Quickstart command: install with test extras, then run the test suite.
test: install-test
	$(PYTHON) -m pytest -q -p no:cacheprovider tests

bench: install
	$(PYTHON) experiments/bench_greedy.py
