"""Fig. 13 (App. C.4): normalised BLOSUM62 beside the amino-acid similarity from attention."""

import matplotlib.pyplot as plt
import numpy as np

from performer.errors import UserError
from performer.figures.io import check_figure_path, figure_format, load_rows, save_figure

NAME = "aa-similarity"  # performer figure NAME
SUMMARY = "Fig. 13 amino-acid similarity from attention beside BLOSUM62 (--input JSON)"

REQUIRED = {"maps": str, "heads_kept": float, "heads": float, "pairs_offdiagonal": float}
NAMES = {"favor": "FAVOR implicit attention", "exact": "exact softmax attention"}


def normalised_blosum(blosum):
  """BLOSUM62 [20, 20] min-max scaled over a != b to [0, 1]; NaN on the diagonal."""
  b = np.asarray(blosum, np.float64)
  off = ~np.eye(len(b), dtype=bool)
  low, high = b[off].min(), b[off].max()
  return np.where(off, (b - low) / (high - low), np.nan)


def _matrix(path, row):
  sim = row.get("similarity")
  try:
    sim = np.array([[np.nan if x is None else x for x in r] for r in sim], np.float64)
  except (TypeError, ValueError):
    sim = None
  if sim is None or sim.shape != (20, 20):
    raise UserError(f"{path}: the {row['maps']} row has no 20 x 20 similarity matrix")
  np.fill_diagonal(sim, np.nan)
  return sim


def render(input_path, out_path):
  """Reads an aa_similarity result and writes the figure to out_path.

  Raises:
    UserError: see io.load_rows; no 20 x 20 BLOSUM62 or similarity matrix;
      an image format matplotlib cannot write or an unwritable path.
  """
  figure_format(out_path)
  record, rows = load_rows(input_path, "aa_similarity", REQUIRED)
  letters = record.get("amino_acids")
  blosum = np.asarray(record.get("blosum62") or [], np.float64)
  if not isinstance(letters, str) or len(letters) != 20 or blosum.shape != (20, 20):
    raise UserError(f"{input_path}: no 20 x 20 BLOSUM62 with its 20 amino acids")
  sims = [(row, _matrix(input_path, row)) for row in rows]
  check_figure_path(out_path)
  panels = [("BLOSUM62, normalised (off-diagonal min-max)", normalised_blosum(blosum), "Blues")]
  for row, sim in sims:
    r = row.get("r_offdiagonal")
    r_text = f"r = {r:.3f}" if isinstance(r, (int, float)) else "r undefined"
    title = (f"{NAMES.get(row['maps'], row['maps'])}: {r_text} vs BLOSUM62\n"
             f"({row['pairs_offdiagonal']} pairs a < b; {row['heads_kept']} of "
             f"{row['heads']} heads)")
    panels.append((title, sim, "Blues"))
  fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.8), squeeze=False,
                           layout="constrained")
  for ax, (title, matrix, cmap) in zip(axes[0], panels):
    image = ax.imshow(matrix, cmap=cmap, interpolation="nearest")
    if not np.isfinite(matrix).any():
      ax.text(9.5, 9.5, "undefined: too few heads pass\nthe attention cutoffs", ha="center",
              va="center", fontsize=9)
    ax.set_xticks(range(20), list(letters), fontsize=7)
    ax.set_yticks(range(20), list(letters), fontsize=7)
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax, shrink=0.8)
  run = record.get("run", {})
  config = record.get("config", {})
  model = f"{run.get('attention', '?')} {'(U)' if run.get('causal') else '(B)'} model"
  sample = (f"{record.get('sequences_used', '?')} {config.get('split', '?')} sequences, weights > "
            f"{config.get('min_attention', '?')}")
  fig.suptitle(f"Amino-acid similarity from attention (Vig et al. 2020): {model}, {sample}",
               fontsize=10)
  save_figure(fig, out_path)
  plt.close(fig)
  return out_path
