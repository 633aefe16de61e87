{{/*
Shared helpers. Each service template calls "strata.workload" with a context dict:
  root: the chart's root context; key: the values key (layerController, ...);
  name: the service name (layer-controller, ...); args: its service-specific arguments.
Namespaced objects carry the service name (the Lease `<name>-leader` and the webhook
certificate's DNS names depend on it); cluster-scoped objects are prefixed with the release
name so two releases never collide.
*/}}

{{/*
Prefix of the release's object names. Empty by default, so an upgrade keeps every name (and
so every leader Lease: renamed Deployments would elect a second leader beside the old ones);
`fullnameOverride: X` gives `X-`, `nameOverride: N` gives `<release>-N-` (or `<release>-`
when the release name contains N). Two releases in one namespace set one of them.
*/}}
{{- define "strata.prefix" -}}
{{- $name := "" -}}
{{- if .Values.fullnameOverride -}}
{{- $name = .Values.fullnameOverride -}}
{{- else if .Values.nameOverride -}}
{{- $name = ternary .Release.Name (printf "%s-%s" .Release.Name .Values.nameOverride) (contains .Values.nameOverride .Release.Name) -}}
{{- end -}}
{{- with $name }}{{ printf "%s-" (. | trunc 36 | trimSuffix "-") }}{{ end -}}
{{- end }}

{{/* Prefix of cluster-scoped names: the name prefix, else the release name. */}}
{{- define "strata.clusterPrefix" -}}
{{- default (printf "%s-" .Release.Name) (include "strata.prefix" .) -}}
{{- end }}

{{/* A service's namespaced object name (Deployment, Service, Roles, ...). */}}
{{- define "strata.fullname" -}}
{{- printf "%s%s" (include "strata.prefix" .root) .name -}}
{{- end }}

{{- define "strata.labels" -}}
{{- $labels := dict "app.kubernetes.io/part-of" "strata" "app.kubernetes.io/managed-by" .root.Release.Service "app.kubernetes.io/instance" .root.Release.Name "app.kubernetes.io/version" .root.Chart.AppVersion "helm.sh/chart" (printf "%s-%s" .root.Chart.Name .root.Chart.Version) -}}
{{- toYaml (merge $labels (.root.Values.global.extraLabels | default dict)) -}}
{{- end }}

