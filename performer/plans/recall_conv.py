"""Associative recall in Zoology's own setting: a short convolution before attention.

recall.py's study has no convolution and stays as that ablation; this runs design `recall_conv`."""

from performer.plans import recall

STUDY = "recall_conv"
SUMMARY = ("associative recall in Zoology's setting (a short convolution before attention): "
           "FAVOR+ against m and its estimators, exact, Taylor, elu+1, ReLU, the convolution alone")


def jobs(ctx):
  return recall.study_jobs(ctx, ctx.budget.recall_conv, STUDY)
