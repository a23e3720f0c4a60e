{{- define "gpucloud.secretName" -}}
{{- default (printf "%s-secrets" .Release.Name) .Values.secrets.existingSecret -}}
{{- end -}}

{{- /* The ClusterRole the instances service binds in each tenant namespace for the
storage service: the release's own, so two releases on one cluster keep theirs. */ -}}
{{- define "gpucloud.tenantStorageRole" -}}
{{ .Release.Name }}-tenant-storage
{{- end -}}

{{- /* The ClusterRole a tenant user's `gpucloud kubeconfig` credential holds in their
tenant's namespace, bound there by the instances service. */ -}}
{{- define "gpucloud.tenantKubectlRole" -}}
{{ .Release.Name }}-tenant-kubectl
{{- end -}}

{{- define "gpucloud.labels" -}}
app.kubernetes.io/part-of: gpucloud
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}


{{- /* The services with a Kafka principal of their own (gpucloud_libs.kafka_access). */ -}}
{{- define "gpucloud.kafkaPrincipals" -}}
gateway instances storage metering monitoring agent
{{- end -}}

{{- /* The Kafka settings of one service: its own SCRAM principal. */ -}}
{{- define "gpucloud.kafkaEnv" -}}
- {name: GPUCLOUD_KAFKA_BOOTSTRAP, value: {{ .root.Values.kafka.bootstrap | quote }}}
- {name: GPUCLOUD_KAFKA_USERNAME, value: gpucloud-{{ .service }}}
- {name: GPUCLOUD_KAFKA_SASL_MECHANISM, value: SCRAM-SHA-256}
- name: GPUCLOUD_KAFKA_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ include "gpucloud.secretName" .root }}, key: kafka-password-{{ .service }}}}
{{- end -}}

{{- /* The signers' public keys, as every service reads them (JSON). */ -}}
{{- define "gpucloud.identityPublicKeys" -}}
{{- $keys := .Values.identity.publicKeys -}}
{{- $_ := required "identity.publicKeys.gateway: the gateway's Ed25519 public key (keygen)" $keys.gateway -}}
{{- $__ := required "identity.publicKeys.instances: the instances service's Ed25519 public key (keygen)" $keys.instances -}}
{{- toJson $keys -}}
{{- end -}}
