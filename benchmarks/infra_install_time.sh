#!/usr/bin/env bash
# Install time and size of the infra extras, each in a fresh virtualenv with no pip cache, so the
# lead can decide which cloud SDKs CI installs. Prints one line per extra.
# Usage: bash benchmarks/infra_install_time.sh [python3.11]
set -euo pipefail
PY=${1:-python3.11}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# Package sets read from pyproject.toml so this measures what `pip install -e .[extra]` pulls.
extras() {
  "$PY" - "$ROOT/pyproject.toml" "$1" <<'PYEOF'
import sys, tomllib
data = tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]
print(" ".join(f"'{d}'" for d in data[sys.argv[2]]))
PYEOF
}
printf '%-10s %8s %10s  %s\n' extra seconds venv_MiB packages
for extra in infra infra-eks infra-gke infra-aks; do
  "$PY" -m venv "$WORK/$extra"
  "$WORK/$extra/bin/pip" install -q --upgrade pip >/dev/null 2>&1
  base=$(du -sm "$WORK/$extra" | cut -f1)
  pkgs=$(extras infra)
  [ "$extra" != infra ] && pkgs="$pkgs $(extras "$extra")"
  start=$(date +%s.%N)
  eval "\"$WORK/$extra/bin/pip\" install -q --no-cache-dir $pkgs" >/dev/null 2>&1
  end=$(date +%s.%N)
  size=$(( $(du -sm "$WORK/$extra" | cut -f1) - base ))
  vers=$("$WORK/$extra/bin/pip" list 2>/dev/null | awk '/^pulumi/ {printf "%s=%s ", $1, $2}')
  printf '%-10s %8.1f %10d  %s\n' "$extra" "$(echo "$end - $start" | bc)" "$size" "$vers"
  rm -rf "$WORK/$extra"
done
