"""The paper's protein numbers (App. C.1 Table 1, App. C.3 Table 2, Fig. 6), as data.

Our tables print them beside ours; the paper's "Performer (generalized)" is Performer-ReLU."""

# Table 1 (App. C.1), TrEMBL single sequences: split -> length statistics
# (residues per sequence, before clipping to L = 1024). The text file lost the
# table; these digits are the published paper's.
TABLE1_SINGLE = {
    "train": {"count": 104_863_744, "min": 2, "max": 74_488, "mean": 353.09, "std": 311.16,
              "median": 289.0},
    "valid": {"count": 102_400, "min": 7, "max": 11_274, "mean": 353.62, "std": 307.42,
              "median": 289.0},
    "test": {"count": 1_033_216, "min": 8, "max": 32_278, "mean": 353.96, "std": 312.23,
             "median": 289.0},
    "ood": {"count": 29_696, "min": 24, "max": 4_208, "mean": 330.96, "std": 269.86,
            "median": 200.0},
}

# Table 1, TrEMBL (concat): split -> chunks of exactly CONCAT_LEN tokens. The
# paper builds no concat test or OOD split.
TABLE1_CONCAT = {"train": 4_532_224, "valid": 4_096}
CONCAT_LEN = 8192

# Table 2 (App. C.3), L = 1024: (direction, model label) -> split ->
# (accuracy %, perplexity). "The empirical baseline results are applicable
# to both the unidirectional (UNI) and bidirectional (BID) models."
_BASELINE = {"test": (9.92, 17.80), "ood": (9.07, 17.93)}
TABLE2 = {
    ("U", "Empirical baseline"): _BASELINE,
    ("U", "Transformer"): {"test": (30.80, 9.37), "ood": (19.70, 13.20)},
    ("U", "Performer-ReLU"): {"test": (31.58, 9.17), "ood": (18.44, 13.63)},
    ("B", "Empirical baseline"): _BASELINE,
    ("B", "Transformer"): {"test": (33.32, 9.22), "ood": (25.07, 12.09)},
    ("B", "Performer-ReLU"): {"test": (36.09, 8.36), "ood": (24.10, 12.26)},
    ("B", "Performer-softmax"): {"test": (33.00, 9.24), "ood": (23.48, 12.41)},
}

# Fig. 6: the models the paper trained per direction. Reformer (LSH) ran (U)
# only and Linformer (B) only; other pairs are our extras.
FIG6 = {
    "U": ("Transformer", "Performer-softmax", "Performer-ReLU", "Reformer"),
    "B": ("Transformer", "Performer-softmax", "Performer-ReLU", "Linformer"),
}
