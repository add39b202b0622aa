# The two commands a new user needs: `make demo` and `make test`.
# Each creates (or reuses) a local virtualenv in .venv and installs what it needs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: demo test test-quick lint bench venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) scripts/demo.py --root demo-data
	$(PY) scripts/demo_spark.py --root demo-data

# The suite mostly waits (child processes, JVM starts, fsync): three worker processes (pytest-xdist)
# overlap the waits. TEST_WORKERS=0 runs it in this one process (docs/DECISIONS.md D85, D93).
TEST_WORKERS ?= 3

test: $(STAMP)
	$(PY) -m pytest -q --durations=15 -n $(TEST_WORKERS) --dist worksteal

test-quick: $(STAMP)
	$(PY) -m pytest -q -m "not slow" -n $(TEST_WORKERS) --dist worksteal

lint: $(STAMP)
	$(PY) -m ruff check broker_core spark_pubsub tests benchmarks
	$(PY) -m mypy broker_core spark_pubsub

bench: $(STAMP)
	$(PY) benchmarks/bench_log.py

clean:
	rm -rf demo-data bench-data .pytest_cache .mypy_cache .ruff_cache
