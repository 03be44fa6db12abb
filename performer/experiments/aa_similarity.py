"""Amino-acid similarity from attention, against BLOSUM62 (paper App. C.4, Fig. 13).

Vig et al.'s (2020) method, for FAVOR's implicit matrix and for exact softmax of the same q, k."""

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import tqdm
from flax import nnx

from performer import favor
from performer.data import pipeline, vocab
from performer.data.shards import TokenShards
from performer.errors import UserError
from performer.experiments import protein_matrices
from performer.experiments import results
from performer.experiments.results import Result
from performer.flags import flag

BLOSUM62_PATH = os.path.join(os.path.dirname(os.path.abspath(vocab.__file__)), "blosum62.txt")
BLOSUM62_SOURCE = ("performer/data/blosum62.txt: NCBI's BLOSUM62 (Henikoff & Henikoff 1992) "
                   "as shipped in Biopython 1.88")
STANDARD = vocab.STANDARD  # the 20 standard amino acids, in this order throughout
_FIRST_RESIDUE = len(vocab.SPECIALS)  # token id of vocab.AMINO_ACIDS[0]


NAME = "aa_similarity"
SUMMARY = "amino-acid similarity from attention vs BLOSUM62 (App. C.4, Fig. 13)"
DESCRIPTION = ("Vig et al. (2020)'s analysis: for every head, the share of its attention (weights "
               "above --min-attention) onto each of the 20 standard amino acids, over --sequences "
               "sequences of a split; the similarity of two amino acids is the Pearson "
               "correlation of their shares across heads (heads with a total below --min-total "
               "left out), and is compared with BLOSUM62 by the Pearson correlation over the 190 "
               "pairs of different amino acids (also over the 210 pairs with the diagonal). Done "
               "for FAVOR's implicit matrix (Performer runs) and for exact softmax of the same "
               "q, k.")
OUT = "runs/aa_similarity.json"
FIGURE = "aa-similarity"


@dataclasses.dataclass(frozen=True)
class SimilarityConfig:
  """A trained run, the sequences to read (default 800 of its data's test split), Vig's cutoffs."""
  run: str = flag(help="a `performer train` workdir of a protein model")
  data: str | None = flag(None, "prepared protein dataset folder",
                          shown="the run's DataConfig.path")
  split: str = flag("test", "train, valid, test or ood")
  sequences: int = flag(800, "sequences drawn at random from the split, clipped to the run's "
                             "sequence length (the paper's 800)")
  seed: int = flag(0, "seed of the sequence draw")
  min_attention: float = flag(0.1, "attention weights at or below this count 0 (Vig et al.'s)")
  min_total: float = flag(100.0, "leave out heads whose thresholded attention sums to less "
                                 "(Vig et al.'s)")
  batch_size: int = flag(8, "sequences per forward pass")

  def __post_init__(self):
    # Messages name the `performer aa-similarity` flag of each field.
    if self.split not in ("train", "valid", "test", "ood"):
      raise UserError(f"--split must be train, valid, test or ood, got {self.split!r}")
    for name, value in (("--sequences", self.sequences), ("--batch-size", self.batch_size)):
      if value < 1:
        raise UserError(f"{name} must be >= 1, got {value}")
    if not 0 <= self.min_attention < 1:
      raise UserError(f"--min-attention must be in [0, 1), got {self.min_attention:g}")
    if not self.min_total >= 0:
      raise UserError(f"--min-total must be >= 0, got {self.min_total:g}")
    if self.seed < 0:
      raise UserError(f"--seed must be >= 0, got {self.seed}")


CONFIG = SimilarityConfig


def load_blosum62(path=BLOSUM62_PATH):
  """BLOSUM62 over the 20 standard amino acids: [20, 20] int, rows/columns in STANDARD order.

  Reads NCBI's matrix format: '#' comment lines, a header row of letters,
  then one row per letter.

  Raises:
    UserError: the file is missing or is not a symmetric matrix covering the
      20 standard amino acids.
  """
  try:
    with open(path) as f:
      lines = [line.split() for line in f if line.strip() and not line.startswith("#")]
  except OSError as e:
    raise UserError(f"{path}: {e.strerror}") from None
  columns = lines[0] if lines else []
  table = {}
  for row in lines[1:]:
    if len(row) != len(columns) + 1:
      raise UserError(f"{path}: row {row[0]!r} has {len(row) - 1} scores for {len(columns)} "
                      "columns")
    table[row[0]] = dict(zip(columns, (int(x) for x in row[1:])))
  missing = [a for a in STANDARD if a not in table or a not in columns]
  if missing:
    raise UserError(f"{path}: no scores for {''.join(missing)}")
  matrix = np.array([[table[a][b] for b in STANDARD] for a in STANDARD])
  if not np.array_equal(matrix, matrix.T):
    raise UserError(f"{path}: the matrix is not symmetric")
  return matrix


