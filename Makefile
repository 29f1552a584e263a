# NPU co-design kit. Every target sets up .venv by itself; users never edit PATH.
#   make test      whole pytest suite (unit, Amaranth simulator, cocotb + Verilator), parallel,
#                  but for the tests on the large sim engine's RTL (make test-sim-device)
#   make sim       the main job: digits CNN + zoo models on the engine RTL vs executor and
#                  float, then the cocotb regression of every RTL block; one summary
#                  (SIM_ARGS="--models mlp --no-blocks --report build/report" etc.)
#   make verilog   Verilog of every top-level component into build/verilog/
#   make lint      ruff + verilator --lint-only -Wall on the generated Verilog
#   make bench     benchmark scripts (tests/bench/bench_*.py), numbers on stdout
#   make fuzz      long fuzzing runs of every reader (tests/fuzz/fuzz_*.py)
#   make bitstream ULX3S-85F bitstream of the board top into build/fpga/ulx3s-85f/ (docs/board.md)
#   make program   load it with openFPGALoader (where installed)
#   make mutate    mutation testing with mutmut (docs/testing.md; MODULES=..., BUDGET=min)
#   make clean     remove build/ and caches (keeps .venv; `make distclean` removes it too)

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
JOBS   ?= $(shell nproc 2>/dev/null || echo 2)
FUZZ_SECONDS ?= 300

.PHONY: all venv test test-sim-device sim verilog lint bench fuzz mutate clean distclean bitstream program

all: test

# Re-install whenever pyproject.toml changes.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,torch]'
	@touch $(STAMP)

venv: $(STAMP)

# Benchmarks also synthesise (YoWASP yosys/nextpnr from the fpga extra).
FPGA_STAMP := $(VENV)/.installed-fpga
$(FPGA_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,torch,fpga,bench]'
	@touch $(FPGA_STAMP)

test: $(STAMP)
	$(PY) -m pytest -n $(JOBS) --dist loadgroup -q --durations=15 -m "not sim_device"

# The tests on the large sim engine's RTL (marker sim_device; `make sim` runs that RTL too).
test-sim-device: $(STAMP)
	$(PY) -m pytest -n $(JOBS) --dist loadgroup -q --durations=15 -m sim_device

SIM_ARGS ?=
sim: $(STAMP)
	$(PY) -m npu sim $(SIM_ARGS)

verilog: $(STAMP)
	$(PY) -m npu verilog -o build/verilog

lint: $(STAMP) verilog
	$(PY) -m ruff check .
	$(PY) -m npu lint-verilog build/verilog

bench: $(FPGA_STAMP)
	@set -e; for s in tests/bench/bench_*.py; do \
	  [ -e "$$s" ] || continue; echo "== $$s"; $(PY) "$$s"; done

fuzz: $(STAMP)
	@set -e; for s in tests/fuzz/fuzz_*.py; do \
	  [ -e "$$s" ] || continue; echo "== $$s"; $(PY) "$$s" --seconds $(FUZZ_SECONDS); done

# The board build (npu.board.build): PLL_MHZ (engine clock; default npu.board.top.PLL_MHZ),
# BOARD_DEVICE (tiny | small | sim | none), BOARD_SEED, BOARD_PLACER (static | heap),
# BOARD_ROUTER (router2 | router1), BOARD_DENSITY (heap placer density), MEMORY (bytes),
# BOARD_MAX_FANOUT (copy flip-flops driving more cell inputs than this; off by default),
# BOARD_TIMEOUT (seconds per tool run; default npu.board.build.TOOL_TIMEOUT, 0: no limit).
# BOARD_SEEDS="2 3 4" synthesises once and places and routes once per seed (BOARD_JOBS at
# a time) into $(BITSTREAM_DIR)/seed<N>/, with Fmax min / median / max in seeds.txt.
BITSTREAM_DIR ?= build/fpga/ulx3s-85f
PLL_MHZ ?=
BOARD_DEVICE ?= tiny
BOARD_SEED ?= 2
BOARD_ROUTER ?= router2
BOARD_DENSITY ?=
BOARD_MAX_FANOUT ?=
BOARD_PLACER ?= static
BOARD_SEEDS ?=
BOARD_JOBS ?= 1
BOARD_TIMEOUT ?=
bitstream: $(FPGA_STAMP)
	$(PY) -m npu.board.build -o $(BITSTREAM_DIR) --device $(BOARD_DEVICE) $(if $(PLL_MHZ),--pll-mhz $(PLL_MHZ)) \
	  $(if $(BOARD_SEEDS),--seeds $(BOARD_SEEDS) --jobs $(BOARD_JOBS),--seed $(BOARD_SEED)) --placer $(BOARD_PLACER) --router $(BOARD_ROUTER) $(if $(MEMORY),--memory $(MEMORY)) \
	  $(if $(BOARD_DENSITY),--density $(BOARD_DENSITY)) $(if $(BOARD_TIMEOUT),--timeout $(BOARD_TIMEOUT)) \
	  $(if $(BOARD_MAX_FANOUT),--max-fanout $(BOARD_MAX_FANOUT))

program:
	@test -f $(BITSTREAM_DIR)/board_top.bit || { \
	  echo "make program: no $(BITSTREAM_DIR)/board_top.bit; run make bitstream first"; exit 1; }
	@command -v openFPGALoader >/dev/null || { \
	  echo "make program: openFPGALoader is not installed (Debian: apt install openfpgaloader);"; \
	  echo "  load $(BITSTREAM_DIR)/board_top.bit with any ECP5 programmer"; exit 1; }
	openFPGALoader --board ulx3s $(BITSTREAM_DIR)/board_top.bit

# Mutation testing: mutmut from the mutate extra; results cached in build/mutate/.
MUTATE_STAMP := $(VENV)/.installed-mutate
$(MUTATE_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,torch,mutate]'
	@touch $(MUTATE_STAMP)

MODULES ?=
BUDGET ?=
mutate: $(MUTATE_STAMP)
	$(PY) tests/mutation/mutate.py --jobs $(JOBS) $(if $(BUDGET),--budget $(BUDGET)) $(MODULES)

clean:
	rm -rf build sim_build .pytest_cache .ruff_cache .hypothesis
	find . -name __pycache__ -type d -prune -not -path './$(VENV)/*' -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
