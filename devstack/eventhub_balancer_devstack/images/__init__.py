"""The images built without a Docker daemon: `make images`.

`python -m eventhub_balancer_devstack.images` is its entry point (no `ehb` command: it needs root).

The Dockerfiles of docker/ stay the one description of each image. This package reads them and
builds the same layout from Debian's packages: a `debootstrap --variant=minbase` root filesystem
with Debian's Python 3.11 in place of the `python:3.11-slim-bookworm` base, the project's
wheels built on this machine in place of the builder stage's `pip wheel`, and each RUN of the
final stage run in a chroot. umoci writes the result as a tagged OCI image into `.images/oci`.

Modules, from pure to I/O: `dockerfiles` parses a Dockerfile, `recipes` turns one into the steps
and configuration of an image; `chroots` runs commands in a root filesystem, `layouts` drives
umoci, `building` puts them together, `smoking` runs a built image with runc.
"""
