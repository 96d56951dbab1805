#!/usr/bin/env bash
# Installs the Debian packages afr needs. Idempotent; does nothing when all are present.
set -euo pipefail
need=()
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
if ((${#need[@]})); then
  if [ "$(id -u)" != 0 ]; then
    echo "afr needs Debian packages: ${need[*]} (run as root or install them)" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
