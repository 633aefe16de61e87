#!/usr/bin/env python3
"""Writes Strata's Grafana dashboards (one per service, plus an overview of the shared
controller metrics) and the Prometheus alert rules next to this file.

The JSON and YAML it writes are committed; edit this file and run `make dashboards`. A test
(`e2e/tests/metrics_catalog.rs`) checks that every metric in docs/metrics.md is
used by a panel or an alert and that nothing here names a metric that does not exist.
"""

import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
SERVICES = ["layer-controller", "drift-observer", "rollout-operator", "admission-webhook"]
SEL = 'cluster=~"$cluster", namespace=~"$namespace"'
# The services that call pods (prepare-downscale, delayed downscale): only they export the
# pod-call metrics, so only their dashboards chart them.
CALLS_PODS = ["rollout-operator", "admission-webhook"]
# Where each alert's runbook lives: a section of docs/runbooks.md in the project's repository.
REPOSITORY = next(line.split('"')[1] for line in (HERE.parent / "Cargo.toml").read_text().splitlines()
                  if line.startswith("repository = "))
RUNBOOKS = f"{REPOSITORY}/blob/main/docs/runbooks.md"


def prefix(service):
    return service.replace("-", "_")


# (dashboard uid, panel id, panel title, refId, why, witness) of the queries the e2e scenario may
# leave without series; filled by Board.panel. The witness is a query that returns series exactly
# when what the reason says did not happen did happen: e2e/tests/observability.rs checks that it
# is empty too, so a panel is never let off for a query that is simply wrong.
MAY_BE_EMPTY = []
# Series that exist only once something goes wrong, which the e2e scenario does not cause.
NO_ERRORS = "only when a reconcile fails; the e2e scenario does not set out to make one fail"
NO_THROTTLING = "only when the client-side limit or kube-apiserver throttles; the e2e scenario stays under both"
NO_POD_CALLS = ("only for the rollout-operator's pod calls (delayed downscale), exercised by "
                "rollout.rs, not by the e2e scenario of observability.rs (which drives the "
                "admission-webhook's prepare-downscale calls)")


# Every replica of every service exports its `<service>_build_info`: the variables list the
# clusters and namespaces that run Strata.
# Our webhooks as kube-apiserver names them: `<webhook>-<namespace>.strata.dev`, or the
# rollout-operator's compatibility names (`<webhook>-<namespace>`).
OUR_WEBHOOKS = ".+\\\\.strata\\\\.dev|(no-downscale|prepare-downscale|pod-eviction|zpdb-validation)-.+"
BUILD_INFO = "{__name__=~\"(" + "|".join(prefix(s) for s in SERVICES) + ")_build_info\"}"


class Board:
    """A dashboard laid out on Grafana's 24-column grid, two panels per row."""

    def __init__(self, uid, title, description):
        self.uid, self.title, self.description = uid, title, description
        self.panels, self.y, self.x, self.next_id = [], 0, 0, 1

    def row(self, title):
        if self.x:
            self.y, self.x = self.y + 8, 0
        self.panels.append({"id": self.next_id, "type": "row", "title": title, "collapsed": False,
                            "gridPos": {"x": 0, "y": self.y, "w": 24, "h": 1}, "panels": []})
        self.next_id += 1
        self.y += 1

    def panel(self, title, description, targets, unit="short", kind="timeseries", width=12,
              may_be_empty=None):
        """`may_be_empty`: {refId: reason} for queries that may return no series in the e2e
        scenario of e2e/tests/observability.rs (written to e2e-empty.tsv); every other query
        must return data there."""
        for ref_id, (reason, witness) in (may_be_empty or {}).items():
            MAY_BE_EMPTY.append((self.uid, self.next_id, title, ref_id, reason, witness))
        if self.x + width > 24:
            self.y, self.x = self.y + 8, 0
        panel = {
            "id": self.next_id, "type": kind, "title": title, "description": description,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"x": self.x, "y": self.y, "w": width, "h": 8},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {"legend": {"displayMode": "table", "placement": "bottom", "showLegend": True}},
            "targets": [{"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend,
                         "datasource": {"type": "prometheus", "uid": "${datasource}"}}
                        for i, (expr, legend) in enumerate(targets)],
        }
        self.panels.append(panel)
        self.next_id += 1
        self.x += width
        if self.x >= 24:
            self.y, self.x = self.y + 8, 0

    def json(self):
        return {
            "uid": self.uid, "title": self.title, "description": self.description,
            "tags": ["strata"], "timezone": "utc", "schemaVersion": 39, "version": 1,
            "editable": True, "refresh": "30s", "time": {"from": "now-6h", "to": "now"},
            "templating": {"list": [
                {"name": "datasource", "label": "Data source", "type": "datasource",
                 "query": "prometheus", "current": {}, "hide": 0},
                # One Prometheus often holds several clusters' series (Thanos, Mimir, federation);
                # without a `cluster` label "All" matches the series that have none.
                {"name": "cluster", "label": "Cluster", "type": "query",
                 "datasource": {"type": "prometheus", "uid": "${datasource}"},
                 "query": {"query": f"label_values({BUILD_INFO}, cluster)", "refId": "cluster"},
                 "definition": f"label_values({BUILD_INFO}, cluster)", "includeAll": True,
                 "multi": True, "allValue": ".*", "current": {"text": "All", "value": "$__all"},
                 "refresh": 2},
                {"name": "namespace", "label": "Namespace", "type": "query",
                 "datasource": {"type": "prometheus", "uid": "${datasource}"},
                 "query": {"query": f'label_values({BUILD_INFO}{{cluster=~"$cluster"}}, namespace)',
                           "refId": "namespace"},
                 "definition": f'label_values({BUILD_INFO}{{cluster=~"$cluster"}}, namespace)',
                 "includeAll": True, "multi": True,
                 "allValue": ".*", "current": {"text": "All", "value": "$__all"}, "refresh": 2},
            ]},
            "annotations": {"list": []},
            "panels": self.panels,
        }


def quantiles(histogram, by=""):
    """p50/p90/p99 targets of a histogram (or only p99 per `by` label, legend `{{by}}`)."""
    rate = f"rate({histogram}_bucket{{{SEL}}}[$__rate_interval])"
    if by:
        return [(f"histogram_quantile(0.99, sum by (le, {by}) ({rate}))", f"{{{{{by}}}}}")]
    return [(f"histogram_quantile({q}, sum by (le) ({rate}))", f"p{int(q * 100)}")
            for q in (0.5, 0.9, 0.99)]


