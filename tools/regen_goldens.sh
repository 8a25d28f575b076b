#!/bin/sh
# Regenerates the golden result files the CLI tests compare against. Run it only when a change to
# the simulator's results is intended, and review `git diff tests/data/golden` before committing.
# Usage: sh tools/regen_goldens.sh BUILD_DIR
set -eu
build=${1:?usage: sh tools/regen_goldens.sh BUILD_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/sim/moesim" run "$root/tests/data/golden/small-study.yaml" -o "$tmp/out" -q > /dev/null
cp "$tmp/out/results.csv" "$root/tests/data/golden/small-study.results.csv"
python3 - "$tmp/out/results.json" "$root/tests/data/golden/small-study.results.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
doc.pop("run_info", None)           # date, host and wall time change from run to run
doc["context"].pop("git_revision", None)
doc["context"].pop("build_type", None)
json.dump(doc, open(sys.argv[2], "w"), indent=2, sort_keys=True)
open(sys.argv[2], "a").write("\n")
PY
echo "regenerated tests/data/golden/small-study.results.{csv,json}"
