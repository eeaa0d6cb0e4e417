"""Configuration mistakes get messages that say what to change."""

from __future__ import annotations

import logging
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer import cli, errors
from eventhub_balancer.consumer import processing, settings


def test_a_missing_pod_name_shows_the_downward_api_snippet() -> None:
    with pytest.raises(errors.InvalidInput) as caught:
        settings.pod_identity({}, pod=None, namespace=None, need_namespace=True)
    assert caught.value.field == "POD_NAME, POD_NAMESPACE"
    assert "fieldPath: metadata.name" in str(caught.value)


def test_every_missing_identity_setting_is_told_at_once() -> None:
    """A container set up by hand without the Downward API and the consumer's name was told
    POD_NAME, then EHB_CONSUMER, one start at a time."""
    with pytest.raises(errors.InvalidInput) as caught:
        settings.pod_identity(
            {}, pod=None, namespace=None, need_namespace=True, consumer="", need_consumer=True
        )
    assert caught.value.field == "POD_NAME, POD_NAMESPACE, EHB_CONSUMER"
    assert caught.value.problem.startswith(
        "are not set: give the EventHubConsumer's name (--consumer or env EHB_CONSUMER); add "
        "the pod's name"
    )
    with pytest.raises(errors.InvalidInput) as caught:
        settings.pod_identity(
            {"POD_NAME": "c-0", "POD_NAMESPACE": "shop"},
            pod=None,
            namespace=None,
            need_namespace=True,
            consumer=None,
            need_consumer=True,
        )
    assert str(caught.value) == (
        "EHB_CONSUMER: is not set: give the EventHubConsumer's name (--consumer or env "
        "EHB_CONSUMER)"
    )
    assert settings.pod_identity(
        {"POD_NAME": "c-0"}, pod=None, namespace=None, need_namespace=False, need_consumer=False
    ) == ("c-0", "default")


def test_the_cli_exits_2_without_a_pod_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("POD_NAME", raising=False)
    assert cli.main(["consume", "--handler", "x:y", "--consumer", "orders"]) == 2
    err = capsys.readouterr().err
    assert "POD_NAME" in err
    assert "valueFrom" in err


def test_the_cli_names_every_missing_identity_setting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("POD_NAME", "POD_NAMESPACE", "EHB_CONSUMER"):
        monkeypatch.delenv(name, raising=False)
    assert cli.main(["consume", "--handler", "x:y"]) == 2
    err = capsys.readouterr().err
    assert "error: POD_NAME, POD_NAMESPACE, EHB_CONSUMER: are not set: " in err
    assert "valueFrom" in err


def test_pod_identity_from_the_environment() -> None:
    env = {"POD_NAME": "orders-7f9c-abc", "POD_NAMESPACE": "shop"}
    assert settings.pod_identity(env, pod=None, namespace=None, need_namespace=True) == (
        "orders-7f9c-abc",
        "shop",
    )


def test_secrets_never_show_in_repr() -> None:
    creds = settings.credentials_from(
        {
            "EHB_EVENTHUB_CONNECTION_STRING": "Endpoint=sb://shop.servicebus.windows.net/;"
            "SharedAccessKeyName=listen;SharedAccessKey=s3cr3t"
        }
    )
    assert creds.eventhub_connection_string is not None
    assert "s3cr3t" not in repr(creds)


def test_handler_loading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ehb_test_pipeline.py").write_text(
        textwrap.dedent(
            """
            def process(events, context):
                return None
            NOT_CALLABLE = 3
            """
        )
    )
    monkeypatch.setattr(sys, "path", list(sys.path))
    function = processing.load_handler("ehb_test_pipeline:process", search_path=[str(tmp_path)])
    assert function.__name__ == "process"
    with pytest.raises(errors.InvalidInput, match="module:function"):
        processing.load_handler("ehb_test_pipeline")
    with pytest.raises(errors.InvalidInput, match="cannot import module 'no_such_module_xyz'"):
        processing.load_handler("no_such_module_xyz:process")
    with pytest.raises(errors.InvalidInput, match="has no attribute 'missing'"):
        processing.load_handler("ehb_test_pipeline:missing")
    with pytest.raises(errors.InvalidInput, match="not callable"):
        processing.load_handler("ehb_test_pipeline:NOT_CALLABLE")


