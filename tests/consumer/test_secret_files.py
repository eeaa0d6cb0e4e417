"""The ``EHB_*_CONNECTION_STRING_FILE`` settings at start: the file's string passes the checks
the variable's passes, with the same messages naming the file; a variable and its file form
together, a missing or empty file fail in one line; no message quotes the secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventhub_balancer import errors
from eventhub_balancer.consumer import settings

SECRET = "c2VjcmV0LWtleS12YWx1ZQ=="
GOOD = (
    f"Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKeyName=app;SharedAccessKey={SECRET}"
)


def file_with(tmp_path: Path, content: str) -> Path:
    path = tmp_path / "connectionString"
    path.write_text(content)
    return path


def test_the_file_holds_the_string_and_the_final_newline_is_not_part_of_it(
    tmp_path: Path,
) -> None:
    path = file_with(tmp_path, GOOD + "\n")
    creds = settings.credentials_from({"EHB_EVENTHUB_CONNECTION_STRING_FILE": str(path)})
    assert creds.eventhub_string() == GOOD
    assert creds.files.eventhub is not None
    assert creds.files.eventhub.path == path
    assert SECRET not in repr(creds)


def test_a_variable_and_its_file_form_together_are_refused_by_name(tmp_path: Path) -> None:
    path = file_with(tmp_path, GOOD)
    with pytest.raises(errors.InvalidInput) as caught:
        settings.credentials_from(
            {
                "EHB_BLOB_CONNECTION_STRING": "UseDevelopmentStorage=true",
                "EHB_BLOB_CONNECTION_STRING_FILE": str(path),
            }
        )
    message = str(caught.value)
    assert message.startswith(
        "EHB_BLOB_CONNECTION_STRING_FILE: goes without EHB_BLOB_CONNECTION_STRING, which is set too"
    )


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (f"SharedAccessKey={SECRET}", "has no Endpoint; give Endpoint=sb://"),
        (
            f"Endpoint=https://shop.servicebus.windows.net/;SharedAccessKey={SECRET}",
            "its Endpoint is not an sb:// URL",
        ),
        ("Endpoint=sb://shop.servicebus.windows.net/", "has no SharedAccessKeyName"),
        ("\n", "is empty: put the connection string in it"),
    ],
)
def test_a_malformed_file_fails_at_start_with_the_variables_message_naming_the_file(
    tmp_path: Path, content: str, problem: str
) -> None:
    path = file_with(tmp_path, content)
    with pytest.raises(errors.InvalidInput) as caught:
        settings.credentials_from({"EHB_EVENTHUB_CONNECTION_STRING_FILE": str(path)})
    assert str(caught.value).startswith(f"EHB_EVENTHUB_CONNECTION_STRING_FILE ({path}): {problem}")
    assert SECRET not in str(caught.value)
    if content.strip():  # the same words as the variable's check
        with pytest.raises(errors.InvalidInput, match=problem.split(";")[0]):
            settings.credentials_from({"EHB_EVENTHUB_CONNECTION_STRING": content})


def test_a_file_naming_a_host_the_pod_may_not_reach_names_the_file(tmp_path: Path) -> None:
    path = file_with(
        tmp_path, f"Endpoint=sb://evil.example.com/;SharedAccessKeyName=a;SharedAccessKey={SECRET}"
    )
    with pytest.raises(errors.InvalidInput, match=r"evil\.example\.com") as caught:
        settings.credentials_from({"EHB_EVENTHUB_CONNECTION_STRING_FILE": str(path)})
    assert str(caught.value).startswith(f"EHB_EVENTHUB_CONNECTION_STRING_FILE ({path}): ")
    blob = file_with(tmp_path, "garbage")
    with pytest.raises(errors.InvalidInput, match=r"checkpoint store's connection string"):
        settings.credentials_from({"EHB_BLOB_CONNECTION_STRING_FILE": str(blob)})


def test_a_missing_file_says_to_mount_the_secret(tmp_path: Path) -> None:
    path = tmp_path / "absent"
    with pytest.raises(errors.InvalidInput) as caught:
        settings.credentials_from({"EHB_BLOB_CONNECTION_STRING_FILE": str(path)})
    assert str(caught.value) == (
        f"EHB_BLOB_CONNECTION_STRING_FILE ({path}): does not exist: mount the Secret there, "
        "or fix the path"
    )


def test_the_cli_fails_in_one_line_on_both_forms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from eventhub_balancer import cli

    monkeypatch.setenv("POD_NAME", "pod-a")
    monkeypatch.setenv("EHB_EVENTHUB_CONNECTION_STRING", GOOD)
    monkeypatch.setenv("EHB_EVENTHUB_CONNECTION_STRING_FILE", str(file_with(tmp_path, GOOD)))
    code = cli.main(
        ["consume", "--handler", "x:y", "--assignment-file", str(tmp_path / "assignment.json")]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "EHB_EVENTHUB_CONNECTION_STRING_FILE: goes without EHB_EVENTHUB_CONNECTION_STRING" in err
    assert SECRET not in err
