"""Recall beyond the trained pairs: recall_conv's rows on fresh seeds, decided at kv = 8 and 16.

The claims, delta, Holm family and seeds were declared before the runs (figures/recall_kv.py,
budgets.RECALL_KV_SEEDS, docs/ARCHITECTURE.md); the rates, data and recipe are recall_conv's."""

from performer.plans import recall

STUDY = "recall_kv"
SUMMARY = ("recall beyond the trained pairs: recall_conv's rows on fresh seeds, the declared "
           "claims decided at kv = 8 and 16")


def jobs(ctx):
  return recall.study_jobs(ctx, ctx.budget.recall_kv, STUDY)