{{- define "strata.selectorLabels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- with .shard }}
strata.dev/shard: {{ . }}
{{- end }}
{{- end }}

{{/* Labels of one service's objects: the chart's, the selector's and the service's own (the
chart's own labels win over extra labels of the same key, so selectors keep working). */}}
{{- define "strata.serviceLabels" -}}
{{- $labels := dict "app.kubernetes.io/part-of" "strata" "app.kubernetes.io/managed-by" .root.Release.Service "app.kubernetes.io/instance" .root.Release.Name "app.kubernetes.io/version" .root.Chart.AppVersion "helm.sh/chart" (printf "%s-%s" .root.Chart.Name .root.Chart.Version) "app.kubernetes.io/name" .name "app.kubernetes.io/component" .name -}}
{{- with .shard }}{{ $_ := set $labels "strata.dev/shard" . }}{{ end -}}
{{- toYaml (merge $labels ((index .root.Values .key).extraLabels | default dict) (.root.Values.global.extraLabels | default dict)) -}}
{{- end }}

{{- define "strata.serviceAccountName" -}}
{{- $v := index .root.Values .key -}}
{{- default (include "strata.fullname" .) $v.serviceAccount.name -}}
{{- end }}

{{- define "strata.image" -}}
{{- $v := index .root.Values .key -}}
{{- $repo := $v.image.repository -}}
{{- with (default .root.Values.global.image.registry $v.image.registry) }}{{ $repo = printf "%s/%s" (trimSuffix "/" .) $repo }}{{ end -}}
{{- if $v.image.digest -}}
{{ printf "%s@%s" $repo $v.image.digest }}
{{- else -}}
{{ printf "%s:%s" $repo (default .root.Chart.AppVersion $v.image.tag) }}
{{- end -}}
{{- end }}

{{/* The flags every service shares (core-k8s runtime), from the service's values. */}}
{{- define "strata.commonArgs" -}}
{{- $v := index .root.Values .key -}}
- --log-format={{ default .root.Values.global.logFormat $v.logFormat }}
- --log-filter={{ default .root.Values.global.logLevel $v.logLevel }}
- --admin-address=:{{ $v.ports.admin }}
- --leader-elect={{ $v.leaderElection.enabled }}
- --lease-duration={{ $v.leaderElection.leaseDuration }}
- --client-qps={{ $v.clientQPS }}
- --client-burst={{ $v.clientBurst }}
- --client-max-in-flight={{ $v.clientMaxInFlight }}
{{- if .shard }}
- --lease-name={{ include "strata.fullname" . }}-{{ .shard }}-leader
{{- else if include "strata.prefix" .root }}
- --lease-name={{ include "strata.fullname" . }}-leader
{{- end }}
{{- end }}

{{/* Pull secrets: names or {name: ...} objects. */}}
{{- define "strata.imagePullSecrets" -}}
{{- $secrets := concat (.root.Values.global.imagePullSecrets | default list) ((index .root.Values .key).imagePullSecrets | default list) -}}
{{- with $secrets -}}
imagePullSecrets:
{{- range . }}
{{- if kindIs "string" . }}
  - name: {{ . }}
{{- else }}
  - {{ toYaml . | nindent 4 | trim }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The `--layer-selector` of one shard of a layer service (`shard` empty: the default shard, the
layers without the shard label, once `sharding.shards` is set), joined with the service's own
`layerSelector`. Empty when the chart deploys no shards and sets no selector.
*/}}
{{/*
The Deployments of a layer service's shards (`sharding.shards`): the service's context `ctx`
with its `args`, each shard's `--layer-selector` in place of the main one.
*/}}
{{- define "strata.shardWorkloads" -}}
{{- $ctx := . -}}
{{- $v := index $ctx.root.Values $ctx.key -}}
{{- range $shard := $ctx.root.Values.sharding.shards }}
{{- $args := list }}
{{- range $ctx.args }}{{ if not (hasPrefix "--layer-selector=" .) }}{{ $args = append $args . }}{{ end }}{{ end }}
{{- $args = append $args (printf "--layer-selector=%s" (include "strata.shardSelector" (dict "root" $ctx.root "shard" $shard "selector" $v.layerSelector))) }}
---
{{ include "strata.workload" (dict "root" $ctx.root "key" $ctx.key "name" $ctx.name "shard" $shard "args" $args "mounts" $ctx.mounts "volumes" $ctx.volumes) }}
{{- end }}
{{- end }}

{{- define "strata.shardSelector" -}}
{{- $parts := list -}}
{{- if .shard -}}
{{- $parts = append $parts (printf "%s=%s" .root.Values.sharding.key .shard) -}}
{{- else if .root.Values.sharding.shards -}}
{{- $parts = append $parts (printf "!%s" .root.Values.sharding.key) -}}
{{- end -}}
{{- with .selector }}{{ $parts = append $parts . }}{{ end -}}
{{- join "," $parts -}}
{{- end }}

{{/*
One service: ServiceAccount, Deployment, Service, PodDisruptionBudget, NetworkPolicy and
ServiceMonitor. RBAC and webhook configurations live in the service's own template.
*/}}
{{- define "strata.workload" -}}
{{- $root := .root -}}
{{- $v := index $root.Values .key -}}
{{- $sa := include "strata.serviceAccountName" . -}}
{{- $fullname := include "strata.fullname" . -}}
{{- /* A shard (`sharding.shards`) is one more Deployment (and PodDisruptionBudget) of the
service, `<name>-<shard>`, with the same ServiceAccount; the service's Service, NetworkPolicy
and monitors select every shard's pods through the selector labels they share. */}}
{{- if .shard }}{{ $fullname = printf "%s-%s" $fullname .shard }}{{ end -}}
{{- if and $v.serviceAccount.create (not .shard) }}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ $sa }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "strata.serviceLabels" . | nindent 4 }}
  {{- with $v.serviceAccount.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $fullname }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "strata.serviceLabels" . | nindent 4 }}
  {{- with $v.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  replicas: {{ $v.replicas }}
  revisionHistoryLimit: {{ $v.revisionHistoryLimit }}
  {{- with $v.minReadySeconds }}
  minReadySeconds: {{ . }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "strata.selectorLabels" . | nindent 6 }}
  strategy:
    type: RollingUpdate
    # One replica at a time, never below the running count: the standby keeps serving (webhook)
    # or keeps its caches warm (leader-elected controllers) while the other is replaced.
    rollingUpdate: {maxSurge: 1, maxUnavailable: 0}
  template:
    metadata:
      labels:
        {{- /* Selector labels win over pod labels of the same key. */}}
        {{- toYaml (merge (include "strata.serviceLabels" . | fromYaml) ($v.podLabels | default dict)) | nindent 8 }}
      {{- $annotations := merge (dict) ($v.podAnnotations | default dict) ($v.extraPodAnnotations | default dict) ($root.Values.global.extraPodAnnotations | default dict) }}
      {{- if $v.prometheus.enabled }}
      {{- $_ := set $annotations "prometheus.io/scrape" "true" }}
      {{- $_ := set $annotations "prometheus.io/port" (toString $v.ports.admin) }}
      {{- $_ := set $annotations "prometheus.io/path" "/metrics" }}
      {{- end }}
      {{- with $annotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: {{ $sa }}
      automountServiceAccountToken: true
      {{- if $v.hostNetwork }}
      hostNetwork: true
      {{- end }}
      {{- with $v.dnsPolicy }}
      dnsPolicy: {{ . }}
      {{- end }}
      {{- with include "strata.imagePullSecrets" . }}
      {{- . | nindent 6 }}
      {{- end }}
      {{- with $v.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      securityContext:
        {{- toYaml $v.podSecurityContext | nindent 8 }}
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      topologySpreadConstraints:
      {{- if $v.topologySpreadConstraints }}
        {{- toYaml $v.topologySpreadConstraints | nindent 8 }}
      {{- else }}
        {{- /* Replicas apart by node and by zone, when the cluster allows it. */}}
        {{- range list "kubernetes.io/hostname" "topology.kubernetes.io/zone" }}
        - maxSkew: 1
          topologyKey: {{ . }}
          whenUnsatisfiable: ScheduleAnyway
          labelSelector:
            matchLabels:
              {{- include "strata.selectorLabels" $ | nindent 14 }}
        {{- end }}
      {{- end }}
      containers:
        - name: {{ .name }}
          image: {{ include "strata.image" . }}
          imagePullPolicy: {{ default $root.Values.global.image.pullPolicy $v.image.pullPolicy }}
          command: [/{{ .name }}]
          args:
            {{- include "strata.commonArgs" . | nindent 12 }}
            {{- with .args }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
            {{- with $v.extraArgs }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          env:
            - name: POD_NAMESPACE
              valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
            - name: POD_NAME
              valueFrom: {fieldRef: {fieldPath: metadata.name}}
            {{- with $root.Values.global.env.httpsProxy }}
            - {name: HTTPS_PROXY, value: {{ . | quote }}}
            {{- end }}
            {{- with $root.Values.global.env.httpProxy }}
            - {name: HTTP_PROXY, value: {{ . | quote }}}
            {{- end }}
            {{- with $root.Values.global.env.noProxy }}
            - {name: NO_PROXY, value: {{ . | quote }}}
            {{- end }}
            {{- with $root.Values.global.env.otlpEndpoint }}
            - {name: OTEL_EXPORTER_OTLP_ENDPOINT, value: {{ . | quote }}}
            {{- end }}
            {{- with $v.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- with $v.extraEnvFrom }}
          envFrom:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          ports:
            - {name: admin, containerPort: {{ $v.ports.admin }}, protocol: TCP}
            {{- with $v.ports.https }}
            - {name: https, containerPort: {{ . }}, protocol: TCP}
            {{- end }}
          livenessProbe:
            httpGet: {path: /livez, port: admin}
            periodSeconds: 10
            failureThreshold: 3
          readinessProbe:
            httpGet: {path: /readyz, port: admin}
            periodSeconds: 5
          {{- with $v.startupProbe }}
          startupProbe:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          securityContext:
            {{- toYaml $v.securityContext | nindent 12 }}
          {{- with concat (.mounts | default list) ($v.extraVolumeMounts | default list) }}
          volumeMounts:
            {{- toYaml . | nindent 12 }}
          {{- end }}
      {{- with concat (.volumes | default list) ($v.extraVolumes | default list) }}
      volumes:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- if not .shard }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ $fullname }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "strata.serviceLabels" . | nindent 4 }}
spec:
  selector:
    {{- include "strata.selectorLabels" . | nindent 4 }}
  ports:
    - {name: admin, port: {{ $v.ports.admin }}, targetPort: admin, protocol: TCP}
    {{- if $v.ports.https }}
    - {name: https, port: 443, targetPort: https, protocol: TCP}
    {{- end }}
{{- end }}
{{- if and $v.podDisruptionBudget.enabled (gt (int $v.replicas) 1) }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ $fullname }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "strata.serviceLabels" . | nindent 4 }}
spec:
  maxUnavailable: 1
  selector:
    matchLabels:
      {{- include "strata.selectorLabels" . | nindent 6 }}
{{- end }}
{{- if and $root.Values.networkPolicy.enabled (not .shard) }}
---
# Inbound traffic only to the admin port (probes, metrics) and the webhook port, each from the
# peers `networkPolicy.adminFrom` / `webhookFrom` list (empty: from anywhere; kube-apiserver's
# addresses are cluster-specific); outbound is left open (API server, pods, sources).
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ $fullname }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "strata.serviceLabels" . | nindent 4 }}
spec:
  podSelector:
    matchLabels:
      {{- include "strata.selectorLabels" . | nindent 6 }}
  policyTypes: [Ingress]
  ingress:
    - ports:
        - {port: {{ $v.ports.admin }}, protocol: TCP}
      {{- with $root.Values.networkPolicy.adminFrom }}
      from:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    {{- with $v.ports.https }}
    - ports:
        - {port: {{ . }}, protocol: TCP}
      {{- with $root.Values.networkPolicy.webhookFrom }}
      from:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    {{- end }}
{{- end }}
{{- range $kind, $m := dict "ServiceMonitor" $root.Values.serviceMonitor "PodMonitor" $root.Values.podMonitor }}
{{- if and $m.enabled (not $.shard) }}
---
apiVersion: monitoring.coreos.com/v1
kind: {{ $kind }}
metadata:
  name: {{ $fullname }}
  namespace: {{ default $root.Release.Namespace $m.namespace }}
  labels:
    {{- include "strata.serviceLabels" $ | nindent 4 }}
    {{- with $m.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  {{- with $m.namespace }}
  namespaceSelector:
    matchNames: [{{ $root.Release.Namespace }}]
  {{- end }}
  selector:
    matchLabels:
      {{- include "strata.selectorLabels" $ | nindent 6 }}
  {{ ternary "endpoints" "podMetricsEndpoints" (eq $kind "ServiceMonitor") }}:
    - port: admin
      path: /metrics
      interval: {{ $m.interval }}
      {{- with $m.scrapeTimeout }}
      scrapeTimeout: {{ . }}
      {{- end }}
      {{- with $m.relabelings }}
      relabelings:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $m.metricRelabelings }}
      metricRelabelings:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
