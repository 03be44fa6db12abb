"""Attention matrices of a trained model for one protein (paper App. C.4, Figs. 10-11).

FAVOR's implicit matrix (A @ v equals the layer's output) beside exact softmax of the same q, k."""

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from performer import favor
from performer.data import fasta, vocab
from performer.errors import UserError
from performer.experiments import protein_matrices
from performer.experiments import results
from performer.experiments.results import Result
from performer.flags import flag

FIRST_THAT_FITS = "first-that-fits"  # --accession: the first record the run's L holds
MAX_DEFAULT_LAYERS = 4  # Fig. 10 shows the first 4 layers


NAME = "attention_maps"
SUMMARY = "one protein's attention matrices, FAVOR and exact (App. C.4, Figs. 10-11)"
DESCRIPTION = ("Feeds one protein (found by accession in a FASTA file) to a trained protein model "
               "as training fed it, and writes each chosen layer's attention matrices: for a "
               "Performer its implicit FAVOR matrix (rows of Q' K'^T over D, whose product with V "
               "is the layer's output) and exact softmax(q k^T / sqrt(d)) of the same q, k; for "
               "other models the exact maps only. Writes a .npz of maps beside the --out JSON of "
               "per-head numbers (total variation FAVOR vs exact, mean attention distance, share "
               "within |i-j| <= 1, most attended position).")
OUT = "runs/attention_maps.json"  # the maps go to the .npz of the same name beside it
FIGURE = "attention-maps"


@dataclasses.dataclass(frozen=True)
class MapsConfig:
  """What to draw: a trained run, a protein by accession, which layers (0-based; None: up to 4)."""
  run: str = flag(help="a `performer train` workdir of a protein model")
  fasta: str = flag("runs/data/swissprot.fasta.gz",
                    "FASTA file (plain or .gz) holding the protein (see data/README.md)")
  accession: str = flag("P00974", "UniProt accession or entry name of the protein, or "
                        f"{FIRST_THAT_FITS}: the first record that fits the run's L",
                        shown="P00974, BPT1_BOVIN, 100 residues, as in the paper")
  layers: tuple[int, ...] | None = flag(
      None, "comma-separated 0-based layers; heads are named layer-head, 0-based, as in the "
      "paper's 'head 1-2'", shown="the first 4, or all if fewer")

  def __post_init__(self):
    # Messages name the `performer attention-maps` flag of each field.
    if not self.accession.strip():
      raise UserError("--accession is empty")
    if self.layers is not None:
      if not self.layers or min(self.layers) < 0:
        raise UserError(f"--layers must be layer indices >= 0, got {_joined(self.layers)}")
      if len(set(self.layers)) != len(self.layers):
        raise UserError(f"--layers values must not repeat, got {_joined(self.layers)}")


CONFIG = MapsConfig


def find_sequence(path, accession):
  """The record of `accession` in a FASTA file (plain or gzip), read by streaming.

  A header matches when its accession (fasta.accession: 'sp|P00974|BPT1_BOVIN'
  -> 'P00974', else the first word) or, in UniProt's 'db|ACC|NAME' form, its
  entry name equals `accession`. The first match wins; reading stops there.

  Returns:
    (header without '>', residues as uint8 token ids [n]); lower case is
    folded and one trailing '*' dropped, as prepare-trembl does.

  Raises:
    UserError: an unreadable or non-FASTA file, no such record, or a record
      with characters outside the 25 amino-acid letters (naming its line).
  """
  wanted = accession.strip()
  needle = wanted.encode()
  for block, first_line, _ in fasta.read_blocks(path, {}):
    if needle not in block:  # most blocks: no parsing at all
      continue
    lines = block.split(b"\n")
    for i, line in enumerate(lines):
      if not line.startswith(b">") or needle not in line:
        continue
      header = line[1:].strip().decode("utf-8", "replace")
      if wanted not in _names(header):
        continue
      end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith(b">")), len(lines))
      record = b"\n".join(lines[i:end])
      parsed = fasta.parse_block((record, first_line + i, path, "fail", b"attention-maps"))
      return header, parsed.tokens
  raise UserError(f"{path}: no record {wanted!r} (looked for it as the accession or entry "
                  "name of every header)")


