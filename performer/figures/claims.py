"""The paper's protein claims (Sec. 4.3, Fig. 6, Table 2) decided on our runs by the verdict rule.

The claims are declared here, before any run (`CLAIMS`): per direction,
Performer-softmax matches the Transformer; Performer-ReLU is better than the
Transformer (Table 2: (U) 31.58 vs 30.80, (B) 36.09 vs 33.32); the Reformer
(U) and the Linformer (B) are worse than the Transformer (Fig. 6). Each is
decided on test accuracy by performer/verdicts.py from the runs' per-sequence
eval files (eval_test_sequences.npz): seed intervals plus a paired bootstrap
over test sequences, TOST for "matches", Holm over the table.

Margin: delta = DELTA_FRACTION of what exact attention gains over the
identity-attention control of the same direction (its measured mean gain):
the paper's own (B) "matches" gap, 0.32 pp, is 1.4% of the Transformer's
23.4 pp over the empirical baseline; at our scale a tenth of the gain is the
finest margin a few seeds can resolve, and we say so beside the verdict.

Scale gate: per direction, exact attention must beat the identity control by
GATE_FACTOR minimum detectable effects (verdicts.Gate); where it does not,
that direction's claims are "not testable at this scale". OOD accuracy is
reported, not judged: the paper makes no claim about it (its own Table 2
puts Performer-ReLU above the Transformer on test and below it on OOD, (U)).

Runs are grouped by their recorded settings less the seed (fig6's
{direction, attention}); runs trained by hand by direction, model and
config. Groups compared at different steps, or without per-sequence files,
are not decided.
"""

import json
import os

import numpy as np

from performer import verdicts
from performer.atomic import atomic_path
from performer.errors import UserError
from performer.figures import paper, runs
from performer.figures.tables import Column, csv_path, write_table

DELTA_FRACTION = 0.1
CONTROL = "Identity"
COLUMNS = (Column("claim"), Column("paper"), Column("difference (pp)"),
           Column("95% interval (pp)"), Column("MDE (pp)"), Column("delta (pp)"),
           Column("seeds"), Column("verdict"), Column("why"))


def _claims():
  """The declared claims: (id, text, kind, a, b, direction)."""
  out = []
  for d in runs.DIRECTIONS:
    out.append((f"{d}: softmax matches Transformer", "Performer-softmax matches the Transformer "
                "(Sec. 4.3; (B) 33.00 vs 33.32, Table 2)", "matches", "Performer-softmax",
                "Transformer", d))
    t, r = paper.TABLE2[(d, "Transformer")]["test"][0], paper.TABLE2[(d, "Performer-ReLU")]["test"][0]
    out.append((f"{d}: ReLU better than Transformer", f"Performer-ReLU is the best ({r:.2f} vs "
                f"{t:.2f}, Table 2)", "better", "Performer-ReLU", "Transformer", d))
  out.append(("U: Reformer worse than Transformer", "Reformer drops in accuracy (Fig. 6)", "worse",
              "Reformer", "Transformer", "U"))
  out.append(("B: Linformer worse than Transformer", "Linformer drops in accuracy (Fig. 6)",
              "worse", "Linformer", "Transformer", "B"))
  return out


CLAIMS = _claims()


def groups(loaded):
  """{(direction, label): [runs]}: one group per model, its seeds; settings other than the seed
  must agree (runs.Run.settings), else the runs are not replicates.

  Raises:
    UserError: two runs of one model whose settings differ beyond the seed.
  """
  out, kinds = {}, {}
  for run in loaded:
    key = (run.direction, run.label)
    rest = {k: v for k, v in run.settings.items() if k != "seed"}
    kind = json.dumps(rest, sort_keys=True) if run.settings else "by hand"
    if key in kinds and kinds[key] != kind:
      raise UserError(f"{run.path}: ({run.direction}) {run.label} with settings {kind}, where "
                      f"another run has {kinds[key]}: not replicates of one model; give the runs "
                      "of one study")
    kinds[key] = kind
    out.setdefault(key, []).append(run)
  return out


def replicates(group, split="test"):
  """verdicts.Replicates of a group's runs, or (None, why) when they cannot be paired."""
  arrays = []
  for run in group:
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


