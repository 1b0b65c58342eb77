"""ipr-crawl: a Scrapy crawl frontier in Redis ordered by incremental PageRank.

Enable it with one setting: ``ADDONS = {"ipr_crawl.Addon": 0}``.
Yamada, Takahashi, Taura, Chikayama 2004 (IPR, BF, BLC) define the orderings.
"""

from ipr_crawl.addon import Addon

__all__ = ["Addon", "__version__"]
__version__ = "0.1.0"
