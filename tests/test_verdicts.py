"""The verdict rule on simulated experiments whose truth is known: its error rates, not anecdotes.

A simulated experiment: a population of sequences with their own difficulty;
a test set of N of them; each model has a true accuracy offset, each seed of
it a random offset (seed noise), and each (model, sequence) its own
deviation (what makes a test set's sample matter, paired across models).
The truth is the difference of the models' offsets.
"""

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

from performer import verdicts
from performer.verdicts import Claim, Replicates

N, TOKENS, SEEDS = 300, 150, 3
SEED_SD, SEQUENCE_SD = 0.002, 0.03  # 0.2 pp between seeds; 3 pp model-by-sequence deviations
DELTA = 0.02  # 2 pp: about 1.5 times the design's MDE (3 seeds, 300 sequences)
TRIALS = 200


def _experiment(rng, offsets, seeds=SEEDS, seed_sd=SEED_SD):
  """{name: Replicates} of models with true accuracy offsets `offsets` on one test set."""
  base = rng.beta(4, 20, size=N)  # difficulty of the drawn test sequences (mean ~17%)
  tokens = rng.integers(TOKENS // 2, 2 * TOKENS, size=N).astype(float)
  out = {}
  for name, offset in offsets.items():
    own = rng.normal(0, SEQUENCE_SD, size=N)  # this model's per-sequence deviation
    p = base + offset + own + rng.normal(0, seed_sd, size=(seeds, 1))
    correct = rng.binomial(np.broadcast_to(tokens, p.shape).astype(int), np.clip(p, 0, 1))
    out[name] = Replicates(correct, np.broadcast_to(tokens, p.shape))
  return out


def _claim(kind, delta=DELTA, **kw):
  return Claim(id=kw.pop("id", "c"), text="simulated", kind=kind, a="a", b="b",
               metric="accuracy", split="test", delta=delta, delta_source="simulation",
               family="sim", **kw)


def _rates(offset, kind, trials=TRIALS, seed=0):
  """Share of each verdict over `trials` simulated experiments with true difference `offset`."""
  rng = np.random.default_rng(seed)
  counts = {}
  for i in range(trials):
    groups = _experiment(rng, {"a": offset, "b": 0.0})
    ev = verdicts.estimate(groups["a"], groups["b"], bootstrap=200, seed=i)
    (v,) = verdicts.decide([_claim(kind)], {"c": ev})
    counts[v.verdict] = counts.get(v.verdict, 0) + 1
  return {k: n / trials for k, n in counts.items()}


# Monte Carlo slack: the standard error of a 5% rate over 200 trials is 1.5 points.
SLACK = 0.035


def test_equal_models_rarely_contradict_matches_or_prove_better():
  matches = _rates(0.0, "matches")
  assert matches.get(verdicts.CONTRADICTED, 0) <= 0.05 + SLACK, matches
  assert matches.get(verdicts.REPRODUCED, 0) >= 0.8, matches  # the design has the power for 2 pp
  better = _rates(0.0, "better", seed=1)
  assert better.get(verdicts.REPRODUCED, 0) <= 0.025 + SLACK, better  # one side of a 5% test
  assert better.get(verdicts.CONTRADICTED, 0) <= 0.025 + SLACK, better


def test_models_two_deltas_apart_are_not_called_matching_and_better_is_found():
  matches = _rates(2 * DELTA, "matches", seed=2)
  assert matches.get(verdicts.REPRODUCED, 0) <= 0.05 + SLACK, matches
  assert matches.get(verdicts.CONTRADICTED, 0) >= 0.5, matches
  better = _rates(2 * DELTA, "better", seed=3)
  assert better.get(verdicts.REPRODUCED, 0) >= 0.8, better
  worse = _rates(2 * DELTA, "worse", seed=4)
  assert worse.get(verdicts.CONTRADICTED, 0) >= 0.8 and worse.get(verdicts.REPRODUCED, 0) == 0


def test_the_interval_covers_the_true_difference_about_95_percent_of_the_time():
  rng = np.random.default_rng(5)
  covered, mdes = 0, []
  for i in range(TRIALS):
    groups = _experiment(rng, {"a": 0.004, "b": 0.0})
    ev = verdicts.estimate(groups["a"], groups["b"], bootstrap=200, seed=i)
    low, high = ev.interval()
    covered += low <= 0.004 <= high
    mdes.append(ev.mde())
  assert 0.95 - SLACK <= covered / TRIALS <= 1.0
  assert 0.002 < np.median(mdes) < DELTA  # the design can see a 2 pp difference


def test_the_gate_fails_without_signal_and_passes_with_it():
  rng = np.random.default_rng(6)
  passed = []
  for gain in (0.0, 0.1):  # no signal; 10 pp, about 7 MDEs
    hits = 0
    for i in range(100):
      groups = _experiment(rng, {"exact": gain, "identity": 0.0})
      hits += verdicts.gate("U", groups["exact"], groups["identity"], bootstrap=200, seed=i).passed
    passed.append(hits / 100)
  assert passed[0] <= 0.05 and passed[1] >= 0.95, passed


def test_a_failed_gate_makes_attention_claims_not_testable_whatever_the_difference():
  rng = np.random.default_rng(7)
  groups = _experiment(rng, {"a": 0.05, "b": 0.0, "exact": 0.0, "identity": 0.0})
  gate = verdicts.gate("U", groups["exact"], groups["identity"], bootstrap=200)
  claims = [_claim("better", id="x", direction="U"), _claim("better", id="y", direction="B")]
  ev = verdicts.estimate(groups["a"], groups["b"], bootstrap=200)
  got = verdicts.decide(claims, {"x": ev, "y": ev}, {"U": gate})
  assert [v.verdict for v in got] == [verdicts.NOT_TESTABLE, verdicts.REPRODUCED]
  assert "identity control" in got[0].reason


def test_one_seed_is_inconclusive_and_a_missing_claim_not_tested():
  rng = np.random.default_rng(8)
  single = _experiment(rng, {"a": 0.05, "b": 0.0}, seeds=1)
  ev = verdicts.estimate(single["a"], single["b"], bootstrap=50)
  assert math.isnan(ev.se_seed) and ev.se_test > 0
  got = verdicts.decide([_claim("better", id="x"), _claim("better", id="z")], {"x": ev})
  assert [v.verdict for v in got] == [verdicts.INCONCLUSIVE, verdicts.NOT_TESTED]
  assert verdicts.row(got[0])["difference (pp)"] == ""  # no interval without seed variance


def test_holm_adjusts_step_down_and_stays_monotone():
  np.testing.assert_allclose(verdicts.holm([0.01, 0.04, 0.03]), [0.03, 0.06, 0.06])
  np.testing.assert_allclose(verdicts.holm([0.5, 0.001]), [0.5, 0.002])


def test_tost_and_the_two_sided_p_values_against_closed_forms():
  ev = verdicts.Evidence(diff=0.002, se_seed=0.003, se_test=0.004, df=math.inf, seeds=(3, 3))
  assert ev.se == pytest.approx(0.005)
  from scipy.stats import norm  # pylint: disable=import-outside-toplevel
  assert verdicts.p_value(_claim("matches", delta=0.01), ev) == pytest.approx(
      norm.sf((0.01 - 0.002) / 0.005))
  assert verdicts.p_value(_claim("better"), ev) == pytest.approx(2 * norm.sf(0.002 / 0.005))
  assert ev.mde() == pytest.approx((norm.ppf(0.975) + norm.ppf(0.8)) * 0.005)
  low, high = ev.interval()
  assert (low, high) == pytest.approx((0.002 - 1.959964 * 0.005, 0.002 + 1.959964 * 0.005))


def test_bad_claims_and_replicates_are_refused():
  with pytest.raises(ValueError, match="kind 'equal'"):
    _claim("equal")
  with pytest.raises(ValueError, match="delta must be > 0"):
    _claim("matches", delta=0)
  with pytest.raises(ValueError, match="0 <= correct <= tokens"):
    Replicates([[3.0]], [[2.0]])
  with pytest.raises(ValueError, match="same sequences"):
    verdicts.estimate(Replicates([[1.0, 1.0]], [[2.0, 2.0]]), Replicates([[1.0]], [[2.0]]))


def test_a_gate_without_seed_variance_leaves_its_claims_inconclusive():
  rng = np.random.default_rng(9)
  groups = _experiment(rng, {"exact": 0.2, "identity": 0.0, "a": 0.0, "b": 0.0}, seeds=1)
  gate = verdicts.gate("U", groups["exact"], groups["identity"], bootstrap=50)
  two = _experiment(rng, {"a": 0.0, "b": 0.0})
  ev = verdicts.estimate(two["a"], two["b"], bootstrap=50)
  (v,) = verdicts.decide([_claim("matches", id="x", direction="U")], {"x": ev}, {"U": gate})
  assert v.verdict == verdicts.INCONCLUSIVE and "needs >= 2 seeds" in v.reason


def test_paired_draws_keep_the_false_positive_rate_and_find_a_real_change():
  # Fig. 14's design: 5 draws, each giving both layers; a shared per-draw offset cancels.
  rng = np.random.default_rng(7)
  claim = Claim(id="c", text="", kind="better", a="deep", b="shallow", metric="error",
                split="test", delta=0.01, delta_source="", family="f14")
  def verdict(shift):
    offset = rng.normal(0, 0.1, 5)  # the draw's own luck, in both layers
    a, b = 0.4 + shift + offset + rng.normal(0, 0.01, 5), 0.4 + offset + rng.normal(0, 0.01, 5)
    ev = verdicts.paired(a, b)
    return verdicts.decide([claim], {"c": ev})[0].verdict
  equal = [verdict(0.0) for _ in range(1000)]
  assert equal.count(verdicts.INCONCLUSIVE) / 1000 > 0.93  # the 5% two-sided level
  apart = [verdict(0.05) for _ in range(300)]  # 5 noise sd of a difference: always found
  assert apart.count(verdicts.REPRODUCED) / 300 > 0.95
  ev = verdicts.paired([1.0, 2.0, 3.0], [0.5, 1.0, 2.0])
  assert ev.diff == pytest.approx(2.5 / 3) and ev.df == 2 and ev.se_test == 0
  assert ev.se_seed == pytest.approx(np.std([0.5, 1.0, 1.0], ddof=1) / math.sqrt(3))
  with pytest.raises(ValueError, match="two equal 1-d arrays"):
    verdicts.paired([1.0], [2.0])


def _shared_seed_luck(rng, shift, seeds=5, luck_sd=0.05, n=3000):
  """Two rows whose seed j shares one luck (init, data order, first W), a offset by `shift`:
  the recall study's design (3,000 test examples of 4 queries)."""
  tokens = np.full((seeds, n), 4.0)
  luck = rng.normal(0, luck_sd, (seeds, 1))
  base = rng.uniform(0.4, 0.8, n)
  make = lambda offset: Replicates(rng.binomial(4, np.clip(base + offset + luck, 0, 1)), tokens)
  return make(shift), make(0.0)


def test_paired_seeds_remove_the_luck_rows_share_and_keep_the_error_rate():
  rng = np.random.default_rng(8)
  claim = _claim("better", delta=0.01)
  def rate(shift, paired, trials=100):
    found = 0
    for i in range(trials):
      a, b = _shared_seed_luck(rng, shift)
      ev = verdicts.estimate(a, b, bootstrap=100, seed=i, paired_seeds=paired)
      found += verdicts.decide([claim], {"c": ev})[0].verdict == verdicts.REPRODUCED
    return found / trials
  assert rate(0.0, paired=True) <= 0.025 + SLACK  # equal rows: one side of a 5% test
  assert rate(0.03, paired=True) >= 0.9  # 3 pp under 5 pp of shared seed luck: found paired
  assert rate(0.03, paired=False) <= 0.5  # and mostly lost when the pairing is ignored
  a, b = _shared_seed_luck(rng, 0.0, seeds=3)
  ev = verdicts.estimate(a, b, paired_seeds=True, bootstrap=10)
  assert ev.df == 2 and ev.se_seed == pytest.approx(
      np.std(a.accuracy() - b.accuracy(), ddof=1) / math.sqrt(3))
  with pytest.raises(ValueError, match="as many seeds"):
    verdicts.estimate(a, _shared_seed_luck(rng, 0.0, seeds=2)[0], paired_seeds=True)


def test_the_seed_projection_predicts_the_mde_that_more_seeds_then_have():
  # Seed noise dominant (1 pp between seeds): 3 seeds cannot see 2 pp, more can.
  rng = np.random.default_rng(10)
  noisy = lambda seeds: _experiment(rng, {"a": 0.0, "b": 0.0}, seeds=seeds, seed_sd=0.01)
  claim = _claim("matches", delta=0.02)
  wanted, projected = [], []
  for i in range(40):
    g = noisy(3)
    ev = verdicts.estimate(g["a"], g["b"], bootstrap=100, seed=i)
    n = verdicts.seeds_to_resolve(claim, g["a"], g["b"], ev, most=12)
    wanted.append(n)
    projected.append(verdicts.projected(g["a"], g["b"], ev, 8).mde())
  assert all(n is None or 4 <= n <= 12 for n in wanted) and sum(n is not None for n in wanted) > 20
  actual = []
  for i in range(40):
    g = noisy(8)
    actual.append(verdicts.estimate(g["a"], g["b"], bootstrap=100, seed=i).mde())
  # The projection from 3 seeds lands near what 8 seeds then show (its median within 20%).
  assert np.median(projected) == pytest.approx(np.median(actual), rel=0.2)
  assert np.median(actual) < claim.delta < np.median(
      [verdicts.estimate(*noisy(3).values(), bootstrap=100).mde() for _ in range(20)])
  # Already below delta, or one seed only: nothing to add.
  quiet = _experiment(rng, {"a": 0.0, "b": 0.0})
  ev = verdicts.estimate(quiet["a"], quiet["b"], bootstrap=100)
  assert verdicts.seeds_to_resolve(claim, quiet["a"], quiet["b"], ev, most=12) is None
  single = _experiment(rng, {"a": 0.0, "b": 0.0}, seeds=1)
  ev = verdicts.estimate(single["a"], single["b"], bootstrap=50)
  assert verdicts.seeds_to_resolve(claim, single["a"], single["b"], ev, most=12) is None
  with pytest.raises(ValueError, match=">= 2 seeds"):
    verdicts.projected(single["a"], single["b"], ev, 5)


def test_the_paired_projection_keeps_only_the_variance_the_pair_does_not_share():
  rng = np.random.default_rng(11)
  claim = _claim("matches", delta=0.02)
  a, b = _shared_seed_luck(rng, 0.0, seeds=3)  # 5 pp of luck shared by seed j of both rows
  ev = verdicts.estimate(a, b, bootstrap=100, paired_seeds=True)
  p = verdicts.projected(a, b, ev, 5, paired_seeds=True)
  assert p.df == 4 and p.se_seed == pytest.approx(
      np.std(a.accuracy() - b.accuracy(), ddof=1) / math.sqrt(5))
  assert p.se_test == ev.se_test and p.diff == ev.diff
  # Unpaired, the shared luck stays in each group's variance: 5 seeds cannot resolve 2 pp.
  unpaired = verdicts.estimate(a, b, bootstrap=100)
  assert verdicts.projected(a, b, unpaired, 5).mde() > claim.delta
  assert verdicts.seeds_to_resolve(claim, a, b, unpaired, most=5) is None
  # What 5 paired seeds then show is near the projection (the same rows, 2 more seeds).
  actual = [verdicts.estimate(*_shared_seed_luck(rng, 0.0, seeds=5), bootstrap=100,
                              paired_seeds=True).mde() for _ in range(20)]
  projections = [verdicts.projected(*g, verdicts.estimate(*g, bootstrap=100, paired_seeds=True),
                                    5, paired_seeds=True).mde()
                 for g in (_shared_seed_luck(rng, 0.0, seeds=3) for _ in range(20))]
  assert np.median(projections) == pytest.approx(np.median(actual), rel=0.3)
  with pytest.raises(ValueError, match="as many seeds"):
    verdicts.projected(a, _shared_seed_luck(rng, 0.0, seeds=2)[0], ev, 5, paired_seeds=True)


def test_a_groups_level_has_its_seeds_t_interval_and_the_test_sets_binomial_error():
  rng = np.random.default_rng(12)
  seeds, n, p = 4, 3000, 0.6
  group = Replicates(rng.binomial(4, p, (seeds, n)), np.full((seeds, n), 4.0))
  ev = verdicts.level(group, bootstrap=1000)
  acc = group.accuracy()
  assert ev.diff == pytest.approx(acc.mean()) and ev.df == seeds - 1
  assert ev.se_seed == pytest.approx(acc.std(ddof=1) / math.sqrt(seeds))
  # Resampling sequences moves the mean over 4 independent seeds by sqrt(p (1 - p) / (4 S n)).
  assert ev.se_test == pytest.approx(math.sqrt(p * (1 - p) / (4 * seeds * n)), rel=0.1)
  low, high = ev.interval()
  assert high - low == pytest.approx(2 * stats.t.ppf(0.975, seeds - 1) * ev.se)
  one = verdicts.level(Replicates(group.correct[:1], group.tokens[:1]), bootstrap=100)
  assert math.isnan(one.se_seed) and math.isnan(one.interval()[0])


def test_holm_level_is_alpha_over_the_family_claims_not_yet_rejected():
  claims = [_claim("better", id=f"c{i}") for i in range(4)]
  other = dataclasses.replace(_claim("better", id="o"), family="elsewhere")
  ev = verdicts.Evidence(diff=0.01, se_seed=0.01, se_test=0.0, df=4, seeds=(5, 5))
  decided = [verdicts.Verdict(c, "x", "", ev, p) for c, p in zip(claims, (0.001, 0.03, 0.2, 1.0))]
  decided.append(verdicts.Verdict(other, "x", "", ev, 0.001))
  # Two of the family's four are rejected at 0.05: the next Holm step is 0.05 / 2.
  assert verdicts.holm_level(decided, claims[2]) == pytest.approx(0.025)
  assert verdicts.holm_level(decided, other) == pytest.approx(0.05)
  # Before any run (no verdicts with p-values): alpha / the family's size, as a design uses.
  untested = [verdicts.Verdict(c, verdicts.INCONCLUSIVE, "", ev, 1.0) for c in claims]
  assert verdicts.holm_level(untested, claims[0]) == pytest.approx(0.05 / 4)
  assert verdicts.holm_level([verdicts.Verdict(claims[0], verdicts.NOT_TESTED, "")],
                             claims[0]) == pytest.approx(0.05)


def test_seeds_at_the_holm_level_are_more_and_give_the_mde_the_level_needs():
  rng = np.random.default_rng(12)
  claim = _claim("better", delta=0.03)
  a, b = _shared_seed_luck(rng, 0.03, seeds=4, luck_sd=0.02)
  ev = verdicts.estimate(a, b, bootstrap=200, paired_seeds=True)
  level = 0.05 / 10
  plain = verdicts.seeds_to_resolve(claim, a, b, ev, 20, paired_seeds=True)
  holm = verdicts.seeds_to_resolve(claim, a, b, ev, 20, paired_seeds=True, alpha=level)
  assert holm is not None and (plain is None or holm > plain)
  # The MDE at the Holm level, (t_{1 - level/2} + t_{0.8}) * se at df = n - 1, falls under delta
  # at `holm` seeds and not one fewer (an independent closed form of projected().mde).
  def mde(n):
    se_seed = np.std(a.accuracy() - b.accuracy(), ddof=1) / math.sqrt(n)
    se = math.hypot(se_seed, ev.se_test)
    return (stats.t.ppf(1 - level / 2, n - 1) + stats.t.ppf(0.8, n - 1)) * se
  assert mde(holm) < claim.delta <= mde(holm - 1)
  # seeds_for sizes a design for any effect: a smaller effect needs more seeds, from 2 up.
  assert verdicts.seeds_for(a, b, ev, claim.delta, 20, paired_seeds=True, alpha=level,
                            start=5) == holm
  big, small = (verdicts.seeds_for(a, b, ev, e, 40, paired_seeds=True, alpha=level)
                for e in (0.06, 0.02))
  assert big is not None and small is not None and 2 <= big < small
  assert mde(small) < 0.02 <= mde(small - 1)
  assert verdicts.seeds_for(a, b, ev, 1e-6, 40, paired_seeds=True, alpha=level) is None
