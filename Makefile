# Set-up and everyday commands. `make run` and `make test` work on a fresh machine.
# Python 3.12 where the machine has it (jax 0.12, the pinned compiler, needs it), else python3.
PYTHON ?= $(shell for p in python3.12 $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12); do \
	$$p -c pass 2>/dev/null && { echo $$p; exit; }; done; echo python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SHARED ?= ../shared

.PHONY: run test test-all fuzz cts clean

$(STAMP): pyproject.toml setup.py constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test,bench,plot,fleet,s3,ray]'
	# bytecode now, as a wheel install writes it: an app's start does not compile our modules
	$(PY) -m compileall -q src > /dev/null
	touch $(STAMP)

run: $(STAMP)
	$(PY) examples/main_job.py

# The suite, the conformance corpus on the reference driver behind `nnapi serve` (the command starts
# and stops the service), and the certification kit (--quick) on every driver we ship. The test files
# that measure no time run on two workers (the suite is mostly single-threaded Python: one core each);
# those marked `timing` run after them, alone, so nothing else loads the machine while they measure.
# The corpus and the kits measure no time either: they run two at a time (`certify`), the longest first.
test: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadgroup -m "not timing"
	$(PY) -m pytest -m timing
	$(MAKE) --no-print-directory -j2 --output-sync=target certify

VTS := vts-openvino vts-xla vts-reference
CERTIFY := cts-reference-served $(VTS)
.PHONY: certify $(CERTIFY)
certify: $(CERTIFY)

cts-reference-served: $(STAMP)
	$(VENV)/bin/nnapi cts $(SHARED)/cts --device reference --service --json $(VENV)/cts-reference.json

# (a static pattern rule: make looks for no implicit rule of a phony target)
$(VTS): vts-%: $(STAMP)
	$(VENV)/bin/nnapi vts --device $* --quick --vectors $(SHARED)/cts --json $(VENV)/vts-$*.json

# Everything: the corpus on every driver alone (xla behind its service) and on all devices, partitioned,
# and the full certification kit on every driver.
test-all: test
	$(VENV)/bin/nnapi cts $(SHARED)/cts --device xla --service --json $(VENV)/cts-xla.json
	$(VENV)/bin/nnapi cts $(SHARED)/cts --device openvino --json $(VENV)/cts-openvino.json
	$(VENV)/bin/nnapi cts $(SHARED)/cts --json $(VENV)/cts-all.json
	for d in reference xla openvino; do \
		$(VENV)/bin/nnapi vts --device $$d --vectors $(SHARED)/cts --json $(VENV)/vts-$$d-full.json || exit 1; \
	done

# The fuzz tests with many more examples (minutes): random models, requests, conformance models with
# mutated parameters, .tflite bytes, HAL model bytes, memory pools and domains; then random valid models
# on every driver against the reference (3000 per driver; -rP prints the counts and operations covered).
fuzz: $(STAMP)
	NNAPI_FUZZ_EXAMPLES=$${NNAPI_FUZZ_EXAMPLES:-2000} $(PY) -m pytest -q -W ignore::RuntimeWarning \
		tests/test_fuzz.py tests/test_tflite_fuzz.py tests/test_memory_fuzz.py tests/test_serialize.py
	NNAPI_FUZZ_EXAMPLES=$${NNAPI_FUZZ_EXAMPLES:-3000} $(PY) -m pytest -q -rP -W ignore::RuntimeWarning \
		tests/test_differential_fuzz.py

clean:
	rm -rf $(VENV) build src/*.egg-info
