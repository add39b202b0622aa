"""Issue 26: a root URL's user info (``s3://KEY:SECRET@bucket``) is never echoed, whatever the secret holds.

A secret holding ``/`` ends the host early for ``urlparse``, so the URL used to pass the credentials
check and reach obstore, whose "invalid port number" error printed it whole.
"""

from __future__ import annotations

import pytest

from broker_core import Client, InvalidUrl
from broker_core.cli import main
from broker_core.storage.urls import mask_userinfo, parse_root

_MIDDLE = "XUtnFEMIk7MD"  # a part of every secret below that no message may show


def _secrets() -> list[str]:
    out = []
    for sep in ("/", ":", "@", "%2F", "/@:"):
        out += [f"wJalr{sep}{_MIDDLE}ENG", f"{sep}wJalr{_MIDDLE}", f"wJalr{_MIDDLE}{sep}"]
    return out


def _urls(secret: str) -> list[str]:
    return [f"s3://AKIAEXAMPLE:{secret}@bucket/prefix", f"s3a://AKIAEXAMPLE:{secret}@bucket",
            f"gs://user:{secret}@bucket/a/b", f"s3://{secret}@bucket/prefix",
            f"s3://AKIAEXAMPLE:{secret}@bucket/prefix?x=1", f"s3://AKIAEXAMPLE:{secret}@bucket//p",
            f"ftp://AKIAEXAMPLE:{secret}@host/p", f"pulsar://AKIAEXAMPLE:{secret}@host:6650"]


def _shown(exc: BaseException) -> str:
    parts = [str(exc), repr(exc), repr(getattr(exc, "context", {}))]
    cause = exc.__cause__ or exc.__context__
    return " ".join(parts + ([str(cause)] if cause is not None else []))


@pytest.mark.parametrize("secret", _secrets())
def test_a_url_with_credentials_is_refused_without_showing_the_secret(secret: str) -> None:
    for url in _urls(secret):
        with pytest.raises(InvalidUrl) as info:
            Client(url)
        shown = _shown(info.value)
        assert _MIDDLE not in shown and secret not in shown, (url, shown)
        with pytest.raises(InvalidUrl) as info:
            parse_root(url)
        assert _MIDDLE not in _shown(info.value), url


@pytest.mark.parametrize("secret", [f"wJalr/{_MIDDLE}", f"wJalr:{_MIDDLE}@x", f"wJalr%2F{_MIDDLE}"])
def test_the_cli_never_prints_a_root_urls_secret(secret: str, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PUBSUB_ROOT", raising=False)
    for url in _urls(secret)[:4]:
        code = main(["--root", url, "topics", "list", "public/default"])
        out = capsys.readouterr()
        assert code != 0
        assert _MIDDLE not in out.err + out.out, (url, out.err)
        assert "***@" in out.err


def test_mask_userinfo_keeps_what_is_not_a_secret() -> None:
    assert mask_userinfo("cannot open s3://K:se/cr@et@bucket/p: bad port") == "cannot open s3://***@bucket/p: bad port"
    assert mask_userinfo("'s3://K:s%2Fx@b/p' and gs://u:v@c") == "'s3://***@b/p' and gs://***@c"
    assert mask_userinfo("abfss://container@account.dfs.core.windows.net/p") == (
        "abfss://container@account.dfs.core.windows.net/p")
    assert mask_userinfo("s3://bucket/prefix and mail@example.com") == "s3://bucket/prefix and mail@example.com"
    assert parse_root("abfss://container@account.dfs.core.windows.net/p").url == (
        "abfss://container@account.dfs.core.windows.net/p")
