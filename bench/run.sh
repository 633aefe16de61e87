#!/usr/bin/env bash
# `make bench`: core-status against Go kstatus on the same corpus, same machine, same run;
# then the layer-controller, rollout-operator and admission-webhook on the local control plane.
# Builds the Go harness (cached by cli-utils version), builds the Rust harness in release mode,
# generates a deterministic mixed corpus, runs each harness RUNS times and writes the median
# run of each to docs/benchmarks.md together with the exact command.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
OBJECTS="${BENCH_OBJECTS:-12000}"
ITERATIONS="${BENCH_ITERATIONS:-20}"
RUNS="${BENCH_RUNS:-3}"
DECODE_PASSES="${BENCH_DECODE_PASSES:-10}"
cache="${STRATA_CACHE:-$HOME/.cache/strata}"
target="${CARGO_TARGET_DIR:-$cache/cargo-target}"
# Every cargo build below lands where the binaries are run from, whatever the caller's shell.
export CARGO_TARGET_DIR="$target"
# The tree measured, named in every section written (a dirty tree says so).
commit="$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
# (The figures this script writes into docs/benchmarks.md do not count as a change.)
if ! git diff --quiet HEAD -- . ':(exclude)docs/benchmarks.md' 2>/dev/null; then commit="$commit-dirty"; fi
export STRATA_BENCH_COMMIT="$commit"
echo "bench: measuring the tree at $commit (binaries in $target)" >&2
cli_utils_version="$(awk '$1 == "sigs.k8s.io/cli-utils" {print $2}' bench/kstatus-go/go.mod | sed -n 1p)"
# Keyed by the harness's own source too, so a change to it rebuilds.
go_bin="$cache/bin/kstatus-bench-$cli_utils_version-$(cat bench/kstatus-go/main.go bench/kstatus-go/go.sum | sha256sum | cut -c1-12)/kstatus-bench"
work="$target/bench"
mkdir -p "$work"

# driver_runs NAME VAR=BINARY DRIVER: runs DRIVER RUNS times, each on a fresh local control
# plane with VAR naming the measured binary, collecting its last output line (one JSON object
# per run) in $work/NAME.jsonl.
driver_runs() {
  local name="$1" binary="$2" driver="$3"
  : > "$work/$name.jsonl"
  for _ in $(seq 1 "$RUNS"); do
    env "$binary" STRATA_BIN_DIR="$target/debug" scripts/with-plane.sh "$driver" \
      | tail -n 1 >> "$work/$name.jsonl"
  done
}

