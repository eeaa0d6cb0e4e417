"""What the Ready and Balanced conditions say of the pods that are not Ready: why none of them
is (`not_ready`), which hold nothing and wait for no share (`holding_nothing`), whose grace
keeps partitions from the Ready pods (`kept_words`), and which Ready pods hold partitions they
say nothing of (`holders`). A count and its noun agree through
`contracts.conditions` (`amount`, `counted`, `every`).

`contracts.podstates` says what a pod is and what its grace keeps (`podstates.kept`); the
sentences the user reads are here, apart from `conditions`, which uses them, to keep it within
bounds; none runs while the Ready pods apply what they hold, as on a plain pod deletion.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import conditions, podstates, timestamps

#: Pods named in a message of `holders`; the rest are counted.
NAMED = 3


def not_ready(states: Iterable[podstates.PodState], *, named: int = 3) -> str:
    """``a CrashLoopBackOff, b not Ready and 2 more``: the first pods by name and why, with
    what the kubelet or the scheduler says of it (``c CreateContainerConfigError (secret
    "orders-blob" not found)``) at the first pod it is said of: a rollout's pods all wait on the
    same Secret."""
    ordered = sorted(states, key=lambda s: models.name_key(s.name))
    words, said = [], set()
    for s in ordered[:named]:
        told = f" ({s.detail})" if s.detail and s.detail not in said else ""
        words.append(f"{s.name} {s.cause or 'not Ready'}{told}")
        said.add(s.detail)
    more = len(ordered) - named
    return ", ".join(words) + (f" and {more} more" if more > 0 else "")


def holding_nothing(states: Sequence[podstates.PodState]) -> str:
    """``1 pod not Ready, holding nothing: c CreateContainerConfigError``: the NotReady pods
    that Balanced leaves out (they hold nothing and no share waits for them)."""
    return (
        f"{conditions.amount(len(states), 'pod')} not Ready, holding nothing: {not_ready(states)}"
    )


def kept_words(found: Sequence[podstates.Kept], *, grace: float) -> str:
    """``NotReady pod b holds 2 until ...``: whose grace keeps partitions from the Ready pods."""
    total = sum(k.partitions for k in found)
    if len(found) == 1:
        k = found[0]
        return (
            f"NotReady pod {k.pod} holds {k.partitions} until {timestamps.format_time(k.until)}, "
            f"when podGraceSeconds ({grace:g} s) since it turned NotReady ends and they move to "
            "the Ready pods"
        )
    each = ", ".join(
        f"{k.pod} ({k.partitions} until {timestamps.format_time(k.until)})" for k in found[:3]
    )
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return (
        f"NotReady pods {each}{more} hold {total}; each pod's partitions move to the Ready "
        f"pods when podGraceSeconds ({grace:g} s) since it turned NotReady ends"
    )


def holders(found: Mapping[str, int], partitions: int) -> str:
    """ "pod c holds 1 of 4 partitions", "pod c holds 1 of 1 partition", or "pods c, d and 2
    more hold 6 of 32 partitions"."""
    names = list(found)
    named = ", ".join(names[:NAMED]) + (
        f" and {len(names) - NAMED} more" if len(names) > NAMED else ""
    )
    who = f"pod {named} holds" if len(names) == 1 else f"pods {named} hold"
    return f"{who} {sum(found.values())} of {conditions.amount(partitions, 'partition')}"
