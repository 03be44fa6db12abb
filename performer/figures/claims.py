"""The paper's protein claims decided on our runs by the verdict rule (performer/verdicts.py).

Claims are declared before any run (`CLAIMS`); margin, gate, grouping: docs/ARCHITECTURE.md."""

import dataclasses
import json
import os

import numpy as np

from performer import verdicts
from performer.atomic import atomic_path
from performer.figures import paper, runs
from performer.figures.tables import Column, csv_path, write_table

NAME = "claims"  # performer figure NAME
SUMMARY = "the paper's protein claims with verdicts, from run folders (--runs)"
READS = "runs"  # render(run folders, out)
TABLE = True

DELTA_FRACTION = 0.1
# More seeds than three only where they bring the MDE under delta (verdicts.seeds_to_resolve),
# up to this many: at five, the Fig. 6 runs' seed part of the error is down to about the test
# set's part (e.g. 0.013 and 0.013 pp, (B) softmax), which more seeds do not shrink.
MOST_SEEDS = 5
CONTROL = "Identity"
COLUMNS = (Column("family"), Column("claim"), Column("paper"), Column("difference (pp)"),
           Column("95% interval (pp)"), Column("MDE (pp)"), Column("delta (pp)"),
           Column("seeds"), Column("verdict"), Column("why"),
           Column("verdict with seeds paired (sensitivity)"))
# Sweep settings that are replicates, not models: pooled within a group.
REPLICATE_KEYS = ("seed", "feature_seed")
# Settings every Fig. 6 run records; a group's key is what a run records beyond them.
FIG6_KEYS = ("direction", "attention")


@dataclasses.dataclass(frozen=True)
class Declared:
  """A claim as declared before its runs: which groups it compares and how.

  a, b: (model label, settings) of the compared groups: the runs of that
    model in `direction` whose recorded settings, less FIG6_KEYS and
    REPLICATE_KEYS, equal `settings` ({} for Fig. 6 and runs trained by hand).
  family: the table whose claims Holm's correction runs over; a family is
    shown when a run of one of its compared models other than the scale
    gate's is given.
  """
  id: str
  text: str
  kind: str
  a: tuple
  b: tuple
  direction: str
  family: str


def _claims():
  """The declared claims of Table 2 / Fig. 6 and of the appendix figures that train models."""
  out = []
  for d in runs.DIRECTIONS:
    out.append(Declared(f"{d}: softmax matches Transformer", "Performer-softmax matches the "
                        "Transformer (Sec. 4.3; (B) 33.00 vs 33.32, Table 2)", "matches",
                        ("Performer-softmax", {}), ("Transformer", {}), d, "table2"))
    t, r = paper.TABLE2[(d, "Transformer")]["test"][0], paper.TABLE2[(d, "Performer-ReLU")]["test"][0]
    out.append(Declared(f"{d}: ReLU better than Transformer", f"Performer-ReLU is the best "
                        f"({r:.2f} vs {t:.2f}, Table 2)", "better", ("Performer-ReLU", {}),
                        ("Transformer", {}), d, "table2"))
  out.append(Declared("U: Reformer worse than Transformer", "Reformer drops in accuracy (Fig. 6)",
                      "worse", ("Reformer", {}), ("Transformer", {}), "U", "table2"))
  out.append(Declared("B: Linformer worse than Transformer", "Linformer drops in accuracy "
                      "(Fig. 6)", "worse", ("Linformer", {}), ("Transformer", {}), "B", "table2"))
  # Fig. 5 (Sec. 4.2): a trained Transformer's weights fine-tuned with other attention; the
  # paper's claims are about PG-19, tested here on the protein fine-tunes (fig5.py).
  tuned = lambda d, label, variant: (label, {"source": f"{d.lower()}_exact", "variant": variant})
  for d in runs.DIRECTIONS:
    out.append(Declared(f"{d}: fine-tuned positive matches continued Transformer",
                        "positive features with redrawing match the Transformer (Fig. 5)",
                        "matches", tuned(d, "Performer-softmax", "positive"),
                        tuned(d, "Transformer", "exact"), d, "fig5"))
  out.append(Declared("U: fine-tuned trig worse than positive", "trig features are unstable "
                      "(Fig. 5)", "worse", tuned("U", "Performer-softmax", "trig"),
                      tuned("U", "Performer-softmax", "positive"), "U", "fig5"))
  out.append(Declared("U: fine-tuned without redraw worse than with", "positive features "
                      "without redrawing plateau (Fig. 5)", "worse",
                      tuned("U", "Performer-softmax", "no_redraw"),
                      tuned("U", "Performer-softmax", "positive"), "U", "fig5"))
  out.append(Declared("U: fine-tuned SMREG better than positive", "SMREG converges faster "
                      "(Fig. 5; at a fixed number of steps)", "better",
                      tuned("U", "Performer-softmax", "smreg"),
                      tuned("U", "Performer-softmax", "positive"), "U", "fig5"))
  out.append(Declared("B: fine-tuned Linformer worse than positive", "Linformer plateaus "
                      "(Fig. 5)", "worse", tuned("B", "Linformer", "linformer"),
                      tuned("B", "Performer-softmax", "positive"), "B", "fig5"))
  # Fig. 15 (App. D.2): replicates are draws of W (feature_seed).
  out.append(Declared("U: without redraw worse than with", "without redrawing an unlucky draw "
                      "degrades training (Fig. 15)", "worse",
                      ("Performer-softmax", {"schedule": "no_redraw"}),
                      ("Performer-softmax", {"schedule": "redraw"}), "U", "fig15"))
  # Fig. 16 (App. D.3): the cosine (trig) kernel is the one the paper says fails (the runs are
  # the generalized attention backend, performer_relu, with kernel f).
  out.append(Declared("B: cosine kernel worse than ReLU", "trigonometric features lead to "
                      "unstable training, even NaN (App. D.3)", "worse",
                      ("Performer-ReLU", {"kernel": "trig"}),
                      ("Performer-ReLU", {"kernel": "relu"}), "B", "fig16"))
  # D.3's renormalization (declared 2026-12-07, before its runs): per bounded kernel, the model
  # without D^-1 against the same kernel with it; one family of its own, so the cosine claim
  # above keeps the Holm family it was decided in.
  for kernel in ("sigmoid", "relu", "abs", "gelu", "tanh", "identity"):  # plans/fig16.BOUNDED
    out.append(Declared(f"B: {kernel} without renormalization matches with", "disabling "
                        f"renormalization does not necessarily hurt accuracy (App. D.3; {kernel})",
                        "matches", ("Performer-ReLU", {"kernel": kernel, "renormalize": False}),
                        ("Performer-ReLU", {"kernel": kernel}), "B", "fig16_renormalize"))
  return out


