"""Service URLs and storage_options: every supported scheme parses, secrets never show."""

from __future__ import annotations

import obstore.store
import pytest

from broker_core.errors import InvalidConfiguration, InvalidUrl
from broker_core.storage import parse_root
from broker_core.storage.urls import obstore_arguments, redact, scrub

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"


@pytest.mark.parametrize(
    ("url", "scheme", "normal"),
    [
        ("s3://bucket/a/b/", "s3", "s3://bucket/a/b"),
        ("s3a://bucket/a", "s3a", "s3a://bucket/a"),
        ("gs://bucket/p", "gs", "gs://bucket/p"),
        ("az://container/p", "az", "az://container/p"),
        ("abfss://container@account.dfs.core.windows.net/p", "abfss",
         "abfss://container@account.dfs.core.windows.net/p"),
        ("memory://name/p", "memory", "memory://name/p"),
        ("S3://bucket", "s3", "s3://bucket"),
    ],
)
def test_object_store_urls_parse(url: str, scheme: str, normal: str) -> None:
    spec = parse_root(url)
    assert spec.is_object_store and spec.scheme == scheme and spec.url == normal


@pytest.mark.parametrize("url", ["gs://bucket/p", "az://container/p", "abfss://container@account.dfs.core.windows.net/p",
                                 "s3a://bucket/p"])
def test_the_untested_stores_at_least_configure(url: str) -> None:
    """Building the store makes no request; gs/az/abfss are only parsed and configured here."""
    options = {"aws_region": "us-east-1"} if url.startswith("s3") else {}
    if url.startswith(("az", "abfss")):
        options = {"azure_storage_account_name": "account", "azure_storage_account_key": "a2V5"}
    store = obstore.store.from_url(parse_root(url, options).url, **obstore_arguments(parse_root(url, options)))
    assert store is not None


def test_plain_paths_and_file_urls_are_local(tmp_path: object) -> None:
    assert parse_root(str(tmp_path)).local_path == str(tmp_path)
    assert parse_root(f"file://{tmp_path}").local_path == str(tmp_path)


@pytest.mark.parametrize("url", ["s3://AKIDX:pw-HIDDEN@bucket/p", "s3://user@bucket/p"])
def test_credentials_in_the_url_are_refused_without_echoing_them(url: str) -> None:
    with pytest.raises(InvalidUrl, match="never in the URL") as info:
        parse_root(url)
    assert "pw-HIDDEN" not in str(info.value) and "AKIDX" not in str(info.value)


@pytest.mark.parametrize("url", ["s3://", "s3://bucket/a//b", "s3://bucket/../x", "s3://bucket/p?versionId=1"])
def test_malformed_object_store_urls_are_refused(url: str) -> None:
    with pytest.raises(InvalidUrl):
        parse_root(url)


def test_secrets_are_redacted_in_reprs_and_scrubbed_from_text() -> None:
    options = {"AWS_SECRET_ACCESS_KEY": SECRET, "aws_region": "eu-west-1", "aws_session_token": "tok-123456"}
    spec = parse_root("s3://bucket/p", options)
    assert SECRET not in repr(spec) and "tok-123456" not in repr(spec)
    assert "eu-west-1" in repr(spec)
    assert redact(spec.storage_options)["aws_secret_access_key"] == "***"
    assert scrub(f"failed with {SECRET} and tok-123456", spec.storage_options) == "failed with *** and ***"


def test_bad_storage_options_are_typed_errors_that_hide_values() -> None:
    with pytest.raises(InvalidConfiguration, match="mapping"):
        parse_root("s3://b/p", ["aws_region"])  # type: ignore[arg-type]
    with pytest.raises(InvalidConfiguration, match="aws_secret_access_key") as info:
        parse_root("s3://b/p", {"aws_secret_access_key": [SECRET]})
    assert SECRET not in str(info.value)
    with pytest.raises(InvalidConfiguration, match="pubsub_nonsense"):
        obstore_arguments(parse_root("s3://b/p", {"pubsub_nonsense": "1"}))


def test_a_plain_http_endpoint_without_allow_http_names_the_option_and_the_endpoint(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from broker_core import Client

    for name in ("AWS_ALLOW_HTTP", "AWS_ENDPOINT", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    options = {"aws_endpoint": "http://admin:pw1234@127.0.0.1:9", "aws_region": "us-east-1",
               "aws_access_key_id": "AKIAX", "aws_secret_access_key": SECRET}
    with pytest.raises(InvalidConfiguration, match="aws_allow_http=true") as info:
        Client("s3://bucket/p", storage_options=options)  # refused before any request
    text = str(info.value)
    assert "http://***@127.0.0.1:9" in text and "pw1234" not in text and SECRET not in text
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # the environment's endpoint too
    with pytest.raises(InvalidConfiguration, match=r"AWS_ENDPOINT_URL.*AWS_ALLOW_HTTP=true"):
        obstore_arguments(parse_root("s3://bucket/p", {"aws_region": "us-east-1"}))
    for allowed in ({"aws_allow_http": "true"}, {"allow_http": "true"}):
        obstore_arguments(parse_root("s3://bucket/p", {**options, **allowed}))
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    obstore_arguments(parse_root("s3://bucket/p", options))
