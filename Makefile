# The two commands of the README do their own set-up: `make demo`, `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The demos install only what they run (the `gateway` extra; `litellm` for GATEWAY=litellm): not the
# test tools, the fuzzer and the linters. The full install above includes both, so it marks them too.
DEMO_STAMP := $(VENV)/.installed-demo
LITELLM_STAMP := $(VENV)/.installed-litellm
SOURCES := pyproject.toml native/Cargo.toml native/Cargo.lock native/src/lib.rs

.PHONY: demo demo-gateway test lint chromium promtool bench chaos chaos-busy clean

# rustup's cargo, where it is installed, before any other (worker.plain_chunk is compiled by cargo).
export PATH := $(HOME)/.cargo/bin:$(PATH)

# $(call install,EXTRAS): the project, editable, with these extras, in the venv (created if needed).
install = bash scripts/ensure-crates \
	&& { test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV); } \
	&& $(BIN)/pip install -q --upgrade pip \
	&& $(BIN)/pip install -q -e '.[$(1)]'
comma := ,

$(STAMP): $(SOURCES)
	$(call install,test)
	@touch $(STAMP) $(DEMO_STAMP) $(LITELLM_STAMP)

# Nothing to install when the full install is there and newer than the sources.
full_install_current = test -f $(STAMP) && test -z "$$(find $(SOURCES) -newer $(STAMP))"

$(DEMO_STAMP): $(SOURCES)
	@$(full_install_current) || { $(call install,gateway); }
	@touch $(DEMO_STAMP)

$(LITELLM_STAMP): $(SOURCES)
	@$(full_install_current) || { $(call install,gateway$(comma)litellm); }
	@touch $(DEMO_STAMP) $(LITELLM_STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

# Debian's chromium, which the HTML report test renders in: installed when missing and we are root,
# otherwise a one-line message with the command to run; instant when it is there.
chromium:
	@bash scripts/ensure-chromium

# Debian's prometheus package, whose promtool checks the alert rules (deploy/monitoring): the same way.
promtool:
	@bash scripts/ensure-promtool

# The benchmark smoke (every row at its small size, ~150 s of one core) runs with `make bench`,
# not here: `make test` stays under ten minutes.
test: lint chromium promtool
	$(BIN)/pytest -n 2 --dist worksteal -p no:cacheprovider -m "not bench_smoke"

demo: $(DEMO_STAMP)
	$(BIN)/python -m devtools.demo

# The real gateway path instead of the simulator: GATEWAY=asgi (the middleware's example gateway)
# or GATEWAY=litellm (the LiteLLM proxy with the billing hook).
GATEWAY ?= asgi
demo-gateway: $(if $(filter litellm,$(GATEWAY)),$(LITELLM_STAMP),$(DEMO_STAMP))
	$(BIN)/python -m devtools.demo_gateway --gateway $(GATEWAY)

# Fault injection and hostile input at full size (20,000 calls per fault, 100,000 fuzz inputs);
# `make test` runs the same tests at their short size.
chaos: $(STAMP)
	$(BIN)/pytest -p no:cacheprovider tests/chaos -m chaos --chaos-full

# The same on a busy machine: a CPU hog per core and one more worker process in every fault run.
chaos-busy: $(STAMP)
	$(BIN)/pytest -p no:cacheprovider tests/chaos/test_faults.py -m chaos --chaos-full --chaos-busy

# First every row at its smoke size (a broken row fails in two minutes, not thirty), then the suite.
bench: $(STAMP)
	$(BIN)/pytest -n 2 -p no:cacheprovider -m bench_smoke tests/benchmarks
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) var .pytest_cache .hypothesis
