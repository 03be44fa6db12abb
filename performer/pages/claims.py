"""Verdict sentences, worded from a claims file's verdict column and the scope it was decided on.

A page never types a verdict: it calls `verdict`, `verdicts` or `findings` (README.md's table)."""

from performer.errors import UserError

# The data each claims file's verdicts were decided on (the `performer figure` that writes it
# says which split its rule reads); the task column adds (L, kv) where there is one.
PROTEINS = "the Swiss-Prot 2014_01 test split, `mini` models"  # data/README.md: the committed data
SCOPES = {
    "claims.csv": PROTEINS,
    "fig5_claims.csv": PROTEINS,
    "fig15_claims.csv": PROTEINS + ", seeds of the feature draw W only (one initialisation)",
    "fig16_claims.csv": PROTEINS,
    "fig14_error_propagation_u_claims.csv":
        "relative output error of a `mini` (U) model on Swiss-Prot test sequences",
    "fig14_error_propagation_b_claims.csv":
        "relative output error of a `mini` (B) model on Swiss-Prot test sequences",
    "recall_claims.csv": "the MQAR test split, attention-only layers",
    "recall_conv_claims.csv": "the MQAR test split, Zoology's layers (short convolution)",
}
# Where the paper (or the later work) showed each file's claims, quoted beside them in the
# findings table: a claim tested here at another task or scale says so (PAPER_FACTS.md).
PAPER_SETTINGS = {
    "claims.csv": "the paper: TrEMBL, 36 layers, L = 1,024 (Fig. 6, Table 2)",
    "fig5_claims.csv": "the paper: LM1B and PG-19 fine-tunes (Fig. 5)",
    "fig15_claims.csv": "the paper: ImageNet64 (App. D.2)",
    "fig16_claims.csv": "the paper: TrEMBL (App. D.3)",
    "fig14_error_propagation_u_claims.csv": "the paper: a trained Transformer (App. D.1)",
    "fig14_error_propagation_b_claims.csv": "the paper: a trained Transformer (App. D.1)",
    "recall_claims.csv": "shown on other tasks or settings; tested here on MQAR",
    "recall_conv_claims.csv": "shown on other tasks or settings; tested here on MQAR",
}
# What a verdict does not say, where the rule's comparison alone would mislead: shown with it.
CAVEATS = {
    ("recall_claims.csv", "ReLU matches FAVOR+"):
        "both rows score under the task's no-binding ceiling (recall.md): they match in failing",
}
# Where each claims file's study page is (README.md's findings table links there).
PAGES = {
    "claims.csv": "proteins", "fig5_claims.csv": "appendix", "fig15_claims.csv": "appendix",
    "fig16_claims.csv": "appendix", "fig14_error_propagation_u_claims.csv": "appendix",
    "fig14_error_propagation_b_claims.csv": "appendix", "recall_claims.csv": "recall",
    "recall_conv_claims.csv": "recall_conv",
}


def task_words(task):
  """"L64_kv4" -> "L = 64, kv = 4"; a family name (table2, fig5) -> ""."""
  parts = task.split("_") if task.startswith("L") else []
  if len(parts) != 2 or not parts[1].startswith("kv"):
    return ""
  return f"L = {parts[0][1:]}, kv = {parts[1][2:]}"


def scope(path, row):
  """Where `row` of claims file `path` was decided: data, (L, kv) and seeds (or draws)."""
  if path not in SCOPES:
    raise UserError(f"results/{path}: no declared scope (performer/pages/claims.py SCOPES)")
  where = [SCOPES[path], task_words(row.get("task", ""))]
  if "seeds" in row:
    where.append(f"{row['seeds']} seeds")
  elif "draws" in row:
    where.append(f"{row['draws']} feature draws")
  caveat = CAVEATS.get((path, row["claim"]))
  return ", ".join(w for w in where if w) + (f"; {caveat}" if caveat else "")


def sentence(path, row):
  """One claim's verdict and its evidence, as the rule decided it."""
  unit = " pp" if "difference (pp)" in row else ""
  get = lambda key: row.get(f"{key} (pp)", row.get(key))  # noqa: E731
  out = (f"{row['claim']}: **{row['verdict']}** on {scope(path, row)} "
         f"(difference {get('difference')}{unit}, 95% interval {get('95% interval')}{unit}")
  if get("delta") is not None:
    out += f", margin +-{get('delta')}{unit}"
  if row["verdict"] == "inconclusive":
    out += f"; smallest difference these seeds detect: {get('MDE')}{unit}"
  return out + ")"


def rows(refs, path, task=None):
  """The rows of claims file `path`, those of `task` only when given."""
  found = refs.raw(path)
  return [r for r in found if task is None or r.get("task") == task]


def verdict(refs, path, claim, task=None):
  """The sentence of the one claim named `claim` (of `task`, where the file has tasks)."""
  hits = [r for r in rows(refs, path, task) if r["claim"] == claim]
  if len(hits) != 1:
    raise UserError(f"results/{path}: {len(hits)} claims named {claim!r} (task {task})")
  return refs.mark(sentence(path, hits[0]))


def verdicts(refs, path, task=None):
  """Every claim of `path` (or of one task) as a Markdown list, in the file's order."""
  return refs.mark("\n".join(f"- {sentence(path, r)}" for r in rows(refs, path, task)))


def findings(refs, pages="results/pages/", paths=tuple(SCOPES)):
  """README.md's table: each paper claim (the `paper` column), the verdict of every comparison
  that tests it and where it was decided, and the page that shows the evidence (under the
  folder `pages`, as the calling page links to it)."""
  lines = ["| paper's claim (where it was shown) | verdicts (what was compared: verdict, where) "
           "| page |", "| --- | --- | --- |"]
  for path in paths:
    by_claim = {}
    for r in rows(refs, path):
      by_claim.setdefault(r["paper"], []).append(r)
    for paper, found in by_claim.items():
      said = "; ".join(f"{r['claim']}: **{r['verdict']}** ({scope(path, r)})" for r in found)
      page = PAGES[path]
      lines.append(f"| {paper} ({PAPER_SETTINGS[path]}) | {said} | [{page}]({pages}{page}.md) |")
  return refs.mark("\n".join(lines))