def controller_rows(board, service, requests=True):
    """The shared controller metrics of one service (core-k8s)."""
    p = prefix(service)
    board.row(f"{service}: controller")
    board.panel("Reconciles", "Reconciles per second, and failed ones by error category.", [
        (f"sum(rate({p}_reconcile_total{{{SEL}}}[$__rate_interval]))", "reconciles"),
        (f"sum by (category) (rate({p}_reconcile_errors_total{{{SEL}}}[$__rate_interval]))",
         "errors: {{category}}"),
    ], unit="ops", may_be_empty={"B": (NO_ERRORS, f"{p}_reconcile_errors_total > 0")})
    board.panel("Reconcile duration", "Quantiles of the time one reconcile takes.",
                quantiles(f"{p}_reconcile_duration_seconds"), unit="s")
    board.panel("Leader", "1 for the replica holding the Lease; exactly one should.", [
        (f"max by (pod) ({p}_leader{{{SEL}}})", "{{pod}}"),
    ], kind="stat", width=24)
    process_rows(board, service)
    if requests:
        http_rows(board, service)


def of_service(expr, service):
    """A `process_*` series (every client library's unprefixed names) kept only for the
    targets that are this service: those exporting its build_info, joined on the scrape
    target (job, instance), which every Prometheus setup has."""
    return f"({expr} * on (job, instance) group_left (pod) {prefix(service)}_build_info{{{SEL}}})"


def process_rows(board, service):
    """Version, CPU and memory of each replica."""
    p = prefix(service)
    board.panel("Version", "The version and commit each replica runs (build_info).", [
        (f"max by (pod, version, commit) ({p}_build_info{{{SEL}}})", "{{pod}}: {{version}} {{commit}}"),
    ], kind="table", width=8)
    board.panel("CPU", "CPU time used per second by each replica (user and system).", [
        (f"max by (pod) ({of_service('rate(process_cpu_seconds_total[$__rate_interval])', service)})",
         "{{pod}}"),
    ], unit="percentunit", width=8)
    board.panel("Memory", "Resident and virtual memory of each replica.", [
        (f"max by (pod) ({of_service('process_resident_memory_bytes', service)})", "resident: {{pod}}"),
        (f"max by (pod) ({of_service('process_virtual_memory_bytes', service)})", "virtual: {{pod}}"),
    ], unit="bytes", width=8)
    board.panel("File descriptors and threads", "Open file descriptors (sockets to the API server "
                "included) against the limit, and OS threads, by replica.", [
        (f"max by (pod) ({of_service('process_open_fds', service)})", "open: {{pod}}"),
        (f"max by (pod) ({of_service('process_max_fds', service)})", "limit: {{pod}}"),
        (f"max by (pod) ({of_service('process_threads', service)})", "threads: {{pod}}"),
    ], width=12)
    board.panel("Up for", "Time since each replica started; a short one after a long one is a "
                "restart.", [
        (f"time() - max by (pod) ({of_service('process_start_time_seconds', service)})", "{{pod}}"),
    ], unit="s", kind="stat", width=12)
    board.panel("Trace spans", "Spans per second sent to the OTLP collector, and spans lost "
                "(queue full, collector failing or refusing); empty while traces are not exported.", [
        (f"sum by (pod) (rate({p}_traces_exported_total{{{SEL}}}[$__rate_interval]))", "exported: {{pod}}"),
        (f"sum by (pod) (rate({p}_traces_dropped_total{{{SEL}}}[$__rate_interval]))", "dropped: {{pod}}"),
    ], unit="ops", width=24)


def http_rows(board, service):
    """Requests served, Kubernetes API requests made and calls to pods (core-k8s)."""
    p = prefix(service)
    board.row(f"{service}: requests")
    req = f"{p}_request_duration_seconds"
    board.panel("Requests served by status", "HTTP requests per second to the admin and webhook "
                "servers, by status class.", [
        (f'sum by (status) (label_replace(rate({req}_count{{{SEL}}}[$__rate_interval]), '
         f'"status", "${{1}}xx", "status_code", "([0-9]).."))', "{{status}}"),
    ], unit="reqps")
    board.panel("Request latency by route (p99)", "99th percentile of serving time by route.",
                quantiles(req, by="route"), unit="s")
    board.panel("Message sizes", "Average request and response body size by route.", [
        (f"sum by (route) (rate({p}_request_message_bytes_sum{{{SEL}}}[$__rate_interval])) / "
         f"sum by (route) (rate({p}_request_message_bytes_count{{{SEL}}}[$__rate_interval]))",
         "request: {{route}}"),
        (f"sum by (route) (rate({p}_response_message_bytes_sum{{{SEL}}}[$__rate_interval])) / "
         f"sum by (route) (rate({p}_response_message_bytes_count{{{SEL}}}[$__rate_interval]))",
         "response: {{route}}"),
    ], unit="bytes")
    board.panel("Requests in flight", "Requests being served, by route.", [
        (f"sum by (route) ({p}_inflight_requests{{{SEL}}})", "{{route}}"),
    ])
    api = f"{p}_kubernetes_api_client_request_duration_seconds"
    board.panel("Kubernetes API requests", "Requests per second to the API server by method and "
                "resource, requests given up waiting for a client-side token, and requests sent again "
                "because the API server answered 429 or was overloaded.", [
        (f"sum by (method, path) (rate({api}_count{{{SEL}}}[$__rate_interval]))", "{{method}} {{path}}"),
        (f"sum by (api_group) (rate({p}_kubernetes_api_client_rate_limited_requests_total{{{SEL}}}[$__rate_interval]))",
         "rate-limited: {{api_group}}"),
        (f"sum by (api_group) (rate({p}_kubernetes_api_client_retried_requests_total{{{SEL}}}[$__rate_interval]))",
         "retried (throttled/overloaded): {{api_group}}"),
    ], unit="reqps", may_be_empty={
        "B": (NO_THROTTLING, f"{p}_kubernetes_api_client_rate_limited_requests_total > 0"),
        "C": (NO_THROTTLING, f"{p}_kubernetes_api_client_retried_requests_total > 0")})
    board.panel("Kubernetes API latency", "Average time to an answer by method and resource.", [
        (f"sum by (method, path) (rate({api}_sum{{{SEL}}}[$__rate_interval])) / "
         f"sum by (method, path) (rate({api}_count{{{SEL}}}[$__rate_interval]))", "{{method}} {{path}}"),
    ], unit="s")
    if service not in CALLS_PODS:
        return
    pod = f"{p}_pod_http_client_request_duration_seconds"
    # The e2e scenario makes the admission-webhook's calls (one refused for its cluster label,
    # one answered); only the rollout-operator's panels may stay empty there.
    excused = service != "admission-webhook"
    board.panel("Calls to pods", "HTTP calls to pods per second by path and status, and calls "
                "refused for a wrong cluster validation label.", [
        (f"sum by (path, status_code) (rate({pod}_count{{{SEL}}}[$__rate_interval]))",
         "{{path}}: {{status_code}}"),
        (f"sum(rate({p}_client_invalid_cluster_validation_label_requests_total{{{SEL}}}[$__rate_interval]))",
         "wrong cluster label"),
    ], unit="reqps", may_be_empty={
        "A": (NO_POD_CALLS, f"{pod}_count > 0"),
        "B": (NO_POD_CALLS, f"{p}_client_invalid_cluster_validation_label_requests_total > 0")}
        if excused else None)
    board.panel("Pod call latency (p99)", "99th percentile of the time pods take to answer, by path.",
                quantiles(pod, by="path"), unit="s",
                may_be_empty={"A": (NO_POD_CALLS, f"{pod}_count > 0")} if excused else None)


