# Two entry points: `make demo` (a real campaign ending in a report) and `make test` (`make lint`, then pytest).
# Each bootstraps .venv on first use (Python 3.11; torch is the CPU build pip finds on disk).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo lint test bench protos lint-protos clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[all,dev]"
	# the airsim backend's client (pyproject's `airsim` extra): its 1.8.1 sdist imports msgpackrpc while it builds,
	# so msgpack-rpc-python goes in first and airsim without build isolation; --no-deps skips opencv-contrib-python,
	# which only airsim's image-file helpers use (docs/subjects/airsim.md)
	$(BIN)/pip install --quiet setuptools==84.2.1 msgpack-rpc-python==0.4.1
	$(BIN)/pip install --quiet --no-build-isolation --no-deps airsim==1.8.1
	touch $(STAMP)

# The Mario simulator's own environment (docs/subjects/mario.md): gym-super-mario-bros / nes-py need numpy < 2, the
# core pins numpy 2, so the pinned list goes in first and the project itself with --no-deps (its entry points make
# the mario backend a plug-in there). `gauntlet up` / the launcher start a simulator from it when it exists.
MARIO_VENV := .venv-mario
MARIO_STAMP := $(MARIO_VENV)/.installed

$(MARIO_STAMP): requirements/mario.txt pyproject.toml
	$(PYTHON) -m venv $(MARIO_VENV)
	$(MARIO_VENV)/bin/pip install --quiet --upgrade pip
	$(MARIO_VENV)/bin/pip install --quiet -r requirements/mario.txt
	$(MARIO_VENV)/bin/pip install --quiet --no-deps -e .
	touch $(MARIO_STAMP)

.venv-mario: $(MARIO_STAMP)

demo: $(STAMP)
	$(BIN)/gauntlet run examples/cartpole_random.yaml

# Style, types, service boundaries and import circles (docs/development/tooling.md); each tool reads its config from
# pyproject.toml, except tools/import_cycles.py, which reads every .py file of the tree.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python tools/import_cycles.py

test: lint
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/throughput.py

protos: $(STAMP)
	$(BIN)/python tools/gen_protos.py

.tools/node_modules/.bin/buf:
	npm install --silent --prefix .tools @bufbuild/buf

# buf lint, and buf breaking against the last released contracts (the committed image protos/baseline/*.binpb).
lint-protos: .tools/node_modules/.bin/buf
	cd protos && ../.tools/node_modules/.bin/buf lint
	.tools/node_modules/.bin/buf breaking protos --against protos/baseline/contracts-v1.0.0.binpb

clean:
	rm -rf $(VENV) $(MARIO_VENV) runs .pytest_cache
