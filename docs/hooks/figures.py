"""The docs site's hook: `<!-- figures: NAME -->` in a page becomes the tables of a record.

The records are docs/benchmarks/NAME.json, written by `make figures`; the rendering lives, typed
and tested, in eventhub_balancer_devstack.benchmarks.records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs import exceptions

from eventhub_balancer import errors
from eventhub_balancer_devstack.benchmarks import records


def on_page_markdown(markdown: str, /, *, page: Any, config: Any, **_: Any) -> str:
    try:
        return records.expand(markdown, directory=Path(config["docs_dir"]) / "benchmarks")
    except errors.EventHubBalancerError as e:
        raise exceptions.PluginError(f"{page.file.src_uri}: {e}") from e
