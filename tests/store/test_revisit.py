"""The revisit policy's pure functions (ipr_crawl.revisit.policy, ipr_crawl.revisit.fingerprint):
001 §4 rules checked as properties (hypothesis) and on hand-worked cases."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy.settings import Settings

from ipr_crawl.config import DEFAULTS, RevisitConfig
from ipr_crawl.revisit.fingerprint import digest, same_version, simhash64, visible_text
from ipr_crawl.revisit.policy import (
    DAY,
    AimdPolicy,
    FixedPolicy,
    MlePolicy,
    NutchAdaptivePolicy,
    RevisitState,
    access,
    bucket,
    first_access,
    format_duration,
    next_due,
    next_interval,
    observe,
    parse_duration,
    parse_policy,
)


def _revisits(redis_client, crawl_id):
    """The revisit store of an opened crawl (its scripts stop with IPR_STORE_LOST without one)."""
    from ipr_crawl.store import FrontierStore
    from ipr_crawl.store.revisit import RevisitStore

    FrontierStore(redis_client, crawl_id, "bf").open()
    return RevisitStore(redis_client, crawl_id)


intervals = st.integers(min_value=1, max_value=400 * 86400).map(float)  # whole seconds: exact sums
histories = st.lists(st.tuples(intervals, st.booleans()), min_size=1, max_size=40)


def replay(history, start=1.0e9, modified=None):
    """State after accesses at start, start + i1, start + i1 + i2, ... with the
    given changed flags; ``modified(prev, now)`` gives a Last-Modified instant."""
    s = first_access(start)
    t = start
    for dt, changed in history:
        lm = modified(t, t + dt) if (modified and changed) else None
        t += dt
        s = observe(s, t, changed, modified_at=lm)
    return s


# -- durations and specs ------------------------------------------------------------------
@given(st.integers(min_value=1, max_value=10**9))
def test_duration_round_trip(seconds):
    assert parse_duration(format_duration(float(seconds))) == seconds


@pytest.mark.parametrize("text, seconds", [("15d", 15 * DAY), ("12h", 43200), ("90m", 5400), ("30s", 30), ("2w", 14 * DAY), ("1.5d", 1.5 * DAY), ("45", 45)])
def test_duration_units(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "d", "-1d", "1x", "1d2h", "inf", "nan"])
def test_duration_rejects(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@given(
    st.sampled_from(["min", "avg", "mix"]),
    st.floats(min_value=0.01, max_value=5, allow_nan=False),
    st.floats(min_value=1.01, max_value=100, allow_nan=False),
    st.integers(min_value=1, max_value=400),
    st.floats(min_value=0.05, max_value=1.0, allow_nan=False),
)
def test_mle_spec_round_trip(kind, lo, factor, tau2_days, alpha):
    hi = lo * factor
    spec = f"mle-{kind}:{lo!r}-{hi!r}:{tau2_days}d:x{alpha!r}"
    p = parse_policy(spec)
    assert p == MlePolicy(kind, lo, hi, tau2_days * DAY, alpha)
    assert p.name == spec
    assert parse_policy(f"mle-{kind}:alpha={alpha!r}:tau2={tau2_days}d:mu={lo!r}-{hi!r}") == p


def test_spec_defaults_and_forms():
    assert parse_policy("mle-mix") == MlePolicy("mix", 0.1, 10.0, 15 * DAY, 1.0)
    assert parse_policy("mle-min:0.5-2:7d") == MlePolicy("min", 0.5, 2.0, 7 * DAY, 1.0)
    assert parse_policy("aimd:1d:0.5") == AimdPolicy(DAY, 0.5, 15 * DAY, False)
    assert parse_policy("aimd:1d:0.5:3d:pair") == AimdPolicy(DAY, 0.5, 3 * DAY, True)
    assert parse_policy("nutch-adaptive") == NutchAdaptivePolicy(0.4, 0.2, 60.0, 365 * DAY, 30 * DAY)
    assert parse_policy("nutch-adaptive:0.3:0.1:1h:100d:7d") == NutchAdaptivePolicy(0.3, 0.1, 3600.0, 100 * DAY, 7 * DAY)
    assert parse_policy("fixed:7d") == FixedPolicy(7 * DAY)


@pytest.mark.parametrize(
    "spec",
    ["mle-max", "mle-mix:10-0.1", "mle-mix:0-10", "mle-mix:0.1-10:15d:x1.5", "mle-mix:0.1-10:0d",
     "aimd:1d:1.5", "aimd:0d:0.5", "aimd:1d:0.5:bogus", "nutch-adaptive:0.4:1.2",
     "nutch-adaptive:min=2d:max=1d", "fixed", "fixed:0d", "fixed:7d:8d", "mle-mix::15d", "mle-mix:foo=1", ""],
)
def test_spec_rejects(spec):
    with pytest.raises(ValueError, match="policy"):
        parse_policy(spec)


# -- state updates (001 §4.1.1, §4.1.3) -----------------------------------------------------
@given(histories)
def test_state_sums_without_last_modified(history):
    s = replay(history)
    changed = [dt for dt, c in history if c]
    assert s.accesses == len(history) + 1
    assert math.isclose(s.T, sum(dt for dt, _ in history), rel_tol=1e-9)
    assert math.isclose(s.U, sum(dt for dt, c in history if not c), rel_tol=1e-9, abs_tol=1e-6)
    assert s.m == len(changed)
    if changed:
        assert s.tc_min == min(changed)
        assert math.isclose(s.tc_avg, sum(changed) / len(changed), rel_tol=1e-6)
        assert s.tc_min <= s.tc_avg * (1 + 1e-9)
    else:
        assert math.isinf(s.tc_min) and math.isinf(s.tc_avg)
    run = 0
    for _, c in history:
        run = 0 if c else run + 1
    assert s.unchanged_run == run
    assert s.last_interval == pytest.approx(history[-1][0])


@given(histories, st.floats(min_value=0.0, max_value=1.0))
def test_last_modified_rule(history, where):
    """LM inside (prev, now]: t_c = LM - prev and now - LM counts into U (001 Fig. 3)."""
    s = replay(history, modified=lambda prev, now: prev + max(where * (now - prev), 1e-3))
    plain = replay(history)
    assert s.m == plain.m and math.isclose(s.T, plain.T)
    assert s.U >= plain.U - 1e-6 and s.U <= s.T + 1e-6
    assert s.tc_min <= plain.tc_min
    # outside the interval (before the previous access, or none): ignored
    stale = replay(history, modified=lambda prev, now: prev - 5.0)
    assert stale.U == plain.U and stale.tc_min == plain.tc_min


def test_last_modified_worked_case():
    s = first_access(0.0)
    s = observe(s, 10 * DAY, changed=True, modified_at=4 * DAY)
    assert (s.T, s.U, s.m, s.tc_min) == (10 * DAY, 6 * DAY, 1, 4 * DAY)
    s = observe(s, 12 * DAY, changed=False)
    assert (s.T, s.U, s.tc_avg) == (12 * DAY, 8 * DAY, 4 * DAY)


def test_access_not_after_previous_only_updates_validators():
    s = first_access(100.0, etag='"a"')
    s2 = observe(s, 100.0, changed=True, etag='"b"')
    assert (s2.accesses, s2.m, s2.etag) == (1, 0, '"b"')


@given(histories)
def test_state_list_round_trip(history):
    s = replay(history)
    s.etag, s.last_modified, s.digest = '"x"', "Tue, 01 Jan 2030 00:00:00 GMT", "b:00"
    assert RevisitState.from_list(s.to_list()) == s


# -- MLE (001 eq. 4, 5) ------------------------------------------------------------------------
mle_policies = st.builds(
    MlePolicy,
    st.sampled_from(["min", "avg", "mix"]),
    st.floats(min_value=0.05, max_value=1.0),
    st.floats(min_value=1.5, max_value=20.0),
    st.just(15 * DAY),
    st.floats(min_value=0.1, max_value=1.0),
)


@given(mle_policies, histories)
def test_mle_interval_cases(p, history):
    s = replay(history)
    tau = next_interval(p, s)
    if s.m == 0:
        assert tau == pytest.approx(p.mu_high * (s.interval or s.last_interval))
        return
    tc = {"min": s.tc_min, "avg": s.tc_avg, "mix": math.sqrt(s.tc_min * s.tc_avg)}[p.estimator]
    ratio = s.U / s.T
    if ratio < math.exp(-1 / p.mu_low):
        expected = p.alpha * p.mu_low * tc
    elif ratio <= math.exp(-1 / p.mu_high):
        expected = p.alpha * tc / math.log(s.T / s.U)
    else:
        expected = p.alpha * p.mu_high * tc
    assert tau == pytest.approx(expected, rel=1e-9)
    assert p.alpha * p.mu_low * tc * (1 - 1e-9) <= tau <= p.alpha * p.mu_high * tc * (1 + 1e-9)


@given(histories)
def test_mle_min_mix_avg_order(history):
    s = replay(history)
    if s.m == 0:
        return
    taus = [next_interval(MlePolicy(k), s) for k in ("min", "mix", "avg")]
    assert taus[0] <= taus[1] * (1 + 1e-9) and taus[1] <= taus[2] * (1 + 1e-9)


@given(st.integers(min_value=1, max_value=50), st.floats(min_value=1.0, max_value=100 * DAY), st.floats(min_value=0.01, max_value=0.99))
def test_eq3_solves_the_likelihood_equation(m, tc, u_share):
    """With all t_ci equal, 1/lambda = t_c / log(T/U) solves 001 eq. (2)."""
    T_minus_U = m * tc
    U = T_minus_U * u_share / (1 - u_share)
    lam = math.log((T_minus_U + U) / U) / tc
    assert m * tc / math.expm1(lam * tc) == pytest.approx(U, rel=1e-6)


@given(st.floats(min_value=0.0, max_value=0.999), st.floats(min_value=0.0, max_value=0.999))
def test_mle_monotone_in_stability(a, b):
    """mu = 1/log(T/U) grows with U/T, so a more stable page is not revisited sooner."""
    p = MlePolicy("avg")
    lo, hi = sorted((a, b))
    s1 = RevisitState(first=0.0, last=100 * DAY, U=lo * 100 * DAY, m=3, tc_min=(1 - lo) * 100 * DAY / 3, accesses=5)
    s2 = RevisitState(first=0.0, last=100 * DAY, U=hi * 100 * DAY, m=3, tc_min=(1 - lo) * 100 * DAY / 3, accesses=5)
    # same t_c (use min so only U/T differs)
    q = MlePolicy("min")
    assert next_interval(q, s1) <= next_interval(q, s2) * (1 + 1e-9)
    assert next_interval(p, s1) > 0


def test_mle_worked_cases():
    p = MlePolicy("mix", 0.1, 10.0, 15 * DAY, 1.0)
    s = first_access(0.0)
    assert next_interval(p, s) == 15 * DAY  # tau_2
    s = observe(s, 15 * DAY, changed=False, interval=15 * DAY)
    assert next_interval(p, s) == 150 * DAY  # U/T = 1: mu_high * tau_prev
    s = observe(s, 165 * DAY, changed=True, interval=150 * DAY)
    # T = 165, U = 15, m = 1, t_c = 150 (min = avg = mix); U/T = 1/11 -> mu = 1/log 11
    assert next_interval(p, s) == pytest.approx(150 * DAY / math.log(11))


# -- AIMD, nutch-adaptive, fixed -------------------------------------------------------------
@given(histories, st.floats(min_value=0.1 * DAY, max_value=5 * DAY), st.floats(min_value=0.05, max_value=0.95), st.booleans())
def test_aimd(history, d, r, pair):
    p = AimdPolicy(d, r, 15 * DAY, pair)
    s = first_access(0.0)
    tau = next_interval(p, s)
    assert tau == 15 * DAY
    t = 0.0
    run = 0
    for _, changed in history:
        if tau < 1.0:
            # Many changes in a row shrink tau geometrically; below a second, t + tau
            # rounds to t (a float's resolution at t), and no crawl revisits that
            # often anyway (IPR_REVISIT_MIN_SECS floors the due time).
            break
        t += tau
        s = observe(s, t, changed, interval=tau)
        new = next_interval(p, s)
        run = 0 if changed else run + 1
        if changed:
            assert new == pytest.approx(tau * r)
        elif pair and run % 2 == 1:
            assert new == tau
        else:
            assert new == pytest.approx(tau + d)
        tau = new


@given(histories)
def test_nutch_adaptive_bounds(history):
    p = NutchAdaptivePolicy(0.4, 0.2, 3600.0, 100 * DAY, 30 * DAY)
    s, t, tau = first_access(0.0), 0.0, 30 * DAY
    for _, changed in history:
        t += tau
        s = observe(s, t, changed, interval=tau)
        new = next_interval(p, s)
        raw = tau * (0.8 if changed else 1.4)
        assert new == pytest.approx(min(max(raw, 3600.0), 100 * DAY))
        tau = new


@given(histories)
def test_fixed(history):
    s = replay(history)
    assert next_interval(FixedPolicy(7 * DAY), s) == 7 * DAY


# -- due times ----------------------------------------------------------------------------------
@given(st.floats(min_value=0, max_value=2e9), st.floats(min_value=0.001, max_value=1e8), st.sampled_from([0.0, 3600.0, DAY]))
def test_next_due(now, tau, res):
    due = next_due(now, tau, res)
    if res == 0:
        assert due == now + tau
    else:
        assert due % res == 0 and due > bucket(now, res)
        steps = round((due - bucket(now, res)) / res)
        assert steps == max(1, math.floor(tau / res + 0.5))
    assert next_due(now, tau, 0.0, min_interval=tau * 2) == now + tau * 2
    assert next_due(now, tau, 0.0, max_interval=tau / 2) == now + tau / 2


# -- growth earned by observed time (the burst-of-304s issue) ------------------------------------
DEFAULT_POLICY = "mle-mix:0.1-10:15d"  # the papers' policy (the default until 2026-11)


def test_a_burst_of_304s_does_not_push_the_next_visit_out():
    """Four accesses within 15 s (t, t+5, t+10, t+15), all unchanged: the interval
    used to go 15 -> 150 -> 1,500 -> 15,000 days (next visit decades away)."""
    cfg = RevisitConfig.from_settings(Settings())
    policy = parse_policy(DEFAULT_POLICY)
    t0 = 1.7e9
    state, tau = access(policy, None, t0, changed=False)
    taus = [tau]
    for k in (5, 10, 15):
        state, tau = access(policy, state, t0 + k, changed=False)
        taus.append(tau)
        due = next_due(t0 + k, tau, cfg.resolution, cfg.min_interval, cfg.max_interval)
        assert due - (t0 + k) <= 90 * DAY
    assert taus[0] == 15 * DAY
    # at most (mu_high - 1) x the previous interval per share of it observed: 15 s seen
    # of the 7.5 days that count as on time -> a few minutes, not decades
    bound = 15 * DAY + (policy.mu_high - 1) * 15 * DAY * 15 / (0.5 * 15 * DAY)
    assert all(15 * DAY <= t <= bound * (1 + 1e-12) for t in taus), [t / DAY for t in taus]
    assert state.interval == taus[-1] < 15 * DAY + 300


def test_repeated_accesses_in_one_bucket_do_not_grow_the_interval():
    """With IPR_REVISIT_RESOLUTION_SECS every access of one day has the same instant:
    no time observed, no growth (it used to multiply by mu_high per access)."""
    for spec in (DEFAULT_POLICY, "aimd:1d:0.5", "nutch-adaptive"):
        policy = parse_policy(spec)
        state, tau = access(policy, None, 0.0, changed=False)
        state, tau = access(policy, state, tau, changed=False)
        for _ in range(3):
            state, again = access(policy, state, state.last, changed=False)
            assert again == tau, spec


def test_default_max_interval_is_finite_and_zero_still_means_no_bound():
    assert DEFAULTS["IPR_REVISIT_MAX_SECS"] == 90 * DAY
    cfg = RevisitConfig.from_settings(Settings())
    assert 0 < cfg.max_interval == 90 * DAY < math.inf
    assert next_due(0.0, 15000 * DAY, cfg.resolution, cfg.min_interval, cfg.max_interval) == 90 * DAY
    assert RevisitConfig.from_settings(Settings({"IPR_REVISIT_MAX_SECS": 0})).max_interval == 0
    assert next_due(0.0, 15000 * DAY, 0.0, 3600.0, 0.0) == 15000 * DAY


def test_a_normal_series_grows_as_before():
    """Accesses at their due times: the policy's own steps, unbounded by the guard
    (15 -> 150 -> 1,500 -> 15,000 days for MLE on a page that never changes)."""
    policy = parse_policy(DEFAULT_POLICY)
    state, tau = access(policy, None, 0.0, changed=False)
    t, taus = 0.0, [tau]
    for _ in range(3):
        t += tau
        state, tau = access(policy, state, t, changed=False)
        taus.append(tau)
    assert [x / DAY for x in taus] == pytest.approx([15, 150, 1500, 15000])


growth_policies = st.sampled_from(
    [DEFAULT_POLICY, "mle-min:0.5-2:3d", "mle-avg:0.1-10:1d:x0.5", "aimd:1d:0.5", "aimd:2d:0.3:pair",
     "nutch-adaptive", "nutch-adaptive:0.3:0.1:1h:100d:7d", "fixed:7d"]
)


@given(growth_policies, st.lists(st.tuples(st.floats(min_value=0.51, max_value=3.0), st.booleans()), min_size=1, max_size=30))
def test_on_time_accesses_take_the_policys_step(spec, history):
    """An access at least half its interval after the previous one (bucket rounding
    brings it no earlier than 2/3) gets exactly what :func:`next_interval` says."""
    policy = parse_policy(spec)
    t = 1.0e9
    state, tau = access(policy, None, t, changed=False)
    for lateness, changed in history:
        if tau < 1.0:
            break
        t += tau * lateness
        expected = next_interval(policy, observe(state, t, changed), changed)
        state, tau = access(policy, state, t, changed)
        assert tau == expected


@given(growth_policies, st.lists(st.tuples(st.floats(min_value=0.0, max_value=0.49), st.booleans()), min_size=1, max_size=30))
def test_early_accesses_earn_growth_by_observed_time(spec, history):
    """An access before half its interval: a decrease as the policy says, an increase
    scaled by the observed share of that half interval (never beyond the step)."""
    policy = parse_policy(spec)
    t = 1.0e9
    state, tau = access(policy, None, t, changed=False)
    for share, changed in history:
        if tau < 1.0:
            break
        elapsed = math.floor(tau * share)  # whole seconds: exact instants
        want = next_interval(policy, observe(state, t + elapsed, changed), changed) if elapsed > 0 else None
        prev = tau
        t += elapsed
        state, tau = access(policy, state, t, changed)
        if want is None:  # no time passed (one time bucket): nothing grows
            assert tau <= prev
            continue
        if want <= prev:
            assert tau == want
        else:
            assert prev <= tau <= prev + (want - prev) * elapsed / (0.5 * prev) * (1 + 1e-9)
            assert tau <= want


# -- content hashes -------------------------------------------------------------------------------
@given(st.binary(max_size=300), st.binary(max_size=300))
def test_body_digest(a, b):
    assert same_version(digest(a), digest(a))
    assert same_version(digest(a), digest(b)) == (a == b)


@given(st.text(alphabet="abc <>/&;", max_size=80))
def test_text_digest_ignores_markup(text):
    body = f"<p>{text}</p>".encode()
    restyled = f"<div class='x'><!-- note --><p>{text}</p><script>var t = 1;</script></div>".encode()
    assert visible_text(restyled) == visible_text(body)
    assert digest(body, "text") == digest(restyled, "text")


# A page of a few hundred words, most of them distinct (as in real text): one
# changed token moves at most a few of the 64 bits. (With ten distinct words, as
# this test once drew, a single token can tip bits whose weighted sums are near
# zero: simhash needs a vocabulary.)
@settings(max_examples=30, derandomize=True)
@given(st.integers(0, 2**32), st.integers(200, 400), st.integers(0, 10**6))
def test_simhash_near_duplicate(seed, size, counter):
    import random
    import string

    rng = random.Random(seed)
    body = " ".join("".join(rng.choices(string.ascii_lowercase, k=rng.randint(4, 9))) for _ in range(size))
    a = digest(f"<p>hits: 0</p><p>{body}</p>".encode(), "simhash")
    b = digest(f"<p>hits: {counter}</p><p>{body}</p>".encode(), "simhash")
    assert same_version(a, b, 4)
    assert same_version(a, b, 4) == same_version(b, a, 4)
    assert simhash64("") == 0
    assert not same_version("", a)


def test_a_sitemaps_lastmod_moves_changed_urls_holds_the_rest_within_limits(redis_client, crawl_id):
    """RevisitStore.apply_lastmods, on a real Redis: a URL modified after its last fetch
    is made due now (the lowest estimated rate first, at most `limit`), one not modified
    is held to now + hold unless fetched `stale_after` ago or more; URLs never fetched
    or not scheduled are left alone."""
    from ipr_crawl.ordering.urls import node_id
    from ipr_crawl.revisit.policy import RevisitState

    store = _revisits(redis_client, crawl_id)
    now, day = 1_000 * DAY, DAY

    def put(url: str, last: float, due: float | None, changes: int = 0) -> bytes:
        id_ = node_id(url)
        state = RevisitState(first=last - 100 * day, last=last, m=changes, accesses=10, unchanged_run=1,
                             last_interval=5 * day)
        store.record(id_, url, state, due)
        return id_

    slow = put("http://a.test/slow", now - 10 * day, now + 50 * day, changes=1)
    fast = put("http://a.test/fast", now - 10 * day, now + 50 * day, changes=9)
    same = put("http://a.test/same", now - 10 * day, now + day)
    stale = put("http://a.test/stale", now - 95 * day, now + day)
    stopped = put("http://a.test/stopped", now - 10 * day, None)
    right = put("http://a.test/right", now - 10 * day, now + day)  # its latest fetch found the change it lists
    store.record(right, "http://a.test/right", RevisitState(first=now - 100 * day, last=now - 10 * day, m=1,
                                                             accesses=10, last_interval=5 * day), now + 30 * day)
    lastmods = [(slow, now - day), (fast, now - day), (same, now - 20 * day), (stale, now - 200 * day),
                (stopped, now - day), (node_id("http://a.test/unknown"), now - day), (right, now - 12 * day)]
    result = store.apply_lastmods(lastmods, now, hold=2 * day, limit=1, stale_after=90 * day)
    assert (result.moved, result.held, result.distrusted) == (1, 1, False)
    assert store.due_at(slow) == now and store.due_at(fast) == now + 50 * day  # the budget took one: the slower
    assert store.due_at(same) == now + 2 * day and store.due_at(stale) == now + day
    assert store.due_at(stopped) is None
    assert store.apply_lastmods(lastmods, now, hold=2 * day).moved == 1  # no limit: the other one too


def test_a_sitemap_the_crawls_fetches_refute_is_not_followed(redis_client, crawl_id):
    """apply_lastmods checks each ``<lastmod>`` against the URL's latest access interval
    (real Redis): a date in it is confirmed if that access found a change, refuted if
    not (a build time); a date before it is refuted if that access found a change (a
    date that never moves). Refuted 3 times or more and more often than confirmed:
    nothing is moved or held."""
    from ipr_crawl.ordering.urls import node_id
    from ipr_crawl.revisit.policy import RevisitState

    store = _revisits(redis_client, crawl_id)
    now, day = 1_000 * DAY, DAY

    def put(url: str, found_change: bool) -> bytes:
        id_ = node_id(url)
        state = RevisitState(first=now - 100 * day, last=now - 10 * day, last_interval=10 * day, m=1, accesses=5,
                             unchanged_run=0 if found_change else 1)
        store.record(id_, url, state, now + day)
        return id_

    changed = [put(f"http://a.test/c{k}", True) for k in range(4)]
    still = [put(f"http://a.test/s{k}", False) for k in range(4)]
    frozen = [(id_, now - 300 * day) for id_ in changed + still]  # the first version's date
    result = store.apply_lastmods(frozen, now, hold=2 * day)
    assert (result.confirmed, result.refuted, result.distrusted, result.moved, result.held) == (0, 4, True, 0, 0)
    build = [(id_, now - 12 * day) for id_ in still]  # a rebuild stamps them all
    result = store.apply_lastmods(build, now, hold=2 * day)
    assert (result.confirmed, result.refuted, result.distrusted) == (0, 4, True)
    assert all(store.due_at(id_) == now + day for id_ in changed + still)  # nothing was moved or held
    truthful = [(id_, now - 15 * day) for id_ in changed] + [(id_, now - 25 * day) for id_ in still]
    mixed = truthful[:4] + [(still[0], now - 12 * day)] + truthful[5:]  # one wrong of eight: still followed
    result = store.apply_lastmods(mixed, now, hold=2 * day)
    assert (result.confirmed, result.refuted, result.distrusted) == (4, 1, False)
    assert store.due_at(still[0]) == now + day  # its own lastmod was refuted: not held
    assert store.due_at(still[1]) == now + 2 * day
    result = store.apply_lastmods(truthful, now, hold=2 * day)
    assert (result.confirmed, result.refuted, result.distrusted) == (4, 0, False)
    assert all(store.due_at(id_) == now + 2 * day for id_ in changed + still)  # held to the next reads


def test_the_directory_pool_is_summed_in_redis_and_old_states_still_read(redis_client, crawl_id):
    """RevisitStore.record adds each access interval to the crawl's rate pool (changes and
    exposure per directory, revisit_record.lua, on a real Redis); rate_pool() reads the
    sums back as RatePool takes them. A state written before prior_scale (12 fields)
    still reads, with scale 1; a non-positive scale is refused."""
    import msgpack

    from ipr_crawl.ordering.urls import node_id
    from ipr_crawl.revisit.budget import RatePool, pool_group
    from ipr_crawl.revisit.policy import RevisitState

    store = _revisits(redis_client, crawl_id)
    busy, quiet = "http://a.test/news/1", "http://a.test/docs/1"
    for i, (url, changed) in enumerate(((busy, True), (busy, True), (quiet, False), (quiet, False), (quiet, True))):
        # each access its own state (its count): the same state and due again is a replay
        state = RevisitState(first=0.0, last=10 * DAY, accesses=2 + i, prior_scale=0.5)
        store.record(node_id(url), url, state, 20 * DAY, pool=(pool_group(url), changed, 10 * DAY))
    store.record(node_id(busy), busy, RevisitState(first=0.0, last=0.0), None, pool=(pool_group(busy), True, 0.0))
    sums = store.rate_pool()
    assert sums == {"http://a.test/news/": (2.0, 20 * DAY), "http://a.test/docs/": (1.0, 30 * DAY)}
    pool = RatePool()
    pool.load(sums)
    assert pool.scale("http://a.test/news/") > pool.scale("http://a.test/docs/")  # both below 1: little seen yet
    assert store.load(node_id(quiet)).prior_scale == 0.5

    old = RevisitState(first=0.0, last=DAY, accesses=2, m=1).to_list()
    assert len(old) == 12  # without a directory prior: the layout earlier versions read
    redis_client.hset(store.keys["revisit"], node_id("http://a.test/old"), msgpack.packb(["http://a.test/old", *old]))
    assert store.load(node_id("http://a.test/old")).prior_scale == 1.0
    for bad in (0.0, None, "x"):
        with pytest.raises(ValueError, match="prior scale"):
            RevisitState.from_list([*old, bad])


def test_an_unreadable_state_is_counted_and_logged_not_silently_reset(redis_client, crawl_id, caplog):
    """RevisitStore.load on a real Redis: a state this version cannot read (16 fields, as
    a later ipr-crawl might write; or not msgpack) gives None, as a URL never fetched, but is
    counted and logged, the first UNREADABLE_LOGGED of them one by one."""
    import logging

    import msgpack

    from ipr_crawl.ordering.urls import node_id
    from ipr_crawl.revisit.policy import RevisitState
    from ipr_crawl.store import revisit as store_module

    store = _revisits(redis_client, crawl_id)
    good = RevisitState(first=0.0, last=DAY, accesses=2, m=1)
    later = [*good.to_list(), 0.5, 0.0, 1.0, "a field of a later version"]
    assert len(later) == 16
    redis_client.hset(store.keys["revisit"], node_id("http://a.test/good"),
                      msgpack.packb(["http://a.test/good", *good.to_list()]))
    redis_client.hset(store.keys["revisit"], node_id("http://a.test/later"), msgpack.packb(["http://a.test/later", *later]))
    redis_client.hset(store.keys["revisit"], node_id("http://a.test/junk"), b"\xc1 not msgpack")
    with caplog.at_level(logging.WARNING, logger="ipr_crawl.store.revisit"):
        assert store.load(node_id("http://a.test/good")) == good
        assert store.unreadable == 0
        assert store.load(node_id("http://a.test/later")) is None
        assert store.load(node_id("http://a.test/junk")) is None
        assert store.load(node_id("http://a.test/never")) is None  # never fetched: not counted
    assert store.unreadable == 2
    warned = [r.getMessage() for r in caplog.records if "cannot be read" in r.getMessage()]
    assert len(warned) == 2 and node_id("http://a.test/later").hex() in warned[0]
    assert "12 to 15 fields" in warned[0] and "later ipr-crawl" in warned[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ipr_crawl.store.revisit"):
        for _ in range(store_module.UNREADABLE_LOGGED + 5):
            store.load(node_id("http://a.test/later"))
    assert store.unreadable == store_module.UNREADABLE_LOGGED + 7
    warned = [r.getMessage() for r in caplog.records if "cannot be read" in r.getMessage()]
    assert len(warned) == store_module.UNREADABLE_LOGGED - 2 and "only counted" in warned[-1]


def test_the_gamma_priors_moments_are_summed_in_redis(redis_client, crawl_id):
    """RevisitStore.record adds an access's five moment deltas (prior=gamma) to the
    crawl's sums in Redis (revisit_record.lua, a real Redis; fields of rate_pool that
    the directory pool does not read); rate_moments() reads them back."""
    from ipr_crawl.ordering.urls import node_id
    from ipr_crawl.revisit.budget import RateMoments
    from ipr_crawl.revisit.policy import RevisitState, rate_counts

    store = _revisits(redis_client, crawl_id)
    assert store.rate_moments() == [0.0] * 5
    mom = RateMoments()
    for k, (url, m) in enumerate((("http://a.test/1", 1), ("http://a.test/2", 0), ("http://a.test/1", 2))):
        before = RevisitState(first=0.0, last=k * DAY, accesses=k + 1, m=max(0, m - 1)) if k else None
        after = RevisitState(first=0.0, last=(k + 10) * DAY, accesses=k + 2, m=m)
        delta = RateMoments.delta(rate_counts(before), rate_counts(after))
        mom.add(delta)
        store.record(node_id(url), url, after, 20 * DAY, moments=delta,
                     event={"url": url, "t": 0.0, "kind": "changed"})
    assert store.rate_moments() == pytest.approx(mom.sums, rel=1e-12)
    assert store.rate_pool() == {}  # the directory pool's reader skips them
    assert len(list(store.events("http://a.test/1"))) == 2  # the event still follows the moments in ARGV


def _refresher(redis_client, crawl_id: str, policy: str):
    """A Refresher of crawl ``crawl_id`` under ``policy`` (IPR_REVISIT_POLICY), on the
    system clock, with an idle frontier: one process of the crawl, for its budget solve."""
    from scrapy.settings import Settings

    from ipr_crawl.config import RevisitConfig
    from ipr_crawl.scheduler.refresher import Refresher

    class Idle:
        def pending(self) -> int:
            return 0

    cfg = RevisitConfig.from_settings(Settings({"IPR_REVISIT_ENABLED": True, "IPR_REVISIT_POLICY": policy}))
    return Refresher(_revisits(redis_client, crawl_id), Idle(), cfg)


def test_one_process_fits_the_gamma_prior_and_the_others_read_it(redis_client, crawl_id):
    """Two processes of one crawl on the system clock (two Refreshers, one real Redis):
    the first to claim the period solves the budget and fits the prior from the sums
    in Redis; the other reads nu and the prior from meta instead of solving again.
    Before 100 changes nothing is fitted."""

    from ipr_crawl.ordering.urls import node_id
    from ipr_crawl.revisit.budget import RateHistogram, RateMoments, fit_gamma_prior
    from ipr_crawl.revisit.policy import RevisitState, estimated_rate, rate_counts
    from ipr_crawl.scheduler.refresher import Refresher

    def refresher() -> Refresher:
        return _refresher(redis_client, crawl_id, "harmonic:8/y:prior=gamma")

    store = _revisits(redis_client, crawl_id)

    def record(k: int, m: int) -> None:
        url = f"http://a.test/{k}"
        state = RevisitState(first=0.0, last=100 * DAY, accesses=11, m=m)
        a, b = RateHistogram().key(estimated_rate(state))
        store.record(node_id(url), url, state, 200 * DAY, rate_bins=("", f"{a}:{b}"),
                     moments=RateMoments.delta(rate_counts(None), rate_counts(state)))

    for k in range(10):
        record(k, 1)  # 10 changes seen in all: too few to fit
    first = refresher()
    assert first.solve_budget() is not None and first.cfg.policy.multiplier.prior is None
    for k in range(10, 60):
        record(k, 10 if k % 2 else 0)  # half the URLs change in every interval, half never
    redis_client.delete(store.keys["meta"] + "_budget_lock")  # the next period
    first, second = refresher(), refresher()
    nu = first.solve_budget()
    prior = first.cfg.policy.multiplier.prior
    assert nu is not None and prior == pytest.approx(fit_gamma_prior(store.rate_moments()))
    assert prior[0] < 1  # rates far apart
    assert second.solve_budget() == nu and second.cfg.policy.multiplier.prior == pytest.approx(prior)


def test_new_url_rate_is_learned_in_redis_and_shared_by_the_refresher(redis_client, crawl_id):
    """harmonic:…:new=learn on a real Redis: RevisitStore.record adds each explored first
    revisit to the crawl's counts (revisit_record.lua, fields new:* of rate_pool; the
    change event still follows in ARGV); the process that solves the budget learns the
    rate of a URL fetched once from them once NEW_MIN_SAMPLES are in, and another
    process reads it from meta."""

    from ipr_crawl.ordering.urls import node_id
    from ipr_crawl.revisit.budget import NEW_MIN_SAMPLES, RateHistogram, new_url_rate
    from ipr_crawl.revisit.policy import RevisitState, estimated_rate
    from ipr_crawl.scheduler.refresher import Refresher

    def refresher() -> Refresher:
        return _refresher(redis_client, crawl_id, "harmonic:8/y:new=learn")

    store = _revisits(redis_client, crawl_id)
    assert store.new_url_counts() == (0.0, 0.0, 0.0)

    def record(k: int, changed: bool) -> None:
        url = f"http://a.test/{k}"
        state = RevisitState(first=0.0, last=3 * DAY, accesses=2, m=int(changed))
        a, b = RateHistogram().key(estimated_rate(state))
        store.record(node_id(url), url, state, 30 * DAY, rate_bins=("", f"{a}:{b}"), first=(changed, 3 * DAY),
                     event={"url": url, "t": 3 * DAY, "kind": "changed" if changed else "unchanged"})

    for k in range(NEW_MIN_SAMPLES - 5):
        record(k, k % 3 == 0)
    first = refresher()
    assert first.solve_budget() is not None and first.cfg.policy.multiplier.new_rate is None  # too few
    for k in range(NEW_MIN_SAMPLES - 5, 40):
        record(k, k % 3 == 0)
    n, x, e = store.new_url_counts()
    assert (n, x, e) == (40.0, 14.0, pytest.approx(40 * 3 * DAY))
    assert len(list(store.events("http://a.test/39"))) == 1
    redis_client.delete(store.keys["meta"] + "_budget_lock")  # the next period
    first, second = refresher(), refresher()
    nu = first.solve_budget()
    rate = first.cfg.policy.multiplier.new_rate
    assert nu is not None and rate == pytest.approx(new_url_rate(40, 14, 40 * 3 * DAY))
    assert second.solve_budget() == nu and second.cfg.policy.multiplier.new_rate == pytest.approx(rate)


def test_a_young_urls_weight_is_binned_from_its_state_in_redis(redis_client, crawl_id):
    """harmonic:…:new=learn:young=0.5 on a real Redis, through the crawl's observer: once
    a new-URL rate is learned, a URL's first three accesses keep it in the histogram's
    bin of its weight times the young factor (read back from its stored state), and its
    fourth moves it to the plain weight's bin, leaving no count behind."""
    from scrapy import Spider
    from scrapy.http import HtmlResponse, Request

    from ipr_crawl.ordering.urls import node_id
    from ipr_crawl.revisit.budget import YEAR, RateHistogram, young_factor
    from ipr_crawl.scheduler.revisits import RevisitObserver

    refresher = _refresher(redis_client, crawl_id, "harmonic:8/y:new=learn:young=0.5")
    policy = refresher.cfg.policy
    policy.multiplier.nu = policy.initial_nu()
    policy.multiplier.new_rate = 50 / YEAR  # as if learned (test above)
    factor = young_factor(50 / YEAR, 0.5)
    observer = RevisitObserver(refresher, refresher.cfg, Spider(name="t"))
    url = "http://a.test/young"
    bins = RateHistogram()
    for k in range(1, 5):
        body = f"<html><body>version {k}</body></html>".encode()
        request = Request(url)
        assert observer.observe(request, HtmlResponse(url, body=body, request=request)) is not None
        state = refresher.store.load(node_id(url))
        assert state is not None and state.accesses == k
        assert state.young == (pytest.approx(factor) if k <= 3 else 1.0)
        hist = refresher.store.rate_histogram()
        assert sum(hist.values()) == 1, hist
        (key,) = hist
        assert key[1] == bins.key(1.0, factor if k <= 3 else 1.0)[1], (k, key)
