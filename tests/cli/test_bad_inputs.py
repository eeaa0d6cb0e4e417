"""Every bad input a new user meets first gets one line on stderr that says what to change.

The table is the contract: each row is an input (flags, environment, files) and the exact
message. A row's message changing is a deliberate act: the test fails until the table says so.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

import pytest

from eventhub_balancer import cli
from eventhub_balancer.cli import allowedendpoints
from tests.support import consumerfakes

#: A consumer started from an assignment file: no Kubernetes needed to reach handler loading.
LOCAL = ("consume", "--assignment-file", "assignment.json")
#: A consumer started from an assignment file that is there, with a handler that loads.
GIVEN = ("consume", "--assignment-file", "{tmp}/given.json")
GOOD = ("--handler-path", "{tmp}", "--handler", "ehb_good:process")
VALID_EVENTHUB = (
    "Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKeyName=listen;SharedAccessKey=k"
)

HANDLERS = {
    "ehb_good.py": """
        def process(events, context):
            return None
    """,
    "ehb_bad_one_arg.py": """
        def process(events):
            return None
    """,
    "ehb_bad_spark_async.py": """
        async def process(df, context):
            return None
    """,
    "ehb_bad_syntax.py": """
        def process(events, context)
            return None
    """,
    "ehb_bad_import.py": """
        import os

        TOPIC = os.environ["ORDERS_TOPIC"]

        def process(events, context):
            return None
    """,
    "ehb_bad_dependency.py": """
        import ehb_no_such_dependency_xyz

        def process(events, context):
            return None
    """,
}

BROKEN_KUBECONFIG = "apiVersion: v1\nclusters: [\n  - bad\n"


@dataclasses.dataclass(frozen=True)
class Row:
    label: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    message: str
    status: int = 2


#: ``ehb checkpoints list`` without NAME, up to its Event Hubs namespace.
LIST_BY_FLAGS = (
    "checkpoints",
    "list",
    "--container",
    "checkpoints",
    "--hub",
    "orders",
    "--eventhub-namespace",
)

ROWS = [
    Row(
        "batch size from the environment",
        (*LOCAL, "--handler", "x:y"),
        {"EHB_BATCH_SIZE": "abc"},
        "ehb consume: error: argument --batch-size: 'abc' is not a whole number (from the flag "
        "or env EHB_BATCH_SIZE) (see ehb consume --help)",
    ),
    Row(
        "a fraction where a count goes",
        (*LOCAL, "--handler", "x:y", "--max-events-per-trigger", "1.5"),
        {},
        "ehb consume: error: argument --max-events-per-trigger: '1.5' is not a whole number "
        "(from the flag or env EHB_MAX_EVENTS_PER_TRIGGER) (see ehb consume --help)",
    ),
    Row(
        "seconds that are not a number",
        (*LOCAL, "--handler", "x:y", "--max-wait", "nan"),
        {},
        "ehb consume: error: argument --max-wait: 'nan' is not a finite number (from the flag "
        "or env EHB_MAX_WAIT) (see ehb consume --help)",
    ),
    Row(
        "endless seconds from the environment",
        (*LOCAL, "--handler", "x:y"),
        {"EHB_RELEASE_TIMEOUT": "inf"},
        "ehb consume: error: argument --release-timeout: 'inf' is not a finite number (from the "
        "flag or env EHB_RELEASE_TIMEOUT) (see ehb consume --help)",
    ),
    Row(
        "a port past 65535",
        (*LOCAL, "--handler", "x:y", "--port", "70000"),
        {},
        "ehb consume: error: argument --port: '70000' is not a port, 0 to 65535 (from the flag "
        "or env EHB_PORT) (see ehb consume --help)",
    ),
    # A value out of range names the variable too: set in a chart's env, a message naming
    # the flag alone sent the reader looking for a flag nobody had given.
    Row(
        "no prefetch at all",
        (*LOCAL, "--handler", "x:y"),
        {"EHB_PREFETCH": "0"},
        "ehb consume: error: argument --prefetch: '0' is less than 1 (from the flag or env "
        "EHB_PREFETCH) (see ehb consume --help)",
    ),
    Row(
        "a shutdown timeout below zero",
        (*LOCAL, "--handler", "x:y", "--shutdown-timeout", "-1"),
        {},
        "ehb consume: error: argument --shutdown-timeout: '-1' is not positive (from the flag "
        "or env EHB_SHUTDOWN_TIMEOUT) (see ehb consume --help)",
    ),
    Row(
        "a release timeout of 0 from the environment",
        (*LOCAL, "--handler", "x:y"),
        {"EHB_RELEASE_TIMEOUT": "0"},
        "ehb consume: error: argument --release-timeout: '0' is not positive (from the flag "
        "or env EHB_RELEASE_TIMEOUT) (see ehb consume --help)",
    ),
    Row(
        "a checkpoint interval below zero from the environment",
        (*LOCAL, "--handler", "x:y"),
        {"EHB_CHECKPOINT_INTERVAL": "-5"},
        "ehb consume: error: argument --checkpoint-interval: '-5' is negative (from the flag "
        "or env EHB_CHECKPOINT_INTERVAL) (see ehb consume --help)",
    ),
    Row(
        "a broken kubeconfig",
        ("status", "--kubeconfig", "{tmp}/kubeconfig"),
        {},
        "ehb: error: --kubeconfig: {tmp}/kubeconfig is not valid YAML (line 3, column 3: "
        "expected the node content, but found '-'): fix the file, or point --kubeconfig / "
        "KUBECONFIG at another",
    ),
    # With -n the API client parses it first: the same line, naming the flag (it said only
    # "a YAML file cannot be read", as of a scenario or values file).
    Row(
        "a broken kubeconfig with -n",
        ("status", "-n", "shop", "--kubeconfig", "{tmp}/kubeconfig"),
        {},
        "ehb: error: --kubeconfig: {tmp}/kubeconfig is not valid YAML (line 3, column 3: "
        "expected the node content, but found '-'): fix the file, or point --kubeconfig / "
        "KUBECONFIG at another",
    ),
    Row(
        "a broken kubeconfig from the environment with -n",
        ("checkpoints", "list", "orders", "-n", "shop"),
        {"KUBECONFIG": "{tmp}/kubeconfig"},
        "ehb: error: KUBECONFIG: {tmp}/kubeconfig is not valid YAML (line 3, column 3: "
        "expected the node content, but found '-'): fix the file, or point --kubeconfig / "
        "KUBECONFIG at another",
    ),
    # `-n` alone: the consumer's NAME was forgotten, not --eventhub-namespace meant (the old
    # spelling, still refused with its hint when the location flags are given).
    Row(
        "checkpoints list without NAME",
        ("checkpoints", "list", "-n", "shop"),
        {},
        "ehb: error: NAME: give the EventHubConsumer whose checkpoints to list, as in `ehb "
        "checkpoints list NAME -n shop` (`ehb status -n shop` lists them)",
    ),
    Row(
        "--spark-remote without --spark",
        (*LOCAL, "--handler", "x:y", "--spark-remote", "sc://spark:15002"),
        {},
        "ehb: error: --spark-remote: only goes with --spark: add --spark (the handler then "
        "takes a DataFrame) or drop --spark-remote or env EHB_SPARK_REMOTE",
    ),
    Row(
        "EHB_SPARK_MASTER without --spark",
        (*LOCAL, "--handler", "x:y"),
        {"EHB_SPARK_MASTER": "spark://spark:7077"},
        "ehb: error: --spark-master: only goes with --spark: add --spark (the handler then "
        "takes a DataFrame) or drop --spark-master or env EHB_SPARK_MASTER",
    ),
    Row(
        "a garbage Event Hubs connection string",
        (*LOCAL, "--handler", "x:y"),
        {"EHB_EVENTHUB_CONNECTION_STRING": "garbage"},
        "ehb: error: EHB_EVENTHUB_CONNECTION_STRING: part 1 is not Key=Value; write each key "
        "once, in plain ASCII letters (Endpoint=sb://<namespace>.servicebus.windows.net/;"
        "SharedAccessKeyName=...;SharedAccessKey=... or AccountName=...;AccountKey=...;"
        "EndpointSuffix=...)",
        status=1,
    ),
    Row(
        "a connection string without an Endpoint",
        (*LOCAL, "--handler", "x:y"),
        {"EHB_EVENTHUB_CONNECTION_STRING": "SharedAccessKeyName=listen;SharedAccessKey=k"},
        "ehb: error: EHB_EVENTHUB_CONNECTION_STRING: has no Endpoint; give "
        "Endpoint=sb://<namespace>.servicebus.windows.net/;SharedAccessKeyName=<policy>;"
        "SharedAccessKey=<key>",
    ),
    Row(
        "a connection string with an https Endpoint",
        (*LOCAL, "--handler", "x:y"),
        {"EHB_EVENTHUB_CONNECTION_STRING": "Endpoint=https://shop.servicebus.windows.net/"},
        "ehb: error: EHB_EVENTHUB_CONNECTION_STRING: its Endpoint is not an sb:// URL; give "
        "Endpoint=sb://<namespace>.servicebus.windows.net/;SharedAccessKeyName=<policy>;"
        "SharedAccessKey=<key>",
    ),
    Row(
        "a connection string without a key",
        (*LOCAL, "--handler", "x:y"),
        {"EHB_EVENTHUB_CONNECTION_STRING": "Endpoint=sb://shop.servicebus.windows.net/"},
        "ehb: error: EHB_EVENTHUB_CONNECTION_STRING: has no SharedAccessKeyName and "
        "SharedAccessKey (nor a SharedAccessSignature); give "
        "Endpoint=sb://<namespace>.servicebus.windows.net/;SharedAccessKeyName=<policy>;"
        "SharedAccessKey=<key>",
    ),
    Row(
        "a handler with one argument",
        (*LOCAL, "--handler-path", "{tmp}", "--handler", "ehb_bad_one_arg:process"),
        {"EHB_EVENTHUB_CONNECTION_STRING": VALID_EVENTHUB},
        "ehb: error: --handler: ehb_bad_one_arg:process takes (events), but a handler is called "
        "with two arguments: process(events, context)",
    ),
    Row(
        "an async Spark handler",
        (*LOCAL, "--spark", "--handler-path", "{tmp}", "--handler", "ehb_bad_spark_async:process"),
        {},
        "ehb: error: --handler: ehb_bad_spark_async:process is async def, but with --spark the "
        "handler is a plain function (Spark calls block): drop async, or drop --spark for "
        "process(events, context)",
    ),
    Row(
        "a handler whose dependency is missing",
        (*LOCAL, "--handler-path", "{tmp}", "--handler", "ehb_bad_dependency:process"),
        {},
        "ehb: error: --handler: module 'ehb_bad_dependency' imports "
        "'ehb_no_such_dependency_xyz', which is not installed: add the package that provides "
        "'ehb_no_such_dependency_xyz' to the image (or to the handler's dependencies)",
    ),
    Row(
        "a handler module with a syntax error",
        (*LOCAL, "--handler-path", "{tmp}", "--handler", "ehb_bad_syntax:process"),
        {},
        "ehb: error: --handler: {tmp}/ehb_bad_syntax.py, line 2: expected ':': fix the handler "
        "module's syntax",
    ),
    Row(
        "a handler module that raises at import",
        (*LOCAL, "--handler-path", "{tmp}", "--handler", "ehb_bad_import:process"),
        {},
        "ehb: error: --handler: importing 'ehb_bad_import' raised KeyError: 'ORDERS_TOPIC' "
        "({tmp}/ehb_bad_import.py, line 4): fix what the module does at import",
    ),
    Row(
        "a handler module that is not there",
        (*LOCAL, "--handler", "ehb_no_such_pipeline:process"),
        {},
        "ehb: error: --handler: cannot import module 'ehb_no_such_pipeline': No module named "
        "'ehb_no_such_pipeline' (is the package installed, or on PYTHONPATH / --handler-path?)",
    ),
    # A consumer without Kubernetes: a folder given for the assignment was a traceback; an
    # acknowledgement file that cannot be written stopped the pod, with a traceback, at its
    # first acknowledgement, after it had started on its partitions.
    Row(
        "an assignment file that is a folder",
        ("consume", "--assignment-file", "{tmp}", *GOOD),
        {},
        "ehb: error: --assignment-file: {tmp} is a directory: give the assignment's JSON file",
    ),
    Row(
        "an assignment file that is not there",
        ("consume", "--assignment-file", "{tmp}/no-assignment.json", *GOOD),
        {},
        "ehb: error: --assignment-file: {tmp}/no-assignment.json does not exist",
    ),
    Row(
        "an acknowledgement file in a folder that is not there",
        (*GIVEN, "--ack-file", "{tmp}/no-folder/acks.json", *GOOD),
        {},
        "ehb: error: --ack-file: cannot write {tmp}/no-folder/acks.json.tmp (No such file or "
        "directory): give a path in a folder you may write",
    ),
    Row(
        "an acknowledgement file that is a folder",
        (*GIVEN, "--ack-file", "{tmp}", *GOOD),
        {},
        "ehb: error: --ack-file: {tmp} is a directory: give the path of a file to write",
    ),
    Row(
        "acknowledgements written over the assignment",
        (*GIVEN, "--ack-file", "{tmp}/given.json", *GOOD),
        {},
        "ehb: error: --ack-file: is the assignment file: give another path (the pod never "
        "writes its assignment)",
    ),
    Row(
        "a consumer listening on an address not of this machine",
        (*GIVEN, *GOOD, "--host", "192.0.2.1"),
        {},
        "ehb: error: --host: cannot listen on 192.0.2.1:8080 (Cannot assign requested "
        "address): give an address of this machine (env EHB_HOST), or 0.0.0.0 for all of them",
        status=1,
    ),
    # A value that names nothing, as an unset variable expanded in the flag gives: the
    # consumer listened on every address, and noted its handler calls in the working
    # directory, which no restart keeps; the operator served a self-signed certificate in
    # place of the one meant.
    Row(
        "a consumer listening on an unset variable's address",
        # With no assignment file there: what was taken ends at once, not in a pod that runs.
        (*LOCAL, *GOOD, "--host", ""),
        {},
        "ehb consume: error: argument --host: '' is not an address: give one of this "
        "machine's, or 0.0.0.0 for all of them (an unset variable in the flag gives '') (see "
        "ehb consume --help)",
    ),
    Row(
        "a consumer noting its handler calls in an unset variable's folder",
        (*LOCAL, *GOOD, "--crash-marker-dir", ""),
        {},
        "ehb consume: error: argument --crash-marker-dir: '' is not a folder: give one on a "
        "volume that outlives the container, such as the chart's /tmp (an unset variable in "
        "the flag gives '') (see ehb consume --help)",
    ),
    Row(
        "the operator's metrics on an unset variable's address",
        ("operator", "-A", "--metrics-host", " ", "--kubeconfig", "{tmp}/no-kubeconfig"),
        {},
        "ehb operator: error: argument --metrics-host: ' ' is not an address: give one of this "
        "machine's, or 0.0.0.0 for all of them (an unset variable in the flag gives '') (see "
        "ehb operator --help)",
    ),
    Row(
        "the operator's metrics certificate in an unset variable's folder",
        ("operator", "-A", "--metrics-cert-dir", "", "--kubeconfig", "{tmp}/no-kubeconfig"),
        {},
        "ehb operator: error: argument --metrics-cert-dir: '' is not a folder: give the one "
        "with tls.crt and tls.key, or drop the flag for a self-signed certificate (an unset "
        "variable in the flag gives '') (see ehb operator --help)",
    ),
    # A Blob suffix that is not one was answered with an Event Hubs suffix to give, and a
    # consumer's flag was named as its variable.
    Row(
        "a consumer's Blob suffix that is not a DNS suffix",
        (*LOCAL, *GOOD, "--allowed-blob-suffix", "com"),
        {},
        "ehb: error: --allowed-blob-suffix: 'com' is not a DNS suffix: give one such as "
        ".blob.core.windows.net",
    ),
    Row(
        "a consumer's Blob suffix from the environment that is not a DNS suffix",
        (*LOCAL, *GOOD),
        {"EHB_ALLOWED_BLOB_SUFFIXES": "core.windows.net,com"},
        "ehb: error: EHB_ALLOWED_BLOB_SUFFIXES: 'com' is not a DNS suffix: give one such as "
        ".blob.core.windows.net",
    ),
    Row(
        "the operator's Blob suffix that is not a DNS suffix, before any cluster",
        (
            "operator",
            "-A",
            "--allowed-blob-suffix",
            "blob/core",
            "--kubeconfig",
            "{tmp}/no-kubeconfig",
        ),
        {},
        "ehb: error: --allowed-blob-suffix: 'blob/core' is not a DNS suffix: give one such as "
        ".blob.core.windows.net",
    ),
    # A consumer's NAME no consumer can have: '' (an unset variable) and '.' asked for the
    # namespace's whole list, which was read as one consumer ("spec.eventHub: is required",
    # "None/None: no status yet"); a namespace no namespace can have was "not found".
    Row(
        "a consumer named by an unset variable",
        ("checkpoints", "export", "", "-n", "shop", "--kubeconfig", "{tmp}/no-kubeconfig"),
        {},
        "ehb checkpoints export: error: argument NAME: '' is not an EventHubConsumer's name "
        "(lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, "
        "at most 253 characters): give one as `ehb status -n NAMESPACE` lists them (see ehb "
        "checkpoints export --help)",
    ),
    Row(
        "the status of a consumer named '.'",
        ("status", ".", "-n", "shop", "--kubeconfig", "{tmp}/no-kubeconfig"),
        {},
        "ehb status: error: argument NAME: '.' is not an EventHubConsumer's name (lower-case "
        "letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 "
        "characters): give one as `ehb status -n NAMESPACE` lists them (see ehb status --help)",
    ),
    Row(
        "dead letters of a consumer in a namespace no name can match",
        ("deadletters", "list", "orders", "-n", "Shop", "--kubeconfig", "{tmp}/no-kubeconfig"),
        {},
        "ehb deadletters list: error: argument -n/--namespace: 'Shop' is not a namespace's "
        "name: give one of 63 characters at most, lowercase letters, digits and '-', starting "
        "and ending with a letter or digit (see ehb deadletters list --help)",
    ),
    Row(
        "checkpoints of a consumer in a namespace no name can match",
        ("checkpoints", "list", "orders", "-n", "Shop", "--kubeconfig", "{tmp}/no-kubeconfig"),
        {},
        "ehb: error: --namespace: 'Shop' is not a namespace's name: give one of 63 characters "
        "at most, lowercase letters, digits and '-', starting and ending with a letter or digit",
    ),
    # The coordinates of `ehb checkpoints list` by flags are checked as the spec's fields are:
    # a host with a space or a one-letter container were tried for 20 s against the store.
    Row(
        "checkpoints of an Event Hubs namespace no host can be",
        ("checkpoints", "list", "--eventhub-namespace", "shop ns", "--hub", "h"),
        {},
        "ehb checkpoints list: error: argument --eventhub-namespace: 'shop ns' is not an Event "
        "Hubs namespace host: use <namespace>.servicebus.windows.net, or host:port with a port "
        "from 1 to 65535 for a local emulator (see ehb checkpoints list --help)",
    ),
    Row(
        "checkpoints in a container no container can be",
        ("checkpoints", "list", "--container", "Checkpoints", "--hub", "h"),
        {},
        "ehb checkpoints list: error: argument --container: 'Checkpoints' is not a blob "
        "container name: use 3-63 lower-case letters, digits and single dashes, starting and "
        "ending with a letter or digit (see ehb checkpoints list --help)",
    ),
    Row(
        "checkpoints of an Event Hub no hub can be",
        ("checkpoints", "list", "--hub", "orders/eu"),
        {},
        "ehb checkpoints list: error: argument --hub: 'orders/eu' is not an Event Hub name: use "
        "the hub's name in its namespace (letters, digits, '.', '-' and '_', starting and "
        "ending with a letter or digit, at most 256 characters) (see ehb checkpoints list "
        "--help)",
    ),
    Row(
        "checkpoints of a consumer group no group can be",
        ("checkpoints", "list", "--hub", "orders", "--consumer-group", "$analytics"),
        {},
        "ehb checkpoints list: error: argument --consumer-group: '$analytics' is not a consumer "
        "group name: use $Default or a group of the hub (letters, digits, '.', '-' and '_', "
        "starting and ending with a letter or digit, at most 50 characters) (see ehb "
        "checkpoints list --help)",
    ),
    Row(
        "checkpoints listed with the runner's token at a host not allowed (named by its flag)",
        (*LIST_BY_FLAGS, "shop.servicebus.windows.net", "--account-url", "https://shop.blob.x.io"),
        {},
        "ehb: error: --account-url: host 'shop.blob.x.io' is not allowed (allowed DNS "
        "suffixes: .blob.core.windows.net); use an endpoint under one of them, or have the "
        f"installer add its suffix ({allowedendpoints.SETTING})",
        status=1,
    ),
    Row(
        "the events waiting read with the runner's token at a namespace not allowed",
        (
            *LIST_BY_FLAGS,
            "shop.servicebus.x.io",
            "--account-url",
            "https://a.blob.core.windows.net",
        ),
        {},
        "ehb: error: --eventhub-namespace: host 'shop.servicebus.x.io' is not allowed "
        "(allowed DNS suffixes: .servicebus.windows.net); use an endpoint under one of them, or "
        f"have the installer add its suffix ({allowedendpoints.SETTING})",
        status=1,
    ),
    Row(
        "dead letters read through a blob endpoint that is not HTTPS",
        ("deadletters", "list", "orders", "--account-url", "http://shop.blob.core.windows.net"),
        {},
        "ehb deadletters list: error: argument --account-url: 'http://shop.blob.core.windows.net' "
        "is not a blob endpoint: use https://<account>.blob.core.windows.net (a host under a "
        "suffix the operator's install allows; a port, if any, from 1 to 65535) (see ehb "
        "deadletters list --help)",
    ),
    Row(
        "a consumer pod naming a consumer no consumer can be",
        ("consume", *GOOD),
        {"EHB_CONSUMER": "Orders", "POD_NAMESPACE": "shop"},
        "ehb: error: EHB_CONSUMER: 'Orders' is not an EventHubConsumer's name (lower-case "
        "letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 "
        "characters): give its metadata.name (--consumer or env)",
    ),
    Row(
        "a handler looked for in a folder that is not there",
        (*LOCAL, "--handler-path", "{tmp}/no-such-folder", "--handler", "ehb_elsewhere:process"),
        {},
        "ehb: error: --handler: cannot import module 'ehb_elsewhere': No module named "
        "'ehb_elsewhere'; --handler-path {tmp}/no-such-folder: no such folder here",
    ),
    Row(
        "dead letters of a partition no hub has",
        ("deadletters", "list", "orders", "--partition", "p1"),
        {},
        "ehb deadletters list: error: argument --partition: 'p1' is not a partition id: give one "
        "of the hub's, 0 to its count less one (see ehb deadletters list --help)",
    ),
    Row(
        "checkpoints listed with neither a consumer nor its coordinates",
        ("checkpoints", "list"),
        {},
        "ehb: error: --eventhub-namespace: give the Event Hubs namespace, "
        "x.servicebus.windows.net, or an EventHubConsumer NAME to read it from "
        "(ehb checkpoints list NAME -n NAMESPACE)",
    ),
    Row(
        "a Spark class archive named by a folder",
        ("spark", "archive", "{tmp}"),
        {},
        "ehb: error: FILE: {tmp} is a directory: name the archive's file",
    ),
    Row(
        "a Spark class archive in a folder that does not exist",
        ("spark", "archive", "{tmp}/no-such-folder/spark.jsa"),
        {},
        "ehb: error: FILE: {tmp}/no-such-folder does not exist: create it first",
    ),
    Row(
        "a Spark class archive with no time to run",
        ("spark", "archive", "{tmp}/spark.jsa", "--timeout", "0"),
        {},
        "ehb spark archive: error: argument --timeout: '0' is not positive "
        "(see ehb spark archive --help)",
    ),
    # The operator's own flags are said before the kubeconfig is read: a newcomer's first
    # `ehb operator` with no cluster yet was told of the kubeconfig, then, once it was fixed,
    # of the flag.
    Row(
        "the operator without a namespace, before any cluster",
        ("operator", "--kubeconfig", "{tmp}/no-kubeconfig"),
        {},
        "ehb: error: --namespace: give --namespace NS (repeatable) or --all-namespaces",
    ),
    Row(
        "the operator's plain metrics off loopback, before any cluster",
        ("operator", "-n", "shop", "--metrics-insecure", "--kubeconfig", "{tmp}/no-kubeconfig"),
        {},
        "ehb: error: --metrics-insecure: serves every tenant's metrics to anyone who reaches "
        "0.0.0.0: give --metrics-host 127.0.0.1 and an authenticating proxy in front, or drop "
        "the flag (HTTPS, TokenReview and SubjectAccessReview)",
    ),
    # A namespace no namespace could match: an unset variable (kopf watched the URL
    # /api/v1/namespaces/pods and logged a traceback on each retry), a capital (served
    # nothing, said nothing), a list that takes namespaces out of the identity's loan.
    Row(
        "the operator serving an empty namespace, before any cluster",
        ("operator", "--namespace", "", "--kubeconfig", "{tmp}/no-kubeconfig"),
        {},
        "ehb: error: --namespace: '' has an empty part: give a namespace's name or a glob "
        "such as team-* (an unset variable in the flag gives '')",
    ),
    Row(
        "the operator serving a namespace no name can match, before any cluster",
        ("operator", "-n", "Team-A", "--kubeconfig", "{tmp}/no-kubeconfig"),
        {},
        "ehb: error: --namespace: 'Team-A' is not a namespace's name: give one of 63 "
        "characters at most, lowercase letters, digits and '-', starting and ending with a "
        "letter or digit",
    ),
    Row(
        "the operator lending its identity to all namespaces but one, before any cluster",
        (
            "operator",
            "-A",
            "--identity-namespace",
            "!kube-system",
            "--kubeconfig",
            "{tmp}/no-kubeconfig",
        ),
        {},
        "ehb: error: --identity-namespace: '!kube-system': give one namespace or glob per "
        "flag, without '!' or ',': the identity is lent only to the namespaces listed, never "
        "to all but some",
    ),
    # The operator's numbers and names: a port past 65535 was a traceback from the socket's
    # bind; a refresh of 0, -5 or nan seconds, a peering name of '' (kopf patched the
    # collection's URL, 405, every few seconds) or Bad_Name were taken as given.
    Row(
        "the operator's metrics on a port no socket can bind",
        ("operator", "-A", "--metrics-port", "70000"),
        {},
        "ehb operator: error: argument --metrics-port: '70000' is not a port, 0 to 65535 "
        "(see ehb operator --help)",
    ),
    Row(
        "the operator re-reading partitions every NaN seconds",
        ("operator", "-A", "--partition-refresh-seconds", "nan"),
        {},
        "ehb operator: error: argument --partition-refresh-seconds: 'nan' is not a number of "
        "seconds above 0 (see ehb operator --help)",
    ),
    Row(
        "the operator re-reading partitions every 0 seconds",
        ("operator", "-A", "--partition-refresh-seconds", "0"),
        {},
        "ehb operator: error: argument --partition-refresh-seconds: '0' is not a number of "
        "seconds above 0 (see ehb operator --help)",
    ),
    Row(
        "the operator peering through an object that cannot be named",
        ("operator", "-A", "--peering", ""),
        {},
        "ehb operator: error: argument --peering: '' is not a peering object name: use the "
        "name of a peering object that exists (a KopfPeering in each namespace served, the "
        "ClusterKopfPeering with -A) (lower-case letters, digits, '-' and '.', starting and "
        "ending with a letter or digit, at most 253 characters) (see ehb operator --help)",
    ),
    Row(
        "the operator binding a host to a namespace no name can match, before any cluster",
        (
            "operator",
            "-A",
            "--bind-location",
            "Shop=shop.blob.core.windows.net",
            "--kubeconfig",
            "{tmp}/no-kubeconfig",
        ),
        {},
        "ehb: error: --bind-location: 'Shop' is not a namespace's name: give one of 63 "
        "characters at most, lowercase letters, digits and '-', starting and ending with a "
        "letter or digit",
    ),
    # float() takes "nan" and "inf", and ``nan <= 0`` is false: a check after parsing let a
    # soak or a chaos run of NaN seconds through (`flagtypes.number`).
    Row(
        "a soak of NaN seconds",
        ("bench", "soak", "--seconds", "nan"),
        {},
        "ehb bench soak: error: argument --seconds: 'nan' is not a finite number "
        "(see ehb bench soak --help)",
    ),
    Row(
        "chaos injected for ever",
        ("bench", "chaos", "--seconds", "inf"),
        {},
        "ehb bench chaos: error: argument --seconds: 'inf' is not a finite number "
        "(see ehb bench chaos --help)",
    ),
    Row(
        "a Spark archive whose driver runs may take for ever",
        ("spark", "archive", "{tmp}/classes.jsa", "--timeout", "1e309"),
        {},
        "ehb spark archive: error: argument --timeout: '1e309' is not a finite number "
        "(see ehb spark archive --help)",
    ),
    Row(
        "a local API whose kubeconfig would name a namespace no kubectl call can use",
        ("local", "kube", "--namespace", "Shop"),
        {},
        "ehb local kube: error: argument --namespace: 'Shop' is not a namespace's name: give "
        "one of 63 characters at most, lowercase letters, digits and '-', starting and ending "
        "with a letter or digit (see ehb local kube --help)",
    ),
    Row(
        "a consumer's soak given the pods of an operator's",
        ("bench", "soak", "--pods", "3"),
        {},
        "ehb: error: --pods: goes with --operator",
    ),
]


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, source in HANDLERS.items():
        (tmp_path / name).write_text(textwrap.dedent(source))
    (tmp_path / "kubeconfig").write_text(BROKEN_KUBECONFIG)
    (tmp_path / "given.json").write_text(json.dumps(consumerfakes.configmap(1, {})))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    for name in [n for n in list(os.environ) if n.startswith(("EHB_", "KUBE"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("POD_NAME", "orders-0")
    return tmp_path


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.label)
def test_a_bad_input_gets_one_line_that_says_what_to_change(
    row: Row,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in row.env.items():
        monkeypatch.setenv(name, value.replace("{tmp}", str(workspace)))
    argv = [a.replace("{tmp}", str(workspace)) for a in row.argv]
    try:
        status = cli.main(argv)
    except SystemExit as e:  # argparse's own errors exit from the parser
        status = int(e.code or 0)
    err = capsys.readouterr().err
    assert err.splitlines() == [row.message.replace("{tmp}", str(workspace))]
    assert status == row.status


def test_argparse_mistakes_are_one_line_too(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--log-format", "yaml", "status"])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("ehb: error: argument --log-format: 'yaml' is not one of text, json")
    assert line.endswith("(see ehb --help)")


def test_a_log_format_from_the_environment_is_checked_as_the_flag_is(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """argparse checks choices only on the command line: EHB_LOG_FORMAT=JSON gave text logs."""
    monkeypatch.setenv("EHB_LOG_FORMAT", "JSON")
    with pytest.raises(SystemExit) as exited:
        cli.main(["status"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "ehb: error: argument --log-format: 'JSON' is not one of text, json (from the flag or "
        "env EHB_LOG_FORMAT) (see ehb --help)"
    ]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["status", "--namepsace", "shop"],
            "ehb status: error: unrecognized arguments: --namepsace (did you mean "
            "--namespace?) (see ehb status --help)",
        ),
        (
            ["local", "up", "--blob-prot", "0"],
            "ehb local up: error: unrecognized arguments: --blob-prot 0 (did you mean "
            "--blob-port?) (see ehb local up --help)",
        ),
        (
            ["status", "-o", "wide"],
            "ehb status: error: unrecognized arguments: -o (see ehb status --help)",
        ),
        # A flag cut short is refused, not guessed: argparse took `--part` for `--partitions`
        # and `--dry` for `--dry-run`, on the commands that move checkpoints too.
        (
            ["checkpoints", "reset", "orders", "--to-latest", "--part", "3"],
            "ehb checkpoints reset: error: unrecognized arguments: --part 3 (did you mean "
            "--partitions? flags are taken only spelt out) (see ehb checkpoints reset --help)",
        ),
        (
            ["deadletters", "replay", "orders", "--all", "--to-hub", "--dry"],
            "ehb deadletters replay: error: unrecognized arguments: --dry (did you mean "
            "--dry-run? flags are taken only spelt out) (see ehb deadletters replay --help)",
        ),
    ],
)
def test_a_misspelt_flag_is_named_with_the_command_it_belongs_to(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    """A typo in a command's flag was refused by the top-level parser: `(see ehb --help)`,
    whose page lists the commands and none of that command's flags."""
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines() == [expected]


def test_every_message_is_one_line_and_names_no_secret() -> None:
    for row in ROWS:
        assert "\n" not in row.message
        assert "SharedAccessKey=k" not in row.message


def test_a_taken_port_is_one_line_that_names_the_flag(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = [a.replace("{tmp}", str(workspace)) for a in (*GIVEN, *GOOD)]
        status = cli.main([*argv, "--host", "127.0.0.1", "--port", str(port)])
    assert capsys.readouterr().err.splitlines() == [
        f"ehb: error: --port: 127.0.0.1:{port} is taken: give another --port (env EHB_PORT), "
        "or 0 for a free one"
    ]
    assert status == 1
