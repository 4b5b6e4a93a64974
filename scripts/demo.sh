#!/usr/bin/env bash
# The main job: a real tool-calling conversation on the bundled SmolLM2 model, through Redis,
# a worker and the gateway. Sets up .venv first (scripts/setup.sh). Extra arguments go to
# `toolq demo` (e.g. --prompt "...").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
exec "$root/.venv/bin/toolq" demo "$@"
