"""Verdicts on the paper's claims: one pre-declared statistical rule for every table and figure.

Evidence: the seed-to-seed variance (Welch t) plus a paired bootstrap over the test sequences."""

import dataclasses
import math

import numpy as np
from scipy import stats

ALPHA = 0.05
POWER = 0.8
KINDS = ("matches", "better", "worse")
REPRODUCED, CONTRADICTED, INCONCLUSIVE = "reproduced", "contradicted", "inconclusive"
NOT_TESTABLE, NOT_TESTED = "not testable at this scale", "not tested"
GATE_FACTOR = 3.0  # exact must beat the control by this many MDEs for attention claims to count
BOOTSTRAP = 2000


@dataclasses.dataclass(frozen=True)
class Claim:
  """A claim of the paper, declared before its runs.

  Attributes:
    id: short name, e.g. "T2-U-softmax".
    text: the claim as the paper makes it (with its source).
    kind: "matches" (|a - b| < delta), "better" (a > b), "worse" (a < b).
    a, b: the compared groups (labels of `Replicates` the caller gathers).
    metric: e.g. "accuracy" (a fraction; differences in the same unit).
    split: "test" or "ood".
    delta: the margin, in the metric's unit: what "the same" means for
      matches. better / worse are decided on difference 0 alone (delta does
      not enter the decision); for them delta sizes the design (the MDE
      it is compared with, `seeds_needed`) and is shown beside the verdict.
    delta_source: where delta comes from (the paper's own gap, a fraction of
      what exact attention gains over the control, ...).
    family: the claims corrected together (Holm), e.g. "table2".
    direction: "U" or "B": which scale gate applies (None: no gate).
  """
  id: str
  text: str
  kind: str
  a: str
  b: str
  metric: str
  split: str
  delta: float
  delta_source: str
  family: str
  direction: str | None = None

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f"claim {self.id}: kind {self.kind!r} is not one of {KINDS}")
    if not self.delta > 0:
      raise ValueError(f"claim {self.id}: delta must be > 0, got {self.delta}")


@dataclasses.dataclass(frozen=True)
class Replicates:
  """One group's seeds on one split, as per-sequence sums of `performer eval`.

  correct, tokens: [seeds, sequences] float: correctly predicted and scored
    tokens of each test sequence (the same sequences, in the same order, for
    every group compared with this one).
  """
  correct: np.ndarray
  tokens: np.ndarray

  def __post_init__(self):
    correct, tokens = np.asarray(self.correct, float), np.asarray(self.tokens, float)
    if correct.ndim != 2 or correct.shape != tokens.shape:
      raise ValueError(f"correct {correct.shape} and tokens {tokens.shape} must both be "
                       "[seeds, sequences]")
    if not (np.all(tokens >= 0) and np.all((correct >= 0) & (correct <= tokens))):
      raise ValueError("per-sequence sums need 0 <= correct <= tokens")
    if np.any(tokens.sum(axis=1) == 0):
      raise ValueError("a seed scored no tokens")
    object.__setattr__(self, "correct", correct)
    object.__setattr__(self, "tokens", tokens)

  @property
  def seeds(self):
    return self.correct.shape[0]

  def accuracy(self, index=None):
    """[seeds] accuracy of each seed over all sequences, or [seeds, ...] over the sequences
    `index` [..., n] (resamples)."""
    if index is None:
      return self.correct.sum(axis=1) / self.tokens.sum(axis=1)
    return self.correct[:, index].sum(axis=-1) / self.tokens[:, index].sum(axis=-1)


@dataclasses.dataclass(frozen=True)
class Evidence:
  """The difference mean(a) - mean(b) of two groups and its uncertainty.

  se_seed, se_test: standard errors from the seeds and from the test set;
  se: their combination; df: degrees of freedom of the t reference (inf when
  the seed part is absent).
  """
  diff: float
  se_seed: float
  se_test: float
  df: float
  seeds: tuple

  @property
  def se(self):
    return math.hypot(self.se_seed, self.se_test)

  def interval(self, level=0.95):
    half = stats.t.ppf(0.5 + level / 2, self.df) * self.se
    return self.diff - half, self.diff + half

  def mde(self, alpha=ALPHA, power=POWER):
    """The true difference a two-sided `alpha` test detects with `power` here."""
    return (stats.t.ppf(1 - alpha / 2, self.df) + stats.t.ppf(power, self.df)) * self.se


