"""The speed targets of FAVOR+ (results/pages/speed_cpu.md, "The targets"): what `performer speed
--targets` measures, each target's bound, and its value from the rows of one run."""

import dataclasses
import math
import operator

from performer.experiments import speed_pytorch
from performer.experiments.speed_worker import CONFIGS, DIRECTIONS, NUM_FEATURES, SCAN, spec

EXACT = ("exact", "exact_blockwise", "exact_dot_product")
FAILED = ("oom", "timeout", "error")  # a row's status when it ran and failed ("skipped": not run)


@dataclasses.dataclass(frozen=True)
class Target:
  """A ratio and its bound: met when `value <op> bound`."""
  name: str
  op: str  # "<=", "<" or ">="
  bound: str  # as the target is stated, e.g. "1.10"
  scope: str = ""  # words after the bound, e.g. " at every L"

  @property
  def text(self):
    return f"{self.op} {self.bound}{self.scope}"

  def met(self, value):
    compare = {"<=": operator.le, "<": operator.lt, ">=": operator.ge}[self.op]
    return value is not None and compare(value, float(self.bound))


TARGETS = {
    "1a": Target("causal / bidirectional FAVOR+ fwd+bwd, L=8192 (layer, m=256, d=64, 8 heads)",
                 "<=", "1.3"),
    "1b": Target("per-token lax.scan / chunked causal FAVOR+ fwd+bwd, L=8192", ">=", "2"),
    "2B": Target("Performer / identity-attention model fwd+bwd, regular, (B), L=8192",
                 "<=", "1.25"),
    "2U": Target("Performer / identity-attention model fwd+bwd, regular, (U), L=8192",
                 "<=", "1.25"),
    "3": Target("bidirectional FAVOR+ fwd GFLOP/s at L=16384 / jnp.dot float32 GFLOP/s", ">=",
                "0.5"),
    "4": Target("causal FAVOR+ fwd+bwd peak bytes/token, L=4096 vs 32768 (max/min)", "<=", "1.10"),
    "5B": Target("crossover L: Performer model fwd+bwd faster than the fastest exact attention "
                 "(B)", "<=", "2048"),
    "5mB": Target("Performer model fwd+bwd peak memory / the smallest exact peak, worst L (B)",
                  "<", "1", " at every L"),
    "5U": Target("crossover L: Performer model fwd+bwd faster than the fastest exact attention "
                 "(U)", "<=", "2048"),
    "5mU": Target("Performer model fwd+bwd peak memory / the smallest exact peak, worst L (U)",
                  "<", "1", " at every L"),
    "2r": Target("recall study's step (U), L=64: FAVOR+ m=64 / identity-attention model fwd+bwd",
                 "<=", "1.5"),
    "5pB": Target("performer-pytorch / ours, FAVOR+ layer fwd+bwd, L=8192 (B)", ">=", "3"),
    "5pU": Target("performer-pytorch / ours, FAVOR+ layer fwd+bwd, L=8192 (U)", ">=", "30"),
}


def targets_plan():
  """The measurements behind `ratios()`: regular config, m = 256, d = 64, 8 heads, and the
  recall config's step (performer-pytorch's only where the peers extra is installed)."""
  def one(attention, direction, mode, lengths, layer):
    return [spec("regular", attention, direction, mode, n, layer=layer) for n in lengths]
  series = [
      one("performer_softmax", "causal", "fwdbwd", (4096, 8192, 32768), True),  # 1, 4
      one("performer_softmax", "bidirectional", "fwdbwd", (8192,), True),  # 1
      one(SCAN, "causal", "fwdbwd", (8192,), True),  # 1
      one("performer_softmax", "bidirectional", "fwd", (16384,), True),  # 3
  ]
  series.append([spec("recall", attention, "causal", "fwdbwd", 64, layer=False)
                 for attention in ("performer_softmax", "exact", "identity")])  # 2r
  for direction in DIRECTIONS:  # 2, 5
    series.append(one("identity", direction, "fwdbwd", (8192,), False))
    series.append(one("performer_softmax", direction, "fwdbwd", (512, 1024, 2048, 8192), False))
    for exact in EXACT:
      series.append(one(exact, direction, "fwdbwd", (512, 1024, 2048), False))
    if not speed_pytorch.missing():
      series.append(one(speed_pytorch.NAME, direction, "fwdbwd", (8192,), True))
  return series


def _default_form(row):
  """Whether a row ran with the platform's default block, chunk, span, batch groups and form."""
  return (not row.get("chunk_size") and not row.get("span") and row.get("batch_tokens") is None
          and row.get("fused") is None)