CLAIMS = _claims()


def group_key(run):
  """(direction, label, settings beyond a Fig. 6 run's and the replicates', as JSON)."""
  rest = {k: v for k, v in run.settings.items() if k not in FIG6_KEYS + REPLICATE_KEYS}
  return run.direction, run.label, json.dumps(rest, sort_keys=True, default=str)


def groups(loaded):
  """{group_key: [runs]}: one group per model and setting, its replicates."""
  out = {}
  for run in loaded:
    out.setdefault(group_key(run), []).append(run)
  return out


def _side(direction, side):
  label, settings = side
  return direction, label, json.dumps(settings, sort_keys=True, default=str)


def paired_runs(rows, a, b):
  """(runs of row a, runs of row b) of {row: [runs]} on the seeds both rows have, and True; or
  all their runs and False where they share fewer than two seeds (then compared unpaired)."""
  shared = {r.seed for r in rows[a]} & {r.seed for r in rows[b]}
  pairs = len(shared) >= 2
  return tuple([r for r in rows[x] if r.seed in shared or not pairs] for x in (a, b)), pairs


def replicates(group, split="test"):
  """verdicts.Replicates of a group's runs, or (None, why) when they cannot be paired."""
  arrays = []
  for run in group:
    if run.failed:  # a NaN model: no numbers to pair, and the verdict says why
      return None, f"{run.name} {run.failed}"
    name = run.evals.get(split, {}).get("sequences_file")
    path = os.path.join(run.path, name) if name else None
    if not path or not os.path.isfile(path):
      return None, f"{run.name} has no per-sequence {split} eval (run performer eval again)"
    with np.load(path) as f:
      arrays.append((f["ids"], f["correct_sum"], f["tokens"]))
  ids = arrays[0][0]
  if any(not np.array_equal(a[0], ids) for a in arrays):
    return None, "the seeds were scored on different sequences"
  return verdicts.Replicates(np.stack([a[1] for a in arrays]), np.stack([a[2] for a in arrays])), None


def shown(loaded):
  """The declared claims of the families whose runs were given."""
  keys = set(groups(loaded))
  gate = {("Transformer", "{}"), (CONTROL, "{}")}
  families = {c.family for c in CLAIMS for side in (c.a, c.b)
              if _side(c.direction, side) in keys and _side(c.direction, side)[1:] not in gate}
  return [c for c in CLAIMS if c.family in families]


