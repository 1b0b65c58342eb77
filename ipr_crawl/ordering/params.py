"""The orderings of this release and their parameters: one frozen dataclass.

:class:`OrderingParams` holds every parameter of a frontier ordering with its
default, and is the one owner of the argument list the Lua scripts read
(:meth:`OrderingParams.lua_args`, ``params_from`` in ``store/lua/_record.lua``).
The ``IPR_*`` settings (``ipr_crawl.config``), the Redis store, the reference
frontier and the replays all build one.

Sources: push (residual push): Andersen, Chung & Lang, FOCS 2006; IPR and its cut-offs DL1, PL, VR, AR, BLC and BF: Yamada, Takahashi, Taura
& Chikayama 2004, §3 and §4.2; importance: Matsuoka, Suzuki, Kishi & Ogawa, §2;
OPIC: Abiteboul, Preda & Cobena 2003; periodic PageRank (``pr``):
Yamada et al. 2004, §4.2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ORDERINGS", "LUA_NAMES", "LUA_ARGS", "TIE_RULES", "OrderingParams", "parse_ordering"]

#: Orderings of this release and their cut-offs.
ORDERINGS: dict[str, tuple[str, ...]] = {
    "ipr": ("dl1", "pl", "vr", "ar"),
    "push": (),
    "blc": (),
    "ifs": (),
    "importance": (),
    "pr": (),
    "opic": (),
    "larger-sites-first": (),
    "bf": (),
}
#: Short names used inside Redis (``store/lua/``) for orderings with long names.
LUA_NAMES = {"larger-sites-first": "lsf"}
#: Tie rule among URLs found on the same page (Yamada et al. 2004, §4.2).
TIE_RULES = ("same-site", "other-site", "none")
#: Names of the ordering arguments every record script reads first, in order
#: (``params_from`` in ``store/lua/_record.lua`` reads them by these names).
LUA_ARGS = (
    "ordering", "cutoff", "initial", "param", "cap", "ia", "ib", "ic", "id", "budget", "damping", "epsilon",
)


def parse_ordering(value: str, cutoff: str = "dl1") -> tuple[str, str]:
    """Split an ``IPR_ORDERING`` value into ``(ordering, cutoff)``.

    ``"ipr:dl1"`` and ``"ipr"`` with ``cutoff="dl1"`` both give ``("ipr", "dl1")``;
    orderings without cut-offs give ``(name, "")``.

    >>> parse_ordering("IPR:DL1")
    ('ipr', 'dl1')
    >>> parse_ordering("bf")
    ('bf', '')

    Raises :class:`ValueError` naming ``IPR_ORDERING`` or ``IPR_CUTOFF``.
    """
    name, _, cut = str(value).strip().lower().partition(":")
    if name not in ORDERINGS:
        raise ValueError(
            f"IPR_ORDERING={value!r} is not an ordering; allowed: " + ", ".join(sorted(ORDERINGS))
        )
    cutoffs = ORDERINGS[name]
    if not cutoffs:
        if cut:
            raise ValueError(f"IPR_ORDERING={value!r}: {name} takes no cut-off")
        return name, ""
    cut = cut or str(cutoff).strip().lower()
    if cut not in cutoffs:
        raise ValueError(f"IPR_CUTOFF={cut!r} is not a cut-off of {name}; allowed: " + ", ".join(cutoffs))
    return name, cut


@dataclass(frozen=True)
class OrderingParams:
    """Parameters of one frontier ordering, with their defaults.

    The defaults are the settings table's (``ipr_crawl.settings_table``: each field's
    setting in ``ORDERING_FIELDS``; ``tests/tools/test_docs.py`` holds them to it), but for
    ``ordering``: ``OrderingParams()`` is ``ipr:dl1``, a crawl's default ``push``.

    - ``ordering``: a key of :data:`ORDERINGS`; ``cutoff``: IPR's cut-off
      (``dl1``, ``pl``, ``vr``, ``ar``; ``""`` for other orderings).
    - ``initial_score``: value a page gets once when fetched (Yamada et al. 2004, §3).
    - ``pl_pages`` (L of PL), ``vr_theta`` (θ of VR), ``ar_threshold`` (a_q / s_q of AR).
    - ``propagation_cap``: score updates beyond the direct targets per page (a count).
    - ``importance``: a, b, c, d of the importance ordering.
    - ``opic_initial_cash``: cash of a start URL (OPIC).
    - ``pr_interval_pages``, ``pr_damping``: ``pr``, one power iteration every N fetches.
    - ``tie_rule``: a member of :data:`TIE_RULES`.
    - ``push_budget`` (edge updates per fetched page, beyond the page's own
      out-links), ``push_damping`` (d), ``push_epsilon`` (smallest residual pushed):
      the ``push`` ordering (forward push, Andersen, Chung & Lang, FOCS 2006).
    - ``prior_weight``: weight of an earlier crawl's PageRank in a new URL's priority
      (``IPR_PRIOR_WEIGHT``; kept in the crawl's ``meta`` by :mod:`ipr_crawl.store.prior`,
      not an argument of the scripts).
    """

    ordering: str = "ipr"
    cutoff: str = "dl1"
    initial_score: float = 1.0
    pl_pages: int = 8
    vr_theta: float = 1.5
    ar_threshold: float = 29 / 30
    propagation_cap: int = 1000
    importance: tuple[float, float, float, float] = (0.2, 0.1, 1.0, 0.5)
    opic_initial_cash: float = 1.0
    pr_interval_pages: int = 165000
    pr_damping: float = 0.85
    tie_rule: str = "same-site"
    push_budget: int = 10
    push_damping: float = 0.85
    push_epsilon: float = 0.0
    prior_weight: float = 1.0

    @property
    def lua_name(self) -> str:
        """The ordering's name inside Redis (``larger-sites-first`` is ``lsf``)."""
        return LUA_NAMES.get(self.ordering, self.ordering)

    @property
    def label(self) -> str:
        """``ordering:cutoff`` (or the ordering alone): what a crawl's ``meta`` stores."""
        return f"{self.ordering}:{self.cutoff}" if self.cutoff else self.ordering

    @property
    def cutoff_param(self) -> float:
        """The cut-off's parameter: L (pl), θ (vr), threshold (ar); 0 for dl1."""
        return float({"pl": self.pl_pages, "vr": self.vr_theta, "ar": self.ar_threshold}.get(self.cutoff, 0))

    def lua_args(self) -> list[Any]:
        """The ordering arguments of the record scripts, in the order of :data:`LUA_ARGS`
        (floats as ``repr`` so that no digit is lost)."""
        return [
            self.lua_name,
            self.cutoff or "dl1",
            repr(float(self.initial_score)),
            repr(self.cutoff_param),
            int(self.propagation_cap),
            *(repr(float(x)) for x in self.importance),
            int(self.push_budget),
            repr(float(self.push_damping)),
            repr(float(self.push_epsilon)),
        ]

    @classmethod
    def parse(cls, value: str, **kwargs: Any) -> OrderingParams:
        """Parameters for an ``IPR_ORDERING`` value (``"ipr:pl"``, ``"bf"``, ...).

        Raises :class:`ValueError` as :func:`parse_ordering`."""
        ordering, cutoff = parse_ordering(value, kwargs.pop("cutoff", "dl1"))
        return cls(ordering=ordering, cutoff=cutoff, **kwargs)
