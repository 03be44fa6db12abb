"""Associative recall in Zoology's own setting: a short convolution before attention.

In Zoology and Based every MQAR model has a gated short convolution before
its attention (models/short_conv.py), which hands each value its key's
token; the recall study (recall.py) has none, and is kept as that ablation.
This study runs the budget's Recall design `recall_conv` with recall.py's
jobs: Zoology's model (gin/recall/zoology.gin: one attention layer, one
head, 16-dimensional queries and keys, no MLP, no position embeddings, a
tied output layer, early stop at 99% valid accuracy) on Zoology's data
(random fillers, a pool of 100,000 training examples), one learning rate per
row family chosen by short tuning runs on valid, then every row at matched
state size over the design's seeds, each evaluated on test (kv = 4), its
shuffled-order twin and kv = 8 and 16. data/mqar.py's stats.json gives each
test split's no-binding ceiling.
"""

from performer.plans import recall

STUDY = "recall_conv"
SUMMARY = ("associative recall in Zoology's setting (a short convolution before attention): "
           "FAVOR+ against m and its estimators, exact, Taylor, elu+1, ReLU, the convolution alone")


def jobs(ctx):
  return recall.study_jobs(ctx, ctx.budget.recall_conv, STUDY)