def first_that_fits(path, max_residues):
  """The first record of a FASTA file with at most `max_residues` residues, as find_sequence.

  Raises:
    UserError: an unreadable file, or no record that short.
  """
  for block, first_line, _ in fasta.read_blocks(path, {}):
    parsed = fasta.parse_block((block, first_line, path, "skip", b"attention-maps"))
    lengths = np.diff(parsed.offsets)
    fits = np.flatnonzero(lengths <= max_residues)
    if fits.size:
      i = int(fits[0])
      return parsed.accessions()[i], parsed.tokens[parsed.offsets[i]:parsed.offsets[i + 1]]
  raise UserError(f"{path}: no record of at most {max_residues} residues")


def _names(header):
  """The accession and, for 'db|ACC|NAME ...' headers, the entry name."""
  word = header.split(None, 1)[0] if header.strip() else ""
  parts = word.split("|")
  return {fasta.accession(header)} | ({parts[2]} if len(parts) >= 3 else set())


# One compilation for all layers (eager calls would compile every operation apart).
_layer_matrices_jit = nnx.jit(protein_matrices.layer_matrices, static_argnames=("layers",))


def head_summary(A):
  """Per-head numbers of attention matrices A [H, L, L] (rows = queries) as dict of [H] arrays.

  mean_distance: expected |i - j| of a query's attention, averaged over
    queries (positions).
  diagonal_share: attention within |i - j| <= 1, averaged over queries.
  top_column, top_column_share: the key position receiving the most
    attention averaged over queries (a "vertical" pattern), and that average.
  """
  A = np.asarray(A, np.float64)
  length = A.shape[-1]
  pos = np.arange(length)
  dist = np.abs(pos[:, None] - pos[None, :])  # [L, L]
  column = A.mean(axis=1)  # [H, L]
  return {
      "mean_distance": (A * dist).sum(-1).mean(-1),
      "diagonal_share": (A * (dist <= 1)).sum(-1).mean(-1),
      "top_column": column.argmax(-1),
      "top_column_share": column.max(-1),
  }


def total_variation(A, B):
  """Per-head mean and max over rows of 0.5 sum_j |A_ij - B_ij| for [H, L, L] arrays."""
  tv = 0.5 * np.abs(np.asarray(A, np.float64) - np.asarray(B, np.float64)).sum(-1)  # [H, L]
  return tv.mean(-1), tv.max(-1)


def run(cfg, *, progress=True):  # pylint: disable=unused-argument
  """Computes the maps. Returns Result(rows, extra, arrays).

  arrays: exact [layers, H, L, L], favor (same shape; Performer runs only)
  and tokens [L], written to the .npz beside the result JSON.

  Raises:
    UserError: see `load_model`, `find_sequence`; a protein longer than the
      run's max_len; --layers beyond the model's.
  """
  run_cfg, model, step = protein_matrices.load_model(cfg.run)
  model_cfg = run_cfg.model
  layers = cfg.layers or tuple(range(min(MAX_DEFAULT_LAYERS, model_cfg.num_layers)))
  if max(layers) >= model_cfg.num_layers:
    raise UserError(f"--layers {_joined(layers)}: the run has {model_cfg.num_layers} layers "
                    f"(0-{model_cfg.num_layers - 1})")
  header, residues = _protein(cfg, model_cfg)
  tokens = protein_matrices.model_input(residues, model_cfg.max_len,
                                        model_cfg.causal)[None]  # [1, L]
  mask = jnp.asarray(tokens != vocab.PAD)
  maps = _layer_matrices_jit(model, jnp.asarray(tokens), mask, layers=layers)
  if not all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(maps)):
    raise UserError(f"{cfg.run}: non-finite attention: a scaled query or key past "
                    f"favor.MAX_NORM = {favor.MAX_NORM:g}, which FAVOR cannot serve")
  own = maps["favor"] if maps["favor"] is not None else (
      maps["exact"] if model_cfg.attention == "exact" else None)
  exact = np.stack([np.asarray(a[0]) for a in maps["exact"]])  # [layers, H, L, L]
  favor_maps = (None if maps["favor"] is None
                else np.stack([np.asarray(a[0]) for a in maps["favor"]]))

  rows = _rows(layers, maps, own, exact, favor_maps, model_cfg.num_heads)

  labels = [_label(t) for t in tokens[0]]
  extra = {
      "protein": {"accession": fasta.accession(header), "header": header, "residues": len(residues),
                  "sequence": vocab.decode(residues)},
      "run": {"path": os.path.abspath(cfg.run), "step": step,
              "attention": model_cfg.attention,
              "causal": model_cfg.causal, "num_layers": model_cfg.num_layers,
              "num_heads": model_cfg.num_heads, "head_dim": model_cfg.head_dim,
              "attention_options": dict(model_cfg.attention_options)},
      "layers": list(layers),
      "labels": labels,
      "maps": ["favor", "exact"] if favor_maps is not None else ["exact"],
      "maps_note": protein_matrices.describe(model_cfg.attention,
                                             protein_matrices.kernel_of(model)),
      "own_matrix_check_note": ("max |A v - backend output| over the layer, A the model's own "
                                "matrix (favor for Performers, exact for Transformers); null "
                                "when the model's attention is neither"),
  }
  arrays = {"exact": exact, "tokens": tokens[0].astype(np.int32)}
  if favor_maps is not None:
    arrays["favor"] = favor_maps
  return Result(rows, extra, arrays=arrays)


