#!/usr/bin/env bash
# Runs the end-to-end test binaries of strata-e2e on the shared plane (E2E_KUBECONFIG), several
# binaries at once: most of their time is spent waiting on the cluster, not on the two cores.
# Each test binary keeps its own `--test-threads=2`; its output is printed whole when it ends.
# Binaries named in E2E_ALONE run afterwards, one at a time: the load and fault scenarios, whose
# checks read timings or memory under a load they make themselves, and the in-cluster tier,
# whose chart release registers a webhook for every AddonsLayer in the cluster (the chart as
# users install it: no selector keeping it off other tests' layers). Exits non-zero when any
# binary failed, naming them.
#
#   scripts/run-e2e.sh [PARALLEL]     (default 3; 1 runs every binary in turn)
set -euo pipefail
parallel="${1:-3}"
cargo="${CARGO:-cargo}"
alone="${E2E_ALONE:-chaos memory plane_restart webhook_robustness in_cluster}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

# The test executables cargo built, by target name (tests/<name>.rs, the lib, the bins).
"$cargo" test -p strata-e2e --tests --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    # Every test harness: the integration tests, and the unit tests of the lib and the bins.
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["executable"])
' >"$out/binaries"
[[ -s $out/binaries ]] || { echo "run-e2e: no test binaries (cargo test --no-run failed?)" >&2; exit 1; }

# The longest first, so the run does not end waiting on one long binary (seconds from the last
# measured run, docs/testing.md); unknown ones last.
order="layer_guarantees rollout sources webhook render tenancy layers dropin services drift wait demo observability webhook_files install kraan traces prepare_downscale proxy git_source listen chart alerts smoke"

run_one() { # name executable
  local name="$1" exe="$2" started=$SECONDS status=0
  (cd "$(dirname "$0")/../e2e" && CARGO_MANIFEST_DIR="$PWD" "$exe" --test-threads=2) >"$out/$name.log" 2>&1 || status=$?
  {
    echo "==> $name ($((SECONDS - started)) s, exit $status)"
    cat "$out/$name.log"
  } >&2
  [[ $status == 0 ]] || echo "$name" >>"$out/failed"
}

declare -A exe
while read -r name path; do exe[$name]="$path"; done <"$out/binaries"
queue=()
for name in $order; do [[ -n ${exe[$name]:-} && " $alone " != *" $name "* ]] && queue+=("$name"); done
for name in "${!exe[@]}"; do
  [[ " $order $alone " == *" $name "* ]] || queue+=("$name")
done

running=0
for name in "${queue[@]}"; do
  run_one "$name" "${exe[$name]}" &
  running=$((running + 1))
  if (( running >= parallel )); then wait -n || true; running=$((running - 1)); fi
done
wait
for name in $alone; do
  [[ -n ${exe[$name]:-} ]] && run_one "$name" "${exe[$name]}"
done

if [[ -s $out/failed ]]; then
  echo "run-e2e: failed: $(tr '\n' ' ' <"$out/failed")" >&2
  exit 1
fi
echo "run-e2e: every test binary passed" >&2