def estimate(a, b, *, bootstrap=BOOTSTRAP, seed=0, paired_seeds=False):
  """Evidence for mean accuracy of `a` minus that of `b` (Replicates on the same sequences).

  paired_seeds: seed j of `a` and of `b` share what a seed draws (the same
  initialisation stream, data order and first features; the recall study's
  rows): the seed part is then a t interval over the n differences (df =
  n - 1), which removes the variance the pair shares.

  Raises:
    ValueError: the groups were scored on different numbers of sequences, or
      paired_seeds with different numbers of seeds.
  """
  if a.correct.shape[1] != b.correct.shape[1]:
    raise ValueError(f"paired groups need the same sequences: {a.correct.shape[1]} vs "
                     f"{b.correct.shape[1]}")
  acc_a, acc_b = a.accuracy(), b.accuracy()
  diff = float(acc_a.mean() - acc_b.mean())
  if paired_seeds:
    if acc_a.size != acc_b.size:
      raise ValueError(f"paired seeds need as many seeds in each group: {acc_a.size} vs "
                       f"{acc_b.size}")
    n = acc_a.size
    seed_var = float((acc_a - acc_b).var(ddof=1) / n) if n > 1 else math.nan
    df = float(n - 1) if n > 1 else math.nan
  else:
    parts = [acc.var(ddof=1) / acc.size for acc in (acc_a, acc_b) if acc.size > 1]
    seed_var = sum(parts) if len(parts) == 2 else math.nan
    if len(parts) == 2 and seed_var > 0:  # Welch-Satterthwaite
      df = seed_var ** 2 / sum(p ** 2 / (acc.size - 1) for p, acc in zip(parts, (acc_a, acc_b)))
    else:
      df = math.inf if len(parts) == 2 else math.nan
  se_test = _bootstrap_se(lambda index: a.accuracy(index).mean(axis=0) -
                          b.accuracy(index).mean(axis=0), a.correct.shape[1], bootstrap, seed)
  return Evidence(diff=diff, se_seed=math.sqrt(seed_var) if seed_var == seed_var else math.nan,
                  se_test=se_test, df=df, seeds=(a.seeds, b.seeds))