def _protein(cfg, model_cfg):
  """(header, residues) of the protein to map (UserError: not found, or past max_len)."""
  if cfg.accession == FIRST_THAT_FITS:
    header, residues = first_that_fits(cfg.fasta, model_cfg.max_len - int(model_cfg.causal))
  else:
    header, residues = find_sequence(cfg.fasta, cfg.accession)
  needed = len(residues) + int(model_cfg.causal)
  if needed > model_cfg.max_len:
    start = "[EOS] + " if model_cfg.causal else ""
    raise UserError(f"{cfg.accession} has {len(residues)} residues; {start}the sequence is "
                    f"{needed} tokens, past the run's max_len {model_cfg.max_len} "
                    "(DataConfig.seq_len)")
  return header, residues


def _rows(layers, maps, own, exact, favor_maps, num_heads):
  """One row per layer and head: the maps' summaries, their distance, the own-matrix check."""
  rows = []
  for n, l in enumerate(layers):
    check = None
    if own is not None:  # the model's own matrix times v reproduces its attention output
      recon = jnp.einsum("bhij,bjhd->bihd", own[n], maps["v"][n].astype(jnp.float32))
      check = float(jnp.max(jnp.abs(recon - maps["out"][n].astype(jnp.float32))))
    stats = {"exact": head_summary(exact[n])}
    if favor_maps is not None:
      stats["favor"] = head_summary(favor_maps[n])
      tv_mean, tv_max = total_variation(favor_maps[n], exact[n])
    for h in range(num_heads):
      row = {"layer": l, "head": h, "name": f"{l}-{h}", "own_matrix_check": check}
      for kind in ("favor", "exact"):
        for key in ("mean_distance", "diagonal_share", "top_column", "top_column_share"):
          value = stats[kind][key][h] if kind in stats else None
          row[f"{kind}_{key}"] = None if value is None else (
              int(value) if key == "top_column" else float(value))
      row["tv_mean"] = float(tv_mean[h]) if favor_maps is not None else None
      row["tv_max"] = float(tv_max[h]) if favor_maps is not None else None
      rows.append(row)
  return rows


def _label(token):
  """Axis label of a token: its residue letter, '^' for the (U) start token."""
  name = vocab.TOKENS[int(token)]
  return "^" if name == "<eos>" else name


def report(cfg, result):
  """The lines `performer attention-maps` prints: the protein, then per layer its extreme heads."""
  rows, extra = result.rows, result.extra
  lines = [f"{extra['protein']['accession']}: {extra['protein']['residues']} residues; "
           f"{extra['run']['attention']} model; layers {_joined(extra['layers'])}",
           extra["maps_note"]]
  own = extra["maps"][0]
  for layer in extra["layers"]:
    at = [r for r in rows if r["layer"] == layer]
    diagonal = max(at, key=lambda r: r[f"{own}_diagonal_share"])
    vertical = max(at, key=lambda r: r[f"{own}_top_column_share"])
    line = (f"  layer {layer}: most diagonal head {diagonal['name']} "
            f"({diagonal[f'{own}_diagonal_share']:.2f} within |i-j|<=1), most vertical "
            f"{vertical['name']} ({vertical[f'{own}_top_column_share']:.2f} onto position "
            f"{vertical[f'{own}_top_column']})")
    if own == "favor":
      line += f"; mean TV from exact softmax {sum(r['tv_mean'] for r in at) / len(at):.3f}"
    if at[0]["own_matrix_check"] is not None:
      line += f"; max |A v - output| {at[0]['own_matrix_check']:.1e}"
    lines.append(line)
  return lines


def _joined(values):
  return ",".join(map(str, values))


FLAGS, main = results.command(__name__)  # what every experiment command does