def head_sums(maps, tokens, mask, min_attention):
  """One batch's per-head sums of thresholded attention: (to_type [H, 20], total [H]).

  Args:
    maps: [B, H, L, L] attention weights (rows = queries).
    tokens: [B, L] int ids; mask: [B, L] bool (True = real token).
    min_attention: weights at or below it count 0 (Vig et al.'s min_attn).

  Only residue positions (not padding, not the (U) start token) count, as
  queries and as keys; to_type[h, b] sums weights onto residues of type
  STANDARD[b], total[h] onto residues of any of the 25 types.
  """
  residue = mask & (tokens >= _FIRST_RESIDUE)  # [B, L]
  keep = residue[:, None, :, None] & residue[:, None, None, :]  # [B, 1, L, L]
  weights = jnp.where(keep & (maps > min_attention), maps, 0.0)
  onto = jnp.sum(weights, axis=2)  # [B, H, L]: attention each key receives
  types = jax.nn.one_hot(tokens - _FIRST_RESIDUE, len(STANDARD), dtype=onto.dtype)  # [B, L, 20]
  return jnp.einsum("bhj,bja->ha", onto, types), jnp.sum(onto, axis=(0, 2))


def _batch_sums(model, tokens, mask, min_attention):
  """{kind: (to_type [layers * H, 20], total [layers * H])} for every layer of the model."""
  maps = protein_matrices.layer_matrices(model, tokens, mask, range(model.cfg.num_layers))
  out = {}
  for kind in ("favor", "exact"):
    if maps[kind] is None:
      continue
    sums = [head_sums(a, tokens, mask, min_attention) for a in maps[kind]]
    out[kind] = (jnp.concatenate([s[0] for s in sums]), jnp.concatenate([s[1] for s in sums]))
  return out


_batch_sums_jit = nnx.jit(_batch_sums, static_argnames=("min_attention",))


def similarity(proportions):
  """Pearson correlation across heads of each pair of amino-acid columns: [K, 20] -> [20, 20].

  A type whose share is the same in every head (e.g. never attended) has no
  defined correlation: its row and column are NaN (the diagonal stays 1).
  """
  p = np.asarray(proportions, np.float64)
  with np.errstate(invalid="ignore", divide="ignore"):
    sim = np.corrcoef(p, rowvar=False) if p.shape[0] >= 2 else np.full((p.shape[1],) * 2, np.nan)
  np.fill_diagonal(sim, 1.0)
  return sim


def blosum_correlation(sim, blosum):
  """Pearson r of an amino-acid similarity matrix and BLOSUM62 over pairs a < b and a <= b.

  Pairs where the similarity is NaN are left out; returns
  (r_offdiagonal, pairs used, r_all, pairs used); r is NaN below 3 pairs.
  """
  result = []
  for k in (1, 0):  # 1: a < b (off-diagonal), 0: a <= b (with the diagonal)
    rows, cols = np.triu_indices(len(STANDARD), k=k)
    x, y = sim[rows, cols], blosum[rows, cols].astype(np.float64)
    finite = np.isfinite(x)
    r = (np.corrcoef(x[finite], y[finite])[0, 1] if finite.sum() >= 3 and np.std(x[finite]) > 0
         else np.nan)
    result += [float(r), int(finite.sum())]
  return tuple(result)


def model_inputs(records, seq_len, causal):
  """Records -> (tokens [B, seq_len] int32, mask [B, seq_len] bool), padded as training pads."""
  tokens = np.full((len(records), seq_len), vocab.PAD, np.int32)
  for i, record in enumerate(records):
    seq = protein_matrices.model_input(record, seq_len, causal)
    tokens[i, :len(seq)] = seq
  return tokens, tokens != vocab.PAD


def sample_indices(count, wanted, seed):
  """`wanted` distinct record numbers of [0, count), drawn with `seed`, sorted (all if fewer)."""
  rng = np.random.default_rng(seed)
  return np.sort(rng.choice(count, size=min(wanted, count), replace=False))