`impersonate` on ServiceAccounts, one Role and RoleBinding per namespace of `accounts` (a list
of `{namespace, serviceAccounts}`), bound to ServiceAccount `sa` of the release: where layers
may act as an account, never cluster-wide. `name` tells whose Roles they are.
*/}}
{{- define "strata.impersonationRoles" -}}
{{- $ctx := .ctx -}}
{{- $root := $ctx.root -}}
{{- range .accounts }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ include "strata.clusterPrefix" $root }}{{ $.name }}-impersonate
  namespace: {{ .namespace }}
  labels:
    {{- include "strata.serviceLabels" $ctx | nindent 4 }}
rules:
  - apiGroups: [""]
    resources: [serviceaccounts]
    verbs: [impersonate]
    {{- with .serviceAccounts }}
    resourceNames:
      {{- toYaml . | nindent 6 }}
    {{- end }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ include "strata.clusterPrefix" $root }}{{ $.name }}-impersonate
  namespace: {{ .namespace }}
  labels:
    {{- include "strata.serviceLabels" $ctx | nindent 4 }}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: {{ include "strata.clusterPrefix" $root }}{{ $.name }}-impersonate}
subjects:
  - {kind: ServiceAccount, name: {{ $.sa }}, namespace: {{ $root.Release.Namespace }}}
{{- end }}
{{- end }}

