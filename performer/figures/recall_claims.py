"""The claims the recall figure decides: the paper's, the later estimators' and, in Zoology's
setting, Based's; declared before the runs, decided by performer/verdicts.py."""

from performer import attention, verdicts
from performer.figures import claims as claims_lib
from performer.figures import recall_runs
from performer.figures.recall_runs import label, state_size

# A twentieth of exact's gain over the control: the smallest gap in recall we would call a
# different ability, declared before the runs; each row's MDE says whether 5 seeds resolve it.
DELTA_FRACTION = 0.05
# More seeds than a study's first ones only where they bring a claim's MDE under delta
# (verdicts.seeds_to_resolve), up to this many.
MOST_SEEDS = 5


def _declared(rows, reference):
  """[(id, text, kind, a, b)] for the rows present ({row: runs}); `reference` is the m of the
  variant rows. Based's and Zoology's claims only where every run has their short convolution
  (ModelConfig.conv_kernel): they are claims about that setting."""
  favor = f"favor_m{reference}"
  ms = sorted(int(r.removeprefix("favor_m")) for r in rows if r.startswith("favor_m"))
  out = [(f"FAVOR+ m={m} matches exact", "FAVOR+ softmax attention matches exact attention "
          "(Sec. 4, Fig. 6: 'nearly identical')", "matches", f"favor_m{m}", "exact") for m in ms]
  out += [("no redraw worse than redraw", "without redrawing, training degrades (Sec. 4.2, "
           "App. D.2)", "worse", "favor_no_redraw", favor),
          ("trig worse than positive", "trigonometric features train unstably; positive ones "
           "do not (Sec. 4.2, Fig. 5)", "worse", "trig", favor),
          ("iid worse than orthogonal", "orthogonal features (ORF) lower the error, which "
           "helps training (Sec. 3, Fig. 4)", "worse", "favor_iid", favor),
          ("ReLU matches FAVOR+", "generalized ReLU attention is as good as softmax (Table 2)",
           "matches", "relu", favor),
          # After the paper: estimators of lower kernel variance (favor/exponential.py).
          ("FAVOR++ better than FAVOR+", "GERF's lower kernel variance gives better attention "
           "(Likhosherstov et al. 2022)", "better", "favorpp", favor),
          ("FAVOR# better than FAVOR+", "SADERF's lower kernel variance gives better attention "
           "(Likhosherstov et al. 2023)", "better", "favorsharp", favor),
          ("simplex better than orthogonal", "simplex features lower the kernel's error below "
           "orthogonal ones (Reid et al. 2023)", "better", "simplex", favor)]
  runs = [run for group in rows.values() for run in group]
  if runs and all(run.config["model"].get("conv_kernel") for run in runs):
    out.append(("Taylor matches exact", "Based's Taylor map recalls as softmax attention does "
                "(Arora et al. 2024, Fig. 3: Taylor 80-99%)", "matches", "taylor", "exact"))
    for row, name in (("elu_plus_one", "elu+1"), ("relu_deterministic", "deterministic ReLU")):
      same = _same_state(rows, row, ms)
      if same:
        out.append((f"{name} better than FAVOR+ m={same} (same state)", f"{name} is on the "
                    "recall-state frontier, above a Performer of the same state (Arora et al. "
                    "2024, Fig. 3, elu+1 as PosELU: ReLU 24-98%, 'Performer' 0-3%)", "better", row,
                    f"favor_m{same}"))
  return [c for c in out if c[3] in rows and c[4] in rows]


def _same_state(rows, row, ms):
  """The m of the FAVOR+ row whose attention state equals `row`'s, or None."""
  if row not in rows:
    return None
  size = state_size(rows[row][0])
  return next((m for m in ms if state_size(rows[f"favor_m{m}"][0]) == size), None)


def reference(rows):
  """The m of the variant rows (their num_features), or None without them."""
  for row in ("favor_no_redraw", "trig", "favor_iid", "relu", "favorpp", "favorsharp"):
    if row in rows:
      return attention.options(rows[row][0].attention, rows[row][0].config["model"].get(
          "attention_options"))["num_features"]
  return None


def decide(task, rows, *, bootstrap=verdicts.BOOTSTRAP):
  """(verdicts, gate or None, more seeds) of one task's declared claims.

  Seeds are paired: a claim compares the seeds its two rows share (a row
  with more seeds, which another claim asked for, gives only those), and
  falls back to unpaired groups where they share fewer than two.

  More seeds: [{"claim", "rows": [a, b], "seeds"}] for each inconclusive
  claim whose MDE more seeds of both rows (paired, at most MOST_SEEDS) would
  bring under its delta (verdicts.seeds_to_resolve): the runs worth adding
  (plans/recall.py reads them).
  """
  gate = None
  if "exact" in rows and "identity" in rows:
    (exact, _), (control, _) = (claims_lib.replicates(rows[r]) for r in ("exact", "identity"))
    if exact is not None and control is not None:
      gate = verdicts.gate("U", exact, control, bootstrap=bootstrap)
  delta = DELTA_FRACTION * gate.evidence.diff if gate and gate.evidence.diff > 0 else 1.0
  declared = _declared(rows, reference(rows))
  claims, evidence, notes, groups = [], {}, {}, {}
  for cid, text, kind, a, b in declared:
    claims.append(verdicts.Claim(id=cid, text=text, kind=kind, a=a, b=b, metric="accuracy",
                                 split="test", delta=delta, family=task,
                                 delta_source=f"{DELTA_FRACTION:g} x exact's gain over identity",
                                 direction="U" if gate else None))
    (runs_a, runs_b), pairs = claims_lib.paired_runs(rows, a, b)
    (ra, why_a), (rb, why_b) = claims_lib.replicates(runs_a), claims_lib.replicates(runs_b)
    if ra is None or rb is None:
      notes[cid] = why_a or why_b
    elif len({recall_runs.planned(r) for r in runs_a + runs_b}) != 1:
      notes[cid] = f"{label(a)} and {label(b)} were evaluated at different steps"
    else:
      groups[cid] = (ra, rb, pairs)
      evidence[cid] = verdicts.estimate(ra, rb, bootstrap=bootstrap, paired_seeds=pairs)
  if gate is None:
    notes = {c.id: "needs exact and identity runs with per-sequence test evals" for c in claims}
  decided = [v if v.claim.id not in notes else verdicts.Verdict(v.claim, verdicts.NOT_TESTED,
                                                                notes[v.claim.id])
             for v in verdicts.decide(claims, evidence, {"U": gate} if gate else {})]
  more = []
  for v in decided:
    if v.verdict == verdicts.INCONCLUSIVE and v.claim.id in evidence:
      a, b, pairs = groups[v.claim.id]
      n = verdicts.seeds_to_resolve(v.claim, a, b, v.evidence, MOST_SEEDS, paired_seeds=pairs)
      if n:
        more.append({"claim": v.claim.id, "rows": [v.claim.a, v.claim.b], "seeds": n})
  return decided, gate, more


def more_note(task, more):
  """The claims table's line on the seeds that would resolve an inconclusive claim."""
  wanted = "; ".join(f"{m['claim']}: {m['seeds']}" for m in more) or "none"
  return (f"{task}: seeds per row (at most {MOST_SEEDS}, both rows of a claim) that would bring "
          f"an inconclusive claim's MDE under its delta (verdicts.seeds_to_resolve, seeds "
          f"paired): {wanted}")
