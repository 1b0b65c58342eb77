# The two commands of the README. Everything else is set up by them.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
ARGS   ?=

.PHONY: demo test install clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed

# Serve the shipped real graph on loopback, crawl it with IPR-DL1 and with BF.
demo: $(VENV)/.installed
	$(PY) -m ipr_crawl.cli demo $(ARGS)

# The whole test suite (real redis-server, real HTTP server, real scrapy crawls).
test: $(VENV)/.installed
	$(PY) -m pytest -q -p no:cacheprovider $(ARGS)

clean:
	rm -rf demo-out .scrapy .hypothesis