def test_the_handler_exit_bound_is_a_flag_and_must_be_positive() -> None:
    import argparse

    from eventhub_balancer.cli import consume
    from eventhub_balancer.consumer import partitions

    parser = argparse.ArgumentParser()
    consume.add_arguments(parser)
    args = parser.parse_args(["--handler", "x:y", "--handler-exit-seconds", "7.5"])
    assert args.handler_exit_seconds == 7.5
    assert parser.parse_args(["--handler", "x:y"]).handler_exit_seconds == 5.0
    with pytest.raises(errors.InvalidInput) as caught:
        partitions.BatchSettings(handler_exit_timeout=0)
    assert caught.value.field == "--handler-exit-seconds"


def test_spark_settings_fail_before_anything_connects() -> None:
    def consumer(**given: object) -> settings.ConsumerSettings:
        return settings.ConsumerSettings(
            pod="p", namespace="n", consumer="c", handler="x:y", spark=True, **given
        )

    with pytest.raises(errors.InvalidInput, match="--spark-remote"):
        consumer(spark_master="spark://h:7077", spark_remote="sc://h:15002")
    with pytest.raises(errors.InvalidInput, match="pass it as --spark-remote"):
        consumer(spark_master="sc://h:15002")
    with pytest.raises(errors.InvalidInput, match="not a Spark Connect URL"):
        consumer(spark_remote="spark://h:7077")
    with pytest.raises(errors.InvalidInput, match="--handler-concurrency"):
        consumer(handler_concurrency=0)
    assert consumer(spark_remote="sc://h").spark_remote == "sc://h"


def test_the_cli_takes_the_trigger_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "p")
    # Out of range, it is refused by the flag's type, as argparse refuses (exit status 2).
    argv = ["consume", "--handler", "x:y", "--assignment-file", "a"]
    with pytest.raises(SystemExit) as exited:
        cli.main([*argv, "--max-events-per-trigger", "0"])
    assert exited.value.code == 2


@pytest.mark.parametrize(
    "connection_string",
    [
        "Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKeyName=l;SharedAccessKey=k",
        "Endpoint=sb://shop.servicebus.windows.net/;"
        "SharedAccessSignature=SharedAccessSignature sr=x",
        "Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKeyName=l;SharedAccessKey=k;"
        "EntityPath=orders",
    ],
)
def test_working_connection_strings_pass_the_start_check(connection_string: str) -> None:
    creds = settings.credentials_from({"EHB_EVENTHUB_CONNECTION_STRING": connection_string})
    assert creds.eventhub_connection_string == connection_string


def test_a_connection_string_to_a_foreign_host_fails_at_start() -> None:
    with pytest.raises(errors.EndpointNotAllowed, match=r"evil\.example\.com"):
        settings.credentials_from(
            {
                "EHB_EVENTHUB_CONNECTION_STRING": "Endpoint=sb://evil.example.com/;"
                "SharedAccessKeyName=l;SharedAccessKey=k"
            }
        )


def test_a_garbage_blob_connection_string_fails_at_start() -> None:
    with pytest.raises(errors.EndpointNotAllowed, match=r"checkpoint store's connection string"):
        settings.credentials_from({"EHB_BLOB_CONNECTION_STRING": "garbage"})