{{/*
Leader election rules of one service (`ctx`, with `sharded` true for a layer service): `create`
(which RBAC cannot narrow by name), and `get`/`patch` of its own Leases only — the main one and
one per shard — so no service can hold or stall another's.
*/}}
{{- define "strata.leaseRules" -}}
{{- $fn := include "strata.fullname" .ctx -}}
{{- $names := list (printf "%s-leader" $fn) -}}
{{- if .sharded }}{{ range .ctx.root.Values.sharding.shards }}{{ $names = append $names (printf "%s-%s-leader" $fn .) }}{{ end }}{{ end -}}
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [create]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  resourceNames: {{ toJson $names }}
  verbs: [get, patch]
{{- end }}

{{/*
The layer-controller's defaults decide the account a layer acts as, and three services must
agree on them (the controller applies as it, the drift-observer dry-runs as it, the webhook and
the author policy check its author against it). They come from values only: a flag passed
through a service's extraArgs would change one service and not the others, so it is refused.
*/}}
{{- define "strata.sharedDefaultsGuard" -}}
{{- $owned := dict "layerController" (list "--default-service-account" "--default-source-namespace") "driftObserver" (list "--default-service-account" "--default-source-namespace" "--apply-as") "admissionWebhook" (list "--layer-default-service-account" "--layer-default-source-namespace" "--layer-controller-service-account") -}}
{{- range $key, $flags := $owned }}
{{- range $arg := (index $.Values $key).extraArgs | default list }}
{{- range $flag := $flags }}
{{- if or (eq (toString $arg) $flag) (hasPrefix (printf "%s=" $flag) (toString $arg)) }}
{{- fail (printf "%s.extraArgs: %q would make this service disagree with the others on the account a layer acts as; set layerController.defaultServiceAccount, layerController.defaultSourceNamespace or admissionWebhook.layerControllerServiceAccount instead" $key $arg) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The layer-controller's ServiceAccount as `<namespace>/<name>`: what a layer naming no account
(and with no default) acts as. `admissionWebhook.layerControllerServiceAccount` when set (a
controller installed by another release), else this release's. The webhook's flag and the
author policy both read it here.
*/}}
{{- define "strata.layerControllerAccount" -}}
{{- default (printf "%s/%s" .Release.Namespace (include "strata.serviceAccountName" (dict "root" . "key" "layerController" "name" "layer-controller"))) .Values.admissionWebhook.layerControllerServiceAccount -}}
{{- end }}

