# Two entry points on a fresh machine: `make run` (pretrain + export) and `make test`.
# Each creates .venv/ and installs what it needs; re-runs only install what changed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip install --quiet --disable-pip-version-check

RUNTIME := $(VENV)/.runtime-installed
TESTING := $(VENV)/.test-installed

.PHONY: run test benchmark clean

$(RUNTIME): setup.py requirements/base.txt requirements/protobuf.txt requirements/corpus.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) -r requirements/base.txt
	$(PIP) --no-deps -r requirements/protobuf.txt
	$(PIP) --no-deps -r requirements/corpus.txt
	$(PIP) --no-deps -e .
	touch $@

$(TESTING): $(RUNTIME) requirements/test.txt requirements/test-assets.txt
	$(PIP) -r requirements/test.txt
	$(PIP) --no-deps -r requirements/test-assets.txt
	touch $@

# Pretrain BERT-Tiny on the bundled Shakespeare corpus, then export a SavedModel
# to savedmodels/bert-tiny-shakespeare/ (run folder: runs/bert-tiny-shakespeare/).
# --resume: an interrupted run continues from its newest checkpoint; a finished one
# is only re-exported.
run: $(RUNTIME)
	$(BIN)/bertology pretrain --model bert --preset bert-tiny --out runs/bert-tiny-shakespeare --resume

# Two pytest workers (one per core of the CI machine), each taking whole test files so that a file's
# module fixtures are built once.
test: $(TESTING)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

benchmark: $(TESTING)
	$(BIN)/python -m benchmarks.bench_mlm

clean:
	rm -rf $(VENV) runs savedmodels/*/