def _find(rows, **keys):
  """The ok row matching keys (in the platform's default form), or None."""
  for row in rows:
    if row.get("status") == "ok" and _default_form(row) and all(
        row.get(k) == v for k, v in keys.items()):
      return row
  return None


def _lowest(rows, attentions, length, value, **keys):
  """(attention, value) of the lowest `value(row)` (time, memory) among `attentions` at `length`,
  or None.

  An attention whose series failed (oom, timeout, error) at or below
  `length` counts as infinitely slow and large there; one not measured up
  to `length` (outside the selection) does not count.
  """
  best = None
  for attention in attentions:
    own = [r for r in rows if r.get("attention") == attention and _default_form(r)
           and all(r.get(k) == v for k, v in keys.items())]
    at = next((r for r in own if r["L"] == length and r["status"] == "ok"), None)
    if at is not None:
      candidate = (attention, value(at))
    elif any(r["status"] in FAILED and r["L"] <= length for r in own):
      candidate = (attention, math.inf)
    else:
      continue
    if best is None or candidate[1] < best[1]:
      best = candidate
  return best


def crossover(rows, exact=EXACT, **keys):
  """Smallest measured L from which Performer-softmax is faster than the fastest of the
  `exact` attentions at that L, and at every longer measured L (an exact attention that ran
  out of memory or time counts as slower), or None."""
  perf = {r["L"]: r for r in rows if r.get("attention") == "performer_softmax"
          and _default_form(r) and r["status"] == "ok"
          and all(r.get(k) == v for k, v in keys.items())}
  best = None
  for n in sorted(perf, reverse=True):
    fastest = _lowest(rows, exact, n, lambda r: r["median_ms"], **keys)
    if fastest is None:
      continue  # no exact attention measured at this L
    if perf[n]["median_ms"] < fastest[1]:
      best = n
    else:
      break
  return best


def memory_ratio(rows, exact=EXACT, **keys):
  """The largest ratio over measured L of Performer-softmax's peak memory to the smallest
  peak among the `exact` attentions at that L, with that L: (ratio, L), or None."""
  worst = None
  for r in rows:
    if (r.get("attention") != "performer_softmax" or not _default_form(r) or r["status"] != "ok"
        or not r.get("peak_bytes") or not all(r.get(k) == v for k, v in keys.items())):
      continue
    smallest = _lowest(rows, exact, r["L"], lambda e: e.get("peak_bytes") or math.inf, **keys)
    if smallest is None:
      continue
    ratio = r["peak_bytes"] / smallest[1]
    if worst is None or ratio > worst[0]:
      worst = (ratio, r["L"])
  return worst


def peer_ratios(rows):
  """performer-pytorch's time over ours at every shape both measured (layer rows): a list of
  dicts with direction, mode, L, ours_ms, theirs_ms and ratio (> 1: ours is faster)."""
  out = []
  for theirs in rows:
    if theirs.get("attention") != speed_pytorch.NAME or theirs["status"] != "ok":
      continue
    keys = {k: theirs[k] for k in ("config", "direction", "mode", "L")}
    ours = _find(rows, attention="performer_softmax", layer=True, **keys)
    if ours:
      out.append(dict(keys, ours_ms=ours["median_ms"], theirs_ms=theirs["median_ms"],
                      ratio=theirs["median_ms"] / ours["median_ms"]))
  return out


def ratios(rows, matmul):
  """The TARGETS' values from rows of one run.

  Returns a list of dicts, in TARGETS' order: id, name, value (None when the
  rows lack a measurement), target (text), met (bool, or None when not
  measured) and detail.
  """
  values = _values(rows, matmul)
  out = []
  for id_, target in TARGETS.items():
    value, detail = values.get(id_, (None, None))
    out.append({"id": id_, "name": target.name, "value": value, "target": target.text,
                "met": None if value is None and not detail else target.met(value),
                "detail": detail or None})
  return out


