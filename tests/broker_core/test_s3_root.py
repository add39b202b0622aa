"""A root on S3 (the moto emulator): the client end to end, deltalake reading a partition with the same
storage_options, the CLI, and bad input (missing bucket, unreachable endpoint) as typed errors."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from broker_core import Client
from broker_core.errors import BrokerPersistenceError, StorageAccessDenied, StorageUnavailable
from broker_core.storage import file_io_for

sys.path.insert(0, __file__.rsplit("/tests/", 1)[0] + "/tests")
from moto_s3 import BUCKET, SECRET_ACCESS_KEY, MotoS3, refusing_metadata_service, start_moto, stop_moto


def test_produce_consume_ack_on_s3(moto_s3: MotoS3) -> None:
    root = moto_s3.fresh_root()
    client = Client(root, storage_options=moto_s3.storage_options)
    try:
        consumer = client.subscribe("t", "sub")
        producer = client.create_producer("t")
        for i in range(20):
            producer.send(f"m{i}".encode())
        got = []
        for _ in range(20):
            msg = consumer.receive(timeout_millis=10_000)
            got.append(msg.data())
            consumer.acknowledge(msg)
        assert got == [f"m{i}".encode() for i in range(20)]
    finally:
        client.close()
    io = file_io_for(root, storage_options=moto_s3.storage_options)
    assert io.list_dir("public/default/persistent/t/_delta_log")  # the log is on the store
    assert "ObjectStoreFileIO" in repr(io) and SECRET_ACCESS_KEY not in repr(io)


def test_deltalake_reads_a_partition_written_on_s3_with_the_same_storage_options(moto_s3: MotoS3) -> None:
    root = moto_s3.fresh_root()
    client = Client(root, storage_options=moto_s3.storage_options)
    try:
        producer = client.create_producer("dl")
        for i in range(5):
            producer.send(f"v{i}".encode(), partition_key=f"k{i}")
        producer.flush()
    finally:
        client.close()
    code = (
        "import json, sys\n"
        "from deltalake import DeltaTable\n"
        "table = DeltaTable(sys.argv[1], storage_options=json.loads(sys.argv[2]))\n"
        "values = sorted(bytes(v).decode() for v in table.to_pyarrow_table().column('value').to_pylist())\n"
        "print('VALUES', json.dumps(values), flush=True)\n"
    )
    # a subprocess: deltalake's pyarrow reads may abort at interpreter exit (judge by output, not exit code)
    done = subprocess.run([sys.executable, "-c", code, f"{root}/public/default/persistent/dl",
                           json.dumps(moto_s3.storage_options)], capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stdout.splitlines() if line.startswith("VALUES ")]
    assert lines, done.stderr[-2000:]
    assert json.loads(lines[0].removeprefix("VALUES ")) == [f"v{i}" for i in range(5)]


def test_cli_reaches_s3_with_storage_options_and_with_aws_environment(moto_s3: MotoS3) -> None:
    root = moto_s3.fresh_root()
    options = [f"--storage-option={k}={v}" for k, v in moto_s3.storage_options.items()]
    base = [sys.executable, "-m", "broker_core.cli", "--root", root, "--json"]
    created = subprocess.run([*base, *options, "topics", "create", "persistent://public/default/cli-t"],
                             capture_output=True, text=True, timeout=120)
    assert created.returncode == 0, created.stderr
    listed = subprocess.run([*base, "topics", "list", "public/default"],  # AWS_* from the fixture's environment
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert "persistent://public/default/cli-t" in listed.stdout


def test_a_missing_bucket_is_a_typed_error_naming_the_root_not_the_secret(moto_s3: MotoS3) -> None:
    url = f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/p"
    with pytest.raises(StorageUnavailable) as info:
        Client(url, storage_options=moto_s3.storage_options)
    assert url in str(info.value) and "does not exist" in str(info.value)
    assert SECRET_ACCESS_KEY not in str(info.value)


def test_an_unreachable_endpoint_fails_fast_naming_the_root(moto_s3: MotoS3) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: nothing listens there
    options = {**moto_s3.storage_options, "aws_endpoint": f"http://127.0.0.1:{port}", "pubsub_max_retries": "1",
               "pubsub_retry_timeout_ms": "2000"}
    url = f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}"
    with pytest.raises(StorageUnavailable, match="unreachable") as info:
        Client(url, storage_options=options)
    assert url in str(info.value) and SECRET_ACCESS_KEY not in str(info.value)
    assert isinstance(info.value, BrokerPersistenceError)


def test_unknown_store_options_are_refused_by_name(moto_s3: MotoS3) -> None:
    from broker_core.errors import InvalidConfiguration

    with pytest.raises(InvalidConfiguration, match="aws_no_such_option"):
        Client(moto_s3.fresh_root(), storage_options={**moto_s3.storage_options, "aws_no_such_option": "1"})


@pytest.fixture(scope="module")
def moto_with_iam() -> Iterator[tuple[MotoS3, dict[str, str], dict[str, str]]]:
    """A second emulator that enforces IAM: (server, admin options, read-only user options)."""
    import boto3

    server = start_moto(unauthenticated_actions=5)
    try:
        admin = {"aws_endpoint": server.endpoint, "aws_region": "us-east-1", "aws_allow_http": "true",
                 "aws_access_key_id": "setup", "aws_secret_access_key": "setup-secret"}
        kw = {"endpoint_url": server.endpoint, "region_name": "us-east-1", "aws_access_key_id": "setup",
              "aws_secret_access_key": "setup-secret"}
        iam = boto3.client("iam", **kw)
        iam.create_user(UserName="reader")
        key = iam.create_access_key(UserName="reader")["AccessKey"]
        policy = {"Version": "2012-10-17",
                  "Statement": [{"Effect": "Allow", "Action": ["s3:GetObject", "s3:ListBucket"], "Resource": "*"}]}
        iam.put_user_policy(UserName="reader", PolicyName="read-only", PolicyDocument=json.dumps(policy))
        boto3.client("s3", **kw).create_bucket(Bucket="iam-bucket")
        # the 5th and last unchecked request: a root (its marker) the read-only user may open
        boto3.client("s3", **kw).put_object(Bucket="iam-bucket", Key="ro-root/_pubsub/root.json", Body=b"{}\n")
        reader = {**admin, "aws_access_key_id": key["AccessKeyId"], "aws_secret_access_key": key["SecretAccessKey"]}
        yield server, admin, reader
    finally:
        stop_moto(server)


def test_wrong_credentials_are_refused_when_the_root_is_opened(moto_with_iam: Any) -> None:
    _, admin, _ = moto_with_iam
    wrong = {**admin, "aws_access_key_id": "AKIAWRONGWRONG", "aws_secret_access_key": "wrong-secret-9f8e7d"}
    with pytest.raises(StorageAccessDenied) as info:
        Client("s3://iam-bucket/app", storage_options=wrong)
    assert "s3://iam-bucket/app" in str(info.value) and "wrong-secret-9f8e7d" not in str(info.value)


def test_a_read_only_user_gets_a_typed_error_and_nothing_is_written(moto_with_iam: Any) -> None:
    _, _, reader = moto_with_iam
    url = "s3://iam-bucket/ro-root"
    io = file_io_for(url, storage_options=reader)  # listing is allowed
    before = io.list_dir("")
    with pytest.raises(StorageAccessDenied, match="denied") as info:
        Client(url, storage_options=reader).create_producer("t").send(b"x")
    assert url in str(info.value) and reader["aws_secret_access_key"] not in str(info.value)
    assert io.list_dir("") == before  # nothing half-written


def test_a_storage_option_without_a_value_is_a_usage_error_that_does_not_echo_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    from broker_core.cli import main

    code = main(["--root", "s3://bucket/p", "--storage-option", "sekrit-token-value",
                 "topics", "list", "public/default"])
    err = capsys.readouterr().err
    assert code == 2 and "KEY=VALUE" in err and "sekrit-token-value" not in err


def test_a_typo_in_the_prefix_is_a_missing_root_not_a_new_empty_one(moto_s3: MotoS3,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from broker_core.cli import main
    from broker_core.errors import RootNotFound

    real = moto_s3.fresh_root()
    Client(real, storage_options=moto_s3.storage_options).close()
    typo = moto_s3.fresh_root(create=False)
    with pytest.raises(RootNotFound, match="create_root=True") as info:
        Client(typo, storage_options=moto_s3.storage_options)
    assert typo in str(info.value) and SECRET_ACCESS_KEY not in str(info.value)
    options = [f"--storage-option={k}={v}" for k, v in moto_s3.storage_options.items()]
    assert main(["--root", typo, *options, "topics", "list", "public/default"]) != 0
    err = capsys.readouterr().err
    assert typo in err and "--create-root" in err
    io = file_io_for(typo, storage_options=moto_s3.storage_options)
    assert io.list_dir("") == []  # the refused opens wrote nothing
    Client(typo, create_root=True, storage_options=moto_s3.storage_options).close()
    assert io.read_bytes("_pubsub/root.json") is not None  # the root marker
    Client(typo, storage_options=moto_s3.storage_options).close()  # now a root


def test_a_root_created_before_the_marker_existed_still_opens(moto_s3: MotoS3) -> None:
    """Roots written by an earlier version have ``_pubsub/`` files and topics but no marker."""
    from broker_core.broker.root_check import open_root
    from broker_core.storage import open_object_store, parse_root

    url = moto_s3.fresh_root()
    client = Client(url, storage_options=moto_s3.storage_options)
    client.create_producer("t").send(b"x")
    client.close()
    file_io_for(url, storage_options=moto_s3.storage_options).delete("_pubsub/root.json")
    older = open_object_store(parse_root(url, moto_s3.storage_options))  # uncached: asks the store again
    open_root(older, url, create_root=False)
    assert older.read_bytes("_pubsub/root.json") is None  # opening for use writes no marker


def test_missing_credentials_are_named_as_such_not_as_a_metadata_403(moto_s3: MotoS3,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """No credentials anywhere: obstore asks the instance-metadata service (here a refusing stand-in
    on 127.0.0.1), and the error says what is missing and where to set it."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    with refusing_metadata_service() as metadata:
        options = {"aws_endpoint": moto_s3.endpoint, "aws_allow_http": "true", "aws_region": "us-east-1",
                   "aws_metadata_endpoint": metadata, "pubsub_max_retries": "0"}
        url = moto_s3.fresh_root(create=False)
        with pytest.raises(StorageAccessDenied, match="no credentials are configured") as info:
            Client(url, storage_options=options)
        text = str(info.value)
        assert url in text and "aws_access_key_id" in text and "AWS_ACCESS_KEY_ID" in text
        # credentials from the environment, or unsigned access, count as configured
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONG")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
        from broker_core.storage.urls import has_aws_credentials

        assert has_aws_credentials({}) and has_aws_credentials({"aws_skip_signature": "true"})
