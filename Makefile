# The README's two set-up commands live here so CI and people run the same thing.
PY ?= python3
INSTALL = $(PY) -m pip install -q -c constraints/cpu.txt -e

.PHONY: demo test test-only lint

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
