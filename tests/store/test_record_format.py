"""The node record and the Lua argument lists are defined once, in Python, and the
Lua side is generated from and checked against them; the download slot of a
request is computed in Python and read by the polite pop without parsing."""

from __future__ import annotations

import re
import struct
from importlib import resources

import msgpack
import pytest
from scrapy import Request, Spider

from ipr_crawl.ordering.params import LUA_ARGS, OrderingParams
from ipr_crawl.scheduler.codec import decode_request, encode_request, payload_slot, slot_of
from ipr_crawl.store import FrontierStore, Link
from ipr_crawl.store.frontier import script_source
from ipr_crawl.store.payload import FORMAT_PLAIN
from ipr_crawl.store.record import RECORD_FORMAT, RECORD_SIZE, lua_definitions, numpy_dtype, parse_record

LUA = resources.files("ipr_crawl.store") / "lua"


def test_no_script_defines_the_record_format_itself() -> None:
    for entry in LUA.iterdir():
        text = entry.read_text()
        assert not re.search(r"local\s+REC\s*=", text), entry.name
        assert not re.search(r"local\s+REC_SIZE\s*=", text), entry.name
        assert "function params_from" not in text, entry.name


def test_every_script_gets_the_generated_definitions(monkeypatch) -> None:
    """The record format heads every script that reads records; the ordering arguments
    come with every script that reads them (tests/store/test_lua_loader.py: and with
    no other). The scripts as shipped, without the tests' key check."""
    monkeypatch.delenv("IPR_LUA_CHECK_KEYS", raising=False)
    for name in ("record_page", "enqueue", "pop", "ack", "set_scores", "replay", "replay_record", "relay",
                 "release_holder"):
        src = script_source(name)
        assert src.startswith(lua_definitions())
    for name in ("record_page", "replay", "replay_record", "relay"):
        src = script_source(name)
        assert f"local N_ORDERING_ARGS = {len(LUA_ARGS)}" in src
        assert src.count("local function params_from(") == 1


def test_python_and_numpy_formats_agree() -> None:
    assert struct.calcsize(RECORD_FORMAT) == RECORD_SIZE == numpy_dtype().itemsize == 37


def test_record_headers_name_the_ordering_arguments_in_order() -> None:
    """The script headers say ARGV[1..9] are the ordering arguments and the page's
    arguments start at ARGV[10]: the same length as LUA_ARGS."""
    head = (LUA / "record_page.lua").read_text()
    assert f"ARGV[{len(LUA_ARGS) + 1}] lease to acknowledge" in head
    assert len(OrderingParams().lua_args()) == len(LUA_ARGS)


def test_a_record_written_by_lua_reads_back_in_python(redis_client, crawl_id) -> None:
    store = FrontierStore(redis_client, crawl_id, "ipr", cutoff="dl1")
    store.open()
    page, a, b = b"p" * 8, b"a" * 8, b"b" * 8
    store.enqueue(page, 0, b"", False)
    store.record_page(page, 0, [Link(a, 0, b""), Link(b, 0, b"")])
    head, links = parse_record(redis_client.hget(store.keys["node"], page))
    assert (head.state, head.s, head.outdeg, links) == (2, 1.0, 2, [a, b])
    assert parse_record(redis_client.hget(store.keys["node"], a))[0].s == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("request_", "slot"),
    [
        (Request("http://Example.COM:8080/a"), "example.com"),
        (Request("http://x.test/", meta={"download_slot": "shared"}), "shared"),
        # header, body and meta values holding the old marker bytes cannot move the slot
        (Request("http://real.test/", method="POST", body=b"\xadownload_slot\xa5wrong",
                 headers={"X-Url": "\xa3url http://evil.test/"}, meta={"note": "download_slot"}), "real.test"),
    ],
)
def test_slot_is_computed_in_python_and_stored_at_the_head(request_, slot) -> None:
    payload, _ = encode_request(request_, None)
    assert slot_of(request_) == slot == payload_slot(payload)
    assert decode_request(payload, None).url == request_.url


class _Spider(Spider):
    name = "s"

    def parse(self, response):
        pass

    def parse_item(self, response):
        pass


_SPIDER = _Spider()