def overview():
    board = Board("strata-overview", "Strata / Overview",
                  "The shared controller metrics of every Strata service.")
    for service in SERVICES:
        controller_rows(board, service, requests=False)
    return board


def layer_controller():
    board = Board("strata-layer-controller", "Strata / layer-controller",
                  "AddonsLayers: states, applies and prunes, dependency waits, rollout times.")
    board.row("Layers")
    board.panel("Layers by state", "How many AddonsLayers are in each state.", [
        (f"sum by (state) (layer_controller_layer_state{{{SEL}}} == 1)", "{{state}}"),
    ], width=12)
    board.panel("Layers not Deployed", "Every layer in another state than Deployed, with its state.", [
        (f'max by (layer, state) (layer_controller_layer_state{{{SEL},state!="Deployed"}} == 1)',
         "{{layer}}: {{state}}"),
    ], kind="table", width=12)
    board.panel("Objects applied and pruned", "Objects per second applied with server-side apply, "
                "left unapplied by a new attempt because unchanged since applied exactly so, "
                "and deleted because they left every layer, by layer.", [
        (f"sum by (layer) (rate(layer_controller_applied_objects_total{{{SEL}}}[$__rate_interval]))",
         "applied: {{layer}}"),
        (f"sum by (layer) (rate(layer_controller_pruned_objects_total{{{SEL}}}[$__rate_interval]))",
         "pruned: {{layer}}"),
        (f"sum by (layer) (rate(layer_controller_unchanged_objects_total{{{SEL}}}[$__rate_interval]))",
         "unchanged, not re-sent: {{layer}}"),
    ], unit="ops")
    board.panel("Waiting for prerequisites", "How long layers waited for the layers they depend on.",
                quantiles("layer_controller_dependency_wait_seconds"), unit="s")
    board.panel("Waiting for prerequisites by layer", "p99 of the time each layer waited for the "
                "layers and objects it depends on (`strata layers why LAYER` shows what it waits on now).",
                quantiles("layer_controller_dependency_wait_seconds", by="layer"), unit="s")
    board.panel("Revision to Deployed", "From starting to apply a revision to the layer being Deployed.",
                quantiles("layer_controller_rollout_seconds"), unit="s", width=24)
    controller_rows(board, "layer-controller")
    return board


def leader_only(expr, service):
    """A gauge only the leader keeps up to date, with every other replica's (stale) value
    zeroed: a replica that lost the Lease keeps exporting what it last set."""
    return f"({expr} * on (namespace, pod) group_left () {prefix(service)}_leader{{{SEL}}})"


def drift_observer():
    board = Board("strata-drift-observer", "Strata / drift-observer",
                  "Drift between what the layers applied and what runs: drifted objects, heals, "
                  "fights, checks and detection latency.")
    board.row("Observed")
    board.panel("Objects observed", "Objects of Deployed layers compared with their manifests "
                "(as counted by the leader).", [
        (f"max({leader_only(f'drift_observer_objects_observed{{{SEL}}}', 'drift-observer')})",
         "objects"),
    ], kind="stat")
    board.panel("Watched kinds", "Kinds with a running watch: one shared watch per kind some layer "
                "applies (as counted by the leader).", [
        (f"max({leader_only(f'drift_observer_watched_kinds{{{SEL}}}', 'drift-observer')})",
         "kinds"),
    ], kind="stat")
    board.row("Drift")
    board.panel("Drifted objects by layer", "Objects of each layer with a drifted field or missing, "
                "as in the layer's status.drift.", [
        (f"max by (layer) ({leader_only(f'drift_observer_drifted_objects{{{SEL}}}', 'drift-observer')})",
         "{{layer}}"),
    ])
    board.panel("Checks by outcome", "Object checks per second: unchanged (decided from the "
                "manifest, no API call), dry_run (server-side apply dry run), missing.", [
        (f"sum by (outcome) (rate(drift_observer_checks_total{{{SEL}}}[$__rate_interval]))",
         "{{outcome}}"),
    ], unit="ops")
    board.panel("Drift detected", "Drifted fields found per second (each drift once, when it "
                "appears), by layer and kind.", [
        (f"sum by (layer, kind) (rate(drift_observer_drift_detected_total{{{SEL}}}[$__rate_interval]))",
         "{{layer}}: {{kind}}"),
    ], unit="ops")
    board.panel("Drift healed", "Drifted objects found clean again after a heal request, per "
                "second, by layer and kind.", [
        (f"sum by (layer, kind) (rate(drift_observer_drift_healed_total{{{SEL}}}[$__rate_interval]))",
         "{{layer}}: {{kind}}"),
    ], unit="ops")
    board.panel("Heal requests", "Heal requests (strata.dev/reconcile-requested-at) sent to the "
                "layer-controller per second, by layer.", [
        (f"sum by (layer) (rate(drift_observer_heal_requests_total{{{SEL}}}[$__rate_interval]))",
         "{{layer}}"),
    ], unit="ops")
    board.panel("Fights", "Fights detected (another writer keeps changing a field back), by layer "
                "and kind; heal requests back off while one lasts.", [
        (f"sum by (layer, kind) (increase(drift_observer_fights_total{{{SEL}}}[$__rate_interval]))",
         "{{layer}}: {{kind}}"),
    ], may_be_empty={"A": ("only when a second writer fights a heal; drift.rs drives one, the e2e "
                           "scenario of observability.rs does not", "drift_observer_fights_total > 0")})
    rate = f"rate(drift_observer_detection_seconds_bucket{{{SEL}}}[$__rate_interval])"
    board.panel("Detection latency", "From the watch event showing a change to the drift being in "
                "the layer's status.", [
        (f"histogram_quantile({q}, sum by (le) ({rate}))", f"p{int(q * 100)}") for q in (0.5, 0.99)
    ], unit="s", width=24)
    controller_rows(board, "drift-observer")
    return board


