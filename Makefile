# The README's two set-up commands live here so CI and people run the same thing.
PY ?= python3
INSTALL = $(PY) -m pip install -q -c constraints/cpu.txt -e

.PHONY: demo test test-only lint sglang-env test-sglang vllm-env test-vllm server-env server-apt test-server consistency-matrix

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
	$(PY) -m ruff check kvdoctor tests scripts
	$(PY) -m ruff format --check kvdoctor tests scripts

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

## The --server vllm --engine vllm environment: .venv-vllm/ with the 2.13.0 CPU build of torch, the pinned
## set vLLM's KV-cache planning, mamba and connector modules import, vllm==0.33.0 without its CUDA-only
## dependencies, and kvdoctor itself (editable). About 3.1 GB and 3 minutes (warm pip cache) on 2 cores.
VLLM_VENV ?= .venv-vllm
VLLM_VERSION ?= 0.33.0
vllm-env: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed: constraints/vllm.txt pyproject.toml
	$(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --no-deps -r constraints/vllm.txt
	$(VLLM_VENV)/bin/python -m pip install -q --no-deps vllm==$(VLLM_VERSION)
	$(VLLM_VENV)/bin/python -m pip install -q --no-deps -e .
	touch $@

## The vLLM suite: vLLM's own spec classes, get_kv_cache_groups and connector classes, in .venv-vllm/.
test-vllm: vllm-env
	VLLM_TARGET_DEVICE=cpu $(VLLM_VENV)/bin/python -m pytest -q -p no:cacheprovider -m vllm tests/vllm

## The real-server environment (kvdoctor consistency): .venv-server/ with the engine set of
## constraints/sglang.txt (torch 2.14.1) plus what SGLang's HTTP server, Mooncake-over-TCP PD and the
## router import (constraints/sglang-server.txt), sglang==0.5.23 without its CUDA-only dependencies, and
## kvdoctor itself (editable). Mooncake's library links libibverbs even for TCP: the apt step installs it
## (skipped when the libraries are already there). About 6.7 GB.
SERVER_VENV ?= .venv-server
server-env: server-apt $(SERVER_VENV)/.installed

server-apt:
	@if ldconfig -p | grep -q libibverbs.so.1 && ldconfig -p | grep -q librdmacm.so.1; then \
		echo "libibverbs1 and librdmacm1 present"; \
	else \
		apt-get update && apt-get install -y libibverbs1 librdmacm1; \
	fi

$(SERVER_VENV)/.installed: constraints/sglang.txt constraints/sglang-server.txt pyproject.toml
	$(PY) -m venv $(SERVER_VENV)
	echo '*' > $(SERVER_VENV)/.gitignore
	$(SERVER_VENV)/bin/python -m pip install -q -r constraints/sglang.txt -r constraints/sglang-server.txt
	$(SERVER_VENV)/bin/python -m pip install -q --no-deps sglang==$(SGLANG_VERSION)
	$(SERVER_VENV)/bin/python -m pip install -q --no-deps -e .
	touch $@

## Real SGLang servers on this machine (tests marked `server`, in .venv-server/): minutes each. CI runs the
## chosen few (Llama PD green and red under drop-kv, LFM2 single green); `matrix` tests run in consistency-matrix.
test-server: server-env
	$(SERVER_VENV)/bin/python -m pytest -q -p no:cacheprovider -m "server and not matrix" tests/consistency

## Every model x topology x fault kvdoctor consistency runs on CPU (long; not part of CI): every real-server
## test (LFM2 PD with missing-mamba, LFM2 PD's issue-21 expected red), then Llama on one server.
CONSISTENCY_OUT ?= kvdoctor-out/consistency
consistency-matrix: server-env
	$(SERVER_VENV)/bin/python -m pytest -q -p no:cacheprovider -m server tests/consistency
	$(SERVER_VENV)/bin/kvdoctor consistency llama-3.1-8b --topology single --shrink --device cpu --output-dir $(CONSISTENCY_OUT)
