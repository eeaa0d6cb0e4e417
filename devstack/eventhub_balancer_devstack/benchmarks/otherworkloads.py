"""The pods of other workloads that share a namespace with the consumers (``ehb bench operator
--other-pods N``).

The operator watches and indexes every pod of the namespaces it serves unless ``ehb operator
--pod-selector`` narrows its pod watch. What that costs grows with the bytes of the pods it
holds, and a real pod is mostly spec: containers with their environment, ports, resources,
probes and mounts, volumes, scheduling rules. These bodies have that shape (`body`), so that
the memory measured next to them is what a namespace shared with real Deployments costs. No
consumer's selector selects them (``app: other-K``), and they carry no owner reference: on the
real control plane the garbage collector would delete pods whose owner does not exist.
"""

from __future__ import annotations

import hashlib
from typing import Any

#: The other pods belong to this many workloads (``app: other-0`` to ``other-49``).
WORKLOADS = 50
#: Each pod's containers: the application, a log shipper, a mesh proxy; (name, port).
CONTAINERS = (("app", 8080), ("logs", 2020), ("proxy", 15001))
#: The volumes each container mounts, with their paths.
MOUNTS = (
    ("config", "/etc/app"),
    ("credentials", "/var/run/secrets/app"),
    ("cache", "/var/cache/app"),
    ("scratch", "/tmp"),
)


def name(i: int) -> str:
    return f"other-{i % WORKLOADS}-{i}"


def body(i: int) -> dict[str, Any]:
    """The ``i``-th other pod, as its Deployment's pod template would make it: three containers
    with 20 environment variables each (values, field, Secret, ConfigMap and resource
    references), two ports, requests and limits, three probes, four mounts and a security
    context; four volumes; anti-affinity and a topology spread by its ``app`` label."""
    workload = f"other-{i % WORKLOADS}"
    labels = {
        "app": workload,
        "app.kubernetes.io/name": workload,
        "app.kubernetes.io/version": "2.14.3",
        "pod-template-hash": hashlib.sha256(workload.encode()).hexdigest()[:10],
    }
    spread = {"labelSelector": {"matchLabels": {"app": workload}}}
    return {
        "metadata": {
            "name": name(i),
            "labels": labels,
            "annotations": {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "9090",
                "kubectl.kubernetes.io/restartedAt": "2026-11-20T08:12:44Z",
            },
        },
        "spec": {
            "containers": [_container(workload, c, port) for c, port in CONTAINERS],
            "volumes": [
                {"name": "config", "configMap": {"name": f"{workload}-config", "optional": True}},
                {
                    "name": "credentials",
                    "secret": {"secretName": f"{workload}-credentials", "optional": True},
                },
                {"name": "cache", "emptyDir": {"sizeLimit": "1Gi"}},
                {"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
            ],
            "terminationGracePeriodSeconds": 45,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 10001,
                "fsGroup": 10001,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "affinity": {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 100,
                            "podAffinityTerm": {
                                **spread,
                                "topologyKey": "kubernetes.io/hostname",
                            },
                        }
                    ]
                }
            },
            "topologySpreadConstraints": [
                {
                    **spread,
                    "maxSkew": 1,
                    "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "ScheduleAnyway",
                }
            ],
        },
    }


def _container(workload: str, container: str, port: int) -> dict[str, Any]:
    digest = hashlib.sha256(f"{workload}/{container}".encode()).hexdigest()
    probe = {"httpGet": {"path": "/healthz", "port": port}, "timeoutSeconds": 2}
    return {
        "name": container,
        "image": f"registry.example.com/shop/{workload}-{container}:2.14.3@sha256:{digest}",
        "imagePullPolicy": "IfNotPresent",
        "args": [f"--listen=:{port}", "--config=/etc/app/config.yaml", "--log-format=json"],
        "env": _environment(workload, container, port),
        # Port names are unique within a pod: each container's carry its name.
        "ports": [
            {"name": f"{container}-http", "containerPort": port, "protocol": "TCP"},
            {"name": f"{container}-metrics", "containerPort": 9090 + port % 7, "protocol": "TCP"},
        ],
        "resources": {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"cpu": "500m", "memory": "512Mi"},
        },
        "startupProbe": {**probe, "periodSeconds": 2, "failureThreshold": 30},
        "livenessProbe": {**probe, "periodSeconds": 10, "failureThreshold": 3},
        "readinessProbe": {
            "httpGet": {"path": "/ready", "port": port},
            "periodSeconds": 5,
            "successThreshold": 1,
        },
        "volumeMounts": [
            {"name": volume, "mountPath": path, "readOnly": volume in ("config", "credentials")}
            for volume, path in MOUNTS
        ],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }


def _environment(workload: str, container: str, port: int) -> list[dict[str, Any]]:
    """20 variables, as a twelve-factor service carries them."""
    service = f"{workload}.shop.svc.cluster.local"
    values = {
        "SERVICE_NAME": f"{workload}-{container}",
        "HTTP_PORT": str(port),
        "LOG_LEVEL": "info",
        "LOG_FORMAT": "json",
        "DATABASE_URL": f"postgres://{workload}@db.{service}:5432/{workload}?sslmode=require",
        "REDIS_URL": f"redis://cache.{service}:6379/0",
        "KAFKA_BOOTSTRAP_SERVERS": "kafka-0.kafka:9092,kafka-1.kafka:9092,kafka-2.kafka:9092",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.observability:4317",
        "OTEL_RESOURCE_ATTRIBUTES": f"service.name={workload},deployment.environment=prod",
        "FEATURE_FLAGS": "checkout-v2,search-ranking,async-invoices,eu-vat-rules",
        "REQUEST_TIMEOUT_MS": "5000",
        "MAX_CONNECTIONS": "64",
        "TZ": "UTC",
    }
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in values.items()]
    fields = {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    fields |= {"POD_IP": "status.podIP", "NODE_NAME": "spec.nodeName"}
    env += [{"name": k, "valueFrom": {"fieldRef": {"fieldPath": v}}} for k, v in fields.items()]
    env += [
        {
            "name": "DATABASE_PASSWORD",
            "valueFrom": {"secretKeyRef": {"name": f"{workload}-credentials", "key": "db"}},
        },
        {
            "name": "REGION",
            "valueFrom": {"configMapKeyRef": {"name": f"{workload}-config", "key": "region"}},
        },
        {
            "name": "MEMORY_LIMIT",
            "valueFrom": {
                "resourceFieldRef": {"containerName": container, "resource": "limits.memory"}
            },
        },
    ]
    return env