def decide(loaded, *, bootstrap=verdicts.BOOTSTRAP):
  """(verdicts.Verdict per claim, {direction: Gate or why not}) for loaded Runs."""
  by_model = groups(loaded)
  reps, whys = {}, {}
  for key, group in by_model.items():
    reps[key], whys[key] = replicates(group)
  gates, deltas = {}, {}
  for d in runs.DIRECTIONS:
    exact, control = reps.get((d, "Transformer")), reps.get((d, CONTROL))
    if exact is not None and control is not None and _same_steps(by_model, d, "Transformer", CONTROL):
      gates[d] = verdicts.gate(d, exact, control, bootstrap=bootstrap)
      deltas[d] = DELTA_FRACTION * gates[d].evidence.diff
  claims, evidence, notes = [], {}, {}
  for cid, text, kind, a, b, d in CLAIMS:
    delta = deltas.get(d)
    claim = verdicts.Claim(id=cid, text=text, kind=kind, a=a, b=b, metric="accuracy",
                           split="test", delta=delta if delta and delta > 0 else 1.0,
                           delta_source=f"{DELTA_FRACTION:g} x ({d}) exact's gain over the "
                                        "identity control", family="table2",
                           direction=d if d in gates else None)
    claims.append(claim)
    missing = [m for m in (a, b) if reps.get((d, m)) is None]
    if d not in gates:
      notes[cid] = f"({d}) needs a Transformer and an identity control with per-sequence evals"
    elif missing:
      notes[cid] = "; ".join(whys.get((d, m)) or f"({d}) {m} not run" for m in missing)
    elif not _same_steps(by_model, d, a, b):
      notes[cid] = f"({d}) {a} and {b} were evaluated at different steps"
    else:
      evidence[cid] = verdicts.estimate(reps[(d, a)], reps[(d, b)], bootstrap=bootstrap)
  decided = verdicts.decide(claims, evidence, gates)
  decided = [v if v.claim.id not in notes else verdicts.Verdict(v.claim, verdicts.NOT_TESTED,
                                                                notes[v.claim.id])
             for v in decided]
  return decided, gates


def _same_steps(by_model, d, *models):
  steps = {r.step for m in models for r in by_model.get((d, m), [])}
  return len(steps) <= 1


def rows(decided):
  """Table rows: the verdict rule's cells, with the paper's evidence and delta."""
  out = []
  for v in decided:
    cells = verdicts.row(v)
    delta = cells["delta (pp)"] if v.claim.direction else ""
    out.append([v.claim.id, v.claim.text, cells["difference (pp)"], cells["95% interval (pp)"],
                cells["MDE (pp)"], delta, cells["seeds"], v.verdict, v.reason])
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
  [{id, kind, verdict, reason}]} (differences as fractions, not pp), which the fig6 plan reads.

  Returns:
    (markdown path, csv path, json path).

  Raises:
    UserError: out_path is not a .md path or unwritable; any runs.load_runs error; runs of
      one model with settings that differ beyond the seed.
  """
  csv_path(out_path)  # a wrong --out fails before reading
  loaded = runs.load_runs(run_dirs)
  decided, gates = decide(loaded)
  gate_notes = [_gate_note(d, g) for d, g in gates.items()]
  notes = [*gate_notes, _ood(loaded),
           "Differences: mean test accuracy of the first model minus the second, over seeds; "
           "intervals combine the seeds' t interval and a paired bootstrap over test sequences. "
           + runs.SCORED,
           "The rule, the margins and why: the docstrings of performer/figures/claims.py and "
           "performer/verdicts.py.",
           ("Paper: Sec. 4.3 and Fig. 6 (36 layers, L = 1024), numbers from Table 2 (App. C.3); "
            "'Performer (generalized)' is Performer-ReLU.")]
  written = write_table(out_path, "Paper claims on proteins, decided by the verdict rule",
                        COLUMNS, rows(decided), notes)
  json_path = os.path.splitext(out_path)[0] + ".json"
  record = {"gates": {d: _gate_record(g) for d, g in gates.items()},
            "claims": [{"id": v.claim.id, "kind": v.claim.kind, "verdict": v.verdict,
                        "reason": v.reason} for v in decided]}
  with atomic_path(json_path) as tmp, open(tmp, "w") as f:
    json.dump(record, f, indent=1)
  return (*written, json_path)


def _gate_record(gate):
  ev = gate.evidence
  finite = bool(np.isfinite(ev.se))
  return {"passed": gate.passed if finite else False, "difference": ev.diff,
          "interval": list(ev.interval()) if finite else None,
          "mde": ev.mde() if finite else None, "seeds": list(ev.seeds)}
