# The two commands of the README. Everything else is set up by them.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
ARGS   ?=

.PHONY: demo test suite lint install clean faults

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[eval,test]'
	touch $@

install: $(VENV)/.installed

# Serve the shipped real graph on loopback, crawl it with the default ordering (push),
# IPR-DL1, BF and Scrapy's own scheduler.
demo: $(VENV)/.installed
	$(PY) -m ipr_crawl.cli demo $(ARGS)

# Lint and types, then the test suite (real redis-server, real HTTP server, real
# scrapy crawls) on JOBS pytest-xdist workers (JOBS=0: one process). The long tests
# are marked `slow` and left out; CI runs them: ARGS="-m 'slow or data'".
# ARGS go to pytest, e.g. ARGS="-m data" or ARGS=tests/store/test_store.py.
JOBS ?= 4
test: lint suite

# The suite alone, without lint (CI's second run).
suite: $(VENV)/.installed
	$(PY) -m pytest -q -p no:cacheprovider -n $(JOBS) --dist load $(ARGS)

# The fault-injection checker (tests/faults/test_nemesis.py): FAULT_SCHEDULES random
# fault schedules (seeds from IPR_FAULT_SEED), each a real shared crawl under kill -9 of
# crawlers and of Redis and cut connections, checked for lost pages and items afterwards.
# CI's slow stage runs 2 of them.
FAULT_SCHEDULES ?= 50
faults: $(VENV)/.installed
	IPR_FAULT_SCHEDULES=$(FAULT_SCHEDULES) $(PY) -m pytest -q -p no:cacheprovider -n 2 -m slow -s tests/faults $(ARGS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check ipr_crawl middlewares tests benchmarks
	$(VENV)/bin/mypy

clean:
	rm -rf demo-out .scrapy .hypothesis

# Scrapy 2.19's own crawl/engine/scheduler/closespider/command tests, plain and
# with the add-on on for every crawler (conformance/README.md); ~11 min, not part of `make test`.
.PHONY: conformance
conformance:
	$(PYTHON) conformance/run.py $(ARGS)
