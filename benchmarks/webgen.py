"""A generated web for frontier-scale runs: millions of URLs with realistic strings and
host structure, none of it held in memory.

- **Hosts:** ``hosts`` of them, sizes Zipf-distributed (host h has about
  ``largest / (h + 1)`` pages, at least 1), as host sizes on the web are (Broder et al.
  2000; Boldi et al. 2004, "UbiCrawler", §5). Names are built from real words: those of
  the shipped EmacsWiki URL list (``ipr_crawl/data/emacswiki.urls.tsv.gz``), e.g.
  ``www.keyboard-macros.org``.
- **Pages:** page k of host h has a URL of one to three word segments and the page
  number (``/emacs/keyboard-macros-412.html``, ``/wiki?id=7``); page 0 is the home page.
- **Links:** a page's out-links are drawn from a generator seeded by the page alone, so
  the same page always has the same links. Out-degree is log-normal (median 20, mean
  about 30; Broder et al. 2000 report a mean of 7-8 on the 1999 web, today's pages link
  far more). 75 % of links stay on the host; a link's target is biased to low page
  numbers (home and index pages) and, across hosts, to large hosts.

:class:`GeneratedWeb` maps ``(host, page)`` to its URL and back; :meth:`GeneratedWeb.links`
gives a page's out-links as ``(host, page)`` pairs.
"""

from __future__ import annotations

import gzip
import random
import re
from functools import lru_cache
from pathlib import Path

URLS = Path(__file__).resolve().parents[1] / "ipr_crawl" / "data" / "emacswiki.urls.tsv.gz"
TLDS = ("com", "org", "net", "de", "co.uk", "jp", "io", "edu", "fr", "info")
_LAST_NUMBER = re.compile(r"(\d+)(?:\.html)?$")


def words(path: Path = URLS) -> list[str]:
    """The distinct lowercase words (3-12 letters) of a URL list's paths, sorted."""
    found: set[str] = set()
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            url = line.rstrip("\n").split("\t", 1)[-1]
            for word in re.findall(r"[A-Za-z]+", url.split("/", 3)[-1]):
                if 3 <= len(word) <= 12:
                    found.add(word.lower())
    return sorted(found)


class GeneratedWeb:
    """``hosts`` hosts, the largest of ``largest`` pages; URLs of ``(host, page)`` pairs.

    Raises ValueError for fewer than one host or page.
    """

    def __init__(self, hosts: int = 200_000, largest: int = 2_000_000, seed: int = 1) -> None:
        if hosts < 1 or largest < 1:
            raise ValueError("a generated web needs at least one host and one page")
        self.hosts, self.largest, self.seed = hosts, largest, seed
        self.words = words()
        self._names: dict[int, str] = {}
        self._hosts: dict[str, int] = {}
        self.url = lru_cache(maxsize=2_000_000)(self._url)

    def size(self, host: int) -> int:
        """Pages of ``host``."""
        return max(1, self.largest // (host + 1))

    def host_name(self, host: int) -> str:
        name = self._names.get(host)
        if name is None:
            rng = random.Random(self.seed * 7_919 + host)
            base = f"{rng.choice(self.words)}-{rng.choice(self.words)}.{rng.choice(TLDS)}"
            name = ("www." if rng.random() < 0.5 else "") + base
            while name in self._hosts:  # another host drew the same words: take a sub-domain
                name = f"{rng.choice(self.words)}.{name}"
            self._names[host] = name
            self._hosts[name] = host
        return name

    def _url(self, host: int, page: int) -> str:
        if page == 0:
            return f"https://{self.host_name(host)}/"
        rng = random.Random(self.seed * 1_000_003 + host * 4_000_037 + page)
        w = self.words
        segments = [rng.choice(w) for _ in range(rng.randint(0, 2))]
        shape = rng.random()
        if shape < 0.6:
            last = f"{rng.choice(w)}-{rng.choice(w)}-{page}.html"
        elif shape < 0.85:
            last = f"{rng.choice(w)}?id={page}"
        else:
            last = f"{rng.choice(w)}/{page}"
        return f"https://{self.host_name(host)}/{'/'.join([*segments, last])}"

    def page_of(self, url: str) -> tuple[int, int]:
        """``(host, page)`` of a URL this web made (its host must have been named).

        Raises KeyError for a host this web has not named.
        """
        rest = url.split("://", 1)[1]
        name, _, path = rest.partition("/")
        match = _LAST_NUMBER.search(path)
        return self._hosts[name], int(match.group(1)) if match else 0

    def links(self, host: int, page: int) -> list[tuple[int, int]]:
        """The out-links of a page as ``(host, page)`` pairs, in page order, repeats kept."""
        rng = random.Random(self.seed * 999_983 + host * 4_000_037 + page)
        out = []
        for _ in range(min(300, int(rng.lognormvariate(3.0, 0.9)))):
            if rng.random() < 0.75:
                target = host
            else:
                target = min(self.hosts - 1, int(self.hosts * rng.random() ** 4))
            out.append((target, int(self.size(target) * rng.random() ** 3)))
        return out
