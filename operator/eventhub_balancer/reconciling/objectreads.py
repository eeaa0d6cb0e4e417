"""What a decision reads of one pod and of one ConfigMap, and whether a body reads the same.

A `fleets.Fleet` keeps one read per pod and per ConfigMap, with the body it was read from: a
body that is that very object, or that reads the same (`same_pod`, `same_map`), is carried
over without reading it again.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import podstates
from eventhub_balancer.reconciling import observations

Body = Mapping[str, Any]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodRead:
    """What a decision reads of one pod, with the body it was read from."""

    body: Body
    #: a copy of `podstates.state_inputs` of the body
    inputs: tuple[object, ...]
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    state: podstates.PodState

    @property
    def member(self) -> models.Member | None:
        s = self.state
        if s.state is None:
            return None
        return models.Member(
            name=models.MemberName(s.name), state=s.state, since=podstates.to_seconds(s.since)
        )


def read_pod(body: Body) -> PodRead:
    meta = body.get("metadata") or {}
    return PodRead(
        body=body,
        inputs=copy.deepcopy(podstates.state_inputs(body)),
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        state=podstates.pod_state(body),
    )


def same_pod(kept: PodRead, body: Body) -> bool:
    """Whether ``body`` reads as ``kept``: its state's inputs, labels and annotations."""
    meta = body.get("metadata") or {}
    return (
        kept.inputs == podstates.state_inputs(body)
        and kept.labels == (meta.get("labels") or {})
        and kept.annotations == (meta.get("annotations") or {})
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class MapRead:
    """One ConfigMap of the consumer, parsed, with the body it was read from."""

    body: Body
    stored: observations.StoredMap


def read_map(body: Body) -> MapRead:
    return MapRead(body=body, stored=observations.stored_map(body))


def same_map(kept: MapRead, body: Body) -> bool:
    """Whether ``body`` reads as ``kept``, uid and resourceVersion included (a write names
    the version it read)."""
    meta = body.get("metadata") or {}
    return (
        kept.stored.resource_version == str(meta.get("resourceVersion", ""))
        and kept.stored.uid == str(meta.get("uid", ""))
        and observations.reads_as(kept.stored, body)
    )
