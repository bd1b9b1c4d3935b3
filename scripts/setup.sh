#!/usr/bin/env bash
# README command (1): installs the Debian packages, builds pdkv and runs the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build/bin/pdkv demo
