"""One OCI image layout (a folder of blobs and an index of tags), written with umoci.

umoci works without a daemon: `unpack` lays an image out as a root filesystem in a bundle
folder, `repack` writes what changed there as one new layer, `config` sets the image's
configuration. Reading a layout needs no tool: index.json names each tag's manifest.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path
from typing import Any

from eventhub_balancer_devstack.images import recipes

#: umoci reads and writes a whole image at a time; longer than this, it is stuck.
UMOCI_TIMEOUT_SECONDS = 900
REF_NAME = "org.opencontainers.image.ref.name"
#: The configuration members a recipe sets whole (the base's values would otherwise be merged).
CLEARED = ("config.env", "config.labels", "config.entrypoint", "config.cmd", "config.exposedports")


class LayoutError(RuntimeError):
    """umoci failed, or the layout lacks what was asked of it."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Layer:
    digest: str
    size: int  # compressed, as pushed to a registry
    created_by: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class Image:
    reference: str  # the tag in the layout
    digest: str  # the manifest's: what a registry shows after a push
    layers: tuple[Layer, ...]
    config: dict[str, Any]  # the OCI image configuration's `config` member

    @property
    def compressed_bytes(self) -> int:
        return sum(layer.size for layer in self.layers)


@dataclasses.dataclass(frozen=True)
class Layout:
    path: Path

    def image(self, tag: str) -> str:
        return f"{self.path}:{tag}"

    def ensure(self) -> None:
        if not (self.path / "index.json").exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _umoci("init", "--layout", str(self.path))

    def tags(self) -> set[str]:
        if not (self.path / "index.json").exists():
            return set()
        index = self._json(self.path / "index.json")
        return {
            m["annotations"][REF_NAME]
            for m in index.get("manifests") or []
            if REF_NAME in m.get("annotations", {})
        }

    def new(self, tag: str) -> None:
        self.remove(tag)
        _umoci("new", "--image", self.image(tag))

    def unpack(self, tag: str, bundle: Path) -> None:
        _umoci("unpack", "--image", self.image(tag), str(bundle))

    def unpack_to_run(self, tag: str, bundle: Path) -> None:
        """A bundle to run, never to `repack`: the same root filesystem and runtime
        configuration as `unpack`'s, without its manifest of every file's digest (read back
        and hashed after the unpack: a quarter of its CPU for the consumer image)."""
        bundle.mkdir(parents=True)
        _umoci("raw", "unpack", "--image", self.image(tag), str(bundle / "rootfs"))
        config = ["--image", self.image(tag), "--rootfs", "rootfs", str(bundle / "config.json")]
        _umoci("raw", "runtime-config", *config)

    def repack(self, tag: str, bundle: Path, *, created_by: str, keep_bundle: bool) -> None:
        """What changed in the bundle's rootfs as a new layer, tagged `tag`; `keep_bundle`
        leaves the bundle ready for another layer on top."""
        self.remove(tag)
        refresh = ["--refresh-bundle"] if keep_bundle else []
        _umoci(
            "repack",
            *refresh,
            "--history.created_by",
            created_by,
            "--image",
            self.image(tag),
            str(bundle),
        )

    def add_layer(self, tag: str, new_tag: str, layer: Path, *, created_by: str) -> None:
        """`tag` with the (uncompressed) tar `layer` on top, saved as `new_tag`."""
        self.remove(new_tag)
        history = ["--history.created_by", created_by]
        _umoci(
            "raw", "add-layer", *history, "--image", self.image(tag), "--tag", new_tag, str(layer)
        )

    def configure(self, tag: str, new_tag: str, config: recipes.ImageConfig) -> None:
        """The image configuration of `tag`, replaced by `config`, saved as `new_tag`."""
        self.remove(new_tag)
        arguments = [
            *(f"--clear={field}" for field in CLEARED),
            *(f"--config.env={k}={v}" for k, v in config.env),
            *(f"--config.label={k}={v}" for k, v in config.labels),
            *(f"--config.exposedports={p}" for p in config.exposed_ports),
            *(f"--config.entrypoint={a}" for a in config.entrypoint),
            *(f"--config.cmd={a}" for a in config.cmd),
            *([f"--config.user={config.user}"] if config.user else []),
            *([f"--config.workingdir={config.workdir}"] if config.workdir else []),
        ]  # fmt: skip
        _umoci("config", *arguments, "--image", self.image(tag), "--tag", new_tag)

    def remove(self, tag: str) -> None:
        if tag in self.tags():
            _umoci("rm", "--image", self.image(tag))

    def collect_garbage(self) -> None:
        """Blobs that no tag reaches any more (earlier builds) are deleted."""
        _umoci("gc", "--layout", str(self.path))

    def describe(self, tag: str) -> Image:
        index = self._json(self.path / "index.json")
        found = [
            m for m in index.get("manifests") or [] if m.get("annotations", {}).get(REF_NAME) == tag
        ]
        if not found:
            raise LayoutError(f"no image {tag} in {self.path}")
        digest = found[0]["digest"]
        manifest = self._json(self.blob(digest))
        config = self._json(self.blob(manifest["config"]["digest"]))
        history = [h for h in config.get("history", []) if not h.get("empty_layer")]
        layers = tuple(
            Layer(digest=layer["digest"], size=layer["size"], created_by=h.get("created_by", ""))
            for layer, h in zip(manifest["layers"], history, strict=True)
        )
        return Image(reference=tag, digest=digest, layers=layers, config=config.get("config", {}))

    def blob(self, digest: str) -> Path:
        algorithm, _, hexdigest = digest.partition(":")
        return self.path / "blobs" / algorithm / hexdigest

    @staticmethod
    def _json(path: Path) -> Any:
        return json.loads(path.read_text())


def _umoci(*arguments: str) -> None:
    done = subprocess.run(
        ["umoci", *arguments],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=UMOCI_TIMEOUT_SECONDS,
        check=False,
    )
    if done.returncode != 0:
        raise LayoutError(
            f"umoci {arguments[0]} failed ({done.returncode}): {done.stderr.strip()[-2000:]}"
        )