layers_bench() {
  # 50 layers x 20 objects in one dependency chain on the local control plane (release
  # controller; the driver and the plane are debug builds, they only wait).
  echo "bench: building the layer-controller (release) and the layers driver" >&2
  cargo build --release -p layer-controller >&2
  cargo build -p strata-e2e --bins --example layers_bench >&2
  driver_runs layers LAYER_CONTROLLER_BIN="$target/release/layer-controller" \
    "$target/debug/examples/layers_bench"
  python3 - "$work/layers.jsonl" "$RUNS" <<'PY'
import json, sys, datetime
sys.path.insert(0, "bench"); import docs_section
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
runs.sort(key=lambda r: r["revision_to_all_deployed_seconds"])
m = runs[len(runs) // 2]
rows = "\n".join(
    f"| {r['revision_to_all_deployed_seconds']:.1f} s | {r['first_layer_deployed_ms']:.0f} ms | {r['hop_ms_median']:.0f} ms | {r['hop_ms_p90']:.0f} ms | {r['hop_ms_max']:.0f} ms | {r['initial_deploy_seconds']:.1f} s | {r['controller_peak_rss_kib']/1024:.0f} MiB |"
    for r in runs)
docs_section.write("layers", f"""
## layer-controller: 50 layers × 20 objects in one dependency chain

Command: `make bench` (= `bench/run.sh`, the layers part alone: `BENCH_ONLY=layers bench/run.sh`);
{sys.argv[2]} runs, each on a fresh local control plane, {datetime.date.today().isoformat()}. Release
controller, one replica. Layer *n* depends on layer *n−1*; all read one GitRepository whose
artifact (1,000 ConfigMaps) is served by a local HTTP server. After the initial deploy a new
revision changes every object; measured: new revision → every layer Deployed at it, and per hop
(layer *n−1* Deployed → layer *n* Deployed, which includes layer *n*'s own 20 server-side applies).

| revision → all Deployed | first layer | hop median | hop p90 | hop max | initial deploy | controller peak RSS |
|---:|---:|---:|---:|---:|---:|---:|
{rows}

Median run: **{m['revision_to_all_deployed_seconds']:.1f} s for 50 hops, median hop {m['hop_ms_median']:.0f} ms**
(goals: median < 100 ms {'met' if m['hop_ms_median'] < 100 else 'not met'}, p90 < 150 ms {'met' if m['hop_ms_p90'] < 150 else 'not met'}).
Both cores are shared by etcd, kube-apiserver, the controller and the driver.

*Not measured here:* Flux's kustomize-controller re-checks a blocked dependent every
`--requeue-dependency` (30 s by default, its documented behaviour), which for this chain
would mean minutes, not seconds; Flux was not run on this machine.
""")
print(f"bench: layers median run {m['revision_to_all_deployed_seconds']:.1f}s, hop median {m['hop_ms_median']:.0f} ms", file=sys.stderr)
PY
}
rollout_bench() {
  echo "bench: building the rollout-operator (release) and the rollout driver" >&2
  cargo build --release -p rollout-operator >&2
  cargo build -p strata-e2e --bins --example rollout_bench >&2
  driver_runs rollout ROLLOUT_OPERATOR_BIN="$target/release/rollout-operator" \
    "$target/debug/examples/rollout_bench"
  python3 - "$work/rollout.jsonl" "$RUNS" <<'PY'
import json, sys, datetime
sys.path.insert(0, "bench"); import docs_section
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
runs.sort(key=lambda r: r["first_deletion_ms_median"])
m = runs[len(runs) // 2]
def revision_median(r):
    # When kube-controller-manager published the new status.updateRevision (ms after the change).
    seen = sorted(x for x in r.get("update_revision_ms", []) if x is not None)
    return f"{seen[len(seen) // 2]:.0f} ms" if seen else "n/a"
rows = "\n".join(
    f"| {r['idle_rss_kib']/1024:.1f} MiB | {r['loaded_rss_kib']/1024:.1f} MiB | {r['peak_rss_kib']/1024:.1f} MiB | "
    f"{', '.join(f'{x:.0f}' for x in r['first_deletion_ms'])} ms | {r['first_deletion_ms_median']:.0f} ms | {r['first_deletion_ms_max']:.0f} ms | "
    f"{sum(r['group_rolled_seconds'])/len(r['group_rolled_seconds']):.1f} s | {r['setup_seconds']:.0f} s | "
    f"{revision_median(r)} |"
    for r in runs)
docs_section.write("rollout", f"""
## rollout-operator: 100 StatefulSets × 10 pods

Command: `make bench` (= `bench/run.sh`; this part alone: `BENCH_ONLY=rollout bench/run.sh`);
{sys.argv[2]} runs, each on a fresh local control plane, {datetime.date.today().isoformat()}. Release
operator, leader election on, watching the bench namespace. 100 OnDelete StatefulSets of 10
pods (34 rollout groups of up to 3 zones, `rollout-max-unavailable: 2`) on kwok nodes. RSS idle
= before any StatefulSet exists; loaded = all 1,000 pods Ready and the operator settled.
Latency: the template of every zone of one group is changed (watch on the group's pods already
established) → the first pod of the group deleted; five groups in turn, each left to finish
rolling (30 pods) before the next, sample *k* then waiting *k* s more (spreading the changes
over a 5 s tick, for the side-by-side run). The latency includes kube-controller-manager
publishing the new revision (`status.updateRevision`, which any operator waits for; its median
is the last column). Each sample starts once kube-controller-manager has posted every Event it
queued (nothing new for 3 s): its client is limited to 20 requests/s, shared with its Events,
and right after the setup's 1,000 pod creations its own StatefulSet writes queue behind a
minute of Event posts, which would count in this latency (the last column shows what
kube-controller-manager took in these samples).

| idle RSS | loaded RSS | peak RSS | template change → first deletion | median | max | group rolled (mean) | setup | change → updateRevision (median) |
|---:|---:|---:|---|---:|---:|---:|---:|---:|
{rows}

Median run: **first deletion {m['first_deletion_ms_median']:.0f} ms median, {m['first_deletion_ms_max']:.0f} ms worst** (goal < 1 s:
{'met' if m['first_deletion_ms_max'] < 1000 else 'not met for every sample'}); **RSS {m['idle_rss_kib']/1024:.1f} MiB idle, {m['loaded_rss_kib']/1024:.1f} MiB with 1,000 pods**.

This run uses Strata's own flags; the comparison with the Grafana operator, both started with
the anchor's command line, is the side-by-side section below.
""")
print(f"bench: rollout first deletion median {m['first_deletion_ms_median']:.0f} ms", file=sys.stderr)
PY
}

webhook_bench() {
  echo "bench: building the admission-webhook (release) and the load generator" >&2
  cargo build --release -p admission-webhook >&2
  cargo build -p strata-e2e --bins >&2
  # The floor is built exactly as the server is (release, fat LTO): the same stack, the same
  # compiler settings. The load generator is only a client.
  cargo build --profile driver -p strata-e2e --example webhook_bench >&2
  cargo build --release -p strata-e2e --example tls_floor_server >&2
  FLOOR_BIN="$target/release/examples/tls_floor_server" \
    driver_runs webhook WEBHOOK_BIN="$target/release/admission-webhook" \
    "$target/driver/examples/webhook_bench"
  python3 - "$work/webhook.jsonl" "$RUNS" <<'PY'
import json, sys, datetime
sys.path.insert(0, "bench"); import docs_section
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
runs.sort(key=lambda r: r["p99_ms"])
m = runs[len(runs) // 2]
def row(what, r):
    return (f"| {what} | {r['requests']:,} | {r['errors']} | {r['p50_ms']:.3f} ms | {r['p99_ms']:.3f} ms | {r['p999_ms']:.3f} ms | {r['max_ms']:.1f} ms | "
            f"{r['slow']:,} ({r['slow_windows_100ms']} of {r['seconds']*10}) | {r['server_cpu_seconds']/r['seconds']*100:.0f}% | {r['idle_rss_kib']/1024:.1f} MiB | {r['peak_rss_kib']/1024:.1f} MiB |")
def median(values):
    values = sorted(values)
    return values[len(values) // 2]
# Server and floor alternate in slices within each run; per run, the median over its slices.
slice_medians = [(median([x["server_p99_ms"] for x in r["slices"]]), median([x["floor_p99_ms"] for x in r["slices"]])) for r in runs]
server_p99 = median([a for a, _ in slice_medians])
floor_p99 = median([b for _, b in slice_medians])
floor_ratio = server_p99 / floor_p99 if floor_p99 else float("inf")
slices_text = "; ".join(f"run {i + 1}: server {a:.3f} ms, floor {b:.3f} ms" for i, (a, b) in enumerate(slice_medians))
rows = "\n".join(f"{row(f'run {i + 1}: admission-webhook', r)}\n{row('same run, interleaved: floor', r['floor'])}" for i, r in enumerate(runs))
docs_section.write("webhook", f"""
## admission-webhook: constant-rate no-downscale reviews over TLS

Command: `make bench` (= `bench/run.sh`; this part alone: `BENCH_ONLY=webhook bench/run.sh`);
{sys.argv[2]} runs, {datetime.date.today().isoformat()}, each against a release server started on a fresh
local control plane (self-managed certificate from its Secret; the load generator verifies it
against the Secret's CA). Load (`e2e/examples/webhook_bench.rs`, optimised): {m['rate']:.0f} reviews/s for
{m['seconds']} s over {m['connections']} keep-alive HTTP/1.1 TLS connections on loopback after a 2 s warm-up,
open loop: latency counts from a request's due time when its connection was still busy then
(so a slow answer also charges the requests queued behind it), else from the actual send
(tokio timers fire up to 1 ms late; that delay is the generator's). Each review is a realistic UPDATE of
a labelled StatefulSet ({m['request_bytes']:,} bytes: object and oldObject), alternating a denied
downscale and an allowed upscale; an error is any failed connection, non-200 answer or wrong
decision. CPU = the server's user+system time over its slices. The **floor** is
`e2e/examples/tls_floor_server.rs`: the same stack (axum, axum-server, rustls/ring,
TCP_NODELAY, multi-thread tokio) answering a fixed AdmissionReview without decoding anything —
what the machine, the stack and the generator cost by themselves. Both run side by side and
get the same load in alternating slices ({len(runs[0]['slices'])} × {m['seconds'] // len(runs[0]['slices'])} s each per run), so a slow
moment of the machine lands on both; each row sums its slices.

| server | requests | errors | p50 | p99 | p99.9 | max | answers > 1 ms (in how many 100 ms windows) | server CPU | idle RSS | peak RSS |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
{rows}

Per run, the median of the slices' p99: {slices_text}. Over the runs: **server p99
{server_p99:.3f} ms, floor p99 {floor_p99:.3f} ms, ratio {floor_ratio:.2f}** (goal: the server's p99 at most 2× the
floor's, measured this way: {'met' if floor_ratio <= 2 else 'not met'}). Median run (by p99 over all its slices): p99
{m['p99_ms']:.3f} ms, {m['errors']} errors, peak RSS {m['peak_rss_kib']/1024:.1f} MiB (goals p99 ≤ 1 ms:
{'met in every run' if all(r['p99_ms'] <= 1 for r in runs) else 'met by the median run, not by every run' if m['p99_ms'] <= 1 else 'not met'}; zero errors: {'met' if all(r['errors'] == 0 for r in runs) else 'not met'});
its CPU {m['server_cpu_seconds']/m['seconds']*100:.0f}% of a core, the floor's {m['floor']['server_cpu_seconds']/m['floor']['seconds']*100:.0f}%.
How the server got to these figures is in `docs/performance-notes.md`.

The comparison with the Grafana operator's webhook server is the side-by-side section below.
""")
print(f"bench: webhook p99 {m['p99_ms']:.3f} ms, {m['errors']} errors", file=sys.stderr)
PY
}

failfast_bench() {
  # A Deployment whose pods cannot pull their image, applied and waited on with
  # `strata wait --strict` (default grace 30 s) on a fresh plane: seconds to Failed.
  echo "bench: building the strata CLI (release) for the fail-fast figures" >&2
  cargo build --release -p strata-cli >&2
  env STRATA_RELEASE_BIN="$target/release/strata" RUNS="$RUNS" STRATA_BIN_DIR="$target/debug" \
    scripts/with-plane.sh bench/failfast.sh | tail -n 1 > "$work/failfast.json"
  python3 - "$work/failfast.json" <<'PY'
import json, sys, datetime, statistics
sys.path.insert(0, "bench"); import docs_section
r = json.load(open(sys.argv[1]))
worst, grace = max(r["seconds"]), r["grace_seconds"]
docs_section.write("core-status-failfast", f"""
## core-status: a bad image to Failed (`strata wait --strict`)

Command: `make bench` (this part alone: `BENCH_ONLY=failfast bench/run.sh`); {len(r["seconds"])} runs on one
fresh local control plane, {datetime.date.today().isoformat()}. A one-replica Deployment whose pods cannot pull
their image (the plane's `strata-pod-cannot-start` kwok stage reports `ImagePullBackOff`), applied with
kubectl and waited on at once with the release `strata wait --strict` (default `--failure-grace` {grace}s);
time from the apply to the wait ending Failed with the pod, container and reason named. kstatus' policy
waits for the Deployment's progress deadline (600 s by default) instead.

| run | apply → Failed |
|---|---:|
""" + "\n".join(f"| {i + 1} | {s:.2f} s |" for i, s in enumerate(r["seconds"])) + f"""

Median {statistics.median(r["seconds"]):.2f} s, worst {worst:.2f} s; goal ≤ grace + 2 s = {grace + 2} s: {'met' if worst <= grace + 2 else 'not met'}
(the grace counts from the pod's creation, which the API stamps to the second).
""")
print(f"bench: fail-fast {r['seconds']} s (grace {grace} s)", file=sys.stderr)
PY
}

drift_bench() {
  # 5,000 objects in 50 layers (release observer and layer-controller; the driver is a debug
  # build that only edits, watches and, for the Krake-style comparison, polls).
  echo "bench: building the drift-observer and layer-controller (release) and the drift driver" >&2
  cargo build --release -p drift-observer -p layer-controller >&2
  cargo build -p strata-e2e --bins --example drift_bench >&2
  : > "$work/drift.jsonl"
  for _ in $(seq 1 "$RUNS"); do
    env DRIFT_OBSERVER_BIN="$target/release/drift-observer" \
      LAYER_CONTROLLER_BIN="$target/release/layer-controller" STRATA_BIN_DIR="$target/debug" \
      scripts/with-plane.sh "$target/debug/examples/drift_bench" | tail -n 1 >> "$work/drift.jsonl"
  done
  python3 - "$work/drift.jsonl" "$RUNS" <<'PY'
import json, sys, datetime
sys.path.insert(0, "bench"); import docs_section
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
runs.sort(key=lambda r: r["detect_ms_p50"])
m = runs[len(runs) // 2]
# kube-apiserver's counters say what was served, not who asked: listed as they are, with no
# attribution to a component (that would need the audit log's user names).
def per_edit(r):
    reqs = {k: v for k, v in r["requests_per_edit"].items() if k != "PATCH configmaps"}
    return ", ".join(f"{k} {v:.2f}" for k, v in sorted(reqs.items())) or "none"
def quiet(r):
    q = r["quiet_requests_20s"]
    return ", ".join(f"{k} {v:.0f}" for k, v in sorted(q.items())) or "none"
rows = "\n".join(
    f"| {r['idle_rss_kib']/1024:.1f} MiB | {r['peak_rss_kib']/1024:.1f} MiB | {r['detect_ms_p50']:.0f} ms | {r['detect_ms_p99']:.0f} ms | "
    f"{r['heal_ms_p50']:.0f} ms | {r['heal_ms_max']:.0f} ms | {r['checks_per_edit']:.2f} | {r['observer_sync_seconds']:.1f} s |"
    for r in runs)
poll_rows = "\n".join(
    f"| {r['poll_requests_per_minute']:,.0f} | {r['poll_round_seconds_median']:.1f} s | {', '.join(f'{x/1000:.1f}' for x in r['poll_detect_ms'])} s |"
    for r in runs)
goals = [
    ("RSS ≤ 64 MiB", m["peak_rss_kib"] / 1024 <= 64),
    ("edit → drift in status p50 < 100 ms", m["detect_ms_p50"] < 100),
    ("p99 < 1 s", m["detect_ms_p99"] < 1000),
    ("edit → healed p50 < 1 s", m["heal_ms_p50"] < 1000),
]
round_s = m["poll_round_seconds_median"]
krake_round = (
    f"a round of 5,000 GETs took {round_s:.1f} s (median run), longer than Krake's 2 s period, so "
    "detection is bounded by the round time plus the sleep."
    if round_s > 2 else
    f"a round of 5,000 GETs took {round_s:.1f} s (median run), within Krake's 2 s period, so "
    "detection is bounded by the 2 s sleep plus the round.")
docs_section.write("drift", f"""
## drift-observer: 5,000 observed objects in 50 layers

Command: `make bench` (= `bench/run.sh`; this part alone: `BENCH_ONLY=drift bench/run.sh`);
{sys.argv[2]} runs, each on a fresh local control plane, {datetime.date.today().isoformat()}. Release
drift-observer and layer-controller, one replica each. 50 AddonsLayers from ConfigMap sources,
100 ConfigMaps each (25 layers `mode: Warn`, 25 `mode: Heal`, interval 1h so only heal requests
re-apply). Driver: `e2e/examples/drift_bench.rs`. **Detection**: {m['edits']} edits of one field
(merge patch by another field manager) on Warn layers, one at a time; time from the PATCH to the
drift being in the layer's `status.drift` (seen by a watch on the layers). **Heal**: 20 edits on
Heal layers; time from the PATCH to the object holding the layer's value again. RSS idle = after
the start-up sync of all 5,000 objects; peak = the process's high-water mark after all edits.

| idle RSS | peak RSS | detect p50 | detect p99 | healed p50 | healed max | checks per edit | start-up sync |
|---:|---:|---:|---:|---:|---:|---:|---:|
{rows}

Median run: goals {'; '.join(f"{g}: {'met' if ok else 'NOT met'}" for g, ok in goals)}.

API requests per detected edit (kube-apiserver's `apiserver_request_total`, delta over the
detection phase divided by the edits; the edits' own PATCHes left out), median run —
{per_edit(m)} (every client together: these counters do not say who asked).
Everything kube-apiserver served in 20 quiet seconds after the edits: {quiet(m)}.

**Krake-style polling, same objects, same run**: the driver GETs all 5,000 objects (16 at a time,
as fast as the API server answers), sleeps 2 s, and repeats for {m['poll_seconds']:.0f} s, with one
edit waiting to be seen at a time:

| GET requests per minute | one round of 5,000 GETs | edit → seen by the poll |
|---:|---:|---|
{poll_rows}

Krake's observer does one GET per resource every 2 s per application with no watch; on this
machine {krake_round} The drift-observer makes no request for an edit it can judge from the
watch event and one dry run per suspect edit.
""")
print(f"bench: drift detect p50 {m['detect_ms_p50']:.0f} ms p99 {m['detect_ms_p99']:.0f} ms, healed p50 {m['heal_ms_p50']:.0f} ms, peak RSS {m['peak_rss_kib']/1024:.1f} MiB", file=sys.stderr)
PY
}

render_bench() {
  # 50 releases of a local chart: `strata render` (release build, default --jobs) against the
  # same `helm template` calls run one after another, and `strata render --jobs 1` to isolate
  # our own overhead; the plane's helm binary, no control plane needed.
  echo "bench: building strata (release) for the render benchmark" >&2
  cargo build --release -p strata-cli >&2
  bash e2e/plane/build.sh >/dev/null
  # shellcheck source=/dev/null
  source e2e/plane/versions.env
  local helm="${HELM:-$cache/bin/helm-$HELM_VERSION/helm}"
  python3 - "$target/release/strata" "$helm" "$RUNS" "$work/render" <<'PY'
import datetime, os, shutil, statistics, subprocess, sys, time
sys.path.insert(0, "bench"); import docs_section
strata, helm, runs, work = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
RELEASES = 50
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
shutil.copytree("e2e/samples/render/charts", f"{work}/charts")
course = ["schema: v2", "namespace: bench", "repositories:", "  local: {url: http://127.0.0.1:9/unused}", "releases:"]
for i in range(RELEASES):
    course += [f"  - name: app{i:02d}", "    chart: ./charts/app", f"    namespace: ns{i:02d}", f"    values: {{greeting: hello-{i}}}"]
open(f"{work}/course.yaml", "w").write("\n".join(course) + "\n")
env = dict(os.environ, HELM=helm)
# strata sets Go's GC target of its helm children itself unless the user chose one: measure
# what a user with neither variable set gets.
env.pop("GOGC", None)
env.pop("GOMEMLIMIT", None)
fresh = iter(range(1_000_000))
def new_output():
    # Every run writes into a directory that never existed: on this machine's journal-less ext4
    # each inode freed in the last few seconds is re-checked for every new file, so deleting
    # the previous tree just before would bill that kernel quirk to whichever run came next
    # (see docs/performance-notes.md). All outputs are deleted at the end.
    return f"{work}/out-{next(fresh)}"
def timed(cmd, **kw):
    os.sync()  # the previous step's file writes are flushed, not billed here
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
    return time.perf_counter() - started
def strata_render(jobs):
    args = [strata, "render", "--gitops", "flux", "-o", new_output(), f"{work}/course.yaml"]
    if jobs:
        args[2:2] = ["--jobs", str(jobs)]
    return timed(args, env=env)
def helm_sequential(gogc=None):
    helm_env = dict(env, GOGC=gogc) if gogc else env
    os.sync()
    started = time.perf_counter()
    for i in range(RELEASES):
        subprocess.run([helm, "template", f"app{i:02d}", "./charts/app", "--namespace", f"ns{i:02d}",
                        "--skip-tests", "--include-crds", "--set", f"greeting=hello-{i}"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=work, env=helm_env)
    return time.perf_counter() - started
# strata's own work, without helm's variance: a stand-in helm that prints each release's real
# `helm template` output (captured once) costs only a process start; strata --jobs 1 with it,
# minus the same 50 process starts, is what strata itself spends.
os.makedirs(f"{work}/helm-out")
for i in range(RELEASES):
    with open(f"{work}/helm-out/app{i:02d}.yaml", "w") as out:
        subprocess.run([helm, "template", f"app{i:02d}", "./charts/app", "--namespace", f"ns{i:02d}",
                        "--skip-tests", "--include-crds", "--set", f"greeting=hello-{i}"],
                       check=True, stdout=out, cwd=work)
fake = f"{work}/instant-helm"
open(fake, "w").write(f'#!/bin/sh\ncat > /dev/null\nexec cat "{work}/helm-out/$2.yaml"\n')
os.chmod(fake, 0o755)
def own_work():
    os.sync()
    started = time.perf_counter()
    subprocess.run([strata, "render", "--jobs", "1", "--gitops", "flux", "-o", new_output(), f"{work}/course.yaml"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(env, HELM=fake))
    total = time.perf_counter() - started
    started = time.perf_counter()
    for i in range(RELEASES):
        subprocess.run([fake, "template", f"app{i:02d}"], check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    return max(total - (time.perf_counter() - started), 0.0)
strata_render(None)  # warm the page cache
rows, parallel, sequential, tuned, own = [], [], [], [], []
for _ in range(runs):
    # Interleaved, so machine noise hits all of them alike.
    parallel.append(strata_render(None))
    sequential.append(helm_sequential())
    tuned.append(helm_sequential("400"))
    own.append(own_work())
files = sum(len(names) for _, _, names in os.walk(f"{work}/out-0"))
for n in range(next(fresh)):
    shutil.rmtree(f"{work}/out-{n}", ignore_errors=True)
for p, q, t, o in zip(parallel, sequential, tuned, own):
    rows.append(f"| {p:.2f} s | {q:.2f} s | {p / q:.2f}× | {t:.2f} s | {p / t:.2f}× | {o * 1000:.0f} ms | {o / p * 100:.1f} % |")
p, q, t, o = statistics.median(parallel), statistics.median(sequential), statistics.median(tuned), statistics.median(own)
ratio, overhead = p / q, o / p * 100
docs_section.write("render", f"""
## strata render: 50 releases

Command: `make bench` (= `bench/run.sh`; this part alone: `BENCH_ONLY=render bench/run.sh`);
{runs} rounds, {datetime.date.today().isoformat()}, release build, helm {os.path.basename(os.path.dirname(helm))}.
A course of 50 releases of the local chart `e2e/samples/render/charts/app` (each with its own
namespace and an inline value), rendered with `--gitops flux` into a new directory ({files} files).
Compared with the same 50 `helm template … --skip-tests --include-crds` calls run one after
another, as a user runs them (Go's default GC), and, for a like-for-like view of the parallelism
alone, with `GOGC=400`, the GC target strata gives its helm children when the user set neither
`GOGC` nor `GOMEMLIMIT`.
strata's own work (splitting, layout, hook mapping, writing the files) is measured without
helm's run-to-run variance: `strata render --jobs 1` with a stand-in helm that prints each
release's captured real output, minus the cost of starting that stand-in 50 times. Each round
runs the four in turn, each after a `sync` so no step pays for the previous one's writes.

| strata render (default jobs) | helm × 50, sequential | ratio | helm × 50, sequential, `GOGC=400` | ratio | strata's own work | its share of the render |
|---:|---:|---:|---:|---:|---:|---:|
{chr(10).join(rows)}

Median: **{ratio:.2f}× the sequential helm time** (goal ≤ 0.6×: {'met' if ratio <= 0.6 else 'not met'}; against helm
with the same GC target {p / t:.2f}×); strata's own share {overhead:.1f} % of its total (goal ≤ 5 %:
{'met' if overhead <= 5 else 'not met'}). Where strata's own time goes is in `docs/performance-notes.md`.
""")
print(f"bench: render {ratio:.2f}x of sequential helm, own share {overhead:.1f}%", file=sys.stderr)
PY
}

# The rollout-operator side by side with the Grafana operator, when its binary is given
# (`ANCHOR_ROLLOUT_OPERATOR_BIN`, built by hand from its source outside this repository).
# Both binaries get the anchor's own command line (Strata's in compatibility mode), each run
# on a fresh local control plane, alternating: the rollout driver (idle and loaded RSS, template
# change → first deletion), then the webhook load (same constant rate over TLS).
anchor_bench() {
  local anchor="${ANCHOR_ROLLOUT_OPERATOR_BIN:-}"
  if [[ -z "$anchor" ]]; then
    python3 - <<'PY'
import sys
sys.path.insert(0, "bench"); import docs_section
docs_section.write("anchor", """
## rollout-operator side by side with the Grafana operator

Anchor not measured.
""")
PY
    return
  fi
  echo "bench: side by side with $anchor" >&2
  cargo build --release -p rollout-operator >&2
  cargo build -p strata-e2e --bins --example rollout_bench >&2
  cargo build --profile driver -p strata-e2e --example webhook_bench >&2
  local runs="${BENCH_ANCHOR_RUNS:-$RUNS}" who bin
  for who in strata anchor; do
    : > "$work/side-rollout-$who.jsonl"
    : > "$work/side-webhook-$who.jsonl"
  done
  for _ in $(seq 1 "$runs"); do
    for who in strata anchor; do
      if [[ "$who" == strata ]]; then bin="$target/release/rollout-operator"; else bin="$anchor"; fi
      env BENCH_STYLE=anchor ROLLOUT_OPERATOR_BIN="$bin" STRATA_BIN_DIR="$target/debug" \
        scripts/with-plane.sh "$target/debug/examples/rollout_bench" \
        | tail -n 1 >> "$work/side-rollout-$who.jsonl"
      env BENCH_STYLE=anchor WEBHOOK_BIN="$bin" STRATA_BIN_DIR="$target/debug" \
        scripts/with-plane.sh "$target/driver/examples/webhook_bench" \
        | tail -n 1 >> "$work/side-webhook-$who.jsonl"
    done
  done
  python3 - "$work" "$runs" "$(sha256sum "$anchor" | cut -c1-12)" <<'PY'
import json, sys, datetime
sys.path.insert(0, "bench"); import docs_section
work, runs_n, anchor_sum = sys.argv[1], sys.argv[2], sys.argv[3]
def load(name):
    return [json.loads(l) for l in open(f"{work}/{name}.jsonl") if l.strip()]
def median(values):
    values = sorted(values)
    return values[len(values) // 2]
side = {who: {"rollout": load(f"side-rollout-{who}"), "webhook": load(f"side-webhook-{who}")}
        for who in ("strata", "anchor")}
def revision_median(r):
    seen = sorted(x for x in r.get("update_revision_ms", []) if x is not None)
    return f"{seen[len(seen) // 2]:.0f} ms" if seen else "n/a"
def figures(who):
    r, w = side[who]["rollout"], side[who]["webhook"]
    return {
        "idle": median([x["idle_rss_kib"] for x in r]) / 1024,
        "loaded": median([x["loaded_rss_kib"] for x in r]) / 1024,
        "first": median([x["first_deletion_ms_median"] for x in r]),
        "rolled": median([sum(x["group_rolled_seconds"]) / len(x["group_rolled_seconds"]) for x in r]),
        "p50": median([x["p50_ms"] for x in w]),
        "p99": median([x["p99_ms"] for x in w]),
        "cpu": median([x["server_cpu_seconds"] / x["seconds"] * 100 for x in w]),
        "wrss": median([x["peak_rss_kib"] for x in w]) / 1024,
        "errors": sum(x["errors"] for x in w),
    }
s, a = figures("strata"), figures("anchor")
def rows(who, label):
    out = []
    for i, (r, w) in enumerate(zip(side[who]["rollout"], side[who]["webhook"])):
        out.append(f"| {label}, run {i + 1} | {r['idle_rss_kib']/1024:.1f} MiB | {r['loaded_rss_kib']/1024:.1f} MiB | "
                   f"{', '.join(f'{x:.0f}' for x in r['first_deletion_ms'])} ms | {r['first_deletion_ms_median']:.0f} ms | "
                   f"{sum(r['group_rolled_seconds'])/len(r['group_rolled_seconds']):.1f} s | {revision_median(r)} | "
                   f"{w['p50_ms']:.3f} ms | {w['p99_ms']:.3f} ms | {w['errors']} | {w['server_cpu_seconds']/w['seconds']*100:.0f}% | {w['peak_rss_kib']/1024:.1f} MiB |")
    return "\n".join(out)
rss_idle, rss_loaded = s["idle"] / a["idle"], s["loaded"] / a["loaded"]
sooner = a["first"] / s["first"]
p99_ratio = s["p99"] / a["p99"]
verdict = lambda ok: "met" if ok else "not met"
w = side["strata"]["webhook"][0]
docs_section.write("anchor", f"""
## rollout-operator side by side with the Grafana operator

Command: `ANCHOR_ROLLOUT_OPERATOR_BIN=<path> make bench` (this part alone:
`ANCHOR_ROLLOUT_OPERATOR_BIN=<path> BENCH_ONLY=anchor bench/run.sh`); {runs_n} runs,
{datetime.date.today().isoformat()}, the anchor binary sha256 {anchor_sum}… built by hand outside this repository
from its source (github.com/grafana/rollout-operator). Both binaries run with **the anchor's command
line** (`-kubernetes.namespace`, `-kubernetes.config-file`, `-kubernetes.api-url`, `-server.port`,
`-log.level=warn`, and for the webhooks `-server-tls.enabled=true -server-tls.port`): Strata's
release `rollout-operator` in compatibility mode. Both therefore use the anchor's defaults,
including its client-side limit of 5 requests/s per API group (burst 10). Each run starts each
binary on a fresh local control plane, alternating.
Rollout: the driver of the rollout section above (100 StatefulSets × 10 pods, 34 groups; RSS idle
before any StatefulSet, loaded with 1,000 pods Ready; template change → first pod deletion for five
groups in turn, each left to roll completely, the changes spread evenly over the anchor's 5 s
reconcile interval: sample *k* of 5 waits *k* s after the previous group finished and
kube-controller-manager settled, so the tick's phase is not always the same; "updateRevision" is
when kube-controller-manager published the new revision, the part of the latency neither
operator controls). Webhooks: the load of the admission-webhook section
({w['rate']:.0f} no-downscale reviews/s for {w['seconds']} s over {w['connections']} keep-alive TLS connections,
each answer checked), against `/admission/no-downscale` on `-server-tls.port`, the certificate
verified against the CA in the Secret the binary wrote.

| binary | idle RSS | loaded RSS | template change → first deletion | median | group rolled (mean) | updateRevision (median) | webhook p50 | webhook p99 | errors | webhook CPU | webhook peak RSS |
|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|
{rows("strata", "Strata")}
{rows("anchor", "anchor")}

Medians over the runs, Strata / anchor:
- **RSS idle {s['idle']:.1f} / {a['idle']:.1f} MiB = {rss_idle:.2f}, loaded {s['loaded']:.1f} / {a['loaded']:.1f} MiB = {rss_loaded:.2f}**
  (goal ≤ 0.33: {verdict(rss_idle <= 1/3 and rss_loaded <= 1/3)});
- **first deletion {s['first']:.0f} ms / {a['first']:.0f} ms: {sooner:.1f}× sooner** (goal ≥ 10×: {verdict(sooner >= 10)});
  a group rolled in {s['rolled']:.1f} s / {a['rolled']:.1f} s;
- **webhook p99 {s['p99']:.3f} / {a['p99']:.3f} ms = {p99_ratio:.2f}** (goal ≤ 0.5: {verdict(p99_ratio <= 0.5)}), p50
  {s['p50']:.3f} / {a['p50']:.3f} ms, CPU {s['cpu']:.0f}% / {a['cpu']:.0f}% of a core, errors {s['errors']} / {a['errors']}.
""")
print(f"bench: side by side: RSS {rss_idle:.2f}/{rss_loaded:.2f}, first deletion {sooner:.1f}x sooner, webhook p99 ratio {p99_ratio:.2f}", file=sys.stderr)
PY
}

# build_fleet SERVICES...: builds the release SERVICES, the plane's own binaries and the fleet
# driver (an optimized build: it shares the two cores with the system under test), the same way
# for every fleet part; the driver is then $target/driver/examples/fleet_bench.
build_fleet() {
  echo "bench: building $* (release) and the fleet driver" >&2
  cargo build --release $(printf -- '-p %s ' "$@") >&2
  cargo build -p strata-e2e --bins >&2
  cargo build --profile driver -p strata-e2e --example fleet_bench >&2
}

fleet_bench() {
  # Flux's "Mean Time To Production" shape (#29): N independent apps created at once, each an
  # OCIRepository, an impersonated ServiceAccount and one health-gated layer of four objects
  # with three variables (release controller). Every (kube-controller-manager client limit,
  # N) pair runs RUNS times, each on a fresh plane. The driver is an optimized build: it shares
  # the two cores with the plane, and as a debug build it took 4.5 CPU-s of a 1,000-layer
  # create round (1.2 s optimized), CPU the system under test then lacked.
  build_fleet layer-controller drift-observer
  local driver="$target/driver/examples/fleet_bench"
  : > "$work/fleet.jsonl"; : > "$work/fleet-anchor.jsonl"; : > "$work/fleet-direct.jsonl"
  # The driver deploys with the anchor whenever it sees its binary: only the anchor's runs may.
  local anchor="${ANCHOR_KUSTOMIZE_CONTROLLER_BIN:-}"
  unset ANCHOR_KUSTOMIZE_CONTROLLER_BIN
  sizes=(${BENCH_FLEET_SIZES:-100 500 1000}); qpss=(${BENCH_FLEET_QPS:-20 200})
  # With BENCH_FLEET_PROFILE=1, one more run at the largest size and last client limit takes a
  # CPU profile of kube-apiserver over the create round (BENCH_FLEET_PROFILE_ROUND=upgrade: the
  # upgrade round; its /debug/pprof, off otherwise) and says where that CPU went
  # (bench/pprof_breakdown.py). That run is not recorded: the profiler costs kube-apiserver CPU
  # (the recorded run that carried it was the slowest of its row).
  export BENCH_FLEET_PROFILE_ROUND="${BENCH_FLEET_PROFILE_ROUND:-create}"
  profile="$work/apiserver-$BENCH_FLEET_PROFILE_ROUND.pprof"; rm -f "$profile" "$work/apiserver-breakdown.md"
  for qps in "${qpss[@]}"; do
    for n in "${sizes[@]}"; do
      if [[ "${BENCH_FLEET_PROFILE:-}" == 1 && "$n" == "${sizes[-1]}" && "$qps" == "${qpss[-1]}" ]]; then
        env LAYER_CONTROLLER_BIN="$target/release/layer-controller" STRATA_BIN_DIR="$target/debug" \
          BENCH_FLEET_LAYERS="$n" STRATA_PLANE_CONTROLLER_MANAGER_QPS="$qps" \
          STRATA_PLANE_APISERVER_PROFILING=1 BENCH_FLEET_APISERVER_PROFILE="$profile" \
          BENCH_FLEET_APISERVER_PROFILE_SECONDS="${BENCH_FLEET_PROFILE_SECONDS:-30}" \
          BENCH_FLEET_APISERVER_PROFILE_ROUND="$BENCH_FLEET_PROFILE_ROUND" \
          scripts/with-plane.sh "$driver" > /dev/null
      fi
      for _ in $(seq 1 "$RUNS"); do
        # The plane alone first (#56: the driver applies every app's objects itself, no
        # deployer), then the layer-controller, alternating: what every deployer is measured
        # against, at the same size and client limit, in the same run.
        env BENCH_FLEET_DIRECT=1 STRATA_BIN_DIR="$target/debug" \
          BENCH_FLEET_LAYERS="$n" STRATA_PLANE_CONTROLLER_MANAGER_QPS="$qps" \
          scripts/with-plane.sh "$driver" | tail -n 1 >> "$work/fleet-direct.jsonl"
        env LAYER_CONTROLLER_BIN="$target/release/layer-controller" STRATA_BIN_DIR="$target/debug" \
          DRIFT_OBSERVER_BIN="$target/release/drift-observer" \
          BENCH_FLEET_LAYERS="$n" STRATA_PLANE_CONTROLLER_MANAGER_QPS="$qps" \
          scripts/with-plane.sh "$driver" | tail -n 1 >> "$work/fleet.jsonl"
      done
    done
  done
  if [[ -f "$profile" ]]; then
    go tool pprof -traces "$profile" 2>/dev/null | python3 bench/pprof_breakdown.py > "$work/apiserver-breakdown.md"
  fi
  # The anchor side by side (the guide: same machine, same run): with
  # ANCHOR_KUSTOMIZE_CONTROLLER_BIN set (Flux's kustomize-controller, built by hand from its
  # source outside this repository), the same apps at the largest size, deployed by it instead,
  # RUNS times at each client limit in BENCH_FLEET_ANCHOR_QPS (default: the last one), once
  # with its own client limit as Flux ships it (`--kube-api-qps` 50, burst 300) and once with
  # BENCH_FLEET_ANCHOR_RAISED (default qps 2000, burst 4000): whether that limit is what holds
  # it back. Its version is read from the binary (Go's build information), not typed in.
  local anchor_version=""
  if [[ -n "$anchor" ]]; then
    anchor_version="$(go version -m "$anchor" | awk '$1 == "mod" {v = $2 " " $3} $1 == "build" && $2 ~ /^vcs.revision=/ {r = substr($2, 14, 12)} END {print v (r ? " (commit " r ")" : "")}')"
    echo "bench: the anchor is $anchor_version" >&2
    local raised="${BENCH_FLEET_ANCHOR_RAISED:---kube-api-qps=2000 --kube-api-burst=4000}"
    for qps in ${BENCH_FLEET_ANCHOR_QPS:-${qpss[-1]}}; do
      for _ in $(seq 1 "$RUNS"); do
        for args in "" "$raised"; do
          env ANCHOR_KUSTOMIZE_CONTROLLER_BIN="$anchor" STRATA_BIN_DIR="$target/debug" \
            BENCH_FLEET_ANCHOR_ARGS="$args" \
            BENCH_FLEET_LAYERS="${sizes[-1]}" STRATA_PLANE_CONTROLLER_MANAGER_QPS="$qps" \
            scripts/with-plane.sh "$driver" | tail -n 1 >> "$work/fleet-anchor.jsonl"
        done
      done
    done
  fi
  export BENCH_FLEET_ANCHOR_VERSION="$anchor_version"
  # Shards (#29 item 4): the largest size at the last client limit again, the layers spread
  # over BENCH_FLEET_SHARD_COUNTS shards, one controller each (no drift-observer).
  for shards in ${BENCH_FLEET_SHARD_COUNTS:-2}; do
    for _ in $(seq 1 "$RUNS"); do
      env LAYER_CONTROLLER_BIN="$target/release/layer-controller" STRATA_BIN_DIR="$target/debug" \
        BENCH_FLEET_LAYERS="${sizes[-1]}" STRATA_PLANE_CONTROLLER_MANAGER_QPS="${qpss[-1]}" \
        BENCH_FLEET_SHARDS="$shards" \
        scripts/with-plane.sh "$driver" | tail -n 1 >> "$work/fleet.jsonl"
    done
  done
  python3 - "$work/fleet.jsonl" "$RUNS" "${BENCH_FLEET_QPS:-20 200}" "${BENCH_FLEET_SIZES:-100 500 1000}" "${BENCH_FLEET_SHARD_COUNTS:-2}" "$work/apiserver-breakdown.md" "$work/fleet-anchor.jsonl" "$work/fleet-direct.jsonl" <<'PY'
import json, os, sys, datetime, collections, statistics
sys.path.insert(0, "bench"); import docs_section, fleet_summary
load = fleet_summary.load
runs, anchor_runs, direct = load(sys.argv[1]), load(sys.argv[7]), load(sys.argv[8])
# The plane alone (#56 item 1): per (client limit, size), the median time from the first apply
# to kube-controller-manager having observed every Deployment, in each round. Every deployer's
# time is divided by it.
alone = fleet_summary.plane_alone(direct)
ratio = lambda r, rnd: fleet_summary.ratio(r, alone, rnd)
fmt_ratio = lambda x: f"{x:.2f}×" if x is not None else "—"
GOAL = {"create": 1.1, "upgrade": 1.1}
alone_rows = []
for r in direct:
    busy = sum((r.get("cpu_seconds_create") or {}).values())
    alone_rows.append(
        f"| {r['controller_manager_qps']} | {r['layers']} | {r['create_applied_seconds']:.1f} s | {r['create_floor_seconds']:.1f} s "
        f"| {r['upgrade_applied_seconds']:.1f} s | {r['upgrade_floor_seconds']:.1f} s | {busy:.1f} s |")
alone_text = "\n".join(
    f"- client limit {q}, {n} apps: plane alone, median create {a['create']:.1f} s, upgrade {a['upgrade']:.1f} s"
    + f" ({a['runs']} run(s))."
    for (q, n), a in alone.items()) or "- no plane-alone runs were recorded: no ratio below can be computed."

def limit_of(args):
    words = (args or "").replace("=", " ").split()
    get = lambda flag, d: words[words.index(flag) + 1] if flag in words and words.index(flag) + 1 < len(words) else d
    q, b = get("--kube-api-qps", "50"), get("--kube-api-burst", "300")
    return f"{q} / {b}" + (" (as shipped)" if (q, b) == ("50", "300") else "")

side_by_side = ""
if anchor_runs:
    version = os.environ.get("BENCH_FLEET_ANCHOR_VERSION") or "version unknown"
    lines, ratios = [], []
    def row(who, limit, r, sent):
        cpu_c, cpu_u = r.get("cpu_seconds_create") or {}, r.get("cpu_seconds_upgrade") or {}
        own = lambda cpu: cpu.get("layer-controller", cpu.get("kustomize-controller", 0.0))
        applied = lambda key: f"{r[key]:.1f} s" if key in r else "—"
        calls = sum((r.get("apiserver_requests_per_layer_create") or {}).values())
        c, u = r["create_to_all_deployed_seconds"], r["upgrade_to_all_deployed_seconds"]
        return (f"| {r['controller_manager_qps']} | {who} | {limit} | {c:.1f} s ({fmt_ratio(ratio(r, 'create'))}) "
                f"| {applied('create_deployments_applied_seconds')} | {u:.1f} s ({fmt_ratio(ratio(r, 'upgrade'))}) "
                f"| {applied('upgrade_deployments_applied_seconds')} | {r['controller_peak_rss_kib']/1024:.1f} MiB "
                f"| {own(cpu_c):.1f} / {own(cpu_u):.1f} s | {sum(cpu_c.values()):.1f} s | {sent / c:.0f} | {calls:.1f} |")
    n = max(r["layers"] for r in anchor_runs)
    for qps in sorted({r["controller_manager_qps"] for r in anchor_runs}):
        ours = [r for r in runs if r["controller_manager_qps"] == qps and r["layers"] == n and r.get("shards", 1) == 1]
        for r in ours:
            sent = sum((r.get("requests_per_layer_create") or {}).values()) * n
            lines.append(row("Strata layer-controller", "none (HTTP/2, at most `--client-max-in-flight` at once)", r, sent))
        by_limit = collections.defaultdict(list)
        for r in anchor_runs:
            if r["controller_manager_qps"] == qps and r["layers"] == n:
                by_limit[limit_of(r.get("anchor_args"))].append(r)
        for limit, theirs in sorted(by_limit.items(), key=lambda kv: "shipped" not in kv[0]):
            lines += [row("Flux kustomize-controller", limit, r, r.get("anchor_requests_create", 0.0)) for r in theirs]
            if ours and theirs:
                med = lambda rs, key: statistics.median(r[key] for r in rs)
                own_cpu = lambda rs, name: statistics.median((r.get("cpu_seconds_create") or {}).get(name, 0.0) for r in rs)
                rate = statistics.median(r.get("anchor_requests_create", 0.0) / r["create_to_all_deployed_seconds"] for r in theirs)
                qps_limit = float(limit.split(" / ")[0])
                held = (f"at most its limit of {qps_limit:.0f}/s" if rate <= qps_limit * 1.02
                        else f"above its limit of {qps_limit:.0f}/s: that limit was not in force")
                ratios.append(
                    f"client limit {qps}, {n} apps, kustomize-controller's client limit {limit}: medians Strata / Flux: "
                    f"create {med(ours, 'create_to_all_deployed_seconds'):.1f} / {med(theirs, 'create_to_all_deployed_seconds'):.1f} s "
                    f"= {med(ours, 'create_to_all_deployed_seconds') / med(theirs, 'create_to_all_deployed_seconds'):.2f}, "
                    f"upgrade {med(ours, 'upgrade_to_all_deployed_seconds'):.1f} / {med(theirs, 'upgrade_to_all_deployed_seconds'):.1f} s "
                    f"= {med(ours, 'upgrade_to_all_deployed_seconds') / med(theirs, 'upgrade_to_all_deployed_seconds'):.2f}, "
                    f"peak RSS {med(ours, 'controller_peak_rss_kib')/1024:.1f} / {med(theirs, 'controller_peak_rss_kib')/1024:.1f} MiB, "
                    f"the deployer's own CPU in the create round {own_cpu(ours, 'layer-controller'):.1f} / {own_cpu(theirs, 'kustomize-controller'):.1f} s; "
                    f"kustomize-controller sent {rate:.0f} requests/s in the create round, {held}")
        if len(by_limit) > 1:
            meds = {l: statistics.median(r["create_to_all_deployed_seconds"] for r in rs) for l, rs in by_limit.items()}
            (l1, t1), (l2, t2) = sorted(meds.items(), key=lambda kv: "shipped" not in kv[0])[:2]
            ratios.append(f"client limit {qps}: kustomize-controller's create median with limit {l2} is {t2:.1f} s against "
                          f"{t1:.1f} s with {l1} ({t2 / t1:.2f}×)")
    side_by_side = f"""
**Side by side with the anchor on this machine, same run**: Flux's kustomize-controller
{version} (read from the binary's Go build information; `ANCHOR_KUSTOMIZE_CONTROLLER_BIN=<path>`,
built by hand from its source outside this repository) deploying the same apps, one
Kustomization each in place of the AddonsLayer (`prune`, `wait`, `serviceAccountName`,
`targetNamespace`, the same three variables in `postBuild.substitute`, the flux-benchmark's
60 m interval), started as Flux's benchmark runs it (`--concurrent=20`, every namespace
watched, info logs in JSON) with admin rights as Flux's install binds it, once with its client
limit as Flux ships it (`--kube-api-qps` 50, `--kube-api-burst` 300) and once raised
(`BENCH_FLEET_ANCHOR_RAISED`). Each run on a fresh plane; *ready* is every Kustomization Ready
at its generation, checked per app as for the layers; the ratio is to the plane alone above;
*applied* is when its last Deployment reached the API server; CPU is the deployer's own in the
create / upgrade round and the whole plane's (every process above) in the create round;
*requests/s* is what the deployer itself sent per second of the create round (its client
metrics: `rest_client_requests_total` for Flux, ours for Strata); *API requests per app* is
what kube-apiserver served per app in the create round, every client together.

| KCM QPS | deployer | its client limit (qps / burst) | create (÷ plane alone) | applied | upgrade (÷ plane alone) | applied | peak RSS | deployer CPU, create / upgrade | all CPU, create | requests/s | API requests per app |
|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|
{chr(10).join(lines)}

{chr(10).join(f"- {r}." for r in ratios)}
"""
breakdown = ""
if os.path.exists(sys.argv[6]):
    breakdown = (f"""
Where kube-apiserver's CPU went in the {os.environ.get("BENCH_FLEET_PROFILE_ROUND", "create")} round of an extra run at {sys.argv[4].split()[-1]} layers and
client limit {sys.argv[3].split()[-1]}, not among the rows above (`BENCH_FLEET_PROFILE=1`: a {os.environ.get("BENCH_FLEET_PROFILE_SECONDS", "30")} s CPU profile from its
`/debug/pprof`, each sampled stack counted once, in the first matching row; `bench/pprof_breakdown.py`):

""" + open(sys.argv[6]).read())
# What the controllers ran with and what the upgrade round left unsent, read from the runs.
args_seen = sorted({r.get("controller_args", "") for r in runs})
def flag_value(args, flag, default):
    words = args.split()
    for i, w in enumerate(words):
        if w.startswith(flag + "="):
            return w.split("=", 1)[1]
        if w == flag and i + 1 < len(words):
            return words[i + 1]
    return default
# The driver sets --sync-period to the layers' interval unless told otherwise; say so from the
# flags each run really had.
syncs = sorted({flag_value(a, '--sync-period', '1m') for a in args_seen})
sync_text = (f" (`--sync-period` {', '.join(syncs)}: the layers' own `interval` is 1h, and the default "
             "1m would re-apply in full, within one round, every layer deployed more than a minute "
             "earlier, while Flux's Kustomizations here re-apply at their 60 m interval)"
             if syncs and all(x != '1m' for x in syncs) else "")
flags_text = "; ".join(sorted({
    f"`--concurrent` {flag_value(a, '--concurrent', '10')}, `--client-max-in-flight` {flag_value(a, '--client-max-in-flight', '32')}"
    # What BENCH_LAYER_CONTROLLER_ARGS added to the flags every run passes.
    + (f" (extra flags: `{extra}`)" if (extra := fleet_summary.controller_flags(a)) else "")
    for a in args_seen}))
sent = [(r["applied_objects_per_layer_upgrade"], r["unchanged_objects_per_layer_upgrade"])
        for r in runs if "unchanged_objects_per_layer_upgrade" in r]
if sent:
    lo_a, hi_a = min(a for a, _ in sent), max(a for a, _ in sent)
    lo_u, hi_u = min(u for _, u in sent), max(u for _, u in sent)
    span = lambda lo, hi: f"{lo:.2f}" if abs(hi - lo) < 0.005 else f"{lo:.2f}–{hi:.2f}"
    unchanged_text = (f"per layer, the upgrade round applied {span(lo_a, hi_a)} objects and left "
                      f"{span(lo_u, hi_u)} unsent as unchanged (the controllers' "
                      "`layer_controller_applied_objects_total` and `layer_controller_unchanged_objects_total`, "
                      f"over {len(sent)} run(s))")
else:
    unchanged_text = "these runs did not record what the layer-controller re-sent"
groups = collections.defaultdict(list)
for r in runs:
    groups[(r["controller_manager_qps"], r["layers"], r.get("shards", 1))].append(r)
rows, observed, served, cpu, verdicts = [], [], [], [], []
for (qps, n, shards), rs in sorted(groups.items()):
    rs.sort(key=lambda r: r["create_to_all_deployed_seconds"])
    median = rs[len(rs) // 2]
    calls = median.get("apiserver_requests_per_layer_create") or {}
    if calls:
        total = sum(calls.values())
        listed = ", ".join(f"{k} {v:.2f}" for k, v in sorted(calls.items()))
        served.append(f"| {qps} | {n} | {shards} | {total:.1f} | {listed} |")
    c = median.get("cpu_seconds_create") or {}
    if c:
        ms = lambda name: 1000 * sum(v for k, v in c.items() if k.startswith(name)) / n
        busy = sum(c.values())
        cpu.append(
            f"| {qps} | {n} | {shards} | {median['create_to_all_deployed_seconds']:.1f} s | {busy:.1f} s "
            f"({busy / median['create_to_all_deployed_seconds']:.2f} cores) | {ms('kube-apiserver'):.1f} | {ms('etcd'):.1f} "
            f"| {ms('kube-controller'):.1f} | {ms('layer-controller'):.1f} | {ms('bench driver'):.1f} |")
    for r in rs:
        c, cf = r["create_to_all_deployed_seconds"], r["create_floor_seconds"]
        u, uf = r["upgrade_to_all_deployed_seconds"], r["upgrade_floor_seconds"]
        req = r["requests_per_layer_create"]
        growth = (r["controller_peak_rss_kib"] - r["controller_idle_rss_kib"]) / n
        applied = lambda key: f"{r[key]:.1f} s" if key in r else "—"
        woken = (f"{r['reconciles_per_layer_create']:.1f} / {r['reconciles_per_layer_upgrade']:.1f}"
                 if "reconciles_per_layer_create" in r else "—")
        own = lambda rnd: (r.get(f"cpu_seconds_{rnd}") or {}).get("layer-controller")
        own_text = f"{own('create'):.1f} / {own('upgrade'):.1f} s" if own("create") is not None and own("upgrade") is not None else "—"
        rows.append(
            f"| {qps} | {n} | {shards} | {c:.1f} s | {applied('create_deployments_applied_seconds')} | {cf:.1f} s "
            f"| {fmt_ratio(ratio(r, 'create'))} | {u:.1f} s | {applied('upgrade_deployments_applied_seconds')} | {uf:.1f} s "
            f"| {fmt_ratio(ratio(r, 'upgrade'))} | {r['controller_peak_rss_kib']/1024:.1f} MiB | {growth:.1f} KiB | {r['controller_peak_sockets']} "
            f"| {req['GET']:.0f} / {req['PATCH']:.0f} / {req['POST']:.0f} | {woken} | {own_text} |")
        o = r.get("observer")
        if o:
            lat = o.get("edit_to_drift") or {}
            lat_text = (f"{lat['p50_seconds']*1000:.0f} / {lat['p99_seconds']*1000:.0f} ms "
                        f"({lat['samples']}, {lat['background_edits_per_second']:.0f}/s)") if lat else "—"
            observed.append(
                f"| {qps} | {n} | {4*n} | {o['sync_seconds']:.1f} s | {o['peak_rss_kib']/1024:.1f} MiB "
                f"| {o['peak_sockets']} | {o['sockets_at_end']} | {lat_text} |")
    # What the rows say, computed: the median ratio to the plane alone against #56's goal, and
    # who set the pace (how close the last Deployment's apply came to this run's floor).
    if (qps, n) in alone:
        parts = []
        for rnd in ("create", "upgrade"):
            m = statistics.median(ratio(r, rnd) for r in rs)
            gap = statistics.median(r[f"{rnd}_floor_seconds"] - r[f"{rnd}_deployments_applied_seconds"]
                                    for r in rs if f"{rnd}_deployments_applied_seconds" in r)
            parts.append(f"{rnd} {m:.2f}× the plane alone ({'within' if m <= GOAL[rnd] else 'over'} the {GOAL[rnd]}× goal; "
                         f"the last Deployment reached the API server {gap:.1f} s before this run's floor)")
        verdicts.append(f"client limit {qps}, {n} layers, {shards} shard(s), medians: " + "; ".join(parts))
early = [r for r in runs if r["create_to_all_deployed_seconds"] < r["create_floor_seconds"]
         or r["upgrade_to_all_deployed_seconds"] < r["upgrade_floor_seconds"]]
early_text = (f" {len(early)} of the {len(runs)} runs show all layers Deployed before their own floor: the two "
              "times come from two watches that deliver with their own delays, and the per-layer check "
              "(write order, not arrival) passed in each." if early else "")
docs_section.write("fleet", f"""
## layer-controller: a fleet of independent apps (Flux's MTTP shape)

Command: `make bench` (this part alone: `BENCH_ONLY=fleet bench/run.sh`; sizes and client
limits from `BENCH_FLEET_SIZES="{sys.argv[4]}"` and `BENCH_FLEET_QPS="{sys.argv[3]}"`); {sys.argv[2]}
run(s) per row, each on a fresh local control plane, {datetime.date.today().isoformat()}, the tree at
{os.environ.get("STRATA_BENCH_COMMIT", "an unknown commit")}. Release
controller, one replica per shard, {flags_text}{sync_text}; the driver
(this benchmark's own process, on the same two cores) an optimized build. Per app: a namespace,
its own OCIRepository (Flux's CRD; the artifact served by a local HTTP server, its status
written as source-controller writes it), a ServiceAccount the layer acts as (impersonation)
with `admin` in the app's namespace, and one AddonsLayer applying a ServiceAccount, a Service,
a Deployment scaled to zero and an Ingress (our own podinfo-like manifests) with three
variables substituted (`spec.postBuild.substitute`: app, namespace, release). All layers are
created at once; *create* is until every layer is Deployed, *upgrade* until every layer is
Deployed again after one variable changed in every layer: the release, carried by the
Deployment alone (its labels and pod template), as Flux's benchmark upgrades by changing each
Deployment's CPU request; the other three objects are unchanged: {unchanged_text}.

**The plane alone** is the yardstick (`BENCH_FLEET_DIRECT=1`, one run before each
layer-controller run, same size and client limit, fresh plane): no deployer, the driver applies
every app's four objects itself (server-side apply, 16 at a time) in the same two rounds, and
the time is until kube-controller-manager had observed every Deployment (its ReplicaSet made,
its status written at its generation). *÷ plane alone* is a deployer's time over that median.
*This run's floor* is the same observation in the deployer's own run; it moves with the
deployer (a slow deployer applies late, so its floor is late too), so it is shown, not divided
by. *Applied* is when the last Deployment of the round reached the API server at that release.
Every run is checked **per layer**: a layer's Deployed status must be a later write than the
one in which kube-controller-manager observed its own Deployment at this release (their
resourceVersions, etcd's one revision counter, compared), else the run fails naming the
layers.{early_text}

{alone_text}

| KCM QPS | apps | create: last applied | create: all observed | upgrade: last applied | upgrade: all observed | all CPU, create |
|---:|---:|---:|---:|---:|---:|---:|
{chr(10).join(alone_rows)}

*Reconciles* per layer (create / upgrade) count every reconcile the controllers ran, whatever
woke it. *KCM QPS* is kube-controller-manager's `--kube-api-qps` (20 is its
default, as in Flux's kind runs). *Growth per layer* is (peak − idle RSS) / N. Requests are the
controller's own (its client metrics), per layer, for the create round: GET / PATCH / POST.
*Controller CPU* is the layer-controller's own CPU-seconds in each round.
*Shards*: the layers spread over that many shards by `sharding.fluxcd.io/key` (the first the
unlabelled default shard), one controller each (`BENCH_FLEET_SHARD_COUNTS="{sys.argv[5]}"`, at the
largest size and last client limit); RSS, sockets and requests are then the sums over the
controllers (peak RSS: the sum of each one's peak).

| KCM QPS | layers | shards | create | applied | this run's floor | ÷ plane alone | upgrade | applied | this run's floor | ÷ plane alone | peak RSS | growth per layer | peak sockets | requests per layer | reconciles per layer | controller CPU, create / upgrade |
|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
{chr(10).join(rows)}

{chr(10).join(f"- {v}." for v in verdicts)}

The drift-observer on the same deployed fleet, started once both rounds are measured (dry runs
as each layer's account, as the chart wires it): *sync* is start → every layer reported clean
(`Drifted=False`); goals from #29: peak RSS ≤ 64 MiB, connections bounded by a constant.
*Edit → drift* (p50 / p99, samples, background rate): once synced, 50 unrelated edits a second
run in the background (annotations of Services no layer applied); each sample changes a label
of one app's Service as another field manager and times until a watch of its layer shows the
drift in `status.drift` (the layer-controller then heals it). Peak RSS and sockets include
this phase.

| KCM QPS | layers | objects | sync | peak RSS | peak sockets | sockets after | edit → drift |
|---:|---:|---:|---:|---:|---:|---:|---:|
{chr(10).join(observed)}

What kube-apiserver served during the create round, per layer, by verb and resource
(`apiserver_request_total` before and after, every client together: the layer-controller, the
driver creating the layers, kube-controller-manager; watches not counted; calls under 0.01 per
layer left out), from the median run of each row:

| KCM QPS | layers | shards | requests per layer | by verb and resource |
|---:|---:|---:|---:|---|
{chr(10).join(served)}

CPU during the create round (the median run), from each process's `/proc` counters: the
machine has two cores, so *busy* near 2 cores means the round was CPU-bound; then per layer, in
milliseconds, by process (*driver*: this benchmark's own process, which creates the layers and
watches them and the Deployments).

| KCM QPS | layers | shards | create | CPU busy | kube-apiserver | etcd | kube-controller-manager | layer-controller | driver |
|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
{chr(10).join(cpu)}
{breakdown}
{side_by_side}
Published by Flux for v2.9.0 (flux-benchmark RESULTS.md; a 16-core runner, kind with 3 nodes,
kustomize-controller with 2 CPUs and `--concurrent` 20; **not run here**): 100 apps 26 s /
134 MiB, 500 apps 2 m 0 s / 183 MiB, 1,000 apps 4 m 13 s / 223 MiB.
""")
PY
  # docs/scaling.md's figures, from the same runs.
  python3 bench/fleet_summary.py fleet "$work/fleet.jsonl" "$work/fleet-direct.jsonl" "$work/fleet-anchor.jsonl"
}

fleet_large_bench() {
  # #56 item 5: the fleet stretched to BENCH_FLEET_LARGE_SIZE layers (default 10,000: 40,000
  # objects), one run of the plane alone and one of the layer-controller (no drift-observer),
  # each on a fresh plane, at client limit BENCH_FLEET_LARGE_QPS. Not part of `make bench`'s
  # default parts: it takes about half an hour on two cores.
  build_fleet layer-controller
  local driver="$target/driver/examples/fleet_bench"
  local n="${BENCH_FLEET_LARGE_SIZE:-10000}" qps="${BENCH_FLEET_LARGE_QPS:-200}"
  : > "$work/fleet-large.jsonl"; : > "$work/fleet-large-direct.jsonl"
  # One run on a fresh plane, its result appended to $1 only when it finished: a run that
  # breaks (the plane cannot hold it) is recorded as such, the part still writes what
  # finished, and its log says where it broke.
  large_run() {
    local into="$1" what="$2"; shift 2
    if env "$@" STRATA_BIN_DIR="$target/debug" BENCH_FLEET_LAYERS="$n" \
      STRATA_PLANE_CONTROLLER_MANAGER_QPS="$qps" scripts/with-plane.sh "$driver" > "$work/fleet-large.out"; then
      tail -n 1 "$work/fleet-large.out" >> "$into"
    else
      echo "bench: $what broke at $n layers (its log above)" >&2
    fi
  }
  large_run "$work/fleet-large-direct.jsonl" "the plane alone" BENCH_FLEET_DIRECT=1
  large_run "$work/fleet-large.jsonl" "the layer-controller's run" \
    LAYER_CONTROLLER_BIN="$target/release/layer-controller"
  python3 bench/fleet_summary.py large "$work/fleet-large.jsonl" "$work/fleet-large-direct.jsonl"
}

fleet_rollback_bench() {
  # #54: the fleet with `spec.rollback` on for every layer (each attempt's rendered manifests
  # kept in a Secret before it is applied), RUNS times at the largest size and last client
  # limit, beside the same fleet without it in the same part, so the cost of keeping
  # revisions is the difference of two rows measured together.
  build_fleet layer-controller
  local driver="$target/driver/examples/fleet_bench"
  local n qps
  n="${BENCH_FLEET_ROLLBACK_SIZE:-1000}"; qps="${BENCH_FLEET_ROLLBACK_QPS:-200}"
  : > "$work/fleet-rollback.jsonl"; : > "$work/fleet-rollback-direct.jsonl"
  # Each round: the plane alone (BENCH_FLEET_DIRECT, no deployer), then the layer-controller
  # without and with rollback, each on a fresh plane: every row is divided by the plane alone
  # measured in the same part (#56 item 1's method).
  for _ in $(seq 1 "$RUNS"); do
    env STRATA_BIN_DIR="$target/debug" BENCH_FLEET_DIRECT=1 \
      BENCH_FLEET_LAYERS="$n" STRATA_PLANE_CONTROLLER_MANAGER_QPS="$qps" \
      scripts/with-plane.sh "$driver" | tail -n 1 >> "$work/fleet-rollback-direct.jsonl"
    for rollback in "" 1; do
      env LAYER_CONTROLLER_BIN="$target/release/layer-controller" STRATA_BIN_DIR="$target/debug" \
        BENCH_FLEET_LAYERS="$n" STRATA_PLANE_CONTROLLER_MANAGER_QPS="$qps" \
        ${rollback:+BENCH_FLEET_ROLLBACK=1} \
        scripts/with-plane.sh "$driver" | tail -n 1 >> "$work/fleet-rollback.jsonl"
    done
  done
  python3 - "$work/fleet-rollback.jsonl" "$RUNS" "$work/fleet-rollback-direct.jsonl" <<'PY'
import json, sys, datetime, statistics
sys.path.insert(0, "bench"); import docs_section
from fleet_summary import load, plane_alone, ratio
runs = load(sys.argv[1])
alone = plane_alone(load(sys.argv[3]))
def times(r, rnd):
    x = ratio(r, alone, rnd)
    t = r[f"{rnd}_to_all_deployed_seconds"]
    return f"{t:.1f} s ({x:.2f}×)" if x is not None else f"{t:.1f} s (no plane-alone run)"
def alone_text(rnd):
    values = [f"{v[rnd]:.1f} s" for v in alone.values()]
    return ", ".join(values) if values else "(no plane-alone run finished)"
rows, medians = [], {}
for on in (False, True):
    rs = [r for r in runs if bool(r.get("rollback")) == on]
    for r in rs:
        kept = (f"{r['kept_bytes_per_layer']:.0f} B ({r['kept_revision_secrets']} Secrets)"
                if on else "—")
        req = r["requests_per_layer_create"]
        rows.append(f"| {'on' if on else 'off'} | {r['layers']} | {r['controller_manager_qps']} | {times(r, 'create')} "
                    f"| {times(r, 'upgrade')} | {r['controller_peak_rss_kib']/1024:.1f} MiB "
                    f"| {(r.get('cpu_seconds_create') or {}).get('layer-controller', 0.0):.1f} s "
                    f"| {req['GET']:.2f} / {req['PATCH']:.2f} | {kept} |")
    if rs:
        medians[on] = {k: statistics.median(r[k] for r in rs) for k in
                       ("create_to_all_deployed_seconds", "upgrade_to_all_deployed_seconds", "controller_peak_rss_kib")}
summary = ""
if len(medians) == 2:
    off, on = medians[False], medians[True]
    summary = ("Medians, rollback on / off: " + ", ".join(
        f"{label} {on[k]/scale:.1f} / {off[k]/scale:.1f} {unit}"
        for label, k, unit, scale in (("create", "create_to_all_deployed_seconds", "s", 1),
                                      ("upgrade", "upgrade_to_all_deployed_seconds", "s", 1),
                                      ("peak RSS", "controller_peak_rss_kib", "MiB", 1024))) + ".")
docs_section.write("fleet-rollback", f"""
## layer-controller: the fleet with `spec.rollback` on every layer

Command: `BENCH_ONLY=fleet-rollback bench/run.sh` (`BENCH_FLEET_ROLLBACK_SIZE`, default 1000;
`BENCH_FLEET_ROLLBACK_QPS`, default 200); {sys.argv[2]} run(s) each way, alternating, each on a
fresh local control plane, {datetime.date.today().isoformat()}. The fleet of the section above
(same driver, same rounds: create, then upgrade by one variable), once without and once with
`spec.rollback: {{enabled: true}}` on every layer (`BENCH_FLEET_ROLLBACK=1`): each new attempt's
rendered manifests are compressed and kept in the layer's Secret `strata-revisions.<layer>`
before they are applied: one apply of that Secret per new attempt, and a GET of it only when
the controller did not write it last itself (a restart, another leader). *Kept* is the
Secrets' data per layer after the upgrade round (two revisions kept: the upgrade's and the
create's), read from the API server. Ratios are to the plane alone (`BENCH_FLEET_DIRECT=1`: the
driver applies every app's objects itself, no deployer), run {sys.argv[2]} time(s) in this part
at the same size and client limit, each on a fresh plane: medians create
{alone_text('create')}, upgrade {alone_text('upgrade')}.

| rollback | layers | KCM QPS | create (÷ plane alone) | upgrade (÷ plane alone) | peak RSS | layer-controller CPU, create | its GET / PATCH per layer, create | kept per layer |
|---|---:|---:|---:|---:|---:|---:|---:|---:|
{chr(10).join(rows)}

{summary}
""")
PY
}

# A node drain's eviction storm through kube-apiserver (#55 item 3) with the pod-eviction
# webhook of Strata's rollout-operator and, when its binary is given
# (`ANCHOR_ROLLOUT_OPERATOR_BIN`), of the anchor's, both started with the anchor's command line
# at its defaults; each run on a fresh plane (kwok nodes: the storm is about the webhook, not
# the pods), alternating. Correctness is judged from outside both binaries (answers, a watch
# of the pods); the binary's API requests come from kube-apiserver's audit log.
drain_bench() {
  local anchor="${ANCHOR_ROLLOUT_OPERATOR_BIN:-}" runs="${BENCH_DRAIN_RUNS:-$RUNS}" who bin
  local whos="strata"
  [[ -n "$anchor" ]] && whos="strata anchor"
  echo "bench: drain storm ($whos)" >&2
  cargo build --release -p rollout-operator >&2
  cargo build -p strata-e2e --bins --example drain_bench >&2
  # Twice: at the anchor's defaults (its client-side limit of 5 requests/s per API group), and
  # with that limit off (`-kubernetes.client-qps=0`, the anchor's own way to turn it off).
  local limit
  for limit in defaults unlimited; do
    for who in $whos; do : > "$work/drain-$limit-$who.jsonl"; done
  done
  for _ in $(seq 1 "$runs"); do
    for limit in defaults unlimited; do
      local more=""
      [[ "$limit" == unlimited ]] && more="-kubernetes.client-qps=0"
      for who in $whos; do
        if [[ "$who" == strata ]]; then bin="$target/release/rollout-operator"; else bin="$anchor"; fi
        env WEBHOOK_BIN="$bin" BENCH_DRAIN_ARGS="$more" STRATA_BIN_DIR="$target/debug" STRATA_PLANE_REAL_NODE=0 \
          scripts/with-plane.sh "$target/debug/examples/drain_bench" \
          | tail -n 1 >> "$work/drain-$limit-$who.jsonl"
        # The anchor logs every refusal: gigabytes over a few storms.
        find "${TMPDIR:-/tmp}/strata-bench-logs" -name '*.log' -size +50M -delete 2>/dev/null || true
      done
    done
  done
  local anchor_sum=""
  [[ -n "$anchor" ]] && anchor_sum="$(sha256sum "$anchor" | cut -c1-12)"
  python3 - "$work" "$runs" "$anchor_sum" <<'PY'
import json, sys, datetime
sys.path.insert(0, "bench"); import docs_section
work, runs_n, anchor_sum = sys.argv[1], sys.argv[2], sys.argv[3]
whos = ["strata"] + (["anchor"] if anchor_sum else [])
limits = {"defaults": "the anchor's defaults (client limit 5/s per API group)", "unlimited": "client limit off (`-kubernetes.client-qps=0`)"}
side = {(limit, who): [json.loads(l) for l in open(f"{work}/drain-{limit}-{who}.jsonl") if l.strip()]
        for limit in limits for who in whos}
def median(values):
    values = sorted(values)
    return values[len(values) // 2]
def answers(r):
    return ", ".join(f"{code}: {n}" for code, n in sorted(r["answers"].items()))
def requests(r):
    top = sorted(r["api_requests_by"].items(), key=lambda kv: -kv[1])[:4]
    return ", ".join(f"{k} {v}" for k, v in top)
rows = []
for limit, who in side:
    label = ("Strata" if who == "strata" else "anchor") + f", {limit}"
    for i, r in enumerate(side[(limit, who)]):
        breaches = "; ".join(r["breaches"]) or "none"
        rows.append(f"| {label}, run {i + 1} | {r['evicted']}/{r['pods']} | {r['seconds']:.1f} s | {r['evictions']} ({r['evictions_per_second']:.0f}/s) | "
                    f"{answers(r)} | {r['p50_ms']:.1f} ms | {r['p99_ms']:.1f} ms | {r['max_ms']:.0f} ms | {r['api_requests']} ({r['api_requests_per_second']:.1f}/s): {requests(r)} | "
                    f"{r['server_cpu_seconds']:.1f} s | {r['peak_rss_kib']/1024:.0f} MiB | {breaches} |")
def figures(limit, who):
    rs = side[(limit, who)]
    return {
        "evicted": median([r["evicted"] for r in rs]), "pods": rs[0]["pods"],
        "seconds": median([r["seconds"] for r in rs]),
        "rate": median([r["evictions_per_second"] for r in rs]),
        "p99": median([r["p99_ms"] for r in rs]),
        "api": median([r["api_requests_per_second"] for r in rs]),
        "unexpected": sum(r["unexpected"] for r in rs),
        "breaches": sum(len(r["breaches"]) for r in rs),
    }
lines = []
for limit, text in limits.items():
    for who in whos:
        f = figures(limit, who)
        lines.append(f"- **{'Strata' if who == 'strata' else 'anchor'}, {text}: {f['evicted']}/{f['pods']} pods evicted in {f['seconds']:.1f} s "
                     f"at {f['rate']:.0f} evictions/s, review p99 {f['p99']:.1f} ms, {f['api']:.1f} API requests/s, "
                     f"{f['unexpected']} answers other than 201/429, {f['breaches']} budget breaches**")
    if anchor_sum:
        s, a = figures(limit, "strata"), figures(limit, "anchor")
        ratio = s["p99"] / a["p99"] if a["p99"] else float("nan")
        both = s["evicted"] == s["pods"] and a["evicted"] == a["pods"]
        lines.append(f"  - p99 Strata / anchor = {ratio:.2f}" + ("" if both else
                     " — not a like-for-like figure: one side did not finish the storm, and its fast answers are refusals it could not decide (see its answers)"))
lines.append("(medians over the runs; answer counts and breaches summed over them)")
if anchor_sum:
    anchor_text = (f"the anchor's binary (sha256 {anchor_sum}…, built by hand outside this repository from its source, "
                   "github.com/grafana/rollout-operator)")
else:
    anchor_text = "the anchor not measured (no `ANCHOR_ROLLOUT_OPERATOR_BIN`)"
r0 = side[("defaults", "strata")][0]
docs_section.write("drain", f"""
## Drain storm: pod evictions through kube-apiserver, beside the anchor

Command: `ANCHOR_ROLLOUT_OPERATOR_BIN=<path> make bench` (this part alone:
`ANCHOR_ROLLOUT_OPERATOR_BIN=<path> BENCH_ONLY=drain bench/run.sh`); {runs_n} runs each,
{datetime.date.today().isoformat()}, Strata's release `rollout-operator` and {anchor_text}, each started with
**the anchor's command line** (`-kubernetes.namespace`, `-server-tls.enabled=true`,
`-server-tls.port`, `-server-tls.self-signed-cert.dns-name=localhost`), once at its defaults (so
both keep the anchor's client-side limit of 5 requests/s per API group, burst 10) and once with
`-kubernetes.client-qps=0` (the limit off), as a ServiceAccount of its own, on a fresh local
control plane per run, alternating. kube-apiserver calls the binary's `/admission/pod-eviction`
(a ValidatingWebhookConfiguration, the CA injected by the binary itself). The storm
(`e2e/examples/drain_bench.rs`): {r0['groups']} zone-aware groups of three zones × {r0['pods'] // r0['groups'] // 3} pods
({r0['pods']} pods on kwok nodes), one ZoneAwarePodDisruptionBudget each (`maxUnavailable: 1`); every pod evicted
at once, each refusal retried {r0['retry_ms']} ms later, until each pod was evicted once or {r0['limit_s']} s passed. Latency is
each eviction call as its caller saw it (the webhook's review included); "API requests" are the binary's own
requests to kube-apiserver during the storm, counted from kube-apiserver's audit log; budget breaches come
from the driver's own watch of the pods (a zone with two pods unavailable at once, or a group with two zones).

| binary | evicted | storm | evictions | answers | p50 | p99 | max | binary's API requests | CPU | peak RSS | budget breaches |
|---|---:|---:|---:|---|---:|---:|---:|---|---:|---:|---|
{chr(10).join(rows)}

{chr(10).join(lines)}
""")
print("bench: drain: " + " / ".join(lines), file=sys.stderr)
PY
}

case "${BENCH_ONLY:-}" in
  fleet) fleet_bench; exit 0 ;;
  fleet-rollback) fleet_rollback_bench; exit 0 ;;
  fleet-large) fleet_large_bench; exit 0 ;;
  anchor) anchor_bench; exit 0 ;;
  drain) drain_bench; exit 0 ;;
  layers) layers_bench; exit 0 ;;
  rollout) rollout_bench; exit 0 ;;
  webhook) webhook_bench; exit 0 ;;
  drift) drift_bench; exit 0 ;;
  failfast) failfast_bench; exit 0 ;;
  render) render_bench; exit 0 ;;
