"""Security of a shared store: no pickle anywhere the package reads Redis,
forged request payloads dropped (``ipr/codec/undecodable``) and never executed,
Redis AUTH through the URL against a real redis-server with ``requirepass``."""

from __future__ import annotations

import ast
import os
import pickle
import re
import sys
from pathlib import Path

import msgpack
import pytest
from conftest import REPO, TEST_DATA
from procs import RedisServer, fetched, read_log, start_crawl

from ipr_crawl.evaluation.graphio import reachable, read_graph
from ipr_crawl.ordering.urls import node_id
from ipr_crawl.scheduler.codec import FORMAT, PayloadError, decode_request, encode_request
from ipr_crawl.spiders.graph import GraphSpider
from ipr_crawl.store import FrontierStore, Link
from ipr_crawl.store.payload import FORMAT_PLAIN, frame_plain

HARVARD = TEST_DATA / "harvard500.tsv.gz"
#: Modules that turn bytes into code or arbitrary objects.
FORBIDDEN_MODULES = {"pickle", "_pickle", "cPickle", "dill", "cloudpickle", "marshal", "shelve",
                     "jsonpickle", "joblib", "scrapy_redis.picklecompat", "scrapy.squeues"}


def package_files() -> list[Path]:
    return sorted([*(REPO / "ipr_crawl").rglob("*.py"), *(REPO / "middlewares").rglob("*.py")])


def test_no_pickle_in_the_package():
    """No import of a pickle-like module and no use of one, anywhere in the
    installed code (the library and its middlewares). The one reader of pickle is
    scrapy-redis's own serializer, which scheduler/migrate.py loads by name only under
    ``IPR_IMPORT_SCRAPY_REDIS=pickle`` (tests/crawls/test_items_and_scrapy_redis.py)."""
    offences = []
    for path in package_files():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Name) and node.id in FORBIDDEN_MODULES:
                names = [node.id]
            elif isinstance(node, ast.Attribute) and node.attr in ("loads", "load", "Unpickler") and \
                    isinstance(node.value, ast.Name) and node.value.id in FORBIDDEN_MODULES:
                names = [node.value.id]
            for name in names:
                if name in FORBIDDEN_MODULES or name.split(".")[0] in FORBIDDEN_MODULES:
                    offences.append(f"{path.relative_to(REPO)}:{node.lineno}: {name}")
    assert len(package_files()) > 10
    assert not offences, offences


def test_scrapy_pickle_queues_are_not_used():
    """Scrapy's own disk queues pickle requests; the add-on's scheduler has none."""
    from scrapy.settings import Settings

    from ipr_crawl.addon import Addon

    settings = Settings({"JOBDIR": ""})
    Addon().update_settings(settings)
    assert settings["SCHEDULER"] == "ipr_crawl.scheduler.IprScheduler"
    source = (REPO / "ipr_crawl" / "scheduler" / "core.py").read_text()
    assert "SCHEDULER_DISK_QUEUE" not in source and "squeues" not in source