def decide(loaded, *, bootstrap=verdicts.BOOTSTRAP, paired_seeds=False):
  """(verdicts.Verdict per shown claim, {direction: Gate}) for loaded Runs.

  paired_seeds: the sensitivity analysis beside the declared rule. Seed j of
  every model shares its data order and mask draws, so the declared
  independent-seeds interval may be too wide; paired, the seed part is a t
  interval over per-seed differences. A claim whose two groups do not have
  the same seeds is not tested paired.
  """
  by_group = groups(loaded)
  reps, whys = {}, {}
  for key, group in by_group.items():
    reps[key], whys[key] = replicates(group)
  gates, deltas = {}, {}
  for d in runs.DIRECTIONS:
    exact, control = _side(d, ("Transformer", {})), _side(d, (CONTROL, {}))
    if reps.get(exact) is not None and reps.get(control) is not None and _same_steps(
        by_group, exact, control):
      gates[d] = verdicts.gate(d, reps[exact], reps[control], bootstrap=bootstrap)
      deltas[d] = DELTA_FRACTION * gates[d].evidence.diff
  claims, evidence, notes = [], {}, {}
  for c in shown(loaded):
    delta = deltas.get(c.direction)
    claim = verdicts.Claim(id=c.id, text=c.text, kind=c.kind, a=c.a[0], b=c.b[0],
                           metric="accuracy", split="test",
                           delta=delta if delta and delta > 0 else 1.0,
                           delta_source=f"{DELTA_FRACTION:g} x ({c.direction}) exact's gain over "
                                        "the identity control", family=c.family,
                           direction=c.direction if c.direction in gates else None)
    claims.append(claim)
    a, b = _side(c.direction, c.a), _side(c.direction, c.b)
    missing = [side for side in (a, b) if reps.get(side) is None]
    if c.direction not in gates:
      notes[c.id] = (f"({c.direction}) needs a Transformer and an identity control with "
                     "per-sequence evals")
    elif missing:
      notes[c.id] = "; ".join(whys.get(m) or f"({c.direction}) {_name(m)} not run"
                              for m in missing)
    elif not _same_steps(by_group, a, b):
      notes[c.id] = f"({c.direction}) {_name(a)} and {_name(b)} were evaluated at different steps"
    elif paired_seeds and [r.seed for r in by_group[a]] != [r.seed for r in by_group[b]]:
      notes[c.id] = (f"({c.direction}) {_name(a)} and {_name(b)} have different seeds: not "
                     "paired")
    else:
      evidence[c.id] = verdicts.estimate(reps[a], reps[b], bootstrap=bootstrap,
                                         paired_seeds=paired_seeds)
  decided = verdicts.decide(claims, evidence, gates)
  decided = [v if v.claim.id not in notes else verdicts.Verdict(v.claim, verdicts.NOT_TESTED,
                                                                notes[v.claim.id])
             for v in decided]
  return decided, gates


def more_seeds(loaded, decided, most=MOST_SEEDS):
  """[{claim, direction, attention: [a, b], settings: [a, b], seeds}] for each inconclusive claim
  whose MDE more seeds per group (at most `most`) would bring under its delta: the runs worth
  adding (performer/plans/fig6.py reads them)."""
  by_group = groups(loaded)
  out = []
  for v in decided:
    if v.verdict != verdicts.INCONCLUSIVE or v.evidence is None:
      continue
    c = next(c for c in CLAIMS if c.id == v.claim.id)
    keys = [_side(c.direction, side) for side in (c.a, c.b)]
    (a, _), (b, _) = (replicates(by_group[k]) for k in keys)
    n = verdicts.seeds_to_resolve(v.claim, a, b, v.evidence, most)
    if n:
      out.append({"claim": c.id, "direction": c.direction, "seeds": n,
                  "attention": [by_group[k][0].attention for k in keys],
                  "settings": [side[1] for side in (c.a, c.b)]})
  return out


def _name(key):
  _, label, settings = key
  return label + ("" if settings == "{}" else f" {settings}")


def _same_steps(by_group, *keys):
  steps = {r.step for key in keys for r in by_group.get(key, [])}
  return len(steps) <= 1


def rows(decided, paired=()):
  """Table rows: the verdict rule's cells, with the paper's evidence and delta, and the paired
  sensitivity's verdict (`decide(..., paired_seeds=True)`) where given."""
  out = []
  paired = {v.claim.id: v for v in paired}
  for v in decided:
    cells = verdicts.row(v)
    delta = cells["delta (pp)"] if v.claim.direction else ""
    sensitivity = paired.get(v.claim.id)
    shown = "-" if sensitivity is None or sensitivity.evidence is None else (
        f"{sensitivity.verdict} ({sensitivity.reason})")
    out.append([v.claim.family, v.claim.id, v.claim.text, cells["difference (pp)"],
                cells["95% interval (pp)"], cells["MDE (pp)"], delta, cells["seeds"], v.verdict,
                v.reason, shown])
  return out


