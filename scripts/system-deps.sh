#!/usr/bin/env bash
# Installs the Debian packages afr needs. Idempotent; does nothing when all are present.
#   python3-venv  the project's virtual environment
#   postgresql    the tests' throwaway PostgreSQL server for the worker's shared state store
#                 (tests/postgres.py runs initdb/pg_ctl from /usr/lib/postgresql/<v>/bin in a
#                 temporary directory; Debian's own "main" cluster is not used)
# and, when it can (as root, with apt reachable), what `make native` compiles the ingest
# modules with (ADR 52):
#   gcc           the C compiler
#   python3-dev   the Python headers, when $PYTHON (the venv's) has none (Debian's python3)
# Without them the modules run from source: a note, not a failure.
set -euo pipefail
need=()
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
if ! command -v initdb >/dev/null 2>&1 && ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
  need+=(postgresql)
fi
if ((${#need[@]})); then
  if [ "$(id -u)" != 0 ]; then
    echo "afr needs Debian packages: ${need[*]} (run as root or install them)" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
# Best effort: what is missing of these is installed when it can be, never a failure.
python="${PYTHON:-python3}"
want=()
command -v gcc >/dev/null 2>&1 || want+=(gcc)
"$python" -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null \
  || want+=(python3-dev)
if ((${#want[@]})); then
  if [ "$(id -u)" = 0 ] && { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${want[@]}"; } >/dev/null 2>&1; then
    :
  else
    echo "afr: without ${want[*]} the ingest modules run from source (slower; docs/building.md)" >&2
  fi
fi
