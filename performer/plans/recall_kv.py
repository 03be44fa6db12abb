"""Recall beyond the trained pairs: recall_conv's rows on fresh seeds, decided at kv = 8 and 16.

Claims and seeds declared before the runs (figures/recall_kv.py, budgets.py); recall_conv's rates."""

from performer.plans import recall

STUDY = "recall_kv"
SUMMARY = ("recall beyond the trained pairs: recall_conv's rows on fresh seeds, the declared "
           "claims decided at kv = 8 and 16")


def jobs(ctx):
  return recall.study_jobs(ctx, ctx.budget.recall_kv, STUDY)