def _ood(loaded):
  """A descriptive note: mean test and OOD accuracy % per model (no verdict)."""
  parts = []
  for (d, label), group in runs.by_model(loaded).items():
    done = [r for r in group if "test" in r.evals and "ood" in r.evals]
    if done:
      test = 100 * runs.mean(r.value("test", "accuracy") for r in done)
      ood = 100 * runs.mean(r.value("ood", "accuracy") for r in done)
      parts.append(f"({d}) {label} {test:.2f} -> {ood:.2f}")
  return ("OOD (reported, not judged: not a claim of the paper): mean test -> OOD accuracy %, "
          + "; ".join(parts)) if parts else "OOD: no model has test and OOD evals."


def _gate_note(direction, gate):
  ev = gate.evidence
  head = f"Scale gate ({direction}): exact beats the identity control by {100 * ev.diff:.2f} pp"
  if not np.isfinite(ev.se):
    return head + f"; undecided: needs >= 2 seeds of each (has {ev.seeds[0]} and {ev.seeds[1]})"
  low, high = ev.interval()
  return (head + f" (95% {100 * low:.2f} .. {100 * high:.2f}; MDE {100 * ev.mde():.2f}): "
          f"{'passed' if gate.passed else 'failed'} (it needs the interval above "
          f"{verdicts.GATE_FACTOR:g} MDEs)")


def render(run_dirs, out_path):
  """Reads run folders and writes the claims table to out_path (Markdown), its .csv twin and
  a .json twin: {"gates": {direction: {passed, difference, interval, mde, seeds}}, "claims":
  [{id, kind, verdict, reason}], "more_seeds": `more_seeds`} (differences as fractions, not
  pp), which the fig6 plan reads.

  Returns:
    (markdown path, csv path, json path).

  Raises:
    UserError: out_path is not a .md path or unwritable; any runs.load_runs error.
  """
  csv_path(out_path)  # a wrong --out fails before reading
  loaded = runs.load_runs(run_dirs)
  decided, gates = decide(loaded)
  paired, _ = decide(loaded, paired_seeds=True)
  wanted = more_seeds(loaded, decided)
  gate_notes = [_gate_note(d, g) for d, g in gates.items()]
  seed_note = (f"Seeds per model (at most {MOST_SEEDS}) that would bring an inconclusive claim's "
               "MDE under its delta (verdicts.seeds_to_resolve; the fig6 plan runs them for "
               "Table 2's claims): "
               + ("; ".join(f"{w['claim']}: {w['seeds']}" for w in wanted) or "none"))
  notes = [*gate_notes, seed_note, _ood(loaded),
           "Differences: mean test accuracy of the first model minus the second, over seeds; "
           "intervals combine the seeds' t interval and a paired bootstrap over test sequences. "
           + runs.SCORED,
           "The rule, the margins and why: docs/ARCHITECTURE.md, performer/verdicts.py and "
           "performer/figures/claims.py.",
           "Sensitivity (not the declared rule): seed j of every model shares its data order "
           "and (B) mask draws, so the last column decides each claim again with seeds paired "
           "(a t interval over per-seed differences); '-' where the two models do not have the "
           "same seeds.",
           ("Paper: Sec. 4.3 and Fig. 6 (36 layers, L = 1024), numbers from Table 2 (App. C.3); "
            "'Performer (generalized)' is Performer-ReLU. Fig. 5: Sec. 4.2 (its claims are about "
            "PG-19; here the protein fine-tunes); Fig. 15: App. D.2; Fig. 16: App. D.3.")]
  written = write_table(out_path, "Paper claims on proteins, decided by the verdict rule",
                        COLUMNS, rows(decided, paired), notes)
  json_path = os.path.splitext(out_path)[0] + ".json"
  record = {"gates": {d: gate_record(g) for d, g in gates.items()},
            "claims": [{"id": v.claim.id, "kind": v.claim.kind, "verdict": v.verdict,
                        "reason": v.reason} for v in decided],
            "paired_sensitivity": [{"id": v.claim.id, "verdict": v.verdict, "reason": v.reason}
                                   for v in paired if v.evidence is not None],
            "more_seeds": wanted}
  with atomic_path(json_path) as tmp, open(tmp, "w") as f:
    json.dump(record, f, indent=1)
  return (*written, json_path)


def gate_record(gate):
  """A scale gate as JSON: passed, difference, 95% interval and MDE (pp), seeds."""
  ev = gate.evidence
  finite = bool(np.isfinite(ev.se))
  return {"passed": gate.passed if finite else False, "difference": ev.diff,
          "interval": list(ev.interval()) if finite else None,
          "mde": ev.mde() if finite else None, "seeds": list(ev.seeds)}