# -- forged payloads ---------------------------------------------------------------------
class Bomb:
    """Unpickling this runs a shell command that creates ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def _packed(data) -> bytes:
    return bytes([FORMAT, 0]) + msgpack.packb(data, use_bin_type=True)


def forged_payloads(marker: str) -> dict[str, bytes | None]:
    """name -> payload (None: no payload stored at all)."""
    bomb = pickle.dumps(Bomb(marker), protocol=pickle.HIGHEST_PROTOCOL)
    url = "http://127.0.0.1:9/forged"
    return {
        "pickle": bomb,
        "pickle-protocol-0": pickle.dumps(Bomb(marker), protocol=0),
        "pickle-behind-format-byte": bytes([FORMAT, 0]) + bomb,
        "slot-longer-than-payload": bytes([FORMAT, 200]) + b"x",
        "empty": b"",
        "missing": None,
        "random-bytes": os.urandom(64),
        "truncated-msgpack": _packed({"url": url, "meta": {"a": "b" * 100}})[:20],
        "msgpack-list": _packed([url]),
        "msgpack-no-url": _packed({"method": "GET"}),
        "msgpack-url-not-str": _packed({"url": 12345}),
        "msgpack-not-a-url": _packed({"url": "not a url"}),
        "class-popen": _packed({"_class": "subprocess.Popen", "url": url, "args": f"touch {marker}", "shell": True}),
        "class-os-system": _packed({"_class": "os.system", "url": url}),
        "class-not-imported": _packed({"_class": "antigravity.Anything", "url": url}),
        "class-not-a-request": _packed({"_class": "scrapy.http.response.Response", "url": url}),
        "callback-dunder": _packed({"url": url, "callback": "__init__"}),
        "callback-unknown": _packed({"url": url, "callback": "no_such_method"}),
        "callback-not-str": _packed({"url": url, "callback": ["parse"]}),
        "meta-not-a-dict": _packed({"url": url, "meta": "not a dict"}),
        "headers-garbage": _packed({"url": url, "headers": "not a dict"}),
        "plain-callback-dunder": frame_plain("127.0.0.1", url, 1, "__init__"),
        "plain-callback-unknown": frame_plain("127.0.0.1", url, None, "no_such_method"),
        "plain-not-a-url": frame_plain("", "not a url"),
        "plain-truncated-depth": bytes([FORMAT_PLAIN, 0, 4, 0x80]),
        "plain-truncated-callback": bytes([FORMAT_PLAIN, 0, 8, 10]) + b"par",
        "plain-not-utf8": bytes([FORMAT_PLAIN, 0, 0]) + b"http://\xff/",
        "plain-slot-longer-than-payload": bytes([FORMAT_PLAIN, 200]) + b"x",
    }


@pytest.mark.parametrize("name", sorted(forged_payloads("/nonexistent")))
def test_forged_payload_is_refused_and_never_executed(name, tmp_path):
    marker = tmp_path / "executed"
    payload = forged_payloads(str(marker))[name]
    spider = GraphSpider(start_urls="http://127.0.0.1:9/")
    before = set(sys.modules)
    with pytest.raises(PayloadError):
        if payload is None:
            raise PayloadError("missing")  # the scheduler's path for a missing payload
        decode_request(payload, spider)
    assert not marker.exists(), "a forged payload ran code"
    assert "antigravity" not in sys.modules
    assert set(sys.modules) - before <= {"scrapy.http.response"}, set(sys.modules) - before


def test_genuine_payload_round_trip():
    from scrapy.http import FormRequest

    spider = GraphSpider(start_urls="http://127.0.0.1:9/")
    request = FormRequest("http://127.0.0.1:9/f", formdata={"q": "x"}, callback=spider.parse, meta={"k": [1, 2]})
    payload, dropped = encode_request(request, spider)
    again = decode_request(payload, spider)
    assert type(again) is FormRequest and again.body == request.body and again.callback == spider.parse
    assert not dropped and again.meta["k"] == [1, 2]


def test_forged_payloads_in_a_real_crawl_are_dropped_with_a_stat(graph_server, tmp_path):
    """Forged requests planted in the crawl's frontier on a real redis-server
    are each dropped with ``ipr/codec/undecodable`` and a log line; the pickle
    bombs do not go off; the crawl fetches its whole graph."""
    marker = tmp_path / "executed"
    graph = read_graph(HARVARD)
    served = graph_server(HARVARD)
    payloads = forged_payloads(str(marker))
    with RedisServer(tmp_path / "redis") as server:
        client = server.client()
        store = FrontierStore(client, "forged", "push")  # the default ordering
        store.open()
        for i, (name, payload) in enumerate(sorted(payloads.items())):
            url = f"{served.base}/forged/{i}/{name}"
            store.enqueue(node_id(url), 0, payload if payload is not None else b"x", False)
            if payload is None:
                client.hdel(store.keys["req"], node_id(url))
        # ... and one planted as an out-link of a recorded page.
        store.record_page(node_id(served.base + "/forged/page"), 0,
                          [Link(node_id(served.base + "/forged/link"), 0, payloads["pickle"])])
        log = tmp_path / "crawl.log"
        proc = start_crawl(served.seed_url, log, {"IPR_REDIS_URL": server.url, "IPR_CRAWL_ID": "forged"})
        code = proc.wait(180)
        text = read_log(log)
        counts = store.counts()
    assert code == 0, text[-3000:]
    assert not marker.exists(), "a forged payload ran code"
    # a planted URL without any payload is one whose request Redis lost: set aside, not failed
    missing = sum(not payload for payload in payloads.values())  # None, or b"" (none stored)
    planted = len(payloads) + 1 - missing
    assert missing and re.search(rf"'ipr/codec/undecodable': {planted}\b", text), text[-3000:]
    assert text.count("dropping an undecodable request") == planted
    assert counts["failed"] == planted and counts["frontier"] == counts["in_flight"] == 0
    assert counts["orphans"] == missing and re.search(rf"'ipr/frontier/payload_lost': {missing}\b", text)
    assert len(set(fetched(log))) == len(reachable(graph, served.seed))


# -- AUTH --------------------------------------------------------------------------------
PASSWORD = "s3cr3t-pass"


def test_redis_auth_through_the_url(graph_server, tmp_path):
    """A real redis-server with requirepass: the right password in
    IPR_REDIS_URL crawls (and never shows in the log); a wrong or missing one
    is a clear error naming the URL with the password hidden."""
    served = graph_server(HARVARD)
    with RedisServer(tmp_path / "redis", password=PASSWORD) as server:
        ok_log = tmp_path / "ok.log"
        ok = start_crawl(served.seed_url, ok_log, {"IPR_REDIS_URL": server.url, "CLOSESPIDER_PAGECOUNT": 30})
        assert ok.wait(120) == 0, read_log(ok_log)[-3000:]
        text = read_log(ok_log)
        assert len(fetched(ok_log)) >= 30 and PASSWORD not in text
        assert server.client().hget("ipr:{ipr_crawl.graph}:meta", "schema") is not None
        for name, url, message in (
            ("wrong", server.url.replace(PASSWORD, "wrong-pass"), "redis://:***@127.0.0.1"),
            ("missing", server.url.replace(f":{PASSWORD}@", ""), "redis://127.0.0.1"),
        ):
            log = tmp_path / f"{name}.log"
            proc = start_crawl(served.seed_url, log, {"IPR_REDIS_URL": url})
            assert proc.wait(60) != 0
            text = read_log(log)
            assert "FrontierUnavailable: Redis at" in text and message in text, text[-2000:]
            assert "refused the password (or needs one)" in text
            assert PASSWORD not in text and "wrong-pass" not in text
            assert not fetched(log)


def test_graph_spider_link_filters_follow_the_settings():
    """ALGORITHMS.md §1.3's filters (IPR_GRAPH_*) as the spider reads them from its crawl."""
    from scrapy.utils.test import get_crawler

    crawler = get_crawler(GraphSpider, {
        "IPR_GRAPH_SKIP_QUERY": True, "IPR_GRAPH_EXTENSIONS": ["html", ".HTM"], "IPR_ENABLED": False,
    })
    spider = GraphSpider.from_crawler(crawler, start_urls="http://a.example/")
    assert spider.skip_reason("http://a.example/p.html") is None
    assert spider.skip_reason("http://a.example/dir/") is None  # no extension: kept
    assert spider.skip_reason("http://a.example/p.htm") is None
    assert spider.skip_reason("http://a.example/p.pdf") == "extension"
    assert spider.skip_reason("http://a.example/p.html?x=1") == "query"
    assert spider.skip_reason("http://a.example/cgi-bin/x") == "query"
    assert spider.skip_reason("http://b.example/p.html") == "host"
    free = GraphSpider.from_crawler(get_crawler(GraphSpider, {"IPR_GRAPH_STAY_ON_HOSTS": False}),
                                    start_urls="http://a.example/")
    assert free.skip_reason("http://b.example/p.pdf?x=1") is None
