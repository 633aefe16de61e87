#!/usr/bin/env bash
# Driver of the fail-fast benchmark, run by bench/run.sh under scripts/with-plane.sh: a
# Deployment whose pods cannot pull their image (the plane's strata-pod-cannot-start kwok
# stage), applied and waited on with `strata wait --strict` (default grace, 30 s), RUNS times;
# prints one JSON line with the seconds from the apply to the wait ending Failed.
set -euo pipefail
strata="${STRATA_RELEASE_BIN:?}"
runs="${RUNS:-3}"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
seconds=()
for i in $(seq 1 "$runs"); do
  ns="bench-failfast-$i-$RANDOM"
  "$KUBECTL" create namespace "$ns" >/dev/null
  cat > "$dir/web.yaml" <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: $ns}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web, strata.dev/fake-waiting: ImagePullBackOff}}
    spec: {containers: [{name: app, image: registry.invalid/web:1}]}
YAML
  start="$(date +%s.%N)"
  "$KUBECTL" apply -f "$dir/web.yaml" >/dev/null
  set +e
  "$strata" wait --strict -f "$dir/web.yaml" --timeout 300s 2> "$dir/wait.err"
  code=$?
  set -e
  end="$(date +%s.%N)"
  if [[ $code -ne 1 ]] || ! grep -q "status: Failed, message: web-.*/app: ImagePullBackOff" "$dir/wait.err"; then
    echo "failfast: the wait did not end Failed naming the pod (exit $code):" >&2
    cat "$dir/wait.err" >&2
    exit 1
  fi
  seconds+=("$(python3 -c "print(round($end - $start, 2))")")
  "$KUBECTL" delete namespace "$ns" --wait=false >/dev/null
done
python3 -c 'import json, sys; print(json.dumps({"grace_seconds": 30, "seconds": [float(s) for s in sys.argv[1:]]}))' "${seconds[@]}"