def rollout_operator():
    board = Board("strata-rollout-operator", "Strata / rollout-operator",
                  "Zone-by-zone rollouts of StatefulSet groups (the Grafana rollout-operator's metric names).")
    board.row("Rollout groups")
    board.panel("Group reconciles", "Reconciles per second by rollout group, and failed ones.", [
        (f"sum by (rollout_group) (rate(rollout_operator_group_reconciles_total{{{SEL}}}[$__rate_interval]))",
         "{{rollout_group}}"),
        (f"sum by (rollout_group) (rate(rollout_operator_group_reconciles_failed_total{{{SEL}}}[$__rate_interval]))",
         "failed: {{rollout_group}}"),
    ], unit="ops")
    board.panel("Group reconcile duration (p99)", "99th percentile of the time to reconcile a group.",
                quantiles("rollout_operator_group_reconcile_duration_seconds", by="rollout_group"), unit="s")
    board.panel("Since the last successful reconcile", "Seconds since each group was last reconciled "
                "without error; it grows while a group keeps failing.", [
        (f"time() - max by (rollout_group) (rollout_operator_last_successful_group_reconcile_timestamp_seconds{{{SEL}}})",
         "{{rollout_group}}"),
    ], unit="s")
    board.panel("Pods deleted", "Outdated pods deleted per second to roll them to the update revision.", [
        (f"sum(rate(rollout_operator_pods_deleted_total{{{SEL}}}[$__rate_interval]))", "deleted"),
    ], unit="ops")
    board.panel("Objects in the watch caches", "Pods and rollout-group StatefulSets each replica "
                "holds in memory: what its memory grows with (every pod of the watched namespaces).", [
        (f"max by (pod, kind) (rollout_operator_cached_objects{{{SEL}}})", "{{pod}}: {{kind}}"),
    ])
    board.row("Zone-aware disruption budgets")
    board.panel("Budget changes observed", "ZoneAwarePodDisruptionBudget changes by result "
                "(invalid ones are logged with the validation message).", [
        (f'sum by (result) (increase(rollout_operator_zpdb_configurations_observed_total{{{SEL},result!~".*ignored"}}[$__rate_interval]))',
         "{{result}}"),
    ])
    zpdb_panels(board, "rollout-operator")
    board.panel("Webhook failure policies", "Failure policy of each webhook entry labelled for the "
                "namespace (compatibility mode); Ignore switches a guard off when the server is down.", [
        (f'max by (type, webhook, policy) (kube_validating_webhook_failure_policy{{{SEL}}} == 1)',
         "{{webhook}}: {{policy}}"),
    ], kind="table", width=24)
    controller_rows(board, "rollout-operator")
    return board


def zpdb_panels(board, service):
    p = prefix(service)
    board.panel("Eviction requests", "Eviction decisions per second by the anchor's reason and "
                "status (429: the budget is used up).", [
        (f"sum by (reason, status) (rate({p}_zpdb_eviction_requests_total{{{SEL}}}[$__rate_interval]))",
         "{{reason}} ({{status}})"),
    ], unit="reqps")
    board.panel("Evictions in flight", "Eviction requests being decided.", [
        (f"sum by (pod) ({p}_zpdb_inflight_eviction_requests{{{SEL}}})", "{{pod}}"),
    ])


def admission_webhook():
    board = Board("strata-admission-webhook", "Strata / admission-webhook",
                  "AdmissionReviews by webhook and outcome, answer times, the serving certificate.")
    board.row("Reviews")
    board.panel("Reviews by outcome", "AdmissionReviews answered per second, by webhook and outcome.", [
        (f"sum by (webhook, outcome) (rate(admission_webhook_reviews_total{{{SEL}}}[$__rate_interval]))",
         "{{webhook}}: {{outcome}}"),
    ], unit="reqps")
    board.panel("Answer time (p99)", "99th percentile of the time to answer, by webhook "
                "(prepare-downscale includes its calls to the pods).",
                quantiles("admission_webhook_review_duration_seconds", by="webhook"), unit="s")
    board.panel("Certificate expires in", "Time left on each replica's serving certificate; renewal "
                "happens a third of the validity before expiry.", [
        (f"max by (pod) (admission_webhook_certificate_expiry_timestamp_seconds{{{SEL}}} > 0) - time()",
         "{{pod}}"),
    ], unit="s", kind="stat")
    board.panel("Certificate file reloads", "Changes of the mounted certificate files: reloaded, or "
                "failed (the last good certificate keeps serving; see the CertificateReloadFailed "
                "Event).", [
        (f"sum by (result) (increase(admission_webhook_certificate_reloads_total{{{SEL}}}[$__rate_interval]))",
         "{{result}}"),
    ])
    board.panel("Undo calls to prepared pods", "prepare-downscale's undo DELETEs to pods prepared for a "
                "downscale that did not happen, by result; `failed` calls are retried, so a lasting "
                "`failed` rate is a pod left prepared.", [
        (f"sum by (result) (rate(admission_webhook_prepare_downscale_undo_total{{{SEL}}}[$__rate_interval]))",
         "{{result}}"),
    ], unit="reqps")
    board.row("Zone-aware disruption budgets")
    zpdb_panels(board, "admission-webhook")
    controller_rows(board, "admission-webhook")
    return board


def alert(name, expr, duration, severity, summary, description, runbook=None, service=None):
    """One alerting rule. `runbook` names its section of docs/runbooks.md (default: the alert's
    name; alerts that exist once per service share one); `service` labels the alerts of one
    service so the chart keeps only those of the services it deploys."""
    labels = {"severity": severity}
    if service:
        labels["service"] = service
    return {"alert": name, "expr": expr, "for": duration, "labels": labels,
            "annotations": {"summary": summary, "description": description,
                            "runbook_url": f"{RUNBOOKS}#{(runbook or name).lower()}"}}