def _values(rows, matmul):
  """{target id: (value or None, detail text or None)} of the rows of one run."""
  out = {}
  layer = dict(config="regular", layer=True)
  causal = _find(rows, attention="performer_softmax", direction="causal", mode="fwdbwd",
                 L=8192, **layer)
  bidir = _find(rows, attention="performer_softmax", direction="bidirectional", mode="fwdbwd",
                L=8192, **layer)
  scan = _find(rows, attention=SCAN, direction="causal", mode="fwdbwd", L=8192, **layer)
  out["1a"] = (causal and bidir and causal["median_ms"] / bidir["median_ms"],
               causal and bidir and f"{causal['median_ms']:.1f} ms / {bidir['median_ms']:.1f} ms")
  out["1b"] = (causal and scan and scan["median_ms"] / causal["median_ms"],
               causal and scan and f"{scan['median_ms']:.1f} ms / {causal['median_ms']:.1f} ms")
  for direction, tag in (("bidirectional", "B"), ("causal", "U")):
    perf = _find(rows, config="regular", layer=False, attention="performer_softmax",
                 direction=direction, mode="fwdbwd", L=8192)
    ident = _find(rows, config="regular", layer=False, attention="identity",
                  direction=direction, mode="fwdbwd", L=8192)
    out[f"2{tag}"] = (perf and ident and perf["median_ms"] / ident["median_ms"],
                      perf and ident
                      and f"{perf['median_ms']:.0f} ms / {ident['median_ms']:.0f} ms")
  fwd = _find(rows, attention="performer_softmax", direction="bidirectional", mode="fwd",
              L=16384, **layer)
  if fwd and matmul.get("status") == "ok":
    gflops = 8 * 16384 * NUM_FEATURES * CONFIGS["regular"].d_model / fwd["median_ms"] / 1e6
    out["3"] = (gflops / matmul["gflops"],
                f"{gflops:.1f} / {matmul['gflops']:.1f} GFLOP/s (8 L m d per head)")
  small, large = (_find(rows, attention="performer_softmax", direction="causal", mode="fwdbwd",
                        L=n, **layer) for n in (4096, 32768))
  if small and large and small.get("peak_bytes") and large.get("peak_bytes"):
    per = (small["peak_bytes"] / 4096, large["peak_bytes"] / 32768)
    out["4"] = (max(per) / min(per),
                f"{per[0]:.0f} vs {per[1]:.0f} bytes/token ({small['memory_source']})")
  for direction, tag in (("bidirectional", "B"), ("causal", "U")):
    keys = dict(config="regular", layer=False, direction=direction, mode="fwdbwd")
    measured = [r for r in rows if all(r.get(k) == v for k, v in keys.items())
                and r.get("attention") in EXACT + ("performer_softmax",)]
    peers = sorted({r["attention"] for r in measured} & set(EXACT), key=EXACT.index)
    naive = crossover(rows, exact=("exact",), **keys) if "exact" in peers else None
    lengths = ",".join(str(n) for n in sorted({r["L"] for r in measured}))
    out[f"5{tag}"] = (crossover(rows, **keys) if peers else None,
                      peers and (f"against {', '.join(peers)}; against naive exact alone: "
                                 f"{naive or 'none'}; measured L: {lengths}"))
    worst = memory_ratio(rows, **keys) if peers else None
    out[f"5m{tag}"] = (worst and worst[0],
                       worst and f"worst at L={worst[1]}; against {', '.join(peers)}")
  favor_step, exact_step, ident = (
      _find(rows, config="recall", layer=False, attention=name, direction="causal",
            mode="fwdbwd", L=64) for name in ("performer_softmax", "exact", "identity"))
  out["2r"] = (favor_step and ident and favor_step["median_ms"] / ident["median_ms"],
               favor_step and ident and (
                   f"{favor_step['median_ms']:.1f} ms / {ident['median_ms']:.1f} ms; "
                   + (f"exact {exact_step['median_ms']:.1f} ms" if exact_step
                      else "exact not measured")))
  paired = {(p["direction"], p["mode"], p["L"]): p for p in peer_ratios(rows)
            if p["config"] == "regular"}
  for direction, tag in (("bidirectional", "B"), ("causal", "U")):
    pair = paired.get((direction, "fwdbwd", 8192))
    out[f"5p{tag}"] = (pair and pair["ratio"],
                       pair and f"{pair['theirs_ms']:.0f} ms / {pair['ours_ms']:.0f} ms")
  return out


def format_ratios(table):
  """Lines for the terminal: one per target."""
  lines = []
  for r in table:
    if r["met"] is None:
      hint = speed_pytorch.missing() if r["id"].startswith("5p") else None
      lines.append(f"  [{r['id']}] {r['name']}: not measured in this run "
                   f"({hint or 'see --targets'})")
      continue
    value = f"{r['value']:.3g}" if isinstance(r["value"], float) else str(r["value"] or "none")
    verdict = "met" if r["met"] else "NOT met"
    lines.append(f"  [{r['id']}] {r['name']}: {value} (target {r['target']}: {verdict}; "
                 f"{r['detail']})")
  return lines
