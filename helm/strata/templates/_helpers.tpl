{{/*
Shared helpers. Each service template calls "strata.workload" with a context dict:
  root: the chart's root context; key: the values key (layerController, ...);
  name: the service name (layer-controller, ...); args: its service-specific arguments.
Namespaced objects carry the service name (the Lease `<name>-leader` and the webhook
certificate's DNS names depend on it); cluster-scoped objects are prefixed with the release
name so two releases never collide.
*/}}

{{- define "strata.labels" -}}
{{- $labels := dict "app.kubernetes.io/part-of" "strata" "app.kubernetes.io/managed-by" .root.Release.Service "app.kubernetes.io/instance" .root.Release.Name "app.kubernetes.io/version" .root.Chart.AppVersion "helm.sh/chart" (printf "%s-%s" .root.Chart.Name .root.Chart.Version) -}}
{{- toYaml (merge $labels (.root.Values.global.extraLabels | default dict)) -}}
{{- end }}

{{- define "strata.selectorLabels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end }}

{{/* Labels of one service's objects: the chart's, the selector's and the service's own (the
chart's own labels win over extra labels of the same key, so selectors keep working). */}}
{{- define "strata.serviceLabels" -}}
{{- $labels := dict "app.kubernetes.io/part-of" "strata" "app.kubernetes.io/managed-by" .root.Release.Service "app.kubernetes.io/instance" .root.Release.Name "app.kubernetes.io/version" .root.Chart.AppVersion "helm.sh/chart" (printf "%s-%s" .root.Chart.Name .root.Chart.Version) "app.kubernetes.io/name" .name "app.kubernetes.io/component" .name -}}
{{- toYaml (merge $labels ((index .root.Values .key).extraLabels | default dict) (.root.Values.global.extraLabels | default dict)) -}}
{{- end }}

{{- define "strata.serviceAccountName" -}}
{{- $v := index .root.Values .key -}}
{{- default .name $v.serviceAccount.name -}}
{{- end }}

{{- define "strata.image" -}}
{{- $v := index .root.Values .key -}}
{{- $repo := $v.image.repository -}}
{{- with .root.Values.global.image.registry }}{{ $repo = printf "%s/%s" . $repo }}{{ end -}}
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
One service: ServiceAccount, Deployment, Service, PodDisruptionBudget, NetworkPolicy and
ServiceMonitor. RBAC and webhook configurations live in the service's own template.
*/}}
{{- define "strata.workload" -}}
{{- $root := .root -}}
{{- $v := index $root.Values .key -}}
{{- $sa := include "strata.serviceAccountName" . -}}
{{- if $v.serviceAccount.create }}
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
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "strata.serviceLabels" . | nindent 4 }}
spec:
  replicas: {{ $v.replicas }}
  revisionHistoryLimit: 5
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
        {{- include "strata.serviceLabels" . | nindent 8 }}
      {{- $annotations := merge (dict) ($v.extraPodAnnotations | default dict) ($root.Values.global.extraPodAnnotations | default dict) }}
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
        - maxSkew: 1
          topologyKey: kubernetes.io/hostname
          whenUnsatisfiable: ScheduleAnyway
          labelSelector:
            matchLabels:
              {{- include "strata.selectorLabels" . | nindent 14 }}
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
            {{- with $root.Values.global.env.noProxy }}
            - {name: NO_PROXY, value: {{ . | quote }}}
            {{- end }}
            {{- with $root.Values.global.env.otlpEndpoint }}
            - {name: OTEL_EXPORTER_OTLP_ENDPOINT, value: {{ . | quote }}}
            {{- end }}
            {{- with $v.extraEnv }}
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
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          securityContext:
            {{- toYaml $v.securityContext | nindent 12 }}
          {{- with .mounts }}
          volumeMounts:
            {{- toYaml . | nindent 12 }}
          {{- end }}
      {{- with .volumes }}
      volumes:
        {{- toYaml . | nindent 8 }}
      {{- end }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ .name }}
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
{{- if and $v.podDisruptionBudget.enabled (gt (int $v.replicas) 1) }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "strata.serviceLabels" . | nindent 4 }}
spec:
  maxUnavailable: 1
  selector:
    matchLabels:
      {{- include "strata.selectorLabels" . | nindent 6 }}
{{- end }}
{{- if $root.Values.networkPolicy.enabled }}
---
# Inbound traffic only to the admin port (probes, metrics) and the webhook port, each from the
# peers `networkPolicy.adminFrom` / `webhookFrom` list (empty: from anywhere; kube-apiserver's
# addresses are cluster-specific); outbound is left open (API server, pods, sources).
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ .name }}
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
{{- if $root.Values.serviceMonitor.enabled }}
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "strata.serviceLabels" . | nindent 4 }}
    {{- with $root.Values.serviceMonitor.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  selector:
    matchLabels:
      {{- include "strata.selectorLabels" . | nindent 6 }}
  endpoints:
    - port: admin
      path: /metrics
      interval: {{ $root.Values.serviceMonitor.interval }}
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
  name: {{ $root.Release.Name }}-{{ $.name }}-impersonate
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
  name: {{ $root.Release.Name }}-{{ $.name }}-impersonate
  namespace: {{ .namespace }}
  labels:
    {{- include "strata.serviceLabels" $ctx | nindent 4 }}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: {{ $root.Release.Name }}-{{ $.name }}-impersonate}
subjects:
  - {kind: ServiceAccount, name: {{ $.sa }}, namespace: {{ $root.Release.Namespace }}}
{{- end }}
{{- end }}
