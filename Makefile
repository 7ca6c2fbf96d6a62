# Set-up and everyday commands. `make run` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SHARED ?= ../shared

.PHONY: run test test-all fuzz cts clean

$(STAMP): pyproject.toml setup.py constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test,bench,plot]'
	touch $(STAMP)

run: $(STAMP)
	$(PY) examples/main_job.py

test: $(STAMP)
	$(PY) -m pytest
	$(VENV)/bin/nnapi cts $(SHARED)/cts --device reference --json $(VENV)/cts-reference.json

# Everything: the whole corpus also on the XLA driver alone and on all devices, partitioned.
test-all: test
	$(VENV)/bin/nnapi cts $(SHARED)/cts --device xla --json $(VENV)/cts-xla.json
	$(VENV)/bin/nnapi cts $(SHARED)/cts --json $(VENV)/cts-all.json

# The fuzz tests with many more examples (minutes): random models, requests, conformance models with
# mutated parameters, .tflite bytes, HAL model bytes, memory pools and domains.
fuzz: $(STAMP)
	NNAPI_FUZZ_EXAMPLES=$${NNAPI_FUZZ_EXAMPLES:-2000} $(PY) -m pytest -q -W ignore::RuntimeWarning \
		tests/test_fuzz.py tests/test_tflite_fuzz.py tests/test_memory_fuzz.py tests/test_serialize.py

clean:
	rm -rf $(VENV) build src/*.egg-info
