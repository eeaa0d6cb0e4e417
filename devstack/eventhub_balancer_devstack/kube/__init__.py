"""A local Kubernetes API server for tests and the demo: no cluster needed.

Built on kmock 0.8 with the gaps closed that kopf and the kubernetes client run into
(server-set metadata, 409/422 semantics, PUT, selectors, generateName, namespaces...) and
what makes it refuse what a cluster refuses (CRD schemas and CEL rules, admission policies)
and talk to kubectl (OpenAPI, Tables), served
on 127.0.0.1 from a thread of its own. See :class:`LocalKubeAPI`.
"""

from eventhub_balancer_devstack.kube.apiservers import LocalKubeAPI

__all__ = ["LocalKubeAPI"]
