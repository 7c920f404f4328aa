"""JSON schemas of the custom resources the program creates (kubernetes-validate only knows the
built-in kinds).

Hand-written from the upstream API references (prometheus-operator v0.77 monitoring.coreos.com/v1,
KEDA 2.15 keda.sh/v1alpha1): every spec field of each CRD is listed so that a misspelt field
fails, like the API server's structural schema would; nested objects splitstack does not set are
left open. Durations use the operator's own pattern; KEDA trigger metadata is map[string]string.
"""

from __future__ import annotations

from typing import Any

DURATION = "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
ANY: dict = {}
STR = {"type": "string"}
INT = {"type": "integer"}
BOOL = {"type": "boolean"}
STRMAP = {"type": "object", "additionalProperties": {"type": "string"}}
DUR = {"type": "string", "pattern": DURATION}


def obj(props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    return schema


def open_fields(*names: str) -> dict[str, Any]:
    return {n: ANY for n in names}


LABEL_SELECTOR = obj({"matchLabels": STRMAP, "matchExpressions": {"type": "array", "items": obj(
    {"key": STR, "operator": STR, "values": {"type": "array", "items": STR}}, ("key", "operator"))}})
METADATA = obj({
    "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", "maxLength": 253},
    "namespace": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63},
    "labels": STRMAP, "annotations": STRMAP}, ("name",))

ENDPOINT = obj({
    **open_fields("authorization", "basicAuth", "bearerTokenFile", "bearerTokenSecret",
                  "enableHttp2", "filterRunning", "followRedirects", "honorLabels",
                  "honorTimestamps", "metricRelabelings", "noProxy", "oauth2", "params",
                  "proxyConnectHeader", "proxyFromEnvironment", "proxyUrl", "relabelings",
                  "scheme", "targetPort", "tlsConfig", "trackTimestampsStaleness"),
    "port": STR, "path": STR, "interval": DUR, "scrapeTimeout": DUR})
SERVICE_MONITOR = obj({
    **open_fields("attachMetadata", "bodySizeLimit", "fallbackScrapeProtocol",
                  "keepDroppedTargets", "labelLimit", "labelNameLengthLimit",
                  "labelValueLengthLimit", "nativeHistogramBucketLimit",
                  "nativeHistogramMinBucketFactor", "podTargetLabels", "sampleLimit",
                  "scrapeClass", "scrapeClassicHistograms", "scrapeProtocols",
                  "selectorMechanism", "targetLabels", "targetLimit",
                  "convertClassicHistogramsToNHCB"),
    "endpoints": {"type": "array", "items": ENDPOINT}, "jobLabel": STR,
    "namespaceSelector": obj({"any": BOOL, "matchNames": {"type": "array", "items": STR}}),
    "selector": LABEL_SELECTOR}, ("selector",))

RULE = obj({"alert": STR, "record": STR, "expr": {"type": ["string", "integer"]}, "for": DUR,
            "keep_firing_for": DUR, "labels": STRMAP, "annotations": STRMAP}, ("expr",))
GROUP = obj({"name": {"type": "string", "minLength": 1}, "interval": DUR, "limit": INT,
             "partial_response_strategy": STR, "query_offset": STR, "labels": STRMAP,
             "rules": {"type": "array", "items": RULE}}, ("name",))
PROMETHEUS_RULE = obj({"groups": {"type": "array", "items": GROUP}})

TRIGGER = obj({
    "type": STR, "name": STR, "metadata": STRMAP, "useCachedMetrics": BOOL,
    "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
    "authenticationRef": obj({"name": STR, "kind": {
        "enum": ["TriggerAuthentication", "ClusterTriggerAuthentication"]}}, ("name",))},
    ("type", "metadata"))
SCALED_OBJECT = obj({
    "scaleTargetRef": obj({"name": STR, "apiVersion": STR, "kind": STR,
                           "envSourceContainerName": STR}, ("name",)),
    "pollingInterval": INT, "initialCooldownPeriod": INT, "cooldownPeriod": INT,
    "idleReplicaCount": INT, "minReplicaCount": INT, "maxReplicaCount": INT, "advanced": ANY,
    "fallback": obj({"failureThreshold": INT, "replicas": INT, "behavior": STR},
                    ("failureThreshold", "replicas")),
    "triggers": {"type": "array", "items": TRIGGER, "minItems": 1}},
    ("scaleTargetRef", "triggers"))
TRIGGER_AUTHENTICATION = obj({
    **open_fields("env", "hashiCorpVault", "podIdentity", "azureKeyVault", "gcpSecretManager",
                  "awsSecretManager", "configMapTargetRef", "boundServiceAccountToken"),
    "secretTargetRef": {"type": "array", "items": obj(
        {"parameter": STR, "name": STR, "key": STR}, ("parameter", "name", "key"))}})


def _resource(api_version: str, kind: str, spec: dict) -> dict[str, Any]:
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **obj(
        {"apiVersion": {"const": api_version}, "kind": {"const": kind}, "metadata": METADATA,
         "spec": spec}, ("apiVersion", "kind", "metadata", "spec"))}


SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): _resource(
        "monitoring.coreos.com/v1", "ServiceMonitor", SERVICE_MONITOR),
    ("monitoring.coreos.com/v1", "PrometheusRule"): _resource(
        "monitoring.coreos.com/v1", "PrometheusRule", PROMETHEUS_RULE),
    ("keda.sh/v1alpha1", "ScaledObject"): _resource("keda.sh/v1alpha1", "ScaledObject",
                                                    SCALED_OBJECT),
    ("keda.sh/v1alpha1", "TriggerAuthentication"): _resource(
        "keda.sh/v1alpha1", "TriggerAuthentication", TRIGGER_AUTHENTICATION),
}
