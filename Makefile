# mitmchaos: `make demo` runs the key-free demo, `make test` the test suite. Both set up
# everything they need first (venv, Podman, images) and are safe to run again.

VENV    := .venv
BIN     := $(VENV)/bin
PY      := $(BIN)/python
STAMP   := $(VENV)/.installed-stamp

# Every shipped plan is a target, run in a scratch project: `make offline-registry-down`,
# `make registry-down` (needs your key and agent), `make claude-code-429`, ...
PLANS   := $(basename $(notdir $(wildcard plans/*.yaml)))
# And every shipped suite and sweep: `make suite-offline-single-points`, `make sweep-offline-retry-budget`.
SUITES  := $(addprefix suite-,$(basename $(notdir $(wildcard plans/suites/*.yaml))))
SWEEPS  := $(addprefix sweep-,$(basename $(notdir $(wildcard plans/sweeps/*.yaml))))

.PHONY: install host images browser test lint docs clean demo $(PLANS) $(SUITES) $(SWEEPS)

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $$(scripts/find-python) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $@

# Podman, runc, netavark, debootstrap and the containers.conf drop-in (needs root once).
host:
	sandbox/host-setup.sh

# The sandbox images, localhost/mitmchaos/sandbox:<version>[-node] (cached; about 2 min the first time).
images: install host
	$(BIN)/mitmchaos images

# The key-free demo (about 2 min once the image exists): an offline experiment against the
# careful and the reckless scripted model, scores side by side; fails unless careful wins.
demo: install host
	$(BIN)/mitmchaos images --no-node
	$(BIN)/mitmchaos demo

# Images a plan names (the default, -node, claude-code, codex) are built on first use.
$(PLANS): install host
	$(BIN)/mitmchaos example plans/$@.yaml

$(SUITES): install host
	$(BIN)/mitmchaos suite --scratch plans/suites/$(@:suite-%=%).yaml

$(SWEEPS): install host
	$(BIN)/mitmchaos sweep --scratch plans/sweeps/$(@:sweep-%=%).yaml

# Headless Chromium, for the test that renders the HTML report (needs root once to install).
browser:
	@command -v chromium >/dev/null 2>&1 || { test "$$(id -u)" = 0 && apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	  echo "browser: cannot install chromium; the HTML screenshot test will skip" >&2

test: install host images browser
	$(BIN)/pytest $(PYTEST_ARGS)

lint: install
	$(BIN)/mitmchaos validate plans/*.yaml
	for f in plans/suites/*.yaml; do $(BIN)/mitmchaos suite --check $$f || exit 1; done
	for f in plans/sweeps/*.yaml; do $(BIN)/mitmchaos sweep --check $$f || exit 1; done
	$(BIN)/mitmchaos docs --check README.md
	$(BIN)/python -m compileall -q addons runner tests

# Benchmarks (a few minutes): bench/results/latest.md and latest.json. Needs Podman (`make host`).
bench: install
	$(PY) -m bench.run $(BENCH_ARGS)

# Regenerate the README's fault catalog and probe reference from the registries.
docs: install
	$(BIN)/mitmchaos docs README.md

clean:
	rm -rf $(VENV) build dist *.egg-info
