#!/usr/bin/env bash
# Installs the Debian packages afr needs. Idempotent; does nothing when all are present.
#   python3-venv  the project's virtual environment
#   postgresql    the tests' throwaway PostgreSQL server for the worker's shared state store
#                 (tests/postgres.py runs initdb/pg_ctl from /usr/lib/postgresql/<v>/bin in a
#                 temporary directory; Debian's own "main" cluster is not used)
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
