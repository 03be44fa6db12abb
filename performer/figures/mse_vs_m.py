"""Fig. 4: MSE of FAVOR attention against m, from an approx-error result file.

One row of panels per input scale: left, orthogonal against iid (and
structured) projections; right, positive against trig and hyperbolic features
and SMREG, all with orthogonal projections. Lines are means over the samples,
error bars one standard deviation (clipped at the bottom, log axis), hollow
markers the medians. Never recomputes the experiment.
"""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=wrong-import-position

from performer.figures.io import load_rows, save_figure  # pylint: disable=wrong-import-position

REQUIRED = ("kernel", "projection", "scaling", "m", "mse_mean", "mse_std", "mse_median",
            "samples", "input_scale")

# (kernel, projection, scaling) -> (label, colour, line style), per panel.
PROJECTION_PANEL = {
    ("positive", "orthogonal", "chi"): ("positive, ORF", "C0", "-"),
    ("positive", "iid", "chi"): ("positive, IID", "C0", "--"),
    ("positive", "hadamard", "chi"): ("positive, H-ORF", "C2", ":"),
    ("positive", "givens", "chi"): ("positive, G-ORF", "C4", ":"),
    ("trig", "orthogonal", "chi"): ("trig, ORF", "C3", "-"),
    ("trig", "iid", "chi"): ("trig, IID", "C3", "--"),
}
KERNEL_PANEL = {
    ("positive", "orthogonal", "chi"): ("positive (SM+)", "C0", "-"),
    ("hyperbolic", "orthogonal", "chi"): ("hyperbolic (SMhyp+)", "C1", "-"),
    ("trig", "orthogonal", "chi"): ("trig (sin/cos)", "C3", "-"),
    ("positive", "orthogonal", "sqrt_d"): ("SMREG (rows of norm sqrt(d))", "C5", "-."),
}


def render(input_path, out_path):
  """Reads an approx_error JSON file and writes the figure to out_path (PNG).

  Raises:
    UserError: the file is missing, not JSON, not an approx_error result, or
      lacks the columns above.
  """
  record, rows = load_rows(input_path, "approx_error", REQUIRED)
  scales = sorted({r["input_scale"] for r in rows})
  fig, axes = plt.subplots(len(scales), 2, figsize=(11, 3.6 * len(scales)), squeeze=False)
  for row_axes, scale in zip(axes, scales):
    at_scale = [r for r in rows if r["input_scale"] == scale]
    for ax, panel, title in ((row_axes[0], PROJECTION_PANEL, "Orthogonal vs IID"),
                             (row_axes[1], KERNEL_PANEL, "Positive vs trig features")):
      for variant, (label, colour, style) in panel.items():
        curve = sorted((r for r in at_scale if (r["kernel"], r["projection"], r["scaling"]) == variant),
                       key=lambda r: r["m"])
        if not curve:
          continue
        m = [r["m"] for r in curve]
        mean = [r["mse_mean"] for r in curve]
        low = [min(r["mse_std"], 0.9 * r["mse_mean"]) for r in curve]  # log axis: stay > 0
        ax.errorbar(m, mean, yerr=[low, [r["mse_std"] for r in curve]], color=colour,
                    linestyle=style, marker="o", markersize=3, capsize=2, label=label)
        ax.plot(m, [r["mse_median"] for r in curve], linestyle="none", marker="o",
                markerfacecolor="none", color=colour, markersize=6)
      ax.set_xscale("log", base=2)
      ax.set_yscale("log")
      ax.set_xlabel("number of random features m")
      ax.set_ylabel("MSE of attention output")
      first = at_scale[0]
      norms = f", |x| ~ {first['query_norm_mean']:.2f}" if "query_norm_mean" in first else ""
      ax.set_title(f"{title}: input scale {scale:g}{norms}", fontsize=10)
      ax.grid(True, which="both", alpha=0.3)
      ax.legend(fontsize=7)
  r0 = rows[0]
  fig.suptitle(f"FAVOR vs exact softmax attention, L={r0.get('L')}, d={r0.get('d')}, "
               f"{r0['samples']} samples (mean, +-1 std; hollow: median)", fontsize=11)
  fig.tight_layout(rect=(0, 0, 1, 0.985))
  save_figure(fig, out_path)
  plt.close(fig)
  return out_path