def run(cfg, *, progress=True):
  """Computes the similarity. Returns Result(rows, extra): one row per matrix kind.

  Raises:
    UserError: see protein_matrices.load_model; a dataset that is not a
      prepared protein dataset, or without the split.
  """
  run_cfg, model, step = protein_matrices.load_model(cfg.run)
  data_cfg = run_cfg.data if cfg.data is None else dataclasses.replace(run_cfg.data, path=cfg.data)
  if pipeline.vocab_ids(data_cfg) != vocab.PROTEIN_IDS:
    raise UserError(f"{data_cfg.path}: not a protein dataset (prepare-trembl)")
  source = TokenShards(pipeline.split_folder(data_cfg, cfg.split))
  if not len(source):
    raise UserError(f"{data_cfg.path}: the {cfg.split!r} split is empty")
  chosen = sample_indices(len(source), cfg.sequences, cfg.seed)
  seq_len, causal = run_cfg.model.max_len, run_cfg.model.causal
  heads = run_cfg.model.num_layers * run_cfg.model.num_heads
  to_type, totals, residues = _attention_sums(cfg, model, source, chosen, seq_len, causal,
                                              progress)
  blosum = load_blosum62()
  rows = [_row(cfg, kind, to_type[kind], totals[kind], blosum, heads)
          for kind in ("favor", "exact") if kind in to_type]
  extra = {
      "amino_acids": STANDARD,
      "blosum62": blosum.tolist(),
      "blosum62_source": BLOSUM62_SOURCE,
      "run": {"path": os.path.abspath(cfg.run), "step": step,
              "attention": run_cfg.model.attention,
              "causal": causal, "num_layers": run_cfg.model.num_layers,
              "num_heads": run_cfg.model.num_heads, "max_len": seq_len},
      "dataset": os.path.abspath(data_cfg.path),
      "sequences_used": len(chosen), "sequences_in_split": len(source),
      "residues_used": residues,
      "maps_note": protein_matrices.describe(run_cfg.model.attention,
                                           protein_matrices.kernel_of(model)),
      "method": ("Vig et al. 2020: per head, the share of thresholded attention onto each "
                 "residue type; similarity = Pearson across kept heads; r = Pearson with "
                 "BLOSUM62 over the 190 pairs a < b (r_all: 210 pairs a <= b)"),
  }
  return Result(rows, extra)


def _attention_sums(cfg, model, source, chosen, seq_len, causal, progress):
  """({kind: [heads, 20] attention onto each residue type}, {kind: [heads] totals}, residues) over
  the chosen sequences, float64 sums of float32 batches (UserError: FAVOR refused an input)."""
  to_type, totals, residues = {}, {}, 0
  batches = range(0, len(chosen), cfg.batch_size)
  for start in tqdm.tqdm(batches, desc="aa-similarity", unit="batch", disable=not progress):
    ids = chosen[start:start + cfg.batch_size]
    records = [source[int(i)] for i in ids] + [np.zeros(0, np.int32)] * (cfg.batch_size - len(ids))
    tokens, mask = model_inputs(records, seq_len, causal)  # fixed shape: one compilation
    residues += int(np.sum(tokens >= _FIRST_RESIDUE))
    try:
      sums = jax.device_get(_batch_sums_jit(model, jnp.asarray(tokens), jnp.asarray(mask),
                                            min_attention=cfg.min_attention))
    except ValueError as e:
      raise UserError(f"{cfg.run}: {e}") from None
    for kind, (onto, total) in sums.items():
      to_type[kind] = to_type.get(kind, 0.0) + np.asarray(onto, np.float64)
      totals[kind] = totals.get(kind, 0.0) + np.asarray(total, np.float64)
  return to_type, totals, residues


def _row(cfg, kind, to_type, totals, blosum, heads):
  """The result row of one matrix kind: its heads' similarity and its correlation with BLOSUM62
  (UserError: non-finite attention)."""
  if not np.all(np.isfinite(to_type)):  # FAVOR past MAX_NORM under jit gives NaN
    raise UserError(f"{cfg.run}: non-finite {kind} attention (a scaled query or key past "
                    f"favor.MAX_NORM = {favor.MAX_NORM:g}?)")
  kept = totals >= max(cfg.min_total, np.finfo(np.float64).tiny)
  proportions = to_type[kept] / totals[kept][:, None]  # [kept heads, 20]
  sim = similarity(proportions)
  r_off, n_off, r_all, n_all = blosum_correlation(sim, blosum)
  return {
      "maps": kind, "r_offdiagonal": _finite_or_none(r_off), "pairs_offdiagonal": n_off,
      "r_all": _finite_or_none(r_all), "pairs_all": n_all,
      "heads_kept": int(kept.sum()), "heads": heads,
      "kept_heads": [int(h) for h in np.flatnonzero(kept)],
      "head_totals": totals.tolist(),
      "proportions": proportions.round(6).tolist(),
      "similarity": [[_finite_or_none(x) for x in row] for row in sim],
  }


def _finite_or_none(x):
  return float(x) if np.isfinite(x) else None


def report(cfg, result):
  """The lines `performer aa-similarity` prints: r with BLOSUM62 per kind of map."""
  extra = result.extra
  lines = [f"{extra['sequences_used']} {cfg.split} sequences ({extra['residues_used']:,} "
           f"residues); {extra['run']['attention']} model"]
  shown = lambda r: "undefined" if r is None else f"{r:.3f}"
  for row in result.rows:
    lines.append(f"  {row['maps']}: Pearson r with BLOSUM62 {shown(row['r_offdiagonal'])} over "
                 f"{row['pairs_offdiagonal']} pairs a<b ({shown(row['r_all'])} over "
                 f"{row['pairs_all']} pairs a<=b); {row['heads_kept']} of {row['heads']} heads "
                 "kept")
    if row["heads_kept"] < 3:
      lines.append(f"    too few heads pass --min-attention {cfg.min_attention:g} and "
                   f"--min-total {cfg.min_total:g} for a correlation; lower them for diffuse "
                   "attention")
  return lines


FLAGS, main = results.command(__name__)  # what every experiment command does
