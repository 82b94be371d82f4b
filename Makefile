# kmemscope: `make demo` and `make test` each work on a fresh Debian machine.
# They install what they need (Debian packages via apt, Python packages in .venv).

PYTHON      ?= python3
VENV        := .venv
BIN         := $(VENV)/bin
DEBIAN_PKGS := trace-cmd libtracecmd-dev libtraceevent-dev libtracefs-dev libzstd-dev zlib1g-dev \
               pkg-config gcc zstd python3-venv
EXAMPLE     := examples/kmem-compaction
DEMO_DIR    := out/demo

.PHONY: all setup native demo test bench fuzz dist clean

all: setup dist

setup: $(BIN)/kmemscope

# Debian packages: installed only when one is missing, so repeated runs are quick.
.debian-stamp:
	@missing=$$(for p in $(DEBIAN_PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:" $$missing; \
		SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
	@touch $@

NATIVE_SRC  := parsers/_tracedat.c $(wildcard parsers/native/*.c parsers/native/*.h)

# The editable install builds the extension in place, next to parsers/_tracedat.c.
$(BIN)/kmemscope: .debian-stamp setup.cfg setup.py pyproject.toml $(NATIVE_SRC)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[report,test]'
	@touch $@

# Rebuild the C extension (parsers/_tracedat.*.so, where the editable install
# keeps it) after editing its sources. Built aside and renamed into place, so a
# running kmemscope keeps its mapped copy intact.
native: .debian-stamp
	test -x $(BIN)/python || $(MAKE) setup
	$(BIN)/python setup.py -q build_ext --force --build-lib build/native --build-temp build/native-tmp
	so=$$(cd build/native/kmemscope/parsers && ls _tracedat*.so) && \
	cp build/native/kmemscope/parsers/$$so parsers/.$$so.new && mv -f parsers/.$$so.new parsers/$$so

# `kmemscope record` as one file for hosts that have only Python 3.8+ and trace-cmd.
dist: dist/kmemscope-record.pyz

dist/kmemscope-record.pyz: $(wildcard capture/*.py) kmemscope/__init__.py kmemscope/errors.py
	$(PYTHON) capture/build_pyz.py $@

demo: setup
	@rm -rf $(DEMO_DIR) && mkdir -p $(DEMO_DIR)
	$(BIN)/kmemscope parse $(EXAMPLE) -o $(DEMO_DIR)/dataset --label kernel=example
	@echo; echo "== runs, and events per type"
	$(BIN)/kmemscope info $(DEMO_DIR)/dataset
	@echo; echo "== the 10 most-allocated page frames"
	$(BIN)/kmemscope sql $(DEMO_DIR)/dataset "SELECT printf('0x%x', pfn) AS pfn, count(*) AS allocations, count(DISTINCT cpu) AS cpus FROM mm_page_alloc WHERE pfn <> 18446744073709551615 GROUP BY pfn ORDER BY allocations DESC, pfn LIMIT 10"
	@echo; echo "== allocations per order"
	$(BIN)/kmemscope sql $(DEMO_DIR)/dataset "SELECT \"order\", count(*) AS allocations, count(*) FILTER (WHERE pfn = 18446744073709551615) AS failed FROM mm_page_alloc GROUP BY 1 ORDER BY 1"
	$(BIN)/kmemscope report $(DEMO_DIR)/dataset -o $(DEMO_DIR)/report.html

test: setup dist
	$(BIN)/python -m pytest -q -rs tests

bench: setup
	$(BIN)/python benchmarks/parse_bench.py

# Ten minutes of `kmemscope parse` on damaged real traces, a table of outcomes
# (tests/fuzz_long.py); e.g. FUZZ_ARGS="--seconds 60 --seed 7".
fuzz: setup
	$(BIN)/python tests/fuzz_long.py $(FUZZ_ARGS)

clean:
	rm -rf build dist out *.egg-info .debian-stamp parsers/*.so
