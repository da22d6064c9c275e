# Two commands that work on a fresh machine with Python 3.11: `make demo` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
DEMO_DATE ?= 2013-02-01

# Airflow runs from this checkout: its home, DAGs and small worker pool (a 2-core machine).
export AIRFLOW_HOME := $(CURDIR)/.airflow
export AIRFLOW__CORE__DAGS_FOLDER := $(CURDIR)/dags
export AIRFLOW__CORE__LOAD_EXAMPLES := False
export AIRFLOW__CORE__PARALLELISM := 4
export GX_ANALYTICS_ENABLED := False

.PHONY: demo test lint types unit services clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/airflow db migrate >/dev/null
	$(BIN)/costaware budget set --scope project=flight-delays --period month --cap-usd 25
	$(BIN)/airflow dags test cost_aware_retrain $(DEMO_DATE) > $(AIRFLOW_HOME)/demo-run.log 2>&1 \
		|| (tail -n 60 $(AIRFLOW_HOME)/demo-run.log; exit 1)
	@grep -oE "(replaying 2013|Reserved \$$|candidate AUC).*" $(AIRFLOW_HOME)/demo-run.log | sed -E 's/ \[airflow.*$$//' || true
	@echo
	$(BIN)/costaware report --dag-id cost_aware_retrain --last-run
	@echo
	$(BIN)/costaware budget show --scope project=flight-delays

services:
	bash scripts/ensure_services.sh

lint: $(BIN)/.installed
	$(BIN)/ruff check src tests dags benchmarks
	$(BIN)/ruff format --check src tests dags benchmarks

types: $(BIN)/.installed
	$(BIN)/mypy

unit: $(BIN)/.installed services
	$(BIN)/pytest

test: lint types unit

clean:
	rm -rf $(VENV) .airflow .airflow-test
