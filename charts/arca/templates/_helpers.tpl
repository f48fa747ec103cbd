{{/*
The chart's logic in one place: names, labels, duration arithmetic, and "arca.model", which
turns .Values into the deployment plan every template renders from (which group hosts which
service, who calls whom across groups, which groups keep state on a volume) and refuses values
that cannot work, with one `fail` line naming the value.
*/}}

{{- define "arca.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "arca.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "arca.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object; "arca.selectorLabels" with a group adds the component. */}}
{{- define "arca.labels" -}}
helm.sh/chart: {{ include "arca.chart" . }}
app.kubernetes.io/name: {{ include "arca.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Call with (dict "root" $ "group" NAME). */}}
{{- define "arca.selectorLabels" -}}
app.kubernetes.io/name: {{ include "arca.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .group }}
{{- end -}}

{{/* The name of a group's objects (Deployment, ConfigMap, headless Service…). */}}
{{- define "arca.groupName" -}}
{{- printf "%s-%s" (include "arca.fullname" .root) .group -}}
{{- end -}}

{{- define "arca.identitySecretName" -}}
{{- .Values.identity.existingSecret | default (printf "%s-identity" (include "arca.fullname" .)) -}}
{{- end -}}

{{/*
Seconds in an arca duration ("500ms", "10s", "1m", "1m30s"), as a float. Call with
(dict "value" V "key" "shutdown.timeout"). arca reads durations with humantime; the chart
accepts its common subset (integers with ms, s, m, h) and refuses the rest, because it must
do arithmetic on them.
*/}}
{{- define "arca.seconds" -}}
{{- $text := toString .value | trim -}}
{{- if not (regexMatch "^([0-9]+(ms|s|m|h) *)+$" $text) -}}
{{- fail (printf "%s: %q is not a duration like 30s, 500ms or 1m30s" .key $text) -}}
{{- end -}}
{{- $unit := dict "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 -}}
{{- $total := 0.0 -}}
{{- range regexFindAll "[0-9]+(ms|s|m|h)" $text -1 -}}
{{- $n := regexFind "^[0-9]+" . | float64 -}}
{{- $total = addf $total (mulf $n (get $unit (regexReplaceAll "^[0-9]+" . ""))) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/*
terminationGracePeriodSeconds: the time a pod may take from deletion to exit is the preStop
sleep, then arca's drain delay, then its shutdown deadline; the margin covers process exit and
signal delivery. Computed from the same values that go into the config.
*/}}
{{- define "arca.graceSeconds" -}}
{{- $s := .Values.shutdown -}}
{{- $pre := include "arca.seconds" (dict "value" $s.preStopSleep "key" "shutdown.preStopSleep") | float64 -}}
{{- $drain := include "arca.seconds" (dict "value" $s.drainDelay "key" "shutdown.drainDelay") | float64 -}}
{{- $timeout := include "arca.seconds" (dict "value" $s.timeout "key" "shutdown.timeout") | float64 -}}
{{- $margin := include "arca.seconds" (dict "value" $s.graceMargin "key" "shutdown.graceMargin") | float64 -}}
{{- if le $timeout 0.0 -}}
{{- fail "shutdown.timeout: must be greater than 0s" -}}
{{- end -}}
{{- addf $pre $drain $timeout $margin | ceil | int -}}
{{- end -}}

{{/*
A storage service keeps state on its pod's volume unless its metadata is in PostgreSQL and, for
storage-users (storage-system keeps no file contents), its blobs in S3. Call with
(dict "root" $ "service" NAME); renders "true" or "".
*/}}
{{- define "arca.storageIsLocal" -}}
{{- $v := index .root.Values .service -}}
{{- if or (not $v.database.existingSecret) (and (eq .service "storage-users") (ne $v.blobs.kind "s3")) -}}true{{- end -}}
{{- end -}}

{{/*
The deployment plan, as JSON: {"groups": {NAME: {...}}, "owner": {SERVICE: GROUP},
"public": GROUP}. Each group holds its merged settings plus:
  services  the services it hosts, in arca's start order
  exported  those called from another group (they listen on TCP and get a Service port)
  remote    service -> owning group, for what its services call but it does not host
  relaxed   those remote services it reaches through the owner's "-peers" Service
  peers     "true" if another group reaches it through its "-peers" Service
  local     "true" if a storage service of it keeps state on the pod's volume
  replicas  the fixed replica count (ignored with autoscaling)
*/}}
{{- define "arca.model" -}}
{{- $root := . -}}
{{- $all := list "proxy" "frontend" "gateway" "thumbnails" "search" "storage-users" "storage-system" "sharing" -}}
{{- /* Who calls whom: keep in step with each service's Service::dependencies (tests/helm.rs
runs the binary on the rendered files, which refuses a config missing a dependency). */ -}}
{{- $deps := dict
    "proxy" (list "frontend" "storage-system")
    "frontend" (list "gateway" "storage-users")
    "gateway" (list "storage-users" "storage-system" "sharing")
    "thumbnails" (list "storage-users")
    "search" (list "storage-users" "sharing")
    "storage-users" (list "sharing")
    "storage-system" (list)
    "sharing" (list "storage-system") -}}
{{- /* Calls that are no dependency (arca_host::OPTIONAL_CALLS, checked by tests/helm.rs): the
callee gets a port and the caller a route to it, but the caller's readiness never waits for it. */ -}}
{{- $optional := dict
    "gateway" (list "thumbnails" "search") -}}
{{- $groups := dict -}}
{{- $owner := dict -}}
{{- range $name, $raw := .Values.groups -}}
{{- if and $raw (dig "enabled" true $raw) -}}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $name) -}}
{{- fail (printf "groups.%s: a group name must be lowercase letters, digits and '-' (it names Kubernetes objects)" $name) -}}
{{- end -}}
{{- if gt (len (include "arca.groupName" (dict "root" $root "group" $name))) 57 -}}
{{- fail (printf "groups.%s: %s is longer than 57 characters (63 with -peers); shorten the group name or fullnameOverride" $name (include "arca.groupName" (dict "root" $root "group" $name))) -}}
{{- end -}}
{{- $g := mergeOverwrite (deepCopy $root.Values.groupDefaults) (deepCopy $raw) -}}
{{- $hosted := list -}}
{{- range $svc := ($g.services | default list) -}}
{{- if not (has $svc $all) -}}
{{- fail (printf "groups.%s.services: unknown service %q; arca's services are %s" $name $svc (join ", " $all)) -}}
{{- end -}}
{{- if hasKey $owner $svc -}}
{{- fail (printf "groups.%s.services: %s is already hosted by group %s; each service runs in exactly one group" $name $svc (get $owner $svc)) -}}
{{- end -}}
{{- $_ := set $owner $svc $name -}}
{{- end -}}
{{- range $svc := $all -}}
{{- if has $svc ($g.services | default list) -}}
{{- $hosted = append $hosted $svc -}}
{{- end -}}
{{- end -}}
{{- if not $hosted -}}
{{- fail (printf "groups.%s.services: empty; list the services this group hosts, or disable it with enabled: false" $name) -}}
{{- end -}}
{{- $_ := set $g "services" $hosted -}}
{{- $_ := set $groups $name $g -}}
{{- end -}}
{{- end -}}
{{- range $svc := $all -}}
{{- if not (hasKey $owner $svc) -}}
{{- fail (printf "groups: no enabled group hosts %s; each of %s must be in exactly one group's services" $svc (join ", " $all)) -}}
{{- end -}}
{{- end -}}
{{- range $name, $g := $groups -}}
{{- $exported := list -}}
{{- $remote := dict -}}
{{- $local := "" -}}
{{- range $svc := $g.services -}}
{{- range $callerGroup, $other := $groups -}}
{{- if ne $callerGroup $name -}}
{{- range $caller := $other.services -}}
{{- if and (or (has $svc (get $deps $caller)) (has $svc (get $optional $caller | default list))) (not (has $svc $exported)) -}}
{{- $exported = append $exported $svc -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $dep := get $deps $svc -}}
{{- if not (has $dep $g.services) -}}
{{- $_ := set $remote $dep (get $owner $dep) -}}
{{- end -}}
{{- end -}}
{{- if and (has $svc (list "storage-users" "storage-system")) (include "arca.storageIsLocal" (dict "root" $root "service" $svc)) -}}
{{- $local = "true" -}}
{{- end -}}
{{- end -}}
{{- $_ := set $g "exported" $exported -}}
{{- $_ := set $g "remote" $remote -}}
{{- $_ := set $g "local" $local -}}
{{- $replicas := int $g.replicas -}}
{{- if lt $replicas 0 -}}
{{- fail (printf "groups.%s.replicas: %d is negative" $name $replicas) -}}
{{- end -}}
{{- if $local -}}
{{- $what := list -}}
{{- range $svc := list "storage-users" "storage-system" -}}
{{- if and (has $svc $g.services) (include "arca.storageIsLocal" (dict "root" $root "service" $svc)) -}}
{{- $what = append $what $svc -}}
{{- end -}}
{{- end -}}
{{- $why := printf "%s %s SQLite metadata or local blobs on one pod's volume, which pods cannot share; keep 1 replica, or give %s PostgreSQL (database.existingSecret) and S3 (blobs.kind: s3)" (join " and " $what) (ternary "keep" "keeps" (gt (len $what) 1)) (join " and " $what) -}}
{{- if gt $replicas 1 -}}
{{- fail (printf "groups.%s.replicas: %d is more than 1, but %s" $name $replicas $why) -}}
{{- end -}}
{{- if $g.autoscaling.enabled -}}
{{- fail (printf "groups.%s.autoscaling.enabled: an autoscaler would start more than 1 pod, but %s" $name $why) -}}
{{- end -}}
{{- end -}}
{{- if and $g.autoscaling.enabled (gt (int $g.autoscaling.minReplicas) (int $g.autoscaling.maxReplicas)) -}}
{{- fail (printf "groups.%s.autoscaling: minReplicas %d is above maxReplicas %d" $name (int $g.autoscaling.minReplicas) (int $g.autoscaling.maxReplicas)) -}}
{{- end -}}
{{- $_ := set $g "replicas" $replicas -}}
{{- end -}}
{{- /*
Readiness across pods. A pod is ready (and so in its headless Service's DNS answer) only when
every service it calls elsewhere answers, so groups calling each other in a cycle would each wait
for the other forever: by default frontend calls storage-users, which calls sharing in the
frontend pod. arca's own probe of a remote service asks that service alone, not its pod, so a
cycle is broken by letting one edge see pods that are not ready yet: through a second headless
Service "-peers" publishing not-ready addresses. The edge chosen is the one whose callee can work
without the caller's group (none of its transitive dependencies live there): storage-users ->
sharing, not frontend -> storage-users. Values leaving a cycle of ready-only edges are refused.
*/ -}}
{{- $closure := dict -}}
{{- range $svc := $all -}}
{{- $_ := set $closure $svc (get $deps $svc) -}}
{{- end -}}
{{- range $i := until (len $all) -}}
{{- range $svc := $all -}}
{{- $acc := get $closure $svc -}}
{{- range $d := get $closure $svc -}}
{{- $acc = concat $acc (get $closure $d) | uniq -}}
{{- end -}}
{{- $_ := set $closure $svc $acc -}}
{{- end -}}
{{- end -}}
{{- $reach := dict -}}
{{- range $name, $g := $groups -}}
{{- $_ := set $reach $name (values $g.remote | uniq) -}}
{{- end -}}
{{- range $i := until (len $groups) -}}
{{- range $name := keys $groups -}}
{{- $acc := get $reach $name -}}
{{- range $h := get $reach $name -}}
{{- $acc = concat $acc (get $reach $h) | uniq -}}
{{- end -}}
{{- $_ := set $reach $name $acc -}}
{{- end -}}
{{- end -}}
{{- $ready := dict -}}
{{- range $name, $g := $groups -}}
{{- $relaxed := list -}}
{{- $waits := list -}}
{{- range $dep, $h := $g.remote -}}
{{- $independent := true -}}
{{- range $d := get $closure $dep -}}
{{- if has $d $g.services -}}{{- $independent = false -}}{{- end -}}
{{- end -}}
{{- if and (has $name (get $reach $h)) $independent -}}
{{- $relaxed = append $relaxed $dep -}}
{{- $_ := set (get $groups $h) "peers" "true" -}}
{{- else -}}
{{- $waits = append $waits $h -}}
{{- end -}}
{{- end -}}
{{- $_ := set $g "relaxed" $relaxed -}}
{{- $_ := set $ready $name ($waits | uniq) -}}
{{- end -}}
{{- range $i := until (len $groups) -}}
{{- range $name := keys $groups -}}
{{- $acc := get $ready $name -}}
{{- range $h := get $ready $name -}}
{{- $acc = concat $acc (get $ready $h) | uniq -}}
{{- end -}}
{{- $_ := set $ready $name $acc -}}
{{- end -}}
{{- end -}}
{{- range $name := keys $groups | sortAlpha -}}
{{- if has $name (get $ready $name) -}}
{{- fail (printf "groups.%s: its pods would wait for their own readiness through %s (services calling each other across groups); group those services together" $name (join ", " (without (get $ready $name | sortAlpha) $name))) -}}
{{- end -}}
{{- end -}}
{{- /* Optional calls last: routes to ready pods, no part of the readiness above. */ -}}
{{- range $name, $g := $groups -}}
{{- range $svc := $g.services -}}
{{- range $callee := get $optional $svc | default list -}}
{{- if not (has $callee $g.services) -}}
{{- $_ := set $g.remote $callee (get $owner $callee) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- dict "groups" $groups "owner" $owner "public" (get $owner "proxy") | toJson -}}
{{- end -}}

{{/*
A group's arca config file: the YAML `arca server --config` reads. Call with
(dict "root" $ "model" $m "name" GROUP). Secrets are not in it: they come from the
environment (ARCA_IDENTITY_SECRET, ARCA_ADMIN_PASSWORD, ARCA_STORAGE_*_DATABASE, …).
*/}}
{{- define "arca.config" -}}
{{- $root := .root -}}
{{- $g := get .model.groups .name -}}
{{- $v := $root.Values -}}
{{- range $key := list "services" "data_dir" "debug" "shutdown" "registry" "identity" -}}
{{- if or (hasKey $v.config $key) (hasKey $g.config $key) -}}
{{- fail (printf "config.%s: set by the chart; use the chart's values (groups, ports, shutdown, registry, identity) instead" $key) -}}
{{- end -}}
{{- end -}}
{{- range $svc := list "proxy" "frontend" "gateway" "thumbnails" "search" "storage-users" "storage-system" "sharing" -}}
{{- range $c := list $v.config $g.config -}}
{{- if and (hasKey $c $svc) (hasKey (get $c $svc) "endpoint") -}}
{{- fail (printf "config.%s.endpoint: set by the chart from groups and ports" $svc) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $cfg := dict
    "services" $g.services
    "data_dir" "/var/lib/arca"
    "debug" (dict "addr" (printf "0.0.0.0:%d" (int $v.ports.debug)))
    "shutdown" (dict "drain_delay" (toString $v.shutdown.drainDelay) "timeout" (toString $v.shutdown.timeout)) -}}
{{- /* The registry: where this group finds the services it calls but does not host. */ -}}
{{- $kind := $v.registry.kind -}}
{{- if eq $kind "nats" -}}
{{- $nats := dict -}}
{{- if $v.registry.nats.existingSecret -}}
{{- /* The URL comes from the Secret through ARCA_REGISTRY_NATS_URL. */ -}}
{{- else if $v.registry.nats.url -}}
{{- $_ := set $nats "url" $v.registry.nats.url -}}
{{- else -}}
{{- fail "registry.nats.url: required with registry.kind nats (nats://HOST:PORT of the NATS cluster, or registry.nats.existingSecret)" -}}
{{- end -}}
{{- if $v.registry.nats.bucket -}}{{- $_ := set $nats "bucket" $v.registry.nats.bucket -}}{{- end -}}
{{- if $v.registry.nats.ttl -}}{{- $_ := set $nats "ttl" (toString $v.registry.nats.ttl) -}}{{- end -}}
{{- $_ := set $cfg "registry" (dict "kind" "nats" "nats" $nats) -}}
{{- else if not $g.remote -}}
{{- /* Calls nothing outside the pod: nothing to look up. */ -}}
{{- $_ := set $cfg "registry" (dict "kind" "static" "static" dict) -}}
{{- else if or (eq $kind "dns") (eq $kind "static") -}}
{{- $names := dict -}}
{{- $static := dict -}}
{{- range $dep, $owner := $g.remote -}}
{{- $svcName := include "arca.groupName" (dict "root" $root "group" $owner) -}}
{{- if has $dep $g.relaxed -}}{{- $svcName = printf "%s-peers" $svcName -}}{{- end -}}
{{- $host := printf "%s.%s.svc.%s:%d" $svcName $root.Release.Namespace $v.clusterDomain (int (get $v.ports $dep)) -}}
{{- $_ := set $names $dep $host -}}
{{- $_ := set $static $dep (list (printf "tcp://%s" $host)) -}}
{{- end -}}
{{- if eq $kind "dns" -}}
{{- $_ := set $cfg "registry" (dict "kind" "dns" "dns" (dict "names" $names "interval" (toString $v.registry.dns.interval))) -}}
{{- else -}}
{{- $_ := set $cfg "registry" (dict "kind" "static" "static" $static) -}}
{{- end -}}
{{- else -}}
{{- fail (printf "registry.kind: %q is not one of dns, static, nats" $kind) -}}
{{- end -}}
{{- /*
Endpoints: TCP on all interfaces for services called from other groups, else in memory. With
the NATS registry a process registers the address it listens on, so there the Deployment
overrides these with the pod's own IP (arca.endpointArgs).
*/ -}}
{{- range $svc := $g.services -}}
{{- $ep := printf "mem://%s" $svc -}}
{{- if has $svc $g.exported -}}
{{- $ep = printf "tcp://0.0.0.0:%d" (int (get $v.ports $svc)) -}}
{{- end -}}
{{- $_ := set $cfg $svc (dict "endpoint" $ep) -}}
{{- end -}}
{{- if has "proxy" $g.services -}}
{{- $proxy := get $cfg "proxy" -}}
{{- $_ := set $proxy "http" (dict "addr" (printf "0.0.0.0:%d" (int $v.ports.http))) -}}
{{- if $v.proxy.tls.existingSecret -}}
{{- $_ := set $proxy "tls" (dict "cert" "/etc/arca/tls/tls.crt" "key" "/etc/arca/tls/tls.key") -}}
{{- end -}}
{{- end -}}
{{- range $svc := list "storage-users" "storage-system" -}}
{{- if has $svc $g.services -}}
{{- $s := index $v $svc -}}
{{- $section := get $cfg $svc -}}
{{- if ne $svc "storage-users" -}}
{{- /* storage-system keeps no file contents: it has no blobs keys. */ -}}
{{- else if eq $s.blobs.kind "s3" -}}
{{- if not $s.blobs.s3.bucket -}}
{{- fail (printf "%s.blobs.s3.bucket: required with blobs.kind s3" $svc) -}}
{{- end -}}
{{- $s3 := dict "bucket" $s.blobs.s3.bucket "region" $s.blobs.s3.region -}}
{{- if $s.blobs.s3.endpoint -}}{{- $_ := set $s3 "endpoint" $s.blobs.s3.endpoint -}}{{- end -}}
{{- $_ := set $section "blobs" (dict "kind" "s3" "s3" $s3) -}}
{{- else if eq $s.blobs.kind "local" -}}
{{- $_ := set $section "blobs" (dict "kind" "local") -}}
{{- else -}}
{{- fail (printf "%s.blobs.kind: %q is not local or s3" $svc $s.blobs.kind) -}}
{{- end -}}
{{- if and (eq $svc "storage-users") $s.personalQuota -}}
{{- $_ := set $section "personal_quota" (toString $s.personalQuota) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* Free-form settings last, the chart-owned keys having been refused above. */ -}}
{{- $extra := mergeOverwrite (deepCopy ($v.config | default dict)) (deepCopy ($g.config | default dict)) -}}
{{- $cfg = mergeOverwrite $extra $cfg -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/*
Extra `arca server` arguments of a group: with the NATS registry each exported service listens
on the pod's IP (Kubernetes expands $(POD_IP) in args), since the address a process listens on
is the one it registers and 0.0.0.0 would send callers to themselves. Call with
(dict "root" $ "group" $g); renders a YAML list, possibly empty.
*/}}
{{- define "arca.endpointArgs" -}}
{{- $args := list -}}
{{- if eq .root.Values.registry.kind "nats" -}}
{{- range $svc := .group.exported -}}
{{- $args = append $args "--set" -}}
{{- $args = append $args (printf "%s.endpoint=tcp://$(POD_IP):%d" $svc (int (get $.root.Values.ports $svc))) -}}
{{- end -}}
{{- end -}}
{{- toYaml $args -}}
{{- end -}}