def alerts():
    controllers = []
    for service in SERVICES:
        p, title = prefix(service), "".join(w.title() for w in service.split("-"))
        controllers += [
            # `up` of the service's scrape job (a ServiceMonitor names the job after the Service,
            # `SERVICE` or `RELEASE-SERVICE`; a PodMonitor `NAMESPACE/NAME`): nothing fires on
            # absent series otherwise. The chart keeps it only for the services it deploys.
            alert(f"{title}Down", f'absent(up{{job=~"(.+[-/])?{service}"}} == 1)', "5m", "critical",
                  f"No {service} replica is up",
                  f"Prometheus has no reachable {service} target for 5 minutes: every replica is "
                  "gone or cannot be scraped, and nothing it does is happening.",
                  runbook="Down", service=service),
            alert(f"{title}ReconcileErrors",
                  f"sum by (namespace, category) (rate({p}_reconcile_errors_total[10m])) > 0", "15m", "warning",
                  f"{service} reconciles keep failing ({{{{ $labels.category }}}})",
                  f"{service} in {{{{ $labels.namespace }}}} has failed reconciles with category "
                  f"{{{{ $labels.category }}}} for 15 minutes; its logs and Warning events name the object.",
                  runbook="ReconcileErrors", service=service),
            alert(f"{title}SlowReconciles",
                  f"histogram_quantile(0.99, sum by (namespace, le) (rate({p}_reconcile_duration_seconds_bucket[10m]))) > 10",
                  "30m", "warning", f"{service} reconciles take over 10 s",
                  f"The 99th percentile of {service} reconcile time in {{{{ $labels.namespace }}}} is "
                  f"{{{{ $value | humanizeDuration }}}}; the API server or a dependency is slow.",
                  runbook="SlowReconciles", service=service),
            alert(f"{title}NoLeader", f"max by (namespace) ({p}_leader) < 1", "5m", "critical",
                  f"No {service} replica is leader",
                  f"No replica of {service} in {{{{ $labels.namespace }}}} has held the Lease "
                  f"{service}-leader for 5 minutes: nothing is being reconciled.",
                  runbook="NoLeader", service=service),
            alert(f"{title}SeveralLeaders", f"sum by (namespace) ({p}_leader) > 1", "5m", "critical",
                  f"More than one {service} replica is leader",
                  f"{{{{ $value }}}} replicas of {service} in {{{{ $labels.namespace }}}} report "
                  "leadership; check clock skew and the Lease.",
                  runbook="SeveralLeaders", service=service),
        ]
    layers = [
        alert("AddonsLayerFailed", 'max by (namespace, layer) (layer_controller_layer_state{state="Failed"}) == 1',
              "10m", "warning", "AddonsLayer {{ $labels.layer }} is Failed",
              "AddonsLayer {{ $labels.layer }} has been Failed for 10 minutes; `kubectl get al "
              "{{ $labels.layer }} -o yaml` shows the condition and the object that failed."),
        alert("AddonsLayerNotProgressing",
              'max by (namespace, layer, state) (layer_controller_layer_state{state=~"Pending|ApplyPending|Applying|Pruning|K8sVersion|RollingBack|GateUnknown"}) == 1',
              "1h", "warning", "AddonsLayer {{ $labels.layer }} stuck in {{ $labels.state }}",
              "AddonsLayer {{ $labels.layer }} has been {{ $labels.state }} for an hour; "
              "`strata layers plan {{ $labels.layer }}` shows what it waits for."),
        alert("AddonsLayerRolledBack", 'max by (namespace, layer) (layer_controller_layer_state{state="RolledBack"}) == 1',
              "1m", "warning", "AddonsLayer {{ $labels.layer }} was rolled back",
              "AddonsLayer {{ $labels.layer }} runs a kept revision after its new one failed; "
              "`strata layers history {{ $labels.layer }}` shows which failed and why."),
        alert("AddonsLayerPruning", "sum by (namespace, layer) (increase(layer_controller_pruned_objects_total[10m])) > 50",
              "0m", "info", "AddonsLayer {{ $labels.layer }} pruned many objects",
              "{{ $value }} objects left AddonsLayer {{ $labels.layer }} and were deleted in 10 minutes."),
    ]
    # Gauges only the leader keeps up to date (a replica that lost the Lease keeps its last
    # values), and counters whose series appear at 1 on the first event (increase() misses it).
    drifted = ("max by (namespace, layer) (drift_observer_drifted_objects"
               " * on (namespace, pod) group_left () drift_observer_leader)")
    drift = [
        alert("AddonsLayerDriftPersists", f"{drifted} > 0", "15m", "warning",
              "AddonsLayer {{ $labels.layer }} has drifted objects",
              "{{ $value }} objects of AddonsLayer {{ $labels.layer }} have differed from what the layer "
              "applies for 15 minutes; `strata drift {{ $labels.layer }}` lists the fields and who "
              "changed them. In Heal mode the heals do not stick; in Warn mode nobody has acted."),
        alert("AddonsLayerDriftFight",
              "sum by (namespace, layer, kind) (increase(drift_observer_fights_total[30m])) > 0"
              " or sum by (namespace, layer, kind) (drift_observer_fights_total"
              " unless drift_observer_fights_total offset 30m) > 0",
              "0m", "warning", "Another writer fights AddonsLayer {{ $labels.layer }} over a {{ $labels.kind }}",
              "A field of a {{ $labels.kind }} of AddonsLayer {{ $labels.layer }} keeps being changed back "
              "after each heal; heal requests back off. The layer's FightDetected condition names the "
              "field and the field manager: make that writer stop, or ignore the field in spec.drift."),
        alert("AddonsLayerDriftNotHealing",
              "(sum by (namespace, layer) (increase(drift_observer_heal_requests_total[15m])) > 0)"
              f" and on (namespace, layer) ({drifted} > 0)",
              "30m", "warning", "Heals of AddonsLayer {{ $labels.layer }} do not remove its drift",
              "The drift-observer has kept asking the layer-controller to re-apply AddonsLayer "
              "{{ $labels.layer }} for 30 minutes and the layer is still drifted: check that the "
              "layer-controller runs and handles the request (status.lastHandledReconcileAt), and "
              "what changes the fields back (`strata drift {{ $labels.layer }}`)."),
    ]
    rollout = [
        alert("RolloutOperatorGroupReconcileFailing",
              "sum by (namespace, rollout_group) (rate(rollout_operator_group_reconciles_failed_total[10m])) > 0",
              "15m", "warning", "Rollout group {{ $labels.rollout_group }} keeps failing to reconcile",
              "Reconciles of rollout group {{ $labels.rollout_group }} in {{ $labels.namespace }} "
              "have failed for 15 minutes; its rollout is not progressing."),
        alert("RolloutOperatorGroupStale",
              "time() - max by (namespace, rollout_group) (rollout_operator_last_successful_group_reconcile_timestamp_seconds) > 900",
              "5m", "warning", "Rollout group {{ $labels.rollout_group }} not reconciled for 15 minutes",
              "The last successful reconcile of {{ $labels.rollout_group }} in {{ $labels.namespace }} "
              "was {{ $value | humanizeDuration }} ago."),
        # The anchor's mixin alerts, on the same metrics.
        alert("RolloutOperatorIncorrectWebhookConfigurationFailurePolicy",
              'count by (type, webhook, namespace) (kube_validating_webhook_failure_policy{policy="Ignore", webhook=~"^(pod-eviction|zpdb-validation).+"} > 0)',
              "5m", "warning", "Webhook {{ $labels.webhook }} fails open",
              "{{ $labels.webhook }} has failurePolicy Ignore: while its server is unreachable, evictions "
              "and budget changes are admitted unchecked and two zones can go down at once."),
        alert("RolloutOperatorBadZoneAwarePodDisruptionBudgetConfiguration",
              'sum by (job, namespace) (rate(rollout_operator_zpdb_configurations_observed_total{result="invalid"}[5m])) > 0',
              "5m", "warning", "An invalid ZoneAwarePodDisruptionBudget was observed",
              "A ZoneAwarePodDisruptionBudget in {{ $labels.namespace }} does not validate; the operator "
              "ignores it and logs the reason (`invalid zone-aware pod disruption budget`)."),
        alert("RolloutOperatorHighNumberInflightZpdbRequests",
              "avg_over_time(rollout_operator_zpdb_inflight_eviction_requests[5m]) > 10"
              " or avg_over_time(admission_webhook_zpdb_inflight_eviction_requests[5m]) > 10",
              "5m", "warning", "Many eviction requests wait for a decision",
              "On average more than 10 eviction requests were being decided at once on {{ $labels.pod }} "
              "for 5 minutes: a drain is contending for the budget or the API server is slow."),
    ]
    rate_limited = []
    for service in SERVICES:
        p, title = prefix(service), "".join(w.title() for w in service.split("-"))
        rate_limited.append(
            alert(f"{title}KubernetesAPIClientRateLimited",
                  f"sum by (namespace, api_group) (rate({p}_kubernetes_api_client_rate_limited_requests_total[5m])) > 0",
                  "15m", "warning", f"{service} gives up API requests at its client-side rate limit",
                  f"{service} in {{{{ $labels.namespace }}}} keeps giving up requests to API group "
                  f"{{{{ $labels.api_group }}}} while waiting for a token: raise --client-qps/--client-burst "
                  "(the anchor's -kubernetes.client-qps/-burst).",
                  runbook="KubernetesAPIClientRateLimited", service=service))
    controllers += rate_limited
    webhook = [
        alert("AdmissionWebhookCertificateExpiring",
              "max by (namespace, pod) (admission_webhook_certificate_expiry_timestamp_seconds > 0) - time() < 14 * 86400",
              "1h", "warning", "The admission webhook's certificate expires in under 14 days",
              "{{ $labels.pod }} serves a certificate expiring in {{ $value | humanizeDuration }}: "
              "renewal (a third of the validity before expiry) has not happened; check its logs and "
              "the certificate Secret. An expired certificate fails every admission call."),
        # kube-apiserver's own account of calling our webhooks (it needs Prometheus to scrape
        # the API server, as every cluster monitoring setup does): under failurePolicy Fail a
        # call that fails refuses the request, under Ignore it admits it unchecked.
        alert("AdmissionWebhookUnavailable",
              f'sum by (name, type, error_type) (rate(apiserver_admission_webhook_rejection_count{{name=~"{OUR_WEBHOOKS}", error_type=~"calling_webhook_error|apiserver_internal_error"}}[5m])) > 0',
              "1m", "critical", "kube-apiserver refuses requests because {{ $labels.name }} cannot be called",
              "kube-apiserver could not call the {{ $labels.type }} webhook {{ $labels.name }} "
              "({{ $labels.error_type }}) and, its failurePolicy being Fail, refused the requests it "
              "guards: {{ $value | humanize }} per second.", runbook="WebhookUnavailable"),
        alert("AdmissionWebhookFailingOpen",
              f'sum by (name, type) (rate(apiserver_admission_webhook_fail_open_count{{name=~"{OUR_WEBHOOKS}"}}[5m])) > 0',
              "5m", "warning", "{{ $labels.name }} cannot be called and requests pass unchecked",
              "kube-apiserver could not call the {{ $labels.type }} webhook {{ $labels.name }} and, its "
              "failurePolicy being Ignore, admitted the requests it guards without the check.",
              runbook="WebhookUnavailable"),
        alert("AdmissionWebhookCertificateReloadFailing",
              'sum by (namespace, pod) (increase(admission_webhook_certificate_reloads_total{result="failed"}[30m])) > 0'
              ' or sum by (namespace, pod) (admission_webhook_certificate_reloads_total{result="failed"}'
              ' unless admission_webhook_certificate_reloads_total{result="failed"} offset 30m) > 0',
              "0m", "warning", "{{ $labels.pod }} cannot load its changed certificate files",
              "The mounted certificate of {{ $labels.pod }} changed and could not be loaded; it keeps "
              "serving the previous one until that expires. The CertificateReloadFailed Event names "
              "the file and the reason."),
        alert("AdmissionWebhookTimeouts",
              'sum by (namespace, webhook) (rate(admission_webhook_reviews_total{outcome="timeout"}[5m])) > 0',
              "5m", "warning", "{{ $labels.webhook }} reviews time out",
              "{{ $labels.webhook }} reviews in {{ $labels.namespace }} take longer than the handler "
              "timeout and are denied; prepare-downscale waits for pods, the others for the API server."),
        alert("AdmissionWebhookInvalidReviews",
              'sum by (namespace, webhook) (rate(admission_webhook_reviews_total{outcome="invalid"}[10m])) > 0',
              "15m", "info", "{{ $labels.webhook }} receives requests that are not AdmissionReviews",
              "Something other than kube-apiserver posts to {{ $labels.webhook }}, or a webhook "
              "configuration points at the wrong path."),
        alert("AdmissionWebhookSlowAnswers",
              'histogram_quantile(0.99, sum by (namespace, webhook, le) (rate(admission_webhook_review_duration_seconds_bucket{webhook!="prepare-downscale"}[10m]))) > 0.5',
              "15m", "warning", "{{ $labels.webhook }} answers slowly",
              "The 99th percentile answer time of {{ $labels.webhook }} is {{ $value | humanizeDuration }}; "
              "every API request it guards waits for it."),
    ]
    return {"groups": [
        {"name": "strata-controllers", "rules": controllers},
        {"name": "strata-layer-controller", "rules": layers},
        {"name": "strata-drift-observer", "rules": drift},
        {"name": "strata-rollout-operator", "rules": rollout},
        {"name": "strata-admission-webhook", "rules": webhook},
    ]}


