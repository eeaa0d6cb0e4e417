"""Test infrastructure that checks RBAC against what the code does.

``requestinfo`` turns an HTTP request to the Kubernetes API into what the API server's
authorizer sees (Kubernetes' RequestInfoFactory rules), ``recording`` is a reverse proxy that
records those requests while a client talks to an API server, and ``authorizing`` evaluates
Role/ClusterRole rules from YAML manifests against recorded requests, and reports the grants
that were never exercised.
"""