def test_spark_settings_need_spark_mode() -> None:
    def consumer(**given: Any) -> settings.ConsumerSettings:
        return settings.ConsumerSettings(
            pod="p", namespace="n", consumer="c", handler="x:y", **given
        )

    with pytest.raises(errors.InvalidInput, match="only goes with --spark") as caught:
        consumer(spark_remote="sc://h:15002")
    assert caught.value.field == "--spark-remote"
    with pytest.raises(errors.InvalidInput, match="only goes with --spark") as caught:
        consumer(spark_conf={"spark.ui.enabled": "false"})
    assert caught.value.field == "--spark-conf"
    assert consumer(spark=True, spark_remote="sc://h").spark_remote == "sc://h"


def test_numbers_come_from_the_environment_when_the_flag_is_absent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import argparse

    from eventhub_balancer.cli import consume

    monkeypatch.setenv("EHB_BATCH_SIZE", "64")
    monkeypatch.setenv("EHB_MAX_WAIT", "0.25")
    parser = argparse.ArgumentParser()
    consume.add_arguments(parser)
    args = parser.parse_args(["--handler", "x:y"])
    assert (args.batch_size, args.max_wait) == (64, 0.25)
    assert parser.parse_args(["--handler", "x:y", "--batch-size", "8"]).batch_size == 8


def test_a_bad_environment_number_does_not_break_other_commands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only the command that has the flag reads its variable."""
    monkeypatch.setenv("EHB_BATCH_SIZE", "abc")
    parser = cli.build_parser()
    args = parser.parse_args(["status", "-n", "shop"])
    assert args.namespace == "shop"


HUB_STRING = (
    "Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKeyName=l;SharedAccessKey=hubkey"
)
BLOB_STRING = (
    "DefaultEndpointsProtocol=https;AccountName=shop;AccountKey=blobkey;"
    "EndpointSuffix=core.windows.net"
)


@pytest.mark.parametrize(
    ("env", "said"),
    [
        pytest.param(
            {"EHB_EVENTHUB_CONNECTION_STRING": "", "EHB_BLOB_CONNECTION_STRING": ""},
            [
                "Event Hubs by workload identity (EHB_EVENTHUB_CONNECTION_STRING is set but "
                "empty, which counts as unset)",
                "checkpoint store by workload identity (EHB_BLOB_CONNECTION_STRING is set but "
                "empty, which counts as unset)",
            ],
            id="empty-as-a-chart-sets-it",
        ),
        pytest.param(
            {},
            ["Event Hubs by workload identity;", "checkpoint store by workload identity"],
            id="unset",
        ),
        pytest.param(
            {
                "EHB_EVENTHUB_CONNECTION_STRING": HUB_STRING,
                "EHB_BLOB_CONNECTION_STRING_FILE": "{blob}",
                "EHB_EVENTHUB_CONNECTION_STRING_FILE": " ",
            },
            [
                "Event Hubs by the connection string of EHB_EVENTHUB_CONNECTION_STRING",
                "checkpoint store by the connection string in the file of "
                "EHB_BLOB_CONNECTION_STRING_FILE ({blob})",
            ],
            id="a-value-and-a-file",
        ),
    ],
)
def test_the_pod_says_at_start_which_credentials_it_uses(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, env: dict[str, str], said: list[str]
) -> None:
    """An empty connection string variable (a chart's ``""`` for unset) counts as unset, and
    the pod used workload identity without a word: a user who meant to give a string saw
    only the hub or the store refuse a token. One INFO line at start says what each uses."""
    blob = tmp_path / "blob-connection-string"
    blob.write_text(BLOB_STRING + "\n")
    caplog.set_level(logging.INFO, logger="eventhub_balancer")
    settings.credentials_from({k: v.format(blob=blob) for k, v in env.items()})
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("eventhub_balancer")]
    assert len(lines) == 1, lines
    assert all(r.levelno == logging.INFO for r in caplog.records)
    for words in said:
        assert words.format(blob=blob) in lines[0], lines[0]
    assert "hubkey" not in lines[0]
    assert "blobkey" not in lines[0]