{{/*
The namespaces the rollout-operator lists in `rolloutOperator.watchNamespaces`, as a JSON
array; empty unless it is enabled and lists them. The admission-webhook's rollout webhooks
(no-downscale, prepare-downscale, pod-eviction, zpdb-validation) then select only these.
*/}}
{{- define "strata.rolloutNamespaces" -}}
{{- $r := .Values.rolloutOperator -}}
{{- $out := list -}}
{{- if $r.enabled -}}
{{- with $r.watchNamespaceSelector -}}
{{- range $key, $value := (.matchLabels | default dict) }}{{ $out = append $out (dict "key" $key "operator" "In" "values" (list $value)) }}{{ end -}}
{{- range (.matchExpressions | default list) }}{{ $out = append $out . }}{{ end -}}
{{- else -}}
{{- with $r.watchNamespaces }}{{ $out = append $out (dict "key" "kubernetes.io/metadata.name" "operator" "In" "values" (uniq .)) }}{{ end -}}
{{- end -}}
{{- end -}}
{{- $out | toJson -}}
{{- end }}

{{- /* A LabelSelector (matchLabels, matchExpressions) written as a selector flag's text
(`k=v,k in (a,b),k notin (c),k,!k`); `what` names it in the error for an unknown operator. */}}
{{- define "strata.selectorText" -}}
{{- $terms := list -}}
{{- range $label, $value := (.selector.matchLabels | default dict) }}{{ $terms = append $terms (printf "%s=%s" $label $value) }}{{ end -}}
{{- range (.selector.matchExpressions | default list) -}}
{{- if eq .operator "In" }}{{ $terms = append $terms (printf "%s in (%s)" .key (join "," .values)) -}}
{{- else if eq .operator "NotIn" }}{{ $terms = append $terms (printf "%s notin (%s)" .key (join "," .values)) -}}
{{- else if eq .operator "Exists" }}{{ $terms = append $terms .key -}}
{{- else if eq .operator "DoesNotExist" }}{{ $terms = append $terms (printf "!%s" .key) -}}
{{- else }}{{ fail (printf "%s: operator %q is not In, NotIn, Exists or DoesNotExist" $.what .operator) -}}
{{- end -}}
{{- end -}}
{{- join "," $terms -}}
{{- end }}

{{- /* What the rollout-operator does in each namespace it acts in (its Role, or in
selector mode the ClusterRole bound per namespace). */}}
{{- define "strata.rolloutOperatorRules" -}}
# Watch rollout groups; scale followers and mirrors.
- apiGroups: [apps]
  resources: [statefulsets]
  verbs: [get, list, watch, patch]
# Advance status.currentRevision once a zone is rolled.
- apiGroups: [apps]
  resources: [statefulsets/status]
  verbs: [update]
# Delete outdated pods; record grafana.com/ready-time on pods covered by a ZPDB.
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch, delete, patch]
# Zone-aware disruption budgets (read even when the webhooks run elsewhere).
- apiGroups: [rollout-operator.grafana.com]
  resources: [zoneawarepoddisruptionbudgets]
  verbs: [list, watch]
# Mirroring replicas from ReplicaTemplates.
- apiGroups: [rollout-operator.grafana.com]
  resources: [replicatemplates/scale]
  verbs: [get]
- apiGroups: [rollout-operator.grafana.com]
  resources: [replicatemplates/status]
  verbs: [patch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end }}
