#!/usr/bin/env bash
# The whole test suite: sets up .venv (scripts/setup.sh), then runs pytest against real Redis
# and the real bundled model. Extra arguments go to pytest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
cd "$root"
set +e
.venv/bin/python -m pytest -ra "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "test.sh: pytest collected no tests; that is a failure, not a pass" >&2
  exit 1
fi
exit "$rc"
