#!/usr/bin/env bash
# The whole test suite, from a fresh checkout: makes .venv/ with the pinned packages (again only
# when a requirements file changed), then runs ruff and pytest (test files in parallel). Extra
# arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is needed; set PYTHON=python3.11 (or newer)")'
stamp=$(cat requirements.txt requirements-test.txt writing-trace-report-pages/requirements.txt | "$PY" -c 'import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())')
if [ ! -x .venv/bin/python ] || [ "$(cat .venv/.requirements-stamp 2>/dev/null)" != "$stamp" ]; then
  echo "tests/run.sh: installing the pinned packages into .venv/ (once)" >&2
  "$PY" -m venv .venv
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-test.txt
  echo "$stamp" > .venv/.requirements-stamp
fi
.venv/bin/ruff check --quiet .
# test files run in parallel, each file whole in one worker (its module fixtures built once):
# as many workers as cores, at most 4 (JAXTRACE_TEST_WORKERS sets it; 0 runs in this process)
workers=${JAXTRACE_TEST_WORKERS:-$("$PY" -c 'import os; print(min(4, len(os.sched_getaffinity(0))))')}
.venv/bin/python -m pytest -q tests -n "$workers" --dist loadfile "$@"