def alert_tests():
    """`promtool test rules` cases for every alert: one input where it fires (its `for` elapsed),
    with the labels and annotations it must carry, and one where it stays quiet — the
    condition just short of true (a series of the right name and labels, below the threshold,
    excluded by a matcher, or not for long enough). The expected annotations are the alert's
    own templates filled with the case's labels and the `$value` the case produces (written out
    by hand: promtool checks the rendering)."""
    rules = {r["alert"]: r for g in alerts()["groups"] for r in g["rules"]}

    def expect(name, labels, value=None):
        rule = rules[name]
        out = {}
        for key, text in rule["annotations"].items():
            for label, v in labels.items():
                text = text.replace(f"{{{{ $labels.{label} }}}}", v)
            if value is not None:
                for form in ["{{ $value | humanizeDuration }}", "{{ $value | humanize }}", "{{ $value }}"]:
                    text = text.replace(form, value)
            out[key] = text
        return {"exp_labels": {**rule["labels"], **labels}, "exp_annotations": out}

    def case(name, fire_series, quiet_series, at, labels, value=None):
        """A firing group and a quiet group, both evaluated at `at`."""
        return [
            {"interval": "1m", "input_series": [{"series": s, "values": v} for s, v in fire_series],
             "alert_rule_test": [{"eval_time": at, "alertname": name,
                                  "exp_alerts": [expect(name, labels, value)]}]},
            {"interval": "1m", "input_series": [{"series": s, "values": v} for s, v in quiet_series],
             "alert_rule_test": [{"eval_time": at, "alertname": name, "exp_alerts": []}]},
        ]

    ns = 'namespace="strata-system"'
    tests = []
    for service in SERVICES:
        p, title = prefix(service), "".join(w.title() for w in service.split("-"))
        # Down: the only target scraped and down for 10 minutes; quiet while a release's
        # prefixed job (`RELEASE-SERVICE`) is up.
        tests += case(f"{title}Down", [(f'up{{job="{service}", instance="10.0.0.1:8080"}}', "0x15")],
                      [(f'up{{job="blue-{service}", instance="10.0.0.1:8080"}}', "1x15")], "10m", {})
        # Errors every minute for half an hour; quiet: the counter stands still.
        tests += case(f"{title}ReconcileErrors",
                      [(f'{p}_reconcile_errors_total{{{ns}, pod="a", category="api"}}', "0+1x40")],
                      [(f'{p}_reconcile_errors_total{{{ns}, pod="a", category="api"}}', "7x40")],
                      "30m", {"namespace": "strata-system", "category": "api"})
        # Every reconcile between 10 and 60 s (p99 59.5 s); quiet: every one under 1 s.
        slow = [("1", "0x60"), ("10", "0x60"), ("60", "0+10x60"), ("+Inf", "0+10x60")]
        fast = [("1", "0+10x60"), ("10", "0+10x60"), ("60", "0+10x60"), ("+Inf", "0+10x60")]
        bucket = f'{p}_reconcile_duration_seconds_bucket{{{ns}, pod="a", le="LE"}}'
        tests += case(f"{title}SlowReconciles", [(bucket.replace("LE", le), v) for le, v in slow],
                      [(bucket.replace("LE", le), v) for le, v in fast], "45m",
                      {"namespace": "strata-system"}, "59.5s")
        # No replica leads; quiet: one of two does.
        tests += case(f"{title}NoLeader",
                      [(f'{p}_leader{{{ns}, pod="a"}}', "0x15"), (f'{p}_leader{{{ns}, pod="b"}}', "0x15")],
                      [(f'{p}_leader{{{ns}, pod="a"}}', "1x15"), (f'{p}_leader{{{ns}, pod="b"}}', "0x15")],
                      "10m", {"namespace": "strata-system"})
        # Two replicas lead; quiet: one does.
        tests += case(f"{title}SeveralLeaders",
                      [(f'{p}_leader{{{ns}, pod="a"}}', "1x15"), (f'{p}_leader{{{ns}, pod="b"}}', "1x15")],
                      [(f'{p}_leader{{{ns}, pod="a"}}', "1x15"), (f'{p}_leader{{{ns}, pod="b"}}', "0x15")],
                      "10m", {"namespace": "strata-system"}, "2")
        # Requests given up at the client limit every minute; quiet: none since the start.
        limited = f'{p}_kubernetes_api_client_rate_limited_requests_total{{{ns}, pod="a", api_group="apps"}}'
        tests += case(f"{title}KubernetesAPIClientRateLimited", [(limited, "0+1x40")], [(limited, "3x40")],
                      "30m", {"namespace": "strata-system", "api_group": "apps"})
    layer = 'namespace="strata-system", layer="monitoring"'
    tests += case("AddonsLayerNotProgressing",
                  [(f'layer_controller_layer_state{{{layer}, state="Applying"}}', "1x90")],
                  [(f'layer_controller_layer_state{{{layer}, state="Applying"}}', "1x30 0x60")],
                  "80m", {"namespace": "strata-system", "layer": "monitoring", "state": "Applying"})
    tests += case("AddonsLayerRolledBack",
                  [(f'layer_controller_layer_state{{{layer}, state="RolledBack"}}', "1x10")],
                  [(f'layer_controller_layer_state{{{layer}, state="RolledBack"}}', "0x10")],
                  "5m", {"namespace": "strata-system", "layer": "monitoring"})
    tests += case("AddonsLayerPruning",
                  [(f'layer_controller_pruned_objects_total{{{layer}, pod="a"}}', "0x10 0+20x20")],
                  [(f'layer_controller_pruned_objects_total{{{layer}, pod="a"}}', "0x10 0+2x20")],
                  "25m", {"namespace": "strata-system", "layer": "monitoring"}, "200")
    # The leader reports 3 drifted objects; quiet: only a replica that lost the Lease does.
    tests += case("AddonsLayerDriftPersists",
                  [(f'drift_observer_drifted_objects{{{layer}, pod="a"}}', "3x30"),
                   (f'drift_observer_leader{{{ns}, pod="a"}}', "1x30")],
                  [(f'drift_observer_drifted_objects{{{layer}, pod="a"}}', "3x30"),
                   (f'drift_observer_leader{{{ns}, pod="a"}}', "0x30"),
                   (f'drift_observer_drifted_objects{{{layer}, pod="b"}}', "0x30"),
                   (f'drift_observer_leader{{{ns}, pod="b"}}', "1x30")],
                  "20m", {"namespace": "strata-system", "layer": "monitoring"}, "3")
    tests += case("AddonsLayerDriftFight",
                  [(f'drift_observer_fights_total{{{layer}, kind="Deployment", pod="a"}}', "0x5 1x25")],
                  [(f'drift_observer_fights_total{{{layer}, kind="Deployment", pod="a"}}', "0x30")],
                  "10m", {"namespace": "strata-system", "layer": "monitoring", "kind": "Deployment"})
    # Heal requests keep going out while the leader still reports drift; quiet: drift gone.
    tests += case("AddonsLayerDriftNotHealing",
                  [(f'drift_observer_heal_requests_total{{{layer}, pod="a"}}', "0+1x60"),
                   (f'drift_observer_drifted_objects{{{layer}, pod="a"}}', "2x60"),
                   (f'drift_observer_leader{{{ns}, pod="a"}}', "1x60")],
                  [(f'drift_observer_heal_requests_total{{{layer}, pod="a"}}', "0+1x60"),
                   (f'drift_observer_drifted_objects{{{layer}, pod="a"}}', "0x60"),
                   (f'drift_observer_leader{{{ns}, pod="a"}}', "1x60")],
                  "50m", {"namespace": "strata-system", "layer": "monitoring"})
    group = 'namespace="strata-system", rollout_group="ingester"'
    tests += case("RolloutOperatorGroupReconcileFailing",
                  [(f'rollout_operator_group_reconciles_failed_total{{{group}, pod="a"}}', "0+1x40")],
                  [(f'rollout_operator_group_reconciles_failed_total{{{group}, pod="a"}}', "4x40")],
                  "30m", {"namespace": "strata-system", "rollout_group": "ingester"})
    # Last success at time 0; quiet: one every minute.
    tests += case("RolloutOperatorGroupStale",
                  [(f'rollout_operator_last_successful_group_reconcile_timestamp_seconds{{{group}, pod="a"}}', "0x30")],
                  [(f'rollout_operator_last_successful_group_reconcile_timestamp_seconds{{{group}, pod="a"}}', "0+60x30")],
                  "25m", {"namespace": "strata-system", "rollout_group": "ingester"}, "25m 0s")
    policy = 'kube_validating_webhook_failure_policy{{type="validating", webhook="pod-eviction-strata-system.strata.dev", namespace="strata-system", policy="{}"}}'
    tests += case("RolloutOperatorIncorrectWebhookConfigurationFailurePolicy",
                  [(policy.format("Ignore"), "1x15")], [(policy.format("Fail"), "1x15")], "10m",
                  {"type": "validating", "webhook": "pod-eviction-strata-system.strata.dev",
                   "namespace": "strata-system"})
    observed = 'rollout_operator_zpdb_configurations_observed_total{{job="rollout-operator", namespace="strata-system", pod="a", result="{}"}}'
    tests += case("RolloutOperatorBadZoneAwarePodDisruptionBudgetConfiguration",
                  [(observed.format("invalid"), "0+1x20")], [(observed.format("success"), "0+1x20")], "15m",
                  {"job": "rollout-operator", "namespace": "strata-system"})
    inflight = 'admission_webhook_zpdb_inflight_eviction_requests{namespace="strata-system", pod="admission-webhook-a"}'
    tests += case("RolloutOperatorHighNumberInflightZpdbRequests", [(inflight, "20x20")], [(inflight, "5x20")],
                  "15m", {"namespace": "strata-system", "pod": "admission-webhook-a"})
    fail_open = 'apiserver_admission_webhook_fail_open_count{{name="{}", type="validating"}}'
    tests += case("AdmissionWebhookFailingOpen",
                  [(fail_open.format("pod-eviction-strata-system.strata.dev"), "0+1x20")],
                  [(fail_open.format("policy.example.com"), "0+1x20")], "15m",
                  {"name": "pod-eviction-strata-system.strata.dev", "type": "validating"})
    reloads = 'admission_webhook_certificate_reloads_total{{namespace="strata-system", pod="admission-webhook-a", result="{}"}}'
    tests += case("AdmissionWebhookCertificateReloadFailing", [(reloads.format("failed"), "0x5 1x25")],
                  [(reloads.format("loaded"), "0x5 1x25")], "10m",
                  {"namespace": "strata-system", "pod": "admission-webhook-a"})
    reviews = 'admission_webhook_reviews_total{{namespace="strata-system", pod="a", webhook="pod-eviction", outcome="{}"}}'
    tests += case("AdmissionWebhookTimeouts", [(reviews.format("timeout"), "0+1x20")],
                  [(reviews.format("allowed"), "0+1x20")], "15m",
                  {"namespace": "strata-system", "webhook": "pod-eviction"})
    tests += case("AdmissionWebhookInvalidReviews", [(reviews.format("invalid"), "0+1x40")],
                  [(reviews.format("denied"), "0+1x40")], "30m",
                  {"namespace": "strata-system", "webhook": "pod-eviction"})
    # Every answer between 0.1 and 1 s (p99 0.991 s); quiet: prepare-downscale, which waits for
    # pods by design, answering as slowly.
    answer = 'admission_webhook_review_duration_seconds_bucket{{namespace="strata-system", pod="a", webhook="{}", le="{}"}}'
    slow = [("0.1", "0x40"), ("1", "0+10x40"), ("+Inf", "0+10x40")]
    tests += case("AdmissionWebhookSlowAnswers", [(answer.format("pod-eviction", le), v) for le, v in slow],
                  [(answer.format("prepare-downscale", le), v) for le, v in slow], "30m",
                  {"namespace": "strata-system", "webhook": "pod-eviction"}, "991ms")
    return {"rule_files": ["alerts.yaml"], "evaluation_interval": "1m", "tests": tests}