@pytest.mark.parametrize(("request_", "plain"), [
    (Request("http://example.com/a/b?q=1"), True),
    (Request("https://example.com/a", callback=_SPIDER.parse_item, meta={"depth": 3}), True),
    (Request("http://Example.COM:8080/a#part", meta={"depth": 0}), True),  # its host is not the slot's bytes
    (Request("https://example.com/", callback=_SPIDER.parse, meta={"depth": 300}), True),  # a depth of 2 bytes
    (Request("ftp://example.com/file"), True),
    (Request("http://example.com/é ü"), True),
    (Request("http://x.test/", meta={"download_slot": "shared"}), False),
    (Request("http://x.test/", meta={"depth": 1, "note": "x"}), False),
    (Request("http://x.test/", meta={"depth": "1"}), False),
    (Request("http://x.test/", priority=2), False),
    (Request("http://x.test/", dont_filter=True), False),
    (Request("http://x.test/", headers={"X": "1"}), False),
    (Request("http://x.test/", errback=_SPIDER.parse), False),
    (Request("http://x.test/", method="POST", body=b"a"), False),
])
def test_a_plain_request_is_framed_small_and_rebuilt_the_same(request_, plain) -> None:
    """A plain request (GET, a URL, a callback, at most Scrapy's depth in meta) is stored
    in format 3 (store/payload.py) and rebuilt as the same request; any other in format 2."""
    payload, _ = encode_request(request_, _SPIDER)
    assert (payload[0] == FORMAT_PLAIN) is plain
    again = decode_request(payload, _SPIDER)
    assert again.to_dict(spider=_SPIDER) == request_.to_dict(spider=_SPIDER)
    assert payload_slot(payload) == slot_of(request_)
    dict_size = len(bytes([2, 0]) + msgpack.packb({"url": request_.url}, use_bin_type=True))
    if plain and request_.url.startswith("http://example.com/a/b"):
        assert len(payload) < dict_size  # smaller than the URL alone as a dict


def test_polite_pop_reads_the_stored_slot(redis_client, crawl_id) -> None:
    """Two requests of one host whose bodies name another host: one per pop when the host is busy."""
    store = FrontierStore(redis_client, crawl_id, "bf")
    store.open()
    for i in range(2):
        req = Request(f"http://real.test/{i}", method="POST", body=b"\xa3url\xb0http://other.test")
        store.enqueue(bytes([i]) * 8, 0, encode_request(req, None)[0], False)
    _, items = store.pop(8, 60, scan=10, busy=["real.test"])
    assert items == []
    _, items = store.pop(8, 60, scan=10)
    assert len(items) == 1  # one per slot


def _crawl_keys_dump(client, crawl_id: str) -> dict[bytes, bytes]:
    return {k: client.dump(k) for k in client.scan_iter(match=f"ipr:{{{crawl_id}}}:*", count=1000)}


def test_a_record_that_cannot_be_made_writes_nothing(redis_client, crawl_id) -> None:
    """record_page checks its arguments and reads the records it touches before its first
    write (Redis does not undo a script's writes when it fails halfway): malformed
    arguments are an IPR_BAD_RECORD error, a link whose stored record cannot be decoded a
    script error, and in both cases every key of the crawl is as it was."""
    import redis

    store = FrontierStore(redis_client, crawl_id, "push")
    store.open()
    nid = [n.to_bytes(8, "big") for n in range(6)]
    store.enqueue(nid[0], 0, b"p0", False)
    _, items = store.pop(1, 60)
    lease = items[0][0]
    links = [Link(nid[1], 0, b"p1"), Link(nid[2], 0, b"p2", priority=3)]
    before = _crawl_keys_dump(redis_client, crawl_id)
    argv = store._record_argv(nid[0], 0, links, lease)
    for broken, message in (
        (argv[:-1] + [argv[-1][:-1]], "the links' priorities"),  # 4 bytes a link: one short
        ([*argv[: argv.index(nid[1])], b"short", *argv[argv.index(nid[1]) + 1:]], "link 0: its id or tie"),
    ):
        with pytest.raises(redis.ResponseError, match=f"IPR_BAD_RECORD record_page: {re.escape(message)}"):
            store._scripts["record_page"](keys=store._record_keys_of(broken), args=broken)
        assert _crawl_keys_dump(redis_client, crawl_id) == before
    # a link already known whose record is corrupt (not this release's format)
    store.enqueue(nid[3], 0, b"p3", False)
    redis_client.hset(store.keys["node"], nid[3], b"\x00garbage")
    before = _crawl_keys_dump(redis_client, crawl_id)
    with pytest.raises(redis.ResponseError):
        store.record_page(nid[0], 0, [Link(nid[4], 0, b"p4"), Link(nid[3], 0, b"p3")], lease)
    assert _crawl_keys_dump(redis_client, crawl_id) == before
    # well formed, the same page records
    redis_client.hdel(store.keys["node"], nid[3])
    assert store.record_page(nid[0], 0, links, lease).added == 2