esac

if [[ ! -x "$go_bin" ]]; then
  echo "bench: building the Go kstatus harness (cli-utils $cli_utils_version)" >&2
  mkdir -p "$(dirname "$go_bin")"
  (cd bench/kstatus-go && GOFLAGS=-mod=mod go build -o "$go_bin.tmp" . && mv "$go_bin.tmp" "$go_bin")
fi
echo "bench: building the Rust harness (release)" >&2
cargo build --release -p core-status --no-default-features --example status_bench >&2
rust_bin="$target/release/examples/status_bench"

median() { # file with one JSON line per run → the line with the median objects_per_second
  python3 -c '
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
runs.sort(key=lambda r: r["objects_per_second"])
print(json.dumps(runs[len(runs) // 2]))' "$1"
}
measure() { # objects iterations label → "go-json rust-compact-json rust-full-json" medians, one per line
  local n="$1" it="$2" label="$3" corpus="$work/corpus-$1.json"
  "$rust_bin" gen "$corpus" "$n"
  : > "$work/go-$label.jsonl"; : > "$work/rust-$label.jsonl"; : > "$work/rust-full-$label.jsonl"
  for _ in $(seq 1 "$RUNS"); do
    "$go_bin" "$corpus" "$it" >> "$work/go-$label.jsonl"
    "$rust_bin" run "$corpus" "$it" compact >> "$work/rust-$label.jsonl"
    "$rust_bin" run "$corpus" "$it" full >> "$work/rust-full-$label.jsonl"
  done
  median "$work/go-$label.jsonl"
  median "$work/rust-$label.jsonl"
  median "$work/rust-full-$label.jsonl"
}
# The required corpus (>= 10,000 objects: bigger than the CPU caches), and a small one that
# stays cache-resident, which isolates the cost of the rules from memory latency.
mapfile -t large < <(measure "$OBJECTS" "$ITERATIONS" large)
mapfile -t small < <(measure 400 $((OBJECTS * ITERATIONS / 400)) small)
# Every object's (status, message) from Go kstatus and from each Strata path, compared line by
# line: the benchmark fails on the first object they disagree on.
STATUS_OUT="$work/go-objects.tsv" "$go_bin" "$work/corpus-$OBJECTS.json" 1 > /dev/null
for mode in compact full decode; do
  STATUS_OUT="$work/rust-$mode-objects.tsv" "$rust_bin" run "$work/corpus-$OBJECTS.json" 1 "$mode" > /dev/null
  if ! cmp -s "$work/go-objects.tsv" "$work/rust-$mode-objects.tsv"; then
    echo "bench: Strata ($mode) and Go kstatus disagree; first differences (line: Go | Strata):" >&2
    paste -d'|' "$work/go-objects.tsv" "$work/rust-$mode-objects.tsv" | awk -F'|' '$1 != $2 {print NR ": " $1 " | " $2; if (++n == 5) exit}' >&2
    exit 1
  fi
done
agreed="$(wc -l < "$work/go-objects.tsv")"
# End to end (decode the file, then compute), as a bulk status pays it.
: > "$work/go-decode.jsonl"; : > "$work/rust-decode.jsonl"
for _ in $(seq 1 "$RUNS"); do
  "$go_bin" "$work/corpus-$OBJECTS.json" "$DECODE_PASSES" decode >> "$work/go-decode.jsonl"
  "$rust_bin" run "$work/corpus-$OBJECTS.json" "$DECODE_PASSES" decode >> "$work/rust-decode.jsonl"
done
go_decode="$(median "$work/go-decode.jsonl")"; rust_decode="$(median "$work/rust-decode.jsonl")"
go_result="${large[0]}"; rust_result="${large[1]}"; rust_full="${large[2]}"
echo "go:   $go_result" >&2
echo "rust: $rust_result" >&2
echo "rust (full trees): $rust_full" >&2
echo "go (400 objects):   ${small[0]}" >&2
echo "rust (400 objects): ${small[1]}" >&2
echo "go (decode):   $go_decode" >&2
echo "rust (decode): $rust_decode" >&2

python3 - "$go_result" "$rust_result" "$OBJECTS" "$ITERATIONS" "$RUNS" "$cli_utils_version" "${small[0]}" "${small[1]}" "$go_decode" "$rust_decode" "$rust_full" "$DECODE_PASSES" "${small[2]}" "$agreed" <<'PY'
import json, sys, datetime
sys.path.insert(0, "bench"); import docs_section
go, rust = json.loads(sys.argv[1]), json.loads(sys.argv[2])
objects, iterations, runs, version = sys.argv[3:7]
go_small, rust_small = json.loads(sys.argv[7]), json.loads(sys.argv[8])
go_dec, rust_dec = json.loads(sys.argv[9]), json.loads(sys.argv[10])
rust_full, passes, rust_full_small = json.loads(sys.argv[11]), sys.argv[12], json.loads(sys.argv[13])
ratio_dec = rust_dec["objects_per_second"] / go_dec["objects_per_second"]
ratio = rust["objects_per_second"] / go["objects_per_second"]
ratio_full = rust_full["objects_per_second"] / go["objects_per_second"]
ratio_small = rust_small["objects_per_second"] / go_small["objects_per_second"]
agreed = int(sys.argv[14])
def row(name, r):
    return f"| {name} | {r['objects_per_second']:,.0f} | {r['peak_rss_kib']/1024:.1f} MiB | `{json.dumps(r['statuses'], sort_keys=True)}` |"
docs_section.write("core-status", f"""
## core-status: status of a mixed corpus vs Go kstatus

Command: `make bench` (= `bench/run.sh`, BENCH_OBJECTS={objects} BENCH_ITERATIONS={iterations} BENCH_RUNS={runs} BENCH_DECODE_PASSES={passes};
this part alone: `BENCH_ONLY=core-status bench/run.sh`); median of {runs} runs each, same machine, same run,
{datetime.date.today().isoformat()}. Corpus: {objects} objects (JSON array) generated deterministically by
`crates/core-status/examples/status_bench.rs` (every special-cased kind in several states, plus
custom resources). Go side: `sigs.k8s.io/cli-utils {version}` `status.Compute` (`bench/kstatus-go`).
Peak RSS is each process's peak from the moment loading is done (the counter is reset then),
so it is what the engine holds and uses, not how the harness read the file.

**Agreement:** every one of the {agreed} objects gets the same status and message from Go kstatus
and from each Strata path below (compared object by object; the benchmark fails on the first
difference).

**1. End to end** — each of {passes} passes decodes the file and computes every status (Go:
`encoding/json` + `UnmarshalJSON` + `Compute`; Strata: `Observed::many_from_json` + `evaluate`):

| engine | objects/s | peak RSS | statuses (first pass) |
|---|---:|---:|---|
{row("Go kstatus", go_dec)}
{row("Strata core-status", rust_dec)}

**End-to-end ratio (Strata / Go): {ratio_dec:.1f}×** (goal ≥ 10×: {'met' if ratio_dec >= 10 else 'not met'}).

**2. Same input** — {iterations} passes over full decoded objects, decoded before the clock starts (Go:
`unstructured.Unstructured`; Strata: `serde_json::Value` trees):

| engine | objects/s | peak RSS | statuses (first pass) |
|---|---:|---:|---|
{row("Go kstatus", go)}
{row("Strata core-status (full Value trees)", rust_full)}

**Same-input ratio: {ratio_full:.1f}×** (goal ≥ 10×: {'met' if ratio_full >= 10 else 'not met'}).

*Secondary, not like for like:* Strata on its compact projection (`core_status::Observed`, only the
fields the rules read, borrowed from the file's bytes — what `strata status` holds), same passes:
{rust['objects_per_second']:,.0f} objects/s, peak RSS {rust['peak_rss_kib']/1024:.1f} MiB ({ratio:.1f}× Go's
same-input figure, which includes no projection step). Cache-resident corpus (400 objects,
{go_small['iterations']} passes): Go {go_small['objects_per_second']:,.0f} objects/s, Strata full trees
{rust_full_small['objects_per_second']:,.0f}, compact {rust_small['objects_per_second']:,.0f}.
""")
print(f"bench: Strata/Go end to end {ratio_dec:.1f}x, same input {ratio_full:.1f}x; {agreed} objects agree; written to docs/benchmarks.md", file=sys.stderr)
PY

# YAML input, end to end as a user runs it: `strata status -f dump.yaml -o json` on a YAML
# List in `kubectl get -o yaml`'s style (written by sigs.k8s.io/yaml) of at least 10 MB, against
# the Go harness converting the same file with sigs.k8s.io/yaml (as kubectl does) and computing
# every status; whole processes, wall time and peak RSS from wait4, median of RUNS.
YAML_OBJECTS="${BENCH_YAML_OBJECTS:-13000}"
echo "bench: building the strata CLI (release) for the YAML input figures" >&2
cargo build --release -p strata-cli >&2
"$rust_bin" gen "$work/corpus-$YAML_OBJECTS.json" "$YAML_OBJECTS"
"$go_bin" to-yaml "$work/corpus-$YAML_OBJECTS.json" "$work/dump-$YAML_OBJECTS.yaml"
STATUS_OUT="$work/go-yaml-objects.tsv" "$go_bin" "$work/dump-$YAML_OBJECTS.yaml" 1 yaml > /dev/null
python3 - "$target/release/strata" "$go_bin" "$work/dump-$YAML_OBJECTS.yaml" "$work/corpus-$YAML_OBJECTS.json" "$work/go-yaml-objects.tsv" "$RUNS" "$work/corpus-$OBJECTS.json" <<'PY'
import datetime, json, os, statistics, subprocess, sys
sys.path.insert(0, "bench"); import docs_section
strata, go, dump, corpus_json, go_objects, runs, core_corpus = sys.argv[1:8]
runs = int(runs)
now = "--now=" + datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

def measure(argv):
    """Wall seconds and peak RSS (KiB) of one whole process, its stdout discarded."""
    import time
    start = time.perf_counter()
    with open(os.devnull, "wb") as devnull:
        proc = subprocess.Popen(argv, stdout=devnull)
        _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if status != 0:
        sys.exit(f"bench: {argv} failed ({status})")
    return seconds, usage.ru_maxrss

def median_run(argv):
    results = sorted((measure(argv) for _ in range(runs)), key=lambda r: r[0])
    return results[len(results) // 2]

# Agreement: every object's status and message from Strata's YAML path and from Go on the YAML.
out = subprocess.run([strata, "status", "-f", dump, "-o", "json", now], check=True, capture_output=True).stdout
mine = ["%s\t%s" % (l["status"], l["message"].replace("\n", " ").replace("\t", " ")) for l in json.loads(out)]
theirs = open(go_objects).read().splitlines()
if mine != theirs:
    bad = next(i for i, (a, b) in enumerate(zip(mine + [""], theirs + [""])) if a != b)
    sys.exit(f"bench: Strata (YAML) and Go kstatus disagree at object {bad}: {mine[bad:bad+1]} vs {theirs[bad:bad+1]}")
size = os.path.getsize(dump)
objects = len(mine)
strata_yaml = median_run([strata, "status", "-f", dump, "-o", "json", now])
strata_json = median_run([strata, "status", "-f", corpus_json, "-o", "json", now])
# The strict policy with the built-in rule pack (and the workloads' pods) on the same objects.
strata_strict = median_run([strata, "status", "-f", corpus_json, "-o", "json", now, "--strict"])
strict_ratio = strata_strict[0] / strata_json[0]
# The same two on the core-status section's corpus (BENCH_OBJECTS objects, JSON array).
# Counted in a child: a child's peak RSS includes what this process held when it forked, so
# loading the corpus here would inflate every measurement after it.
core_objects = int(subprocess.run([sys.executable, "-c", "import json, sys; print(len(json.load(open(sys.argv[1]))))", core_corpus],
                                  check=True, capture_output=True, text=True).stdout)
core_default = median_run([strata, "status", "-f", core_corpus, "-o", "json", now])
core_strict = median_run([strata, "status", "-f", core_corpus, "-o", "json", now, "--strict"])
core_strict_ratio = core_strict[0] / core_default[0]
go_yaml = median_run([go, dump, "1", "yaml"])
ratio = go_yaml[0] / strata_yaml[0]
mb = size / 1e6
per_10mb = strata_yaml[0] * 10e6 / size
mem_ratio = strata_yaml[1] * 1024 / size
def row(name, r):
    return f"| {name} | {r[0]:.3f} s | {r[1]/1024:.1f} MiB | {r[1]*1024/size:.2f}× |"
docs_section.write("core-status-yaml", f"""
## core-status: YAML input end to end (`strata status` on a cluster dump)

Command: `make bench` (this part runs with `BENCH_ONLY=core-status bench/run.sh`; BENCH_YAML_OBJECTS={objects},
BENCH_RUNS={runs}); {datetime.date.today().isoformat()}, same machine, same run. Input: {objects} objects of the
core-status corpus as one YAML `List` of {mb:.1f} MB written by `sigs.k8s.io/yaml` (the style of
`kubectl get -o yaml`). Whole processes: wall time from start to exit and peak RSS (wait4), median
of {runs} runs. Strata: `strata status -f dump.yaml -o json` (release build; reads, converts, computes
and prints every status). Go: the `bench/kstatus-go` harness in `yaml` mode (`sigs.k8s.io/yaml`
`YAMLToJSON`, as kubectl reads YAML, then `UnmarshalJSON` and `status.Compute` per object; prints only
counts). **Agreement:** all {objects} objects get the same status and message from both.

| run | wall time | peak RSS | peak RSS / input |
|---|---:|---:|---:|
{row("Strata `strata status` on the YAML", strata_yaml)}
{row("Strata `strata status` on the same objects as JSON (reference)", strata_json)}
{row("Go kstatus + sigs.k8s.io/yaml on the YAML", go_yaml)}
{row("Strata `strata status --strict` (rule pack, pods) on the JSON", strata_strict)}
{row(f"Strata `strata status` on the core-status corpus ({core_objects} objects, JSON)", core_default)}
{row(f"Strata `strata status --strict` (rule pack, pods) on the core-status corpus", core_strict)}

**Ratio (Go time / Strata time): {ratio:.1f}×.** Goals: ≤ 0.5 s per 10 MB of YAML — {per_10mb:.3f} s
({'met' if per_10mb <= 0.5 else 'not met'}); peak memory ≤ 3× the input — {mem_ratio:.2f}×
({'met' if mem_ratio <= 3 else 'not met'}). `--strict` with the rule pack: {core_strict_ratio:.2f}× the default
policy's time on the {core_objects}-object core-status corpus, {strict_ratio:.2f}× on the {objects} objects above (goal
≤ 1.3×: {'met' if max(core_strict_ratio, strict_ratio) <= 1.3 else 'not met'}). Both policies decode each object into the compact projection; `--strict`
keeps each object's text beside it and decodes in full only what its rules must read whole (kinds
a health expression covers, workloads with pods in the input, pods a workload may own).
(*peak RSS / input* is against the YAML file's size on every row.) A measured process's peak RSS
includes this harness's own at the fork (Linux keeps the high-water mark across exec): the harness
holds nothing large while it measures.
""")
print(f"bench: YAML {mb:.1f} MB: Strata {strata_yaml[0]:.3f} s / {strata_yaml[1]/1024:.1f} MiB, Go {go_yaml[0]:.3f} s / {go_yaml[1]/1024:.1f} MiB ({ratio:.1f}x)", file=sys.stderr)
PY

failfast_bench

if [[ "${BENCH_ONLY:-}" != core-status ]]; then
  layers_bench
  fleet_bench
  fleet_rollback_bench
  drift_bench
  render_bench
  rollout_bench
  webhook_bench
  anchor_bench
  drain_bench
fi