def level(a, *, bootstrap=BOOTSTRAP, seed=0):
  """Evidence for the mean accuracy of one group (in `diff`), as `estimate` gives a difference:
  a t interval over its seeds (df = seeds - 1) plus a bootstrap over the test sequences.

  A group of one seed has no seed part (se_seed and df NaN: no interval).
  """
  acc = a.accuracy()
  n = acc.size
  se_test = _bootstrap_se(lambda index: a.accuracy(index).mean(axis=0), a.correct.shape[1],
                          bootstrap, seed)
  return Evidence(diff=float(acc.mean()),
                  se_seed=float(acc.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan,
                  se_test=se_test, df=float(n - 1) if n > 1 else math.nan, seeds=(n,))


def _bootstrap_se(statistic, n, bootstrap, seed):
  """The standard deviation of statistic(index [resamples, n]) -> [resamples] over `bootstrap`
  resamples of the n test sequences."""
  rng = np.random.default_rng(seed)
  draws = []
  for start in range(0, bootstrap, 64):  # 64 resamples at a time: [seeds, 64, n] in memory
    draws.append(statistic(rng.integers(0, n, (min(64, bootstrap - start), n))))
  return float(np.concatenate(draws).std(ddof=1))


def projected(a, b, evidence, seeds, *, paired_seeds=False):
  """The Evidence that `seeds` replicates per group would give, from what `a` and `b` show now.

  Each group's seed variance is kept as measured and divided by `seeds`
  (paired_seeds, as in `estimate`: the variance of the per-seed differences,
  df = seeds - 1); the test set's part is kept as measured (more seeds of the
  same models are scored on the same sequences, so it shrinks little: the
  projection errs towards too many seeds, not too few). The difference stays
  as measured: it only says how precise a design would be, not what it would
  find.

  Raises:
    ValueError: a group has fewer than two seeds (no variance to project), or
      paired_seeds with different numbers of seeds.
  """
  if min(a.seeds, b.seeds) < 2:
    raise ValueError(f"a projection needs >= 2 seeds per group, has {a.seeds} and {b.seeds}")
  if paired_seeds:
    if a.seeds != b.seeds:
      raise ValueError(f"paired seeds need as many seeds in each group: {a.seeds} vs {b.seeds}")
    seed_var = float((a.accuracy() - b.accuracy()).var(ddof=1) / seeds)
    df = float(seeds - 1)
  else:
    parts = [acc.var(ddof=1) / seeds for acc in (a.accuracy(), b.accuracy())]
    seed_var = sum(parts)
    df = seed_var ** 2 / sum(p ** 2 / (seeds - 1) for p in parts) if seed_var > 0 else math.inf
  return Evidence(diff=evidence.diff, se_seed=math.sqrt(seed_var), se_test=evidence.se_test,
                  df=df, seeds=(seeds, seeds))


def seeds_to_resolve(claim, a, b, evidence, most, *, paired_seeds=False, alpha=ALPHA):
  """The fewest seeds per group, more than now and at most `most`, at which the design's MDE
  at level `alpha` would fall below the claim's delta; None where it is below already or stays
  above.

  This is the rule for spending more runs on a claim: only where more seeds
  can make a difference of delta visible (see `projected`; paired_seeds as
  there). `alpha` is the level the claim will be tested at: studies declared
  from 2026-12-07 pass `holm_level` (docs/ARCHITECTURE.md, "More seeds"),
  earlier ones kept the unadjusted ALPHA they declared.
  """
  if min(a.seeds, b.seeds) < 2 or evidence.mde(alpha) < claim.delta:
    return None
  return seeds_for(a, b, evidence, claim.delta, most, paired_seeds=paired_seeds, alpha=alpha,
                   start=max(a.seeds, b.seeds) + 1)


def seeds_for(a, b, evidence, effect, most, *, paired_seeds=False, alpha=ALPHA, start=2):
  """The fewest seeds per group in start..most whose projected MDE at level `alpha` is under
  `effect` (a difference, in the metric's unit), or None: the size of a design that detects
  `effect` with POWER (`projected`; paired_seeds as there).

  Raises:
    ValueError: as `projected`.
  """
  for n in range(max(start, 2), most + 1):
    if projected(a, b, evidence, n, paired_seeds=paired_seeds).mde(alpha) < effect:
      return n
  return None


def holm_level(decided, claim, alpha=ALPHA):
  """The level Holm's step-down compares `claim`'s p-value with at its next step: alpha over
  the claims of its family (`decide`'s testable ones, those with p_adjusted) not yet rejected.
  Before any run (no claim rejected) it is alpha / the family's size.

  decided: the `decide` verdicts of the family (others are ignored).
  """
  family = [v for v in decided if v.claim.family == claim.family and v.p_adjusted is not None]
  rejected = sum(v.p_adjusted < alpha for v in family)
  return alpha / max(1, len(family) - rejected)


def paired(a, b):
  """Evidence for mean(a) - mean(b) from replicates paired one to one (a[j] and b[j] share
  draw j, e.g. of the random features W): a t interval over the n differences, df = n - 1.

  There is no test-set term: use it where the evaluation set is fixed and its sampling error
  is not the question (Fig. 14's probe: how FAVOR's error moves through the layers of one
  model on one set of sequences), and say so beside the verdict.

  Raises:
    ValueError: a and b differ in length or have fewer than 2 replicates.
  """
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  if a.shape != b.shape or a.ndim != 1 or len(a) < 2:
    raise ValueError(f"paired replicates need two equal 1-d arrays of >= 2, got {a.shape} and "
                     f"{b.shape}")
  d = a - b
  return Evidence(diff=float(d.mean()), se_seed=float(d.std(ddof=1) / math.sqrt(len(d))),
                  se_test=0.0, df=float(len(d) - 1), seeds=(len(a), len(b)))


def p_value(claim, evidence):
  """The p-value of the claim's own test (before Holm): TOST for matches, two-sided otherwise."""
  if evidence.se == 0:  # replicates that agree exactly: the difference is known
    inside = abs(evidence.diff) < claim.delta
    return float(not inside) if claim.kind == "matches" else float(evidence.diff == 0)
  t = stats.t(evidence.df)
  if claim.kind == "matches":
    return float(max(t.sf((evidence.diff + claim.delta) / evidence.se),
                     t.cdf((evidence.diff - claim.delta) / evidence.se)))
  return float(2 * t.sf(abs(evidence.diff) / evidence.se))


def contrary_p_value(claim, evidence):
  """For matches: the p-value that |diff| > delta (the difference shown outside the margin)."""
  if evidence.se == 0:
    return float(abs(evidence.diff) <= claim.delta)
  t = stats.t(evidence.df)
  return float(min(t.sf((evidence.diff - claim.delta) / evidence.se),
                   t.cdf((evidence.diff + claim.delta) / evidence.se)))


def holm(p_values):
  """Holm-adjusted p-values (same order): step-down, monotone, capped at 1."""
  p = np.asarray(p_values, float)
  order = np.argsort(p)
  adjusted = np.empty_like(p)
  running = 0.0
  for rank, i in enumerate(order):
    running = max(running, min(1.0, (p.size - rank) * p[i]))
    adjusted[i] = running
  return adjusted


@dataclasses.dataclass(frozen=True)
class Gate:
  """The scale gate of one direction: exact attention against the identity control."""
  direction: str
  evidence: Evidence

  @property
  def passed(self):
    low, _ = self.evidence.interval()
    return bool(low > GATE_FACTOR * self.evidence.mde())


def gate(direction, exact, control, **kwargs):
  """The Gate of `direction` from the exact model's and the control's Replicates."""
  return Gate(direction, estimate(exact, control, **kwargs))


@dataclasses.dataclass(frozen=True)
class Verdict:
  claim: Claim
  verdict: str
  reason: str
  evidence: Evidence | None = None
  p_adjusted: float | None = None


def decide(claims, evidence, gates=None, *, alpha=ALPHA):
  """Verdicts for `claims` (one family or several), from {claim.id: Evidence}.

  gates: {direction: Gate}; a claim whose direction's gate failed is not
  testable at this scale. A claim without evidence is not tested; one whose
  evidence has no seed variance (fewer than two seeds in a group) is
  inconclusive. Holm's correction runs over the testable claims of each
  family.

  Returns:
    [Verdict] in the order of `claims`.
  """
  gates = gates or {}
  out = {}
  testable = []
  for claim in claims:
    ev = evidence.get(claim.id)
    gated = gates.get(claim.direction)
    if ev is None:
      out[claim.id] = Verdict(claim, NOT_TESTED, "no runs")
    elif gated is not None and not math.isfinite(gated.evidence.se):
      out[claim.id] = Verdict(claim, INCONCLUSIVE, (
          f"({claim.direction}) the scale gate needs >= 2 seeds of exact and of the control, has "
          f"{gated.evidence.seeds}"), ev)
    elif gated is not None and not gated.passed:
      low, _ = gated.evidence.interval()
      out[claim.id] = Verdict(claim, NOT_TESTABLE, (
          f"({claim.direction}) exact beats the identity control by {100 * gated.evidence.diff:.2f} "
          f"pp (95% low {100 * low:.2f}), under {GATE_FACTOR:g} x its MDE "
          f"{100 * gated.evidence.mde():.2f} pp"), ev)
    elif not math.isfinite(ev.se_seed):
      out[claim.id] = Verdict(claim, INCONCLUSIVE, f"seeds {ev.seeds}: needs >= 2 per group", ev)
    else:
      testable.append(claim)
  for family in dict.fromkeys(c.family for c in testable):
    mine = [c for c in testable if c.family == family]
    adjusted = holm([p_value(c, evidence[c.id]) for c in mine])
    contrary = holm([contrary_p_value(c, evidence[c.id]) if c.kind == "matches" else 1.0
                     for c in mine])
    for claim, p, q in zip(mine, adjusted, contrary):
      ev = evidence[claim.id]
      if claim.kind == "matches":
        verdict = REPRODUCED if p < alpha else CONTRADICTED if q < alpha else INCONCLUSIVE
        reason = f"TOST at +-{100 * claim.delta:.2f} pp: p = {p:.3g} (Holm)"
      else:
        sign = 1 if claim.kind == "better" else -1
        significant = p < alpha
        verdict = (INCONCLUSIVE if not significant
                   else REPRODUCED if sign * ev.diff > 0 else CONTRADICTED)
        reason = f"two-sided p = {p:.3g} (Holm)"
      out[claim.id] = Verdict(claim, verdict, reason, ev, float(p))
  return [out[c.id] for c in claims]


def row(v):
  """A table row of a Verdict: claim, difference (pp), 95% interval, MDE, delta, verdict."""
  ev = v.evidence
  pp = lambda x: f"{100 * x:+.2f}"
  cells = {"claim": v.claim.id, "kind": v.claim.kind, "delta (pp)": f"{100 * v.claim.delta:.2f}",
           "difference (pp)": "", "95% interval (pp)": "", "MDE (pp)": "", "seeds": "",
           "verdict": v.verdict, "why": v.reason}
  if ev is not None and math.isfinite(ev.se):
    low, high = ev.interval()
    cells.update({"difference (pp)": pp(ev.diff), "95% interval (pp)": f"{pp(low)} .. {pp(high)}",
                  "MDE (pp)": f"{100 * ev.mde():.2f}", "seeds": "/".join(map(str, ev.seeds))})
  return cells
