# The README's two set-up commands live here so CI and people run the same thing.
PY ?= python3
INSTALL = $(PY) -m pip install -q -c constraints/cpu.txt -e

.PHONY: demo test test-only lint sglang-env test-sglang

## Install, then run the main job on a built-in default (CPU, no GPU needed).
demo:
	$(INSTALL) .
	kvdoctor roundtrip inkling-small --kv-cache-dtype mxfp8 --disaggregation-mode decode --page-size 128 --device cpu

## Install with test extras, lint, and run the whole test suite.
test:
	$(INSTALL) '.[test]'
	$(MAKE) test-only

test-only: lint
	$(PY) -m pytest -q

lint:
	$(PY) -m ruff check kvdoctor kernels tests scripts

## The --engine sglang environment: .venv-sglang/ with torch 2.14.1 (as SGLang pins it), the pinned set
## SGLang's pool and scheduler modules import, sglang==0.5.23 without its CUDA-only dependencies, and
## kvdoctor itself (editable). About 6 GB and 4 minutes on a fresh machine.
SGLANG_VENV ?= .venv-sglang
SGLANG_VERSION ?= 0.5.23
sglang-env: $(SGLANG_VENV)/.installed

$(SGLANG_VENV)/.installed: constraints/sglang.txt pyproject.toml
	$(PY) -m venv $(SGLANG_VENV)
	$(SGLANG_VENV)/bin/python -m pip install -q -r constraints/sglang.txt
	$(SGLANG_VENV)/bin/python -m pip install -q --no-deps sglang==$(SGLANG_VERSION)
	$(SGLANG_VENV)/bin/python -m pip install -q --no-deps -e .
	touch $@

## The engine suite: SGLang's real classes and retraction code, in .venv-sglang/.
test-sglang: sglang-env
	TRITON_INTERPRET=1 $(SGLANG_VENV)/bin/python -m pytest -q -m sglang tests/engines