def main():
    # `generate.py [DIR]`: write into DIR instead of here (the test that keeps the committed
    # files equal to the generator's output compares the two).
    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
    out.mkdir(parents=True, exist_ok=True)
    for name, board in [("overview", overview()), ("layer-controller", layer_controller()),
                        ("drift-observer", drift_observer()),
                        ("rollout-operator", rollout_operator()),
                        ("admission-webhook", admission_webhook())]:
        (out / f"strata-{name}.json").write_text(json.dumps(board.json(), indent=2) + "\n")
    (out / "e2e-empty.tsv").write_text(
        "# Generated by dashboards/generate.py: panel queries that may return no series in the\n"
        "# e2e scenario of e2e/tests/observability.rs (every other one must), why, and the witness\n"
        "# query that must be empty too (it has series exactly when the reason does not hold).\n"
        "# uid\tpanel id\tpanel title\trefId\treason\twitness\n"
        + "".join(f"{u}\t{i}\t{t}\t{r}\t{why}\t{w}\n" for u, i, t, r, why, w in MAY_BE_EMPTY))
    # Prometheus rule groups: a `rule_files` entry, or the spec of a PrometheusRule.
    (out / "alerts.yaml").write_text(
        "# Generated by dashboards/generate.py: Prometheus alert rules for Strata.\n"
        + "\n".join(to_yaml(alerts(), 0)) + "\n")
    (out / "alerts-test-generated.yaml").write_text(
        "# Generated by dashboards/generate.py: a firing and a quiet `promtool test rules` case for\n"
        "# every alert (alerts-test.yaml holds the hand-written scenarios).\n"
        + "\n".join(to_yaml(alert_tests(), 0)) + "\n")


def to_yaml(value, indent):
    """Block YAML of dicts, lists and strings; strings double-quoted (JSON escapes are YAML's)."""
    pad = " " * indent
    if isinstance(value, dict):
        lines = []
        for key, item in value.items():
            if isinstance(item, (dict, list)) and not item:
                lines.append(f"{pad}{key}: {json.dumps(item)}")
            elif isinstance(item, (dict, list)):
                lines.append(f"{pad}{key}:")
                lines += to_yaml(item, indent + 2)
            else:
                lines.append(f"{pad}{key}: {json.dumps(item)}")
        return lines
    lines = []
    for item in value:
        inner = to_yaml(item, indent + 2) if isinstance(item, (dict, list)) else [f"{pad}  {json.dumps(item)}"]
        lines.append(f"{pad}- {inner[0].lstrip()}")
        lines += inner[1:]
    return lines


if __name__ == "__main__":
    main()
