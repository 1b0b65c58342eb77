"""Pure rules of revisits (no Scrapy, no Redis, no Twisted).

- :mod:`~ipr_crawl.revisit.policy`: change-rate estimators and revisit policies
  (Cho & Garcia-Molina 2003; the papers' MLE, AIMD, Nutch adaptive, fixed), change
  classification, HTTP dates (RFC 9110 §5.6.7): the import path of the modules
  :mod:`~ipr_crawl.revisit.state`, :mod:`~ipr_crawl.revisit.policies`,
  :mod:`~ipr_crawl.revisit.spec`, :mod:`~ipr_crawl.revisit.durations` and
  :mod:`~ipr_crawl.revisit.httpdate`.
- :mod:`~ipr_crawl.revisit.budget` and :mod:`~ipr_crawl.revisit.rates`: revisits under
  a budget (Kolobov et al. 2019) and the change rates it splits.
- :mod:`~ipr_crawl.revisit.fingerprint`: content fingerprints (SHA-1 of the body or of
  the visible text, 64-bit simhash; Charikar 2002).
"""

from ipr_crawl.revisit.fingerprint import HASH_MODES, digest, same_version, simhash64, visible_text
from ipr_crawl.revisit.policy import (
    CHANGE_CLASSES,
    DAY,
    AimdPolicy,
    FixedPolicy,
    MlePolicy,
    NutchAdaptivePolicy,
    Policy,
    RevisitState,
    access,
    bucket,
    first_access,
    format_duration,
    next_due,
    next_interval,
    observe,
    parse_duration,
    parse_http_date,
    parse_policy,
    update,
)

__all__ = ["HASH_MODES", "digest", "same_version", "simhash64", "visible_text", "CHANGE_CLASSES", "DAY", "AimdPolicy", "FixedPolicy", "MlePolicy", "NutchAdaptivePolicy", "Policy", "RevisitState", "access", "bucket", "first_access", "format_duration", "next_due", "next_interval", "observe", "parse_duration", "parse_http_date", "parse_policy", "update"]
