"""Pure rules of revisits (no Scrapy, no Redis, no Twisted).

- :mod:`~ipr_crawl.revisit.policy`: change-rate estimators and revisit policies
  (Cho & Garcia-Molina 2003; the papers' MLE, AIMD, Nutch adaptive, fixed), change
  classification, HTTP dates (RFC 9110 §5.6.7).
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
