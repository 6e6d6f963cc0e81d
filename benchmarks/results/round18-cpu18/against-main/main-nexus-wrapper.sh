#!/bin/bash
# main 513594d's sources (a snapshot) with main's venv
export PYTHONPATH=/tmp/cpu18-main/src
exec /work/main/.venv/bin/python -m nexus_cli "$@"
