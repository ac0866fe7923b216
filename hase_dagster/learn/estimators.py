"""The estimators behind the kernel regressor, each saved in a format that loading cannot execute.

Every estimator predicts log(ms) from the feature matrix and saves itself into a folder as data
(JSON numbers, XGBoost's own UBJSON model, numpy arrays read with ``allow_pickle=False``):

- :class:`FlopsBaseline`: log(latency) linear in log(FLOPs), log(bytes) and load, per family;
- :class:`Forest`: a RandomForest trained by scikit-learn, kept as the arrays of its trees;
- :class:`Boosted`: XGBoost, kept as XGBoost's own model file;
- :class:`RooflineResidual`: a roofline base per op class (time = a + b x FLOPs + c x bytes, with
  non-negative coefficients, so it grows linearly past the largest kernel it saw) times an XGBoost
  correction learned on log(measured / base). Trees alone are flat outside the shapes they were
  trained on; the base carries the extrapolation and the trees only the shape-specific residual;
- :class:`PathRateBoosted`: XGBoost with a feature from each movement path's measured rate;
- :class:`RecurrentBaseBoosted`: XGBoost whose LSTM/GRU/RNN rows are a per-step base times the trees' correction,
  and on a GPU EP whose biased convolutions are the trees' convolution plus :class:`ConvBiasPass`'s bias pass.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from hase_dagster.core.errors import HaseError
from hase_dagster.learn.features import MODE_FAMILIES, OPERAND_ORDERS

# Clip log predictions: a linear model can extrapolate wildly.
LOG_MS_RANGE = (-12.0, 12.0)


class Estimator(Protocol):
    """Predicts log(ms) from a feature matrix; saves to and loads from a folder."""

    kind: str

    def fit(self, x: np.ndarray, y: np.ndarray) -> Estimator: ...
    def predict(self, x: np.ndarray) -> np.ndarray: ...
    def save(self, folder: Path, stem: str) -> dict[str, Any]: ...


class FeatureLayout:
    """Where the named numeric columns and the one-hot family/op blocks sit in the matrix."""

    def __init__(
        self,
        columns: dict[str, int],
        n_numeric: int,
        families: list[str],
        ops: list[str],
        operand_order: str = "largest_first",
        family_variants: bool = True,
    ) -> None:
        self.columns = columns
        self.n_numeric = n_numeric
        self.families = families
        self.ops = ops
        # How the features read a kernel's operands (features.OPERAND_ORDERS): a prediction reads them as
        # the training did.
        self.operand_order = operand_order
        # Whether the family feature splits features.RANK_FAMILIES and MODE_FAMILIES (as the training did).
        self.family_variants = family_variants

    @staticmethod
    def _hot_index(hot: np.ndarray) -> np.ndarray:
        if hot.shape[1] == 0:
            return np.full(len(hot), -1)
        return np.where(hot.any(axis=1), np.argmax(hot, axis=1), -1)

    def family_index(self, x: np.ndarray) -> np.ndarray:
        """Index of each row's family in ``families``, -1 for a family never seen."""
        return self._hot_index(x[:, self.n_numeric : self.n_numeric + len(self.families)])

    def op_index(self, x: np.ndarray) -> np.ndarray:
        """Index of each row's op in ``ops``, -1 for an op never seen."""
        start = self.n_numeric + len(self.families)
        return self._hot_index(x[:, start : start + len(self.ops)])

    def column(self, x: np.ndarray, name: str) -> np.ndarray:
        return x[:, self.columns[name]]

    def op_types(self, x: np.ndarray) -> np.ndarray:
        """Each row's op type (``ops`` without its domain: ``Conv``, ``LSTM``), "" for an op never seen."""
        names = np.array([*(op.rsplit(".", 1)[-1] for op in self.ops), ""], dtype=object)
        return names[self.op_index(x)]

    def load_columns(self) -> list[int]:
        return [i for name, i in self.columns.items() if name.startswith("load_")]

    def max_load(self, x: np.ndarray) -> np.ndarray:
        """The largest load field of each row (utilisation in %), 0 without load fields."""
        columns = self.load_columns()
        return x[:, columns].max(axis=1) if columns else np.zeros(len(x))

    def to_json(self) -> dict[str, Any]:
        return {
            "columns": self.columns,
            "n_numeric": self.n_numeric,
            "families": self.families,
            "ops": self.ops,
            "operand_order": self.operand_order,
            "family_variants": self.family_variants,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FeatureLayout:
        """The layout a :meth:`to_json` entry describes; one saved before the operand order was recorded read
        its operands in graph order, one saved before ``family_variants`` kept the catalog's families."""
        order = str(data.get("operand_order", "graph"))
        if order not in OPERAND_ORDERS:
            known = ", ".join(OPERAND_ORDERS)
            raise HaseError(f"feature layout names operand order {order!r}; this Hase knows {known}")
        return cls(
            {k: int(v) for k, v in data["columns"].items()},
            int(data["n_numeric"]),
            list(data["families"]),
            list(data["ops"]),
            order,
            bool(data.get("family_variants", False)),
        )


class FlopsBaseline:
    """log(latency) linear in log(FLOPs), log(bytes) and load, fitted per family (global fallback)."""

    kind = "flops_baseline"
    LOG_COLUMNS = ("log_flops", "log_input_bytes", "log_output_bytes")

    def __init__(self, layout: FeatureLayout) -> None:
        self.layout = layout
        self.per_family: dict[int, np.ndarray] = {}
        self.global_fit: np.ndarray | None = None
        self.target_range = (-np.inf, np.inf)

    def _design(self, x: np.ndarray) -> np.ndarray:
        columns = [self.layout.columns[c] for c in self.LOG_COLUMNS]
        return np.hstack([np.ones((len(x), 1)), x[:, columns], x[:, self.layout.load_columns()] / 100.0])

    def fit(self, x: np.ndarray, y: np.ndarray) -> FlopsBaseline:
        design = self._design(x)
        # A line extrapolates without bound; keep predictions within 10x of what training saw.
        self.target_range = (float(y.min()) - np.log(10), float(y.max()) + np.log(10))
        self.global_fit = np.linalg.lstsq(design, y, rcond=None)[0]
        family_index = self.layout.family_index(x)
        for f in range(len(self.layout.families)):
            rows = family_index == f
            if rows.sum() >= design.shape[1] + 2:
                self.per_family[f] = np.linalg.lstsq(design[rows], y[rows], rcond=None)[0]
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        if self.global_fit is None:
            raise ValueError("FlopsBaseline.predict before fit")
        design = self._design(x)
        family_index = self.layout.family_index(x)
        out = design @ self.global_fit
        for f, coefficients in self.per_family.items():
            rows = family_index == f
            out[rows] = design[rows] @ coefficients
        return np.clip(out, *self.target_range)

    def save(self, folder: Path, stem: str) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "global_fit": _floats(self.global_fit),
            "target_range": list(self.target_range),
            "per_family": {str(f): _floats(c) for f, c in self.per_family.items()},
        }

    @classmethod
    def load(cls, layout: FeatureLayout, entry: dict[str, Any], folder: Path) -> FlopsBaseline:
        model = cls(layout)
        model.global_fit = np.array(entry["global_fit"], dtype=float)
        model.target_range = (float(entry["target_range"][0]), float(entry["target_range"][1]))
        model.per_family = {int(f): np.array(c, dtype=float) for f, c in entry["per_family"].items()}
        return model


class Forest:
    """A RandomForest (scikit-learn) kept as its trees' arrays; prediction walks the arrays."""

    kind = "random_forest"

    # 100 trees: against 200, on make run's rows with the reference rows (5,625), held-out rows 5.94 vs 5.88%,
    # held-out architectures 19.98 vs 19.92%, the kind chosen the same, the comparison 56 s instead of 89 s on 2 cores.
    def __init__(self, n_estimators: int = 100) -> None:
        self.n_estimators = n_estimators
        self.arrays: dict[str, np.ndarray] = {}

    def fit(self, x: np.ndarray, y: np.ndarray) -> Forest:
        from sklearn.ensemble import RandomForestRegressor

        forest = RandomForestRegressor(n_estimators=self.n_estimators, min_samples_leaf=1, n_jobs=-1, random_state=0)
        forest.fit(x, y)
        trees = [estimator.tree_ for estimator in forest.estimators_]
        offsets = np.cumsum([0] + [t.node_count for t in trees])
        # Children are stored as global node indices (leaves point at themselves) so one walk
        # serves every tree.
        left, right = [], []
        for tree, offset in zip(trees, offsets[:-1]):
            leaf = tree.children_left < 0
            own = np.arange(tree.node_count) + offset
            left.append(np.where(leaf, own, tree.children_left + offset))
            right.append(np.where(leaf, own, tree.children_right + offset))
        self.arrays = {
            "roots": offsets[:-1].astype(np.int64),
            "left": np.concatenate(left).astype(np.int64),
            "right": np.concatenate(right).astype(np.int64),
            "feature": np.concatenate([np.maximum(t.feature, 0) for t in trees]).astype(np.int64),
            "threshold": np.concatenate([t.threshold for t in trees]).astype(np.float64),
            "value": np.concatenate([t.value[:, 0, 0] for t in trees]).astype(np.float64),
        }
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        a = self.arrays
        rows = np.arange(len(x))[:, None]
        node = np.broadcast_to(a["roots"][None, :], (len(x), len(a["roots"]))).copy()
        while True:
            go_left = x[rows, a["feature"][node]] <= a["threshold"][node]
            nxt = np.where(go_left, a["left"][node], a["right"][node])
            if np.array_equal(nxt, node):
                break
            node = nxt
        return a["value"][node].mean(axis=1)

    def save(self, folder: Path, stem: str) -> dict[str, Any]:
        name = f"{stem}.forest.npz"
        np.savez_compressed(folder / name, **self.arrays)  # type: ignore[arg-type]  # stubs read **kwds as allow_pickle
        return {"kind": self.kind, "file": name}

    @classmethod
    def load(cls, layout: FeatureLayout, entry: dict[str, Any], folder: Path) -> Forest:
        model = cls()
        with np.load(folder / entry["file"], allow_pickle=False) as data:
            model.arrays = {k: data[k] for k in data.files}
        return model


class Boosted:
    """XGBoost gradient-boosted trees, saved as XGBoost's own UBJSON model.

    A saved entry may also name a ``trees`` file: the same trees as numpy arrays (see
    :func:`tree_arrays`), which :meth:`predict` walks without importing XGBoost (its import alone
    takes over a second, most of a fast prediction's budget).
    """

    kind = "xgboost"

    def __init__(self, n_estimators: int = 800, max_depth: int = 5) -> None:
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.booster: Any = None
        self.trees: dict[str, np.ndarray] | None = None

    def fit(self, x: np.ndarray, y: np.ndarray) -> Boosted:
        from xgboost import XGBRegressor

        model = XGBRegressor(
            n_estimators=self.n_estimators,
            max_depth=self.max_depth,
            learning_rate=0.03,
            subsample=0.8,
            colsample_bytree=0.8,
            n_jobs=-1,
            random_state=0,
        )
        model.fit(x, y)
        self.booster = model.get_booster()
        self.trees = None
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        if self.trees is not None:
            return predict_tree_arrays(self.trees, x)
        return np.asarray(self.booster.inplace_predict(x), dtype=float)

    def save(self, folder: Path, stem: str) -> dict[str, Any]:
        """XGBoost's own model file; a model loaded from a bundle has its trees as arrays only, and saves those."""
        if self.booster is None and self.trees is not None:
            name = f"{stem}.xgb.trees.npz"
            np.savez_compressed(folder / name, **self.trees)  # type: ignore[arg-type]  # stubs read **kwds as allow_pickle
            return {"kind": self.kind, "trees": name}
        name = f"{stem}.xgb.ubj"
        self.booster.save_model(str(folder / name))
        return {"kind": self.kind, "file": name}

    @classmethod
    def load(cls, layout: FeatureLayout, entry: dict[str, Any], folder: Path) -> Boosted:
        model = cls()
        if entry.get("trees"):
            with np.load(folder / entry["trees"], allow_pickle=False) as data:
                model.trees = {k: data[k] for k in data.files}
            if set(model.trees) != set(TREE_ARRAYS):
                raise ValueError(f"{entry['trees']} holds {sorted(model.trees)}, not the arrays {list(TREE_ARRAYS)}")
            return model
        import xgboost

        model.booster = xgboost.Booster()
        model.booster.load_model(str(folder / entry["file"]))
        return model

    @staticmethod
    def add_trees(entry: dict[str, Any], folder: Path) -> dict[str, Any]:
        """Write the trees of the saved XGBoost model ``entry`` in ``folder`` as arrays beside it;
        return the entry naming them (what :meth:`load` then reads instead of the model file). An entry that
        has arrays and no model file is returned as it is."""
        if "file" not in entry and entry.get("trees"):
            return entry
        import xgboost

        booster = xgboost.Booster()
        booster.load_model(str(folder / entry["file"]))
        name = entry["file"].removesuffix(".ubj") + ".trees.npz"
        np.savez_compressed(folder / name, **tree_arrays(booster))  # type: ignore[arg-type]  # stubs read **kwds as allow_pickle
        return {**entry, "trees": name}


def with_tree_arrays(entry: dict[str, Any], folder: Path) -> dict[str, Any]:
    """A saved estimator ``entry`` whose XGBoost models, its own or nested ones (a roofline's residual, a
    path-rate model's trees), name their trees as arrays (:meth:`Boosted.add_trees`)."""
    if entry.get("kind") == Boosted.kind:
        return Boosted.add_trees(entry, folder)
    return {k: with_tree_arrays(v, folder) if isinstance(v, dict) and "kind" in v else v for k, v in entry.items()}


# The arrays of a tree ensemble walked by predict_tree_arrays.
IDENTITY_OBJECTIVES = ("reg:squarederror", "reg:absoluteerror")
TREE_ARRAYS = ("base_score", "roots", "left", "right", "feature", "threshold", "default_left", "value")


def tree_arrays(booster: Any) -> dict[str, np.ndarray]:
    """The trees of an XGBoost regression booster (``reg:squarederror`` or ``reg:absoluteerror``, one target,
    numerical splits) as flat arrays read from XGBoost's JSON model: children as global node indices (a leaf
    points at itself), split feature and float32 threshold, the side a missing value takes, and each
    node's value (a leaf's output)."""
    model = json.loads(booster.save_raw("json"))["learner"]
    objective = model["objective"]["name"]
    params = model["learner_model_param"]
    # Both objectives' trees add up to the prediction with no link function.
    if objective not in IDENTITY_OBJECTIVES or int(params.get("num_target", 1)) != 1:
        raise ValueError(
            f"only single-target {' or '.join(IDENTITY_OBJECTIVES)} boosters become arrays, not {objective}"
        )
    trees = model["gradient_booster"]["model"]["trees"]
    if any(any(t["split_type"]) for t in trees):
        raise ValueError("a categorical split cannot be walked as arrays")
    offsets = np.cumsum([0] + [len(t["left_children"]) for t in trees])
    left, right = [], []
    for tree, offset in zip(trees, offsets[:-1]):
        children_left, children_right = np.array(tree["left_children"]), np.array(tree["right_children"])
        leaf = children_left < 0
        own = np.arange(len(children_left)) + offset
        left.append(np.where(leaf, own, children_left + offset))
        right.append(np.where(leaf, own, children_right + offset))
    return {
        "base_score": np.array([float(params["base_score"].strip("[]"))], dtype=np.float64),
        "roots": offsets[:-1].astype(np.int64),
        "left": np.concatenate(left).astype(np.int64),
        "right": np.concatenate(right).astype(np.int64),
        "feature": np.concatenate([t["split_indices"] for t in trees]).astype(np.int64),
        "threshold": np.concatenate([t["split_conditions"] for t in trees]).astype(np.float32),
        "default_left": np.concatenate([t["default_left"] for t in trees]).astype(bool),
        "value": np.concatenate([t["split_conditions"] for t in trees]).astype(np.float64),
    }


def predict_tree_arrays(trees: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """What the booster behind ``trees`` predicts for ``x``, bit for bit: XGBoost compares float32
    features with ``value < threshold`` (left), sends a missing (NaN) value to its default side, and
    adds the leaves to the base score one tree after another in float32.

    Each row's answer depends on that row alone, so rows with the same float32 bytes are walked
    once: a model's kernels repeat (ViT-B/16's twelve identical layers; every load's idle twin), and
    a ViT-B/16 question under six loads has 2274 rows but 136 distinct ones.
    """
    features = np.ascontiguousarray(x, dtype=np.float32)
    if features.ndim == 2 and len(features) > 1 and features.shape[1] > 0:
        rows = features.view(np.dtype((np.void, features.dtype.itemsize * features.shape[1]))).ravel()
        _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
        if len(first) < len(features):
            return _walk_trees(trees, features[first])[inverse.ravel()]
    return _walk_trees(trees, features)


def _walk_trees(trees: dict[str, np.ndarray], features: np.ndarray) -> np.ndarray:
    """:func:`predict_tree_arrays` on a C-contiguous float32 matrix, every row walked."""
    n, width = features.shape
    flat = features.ravel()
    # Flat indices into the features (row offset + split feature) gather faster than a 2-D fancy index.
    offsets = (np.arange(n, dtype=np.intp) * width)[:, None]
    node = np.broadcast_to(trees["roots"][None, :], (n, len(trees["roots"]))).copy()
    while True:
        value = flat[offsets + trees["feature"][node]]
        go_left = np.where(np.isnan(value), trees["default_left"][node], value < trees["threshold"][node])
        step = np.where(go_left, trees["left"][node], trees["right"][node])
        if np.array_equal(step, node):
            break
        node = step
    base = np.full((n, 1), trees["base_score"][0], dtype=np.float32)
    margins = np.concatenate([base, trees["value"][node].astype(np.float32)], axis=1)
    return np.add.accumulate(margins, axis=1, dtype=np.float32)[:, -1].astype(float)


# Op classes with fewer measured rows than this use their group's roofline, then the global one.
MIN_CLASS_ROWS = 8
# The op column values (``domain.OpType``) of a fused and a plain convolution.
FUSED_CONV, PLAIN_CONV = "com.microsoft.FusedConv", ".Conv"
# Op types whose kernels share a roofline shape, so an op type never measured borrows its group's.
OP_GROUPS: dict[str, tuple[str, ...]] = {
    "conv": ("Conv", "FusedConv", "ConvTranspose", "NhwcConv", "NhwcFusedConv", "QLinearConv"),
    "matmul": ("MatMul", "Gemm", "FusedMatMul", "FusedGemm", "MatMulInteger", "Attention", "MultiHeadAttention"),
    "pool": ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool"),
    "normalization": (
        "LayerNormalization",
        "SkipLayerNormalization",
        "SimplifiedLayerNormalization",
        "BatchNormalization",
        "InstanceNormalization",
        "GroupNorm",
        "Softmax",
        "LogSoftmax",
    ),
    "movement": (
        "Transpose",
        "Concat",
        "Split",
        "Slice",
        "Gather",
        "Reshape",
        "Flatten",
        "Squeeze",
        "Unsqueeze",
        "Identity",
        "Expand",
        "Tile",
        "Pad",
        "Resize",
        "ReorderInput",
        "ReorderOutput",
        "MemcpyFromHost",
        "MemcpyToHost",
        "Cast",
    ),
}
_GROUP_OF = {op: group for group, ops in OP_GROUPS.items() for op in ops}


def op_group(op: str) -> str:
    """The roofline group of an op column value (``domain.OpType``); ``elementwise`` by default."""
    return _GROUP_OF.get(op.rsplit(".", 1)[-1], "elementwise")


def _is_mode_family(family: str) -> bool:
    """Whether ``family`` is a :data:`features.MODE_FAMILIES` variant (``Resize@cubic``)."""
    base, _, mode = family.partition("@")
    return mode in MODE_FAMILIES.get(base, ())


class RooflineResidual:
    """A roofline base per op class, times an XGBoost correction in log space.

    Base: ``ms = a + b * GFLOP + c * MB`` (a: launch-and-tail floor, b: inverse compute throughput,
    c: inverse bandwidth over input, output and weight bytes), with a, b, c >= 0 fitted on relative
    errors over all idle rows. Each op class (the op type, grouped convolutions apart) then fits its
    own floor and one efficiency factor on (b, c), per op group (:data:`OP_GROUPS`) for classes too
    small or never seen, and the global fit serves groups never seen. Correction: XGBoost on
    ``log(measured) - log(base)`` with the
    usual features plus log(base).
    """

    kind = "roofline_xgboost"

    def __init__(
        self,
        layout: FeatureLayout,
        n_estimators: int = 600,
        fused_grouped_as_plain: bool = True,
        mode_classes: bool = True,
    ) -> None:
        self.layout = layout
        # False for a model saved before grouped FusedConv and Conv shared a class (it loads as fitted).
        self.fused_grouped_as_plain = fused_grouped_as_plain
        # A mode that changes the algorithm (features.MODE_FAMILIES: a bicubic Resize reads about 100x the time per
        # element of a bilinear one) is a class of its own, so its base scales with size beyond the rows the trees
        # saw. False for a model saved before (it loads as fitted).
        self.mode_classes = mode_classes
        self.per_class: dict[str, np.ndarray] = {}
        self.per_group: dict[str, np.ndarray] = {}
        self.global_fit = np.zeros(3)
        self.residual = Boosted(n_estimators)

    def op_classes(self, x: np.ndarray) -> np.ndarray:
        ops = np.array([*self.layout.ops, "?"], dtype=object)[self.layout.op_index(x)]
        grouped = self.layout.column(x, "group") > 1
        if self.fused_grouped_as_plain:
            # A grouped FusedConv runs the plain grouped Conv with an activation epilogue (one small GEMM
            # per group and image on the CPU EP): one class, so a fused activation needs no rows of its own.
            ops = np.where(grouped & (ops == FUSED_CONV), PLAIN_CONV, ops)
        classes = np.where(grouped, ops + ":grouped", ops)
        if self.mode_classes:
            modal = [i for i, family in enumerate(self.layout.families) if _is_mode_family(family)]
            if modal:
                index = self.layout.family_index(x)
                families = np.array(self.layout.families, dtype=object)[np.maximum(index, 0)]
                classes = np.where(np.isin(index, modal), families, classes)
        return classes

    def _design(self, x: np.ndarray) -> np.ndarray:
        gflop = np.expm1(self.layout.column(x, "log_flops")) / 1e9
        megabytes = (
            sum(np.expm1(self.layout.column(x, c)) for c in ("log_input_bytes", "log_output_bytes", "log_weight_bytes"))
            / 1e6
        )
        return np.column_stack([np.ones(len(x)), gflop, megabytes])

    @staticmethod
    def _relative_nnls(design: np.ndarray, ms: np.ndarray) -> np.ndarray:
        from scipy.optimize import nnls

        scale = np.maximum(np.abs(design).max(axis=0), 1e-12)
        solution, _ = nnls((design / scale) / ms[:, None], np.ones(len(ms)))
        return solution / scale

    def op_groups(self, x: np.ndarray) -> np.ndarray:
        ops = [*self.layout.ops, "?"]
        return np.array([op_group(ops[i]) for i in self.layout.op_index(x)], dtype=object)

    def base_ms(self, x: np.ndarray) -> np.ndarray:
        design = self._design(x)
        out = design @ self.global_fit
        groups = self.op_groups(x)
        for name, coefficients in self.per_group.items():
            rows = groups == name
            out[rows] = design[rows] @ coefficients
        classes = self.op_classes(x)
        for name, coefficients in self.per_class.items():
            rows = classes == name
            out[rows] = design[rows] @ coefficients
        return np.maximum(out, 1e-6)

    def fit(self, x: np.ndarray, y: np.ndarray) -> RooflineResidual:
        ms = np.exp(y)
        design = self._design(x)
        # The base is the idle device's roofline: rows under load would teach it the wait.
        load = self.layout.max_load(x)
        idle = load <= load.min() + 10.0  # load fields are utilisation in %
        if idle.sum() < MIN_CLASS_ROWS:
            idle = np.ones(len(x), dtype=bool)
        self.global_fit = self._relative_nnls(design[idle], ms[idle])
        # A class keeps the device's throughputs and fits its own floor and efficiency: slopes fitted
        # freely on a class's narrow range of small kernels (a CNN's classifier Gemm) explode when a
        # large kernel of that class (a transformer's MatMul) comes along.
        shaped = np.column_stack([design[:, 0], design[:, 1:] @ self.global_fit[1:]])
        for fits, labels in ((self.per_group, self.op_groups(x)), (self.per_class, self.op_classes(x))):
            for name in np.unique(labels[idle]):
                rows = idle & (labels == name)
                if rows.sum() >= MIN_CLASS_ROWS:
                    floor, efficiency = self._relative_nnls(shaped[rows], ms[rows])
                    fits[str(name)] = np.array([floor, *(efficiency * self.global_fit[1:])])
        base = np.log(self.base_ms(x))
        self.residual.fit(np.column_stack([x, base]), y - base)
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        base = np.log(self.base_ms(x))
        return base + self.residual.predict(np.column_stack([x, base]))

    def save(self, folder: Path, stem: str) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "global_fit": _floats(self.global_fit),
            "per_class": {k: _floats(v) for k, v in self.per_class.items()},
            "per_group": {k: _floats(v) for k, v in self.per_group.items()},
            "fused_grouped_as_plain": self.fused_grouped_as_plain,
            "mode_classes": self.mode_classes,
            "residual": self.residual.save(folder, f"{stem}.residual"),
        }

    @classmethod
    def load(cls, layout: FeatureLayout, entry: dict[str, Any], folder: Path) -> RooflineResidual:
        model = cls(
            layout,
            fused_grouped_as_plain=bool(entry.get("fused_grouped_as_plain", False)),
            mode_classes=bool(entry.get("mode_classes", False)),
        )
        model.global_fit = np.array(entry["global_fit"], dtype=float)
        model.per_class = {k: np.array(v, dtype=float) for k, v in entry["per_class"].items()}
        model.per_group = {k: np.array(v, dtype=float) for k, v in entry["per_group"].items()}
        model.residual = Boosted.load(layout, entry["residual"], folder)
        return model


class PathRateBoosted:
    """XGBoost with one more feature: the time the kernel's movement path takes for its bytes.

    A path is a family and which of the last four dims the kernel changes (``changed_d0..3``): ORT runs
    a pad of a channels-last map in a generic kernel 25-50x slower per byte than a channels-first pad or a
    copy, and the boosted trees fit those few rows poorly among many fast ones (0.73x held out by row on the
    H100 tables). Fitting takes, per path with at least :data:`MIN_PATH_ROWS` rows, the median of
    log(ms) - log(bytes moved) (a rate; per family, then over all rows, where a path has fewer), and gives the
    trees log(bytes moved) + that median as a feature they can split on. It helps within the sizes trained on
    (the generic pads 0.73x -> 0.92x held out by row), not beyond them: trees stay flat there. Trained only
    when asked for by name (not in :data:`KINDS`).
    """

    kind = "xgboost_path_rate"

    def __init__(self, layout: FeatureLayout, n_estimators: int = 800) -> None:
        self.layout = layout
        self.path_rates: dict[str, float] = {}
        self.family_rates: dict[str, float] = {}
        self.global_rate = 0.0
        self.trees = Boosted(n_estimators)

    def _paths(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each row's family index (-1: unseen) and path code (family index x 16 + the changed-dims bits)."""
        family = self.layout.family_index(x)
        bits = sum((self.layout.column(x, f"changed_d{i}") > 0).astype(int) << (3 - i) for i in range(4))
        return family, family * 16 + bits

    def _path_name(self, code: int) -> str:
        return f"{self.layout.families[code // 16]}:{code % 16:04b}"

    def _log_bytes(self, x: np.ndarray) -> np.ndarray:
        # Clipped at 0 (no bytes): real rows never go below, but the export's check feeds random matrices.
        moved = sum(
            np.expm1(np.clip(self.layout.column(x, c), 0, None)) for c in ("log_input_bytes", "log_output_bytes")
        )
        return np.log1p(moved)

    def path_feature(self, x: np.ndarray) -> np.ndarray:
        """log(bytes moved) + the log rate of each row's path (its family's, or all rows', when unseen)."""
        family, path = self._paths(x)
        rate = np.full(len(x), self.global_rate)
        for index, name in enumerate(self.layout.families):
            if name in self.family_rates:
                rate[family == index] = self.family_rates[name]
        for code in np.unique(path[family >= 0]):
            name = self._path_name(int(code))
            if name in self.path_rates:
                rate[path == code] = self.path_rates[name]
        return self._log_bytes(x) + rate

    def fit(self, x: np.ndarray, y: np.ndarray) -> PathRateBoosted:
        family, path = self._paths(x)
        log_rate = y - self._log_bytes(x)
        self.global_rate = float(np.median(log_rate))
        known = family >= 0
        self.family_rates = {self.layout.families[c]: r for c, r in _medians_by(family, log_rate, known).items()}
        self.path_rates = {self._path_name(c): r for c, r in _medians_by(path, log_rate, known).items()}
        self.trees.fit(np.column_stack([x, self.path_feature(x)]), y)
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.trees.predict(np.column_stack([x, self.path_feature(x)]))

    def save(self, folder: Path, stem: str) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "path_rates": self.path_rates,
            "family_rates": self.family_rates,
            "global_rate": self.global_rate,
            "trees": self.trees.save(folder, f"{stem}.path"),
        }

    @classmethod
    def load(cls, layout: FeatureLayout, entry: dict[str, Any], folder: Path) -> PathRateBoosted:
        model = cls(layout)
        model.path_rates = {k: float(v) for k, v in entry["path_rates"].items()}
        model.family_rates = {k: float(v) for k, v in entry["family_rates"].items()}
        model.global_rate = float(entry["global_rate"])
        model.trees = Boosted.load(layout, entry["trees"], folder)
        return model


# The gates of each recurrent op: its per-step GEMM computes this many blocks of hidden units.
RECURRENT_GATES: dict[str, int] = {"LSTM": 4, "GRU": 3, "RNN": 1}


# Single-input elementwise ops whose large rows read the device's streaming bandwidth (one read, one write).
STREAMING_OPS = ("Relu", "Sigmoid", "Tanh", "Erf", "Exp", "Neg", "Abs", "Sqrt", "Reciprocal", "HardSigmoid")
# Rows whose output is at least this many bytes stream at the device's bandwidth (smaller ones are launch-bound).
STREAMING_MIN_OUTPUT_BYTES = 16e6


class ConvBiasPass:
    """The pass ORT's CUDA Conv makes over its output to add a bias, apart from the convolution itself.

    ORT's CUDA Conv runs cuDNN's convolution and then, where the node has a bias, ``cudnnAddTensor`` over the whole
    output: one more read and write of it. Every convolution with BatchNorm folded into it has a bias, so the tables
    hold few without one (pre-activation networks' BatchNorm-ReLU-Conv, 45 of 1,394 H100 Conv rows at batch 64), and
    the trees predicted those as if they paid the pass: ResNetV2-50's bias-free 1x1 convolutions at 2-3x their time
    (results/gpu-general/user-kernels-b). On the H100 tables' memory-bound convolutions the biased ones reach at most
    2.8 TB/s counting three passes over the output and the bias-free ones the same counting one. Model:
    ``pass ms = 2 x output bytes / bandwidth``, the bandwidth the median over the training rows of large (at least
    :data:`STREAMING_MIN_OUTPUT_BYTES`) idle single-input elementwise kernels (:data:`STREAMING_OPS`, input plus
    output bytes over time). The trees learn every convolution without its pass (a biased row's time less the pass,
    at least a quarter of it), and a biased convolution is predicted as the trees' time plus the pass.
    """

    def __init__(self, layout: FeatureLayout, bandwidth_gbps: float = 0.0) -> None:
        self.layout = layout
        self.bandwidth_gbps = bandwidth_gbps  # 0: not fitted (too few streaming rows, or no conv_bias column)

    def _bytes(self, x: np.ndarray, name: str) -> np.ndarray:
        return np.expm1(self.layout.column(x, name))

    def fit(self, x: np.ndarray, y: np.ndarray) -> ConvBiasPass:
        """Fit the bandwidth on ``x``'s streaming rows; leave it 0 where fewer than MIN_CLASS_ROWS exist."""
        self.bandwidth_gbps = 0.0
        if "conv_bias" not in self.layout.columns:
            return self
        load = self.layout.max_load(x)
        output = self._bytes(x, "log_output_bytes")
        streaming = (
            np.isin(self.layout.op_types(x), STREAMING_OPS)
            & (load <= load.min() + 10.0)
            & (output >= STREAMING_MIN_OUTPUT_BYTES)
        )
        if streaming.sum() >= MIN_CLASS_ROWS:
            moved = self._bytes(x[streaming], "log_input_bytes") + output[streaming]
            self.bandwidth_gbps = float(np.median(moved / np.exp(y[streaming]) / 1e6))
        return self

    def pass_ms(self, x: np.ndarray) -> np.ndarray:
        """Each row's bias pass in ms: 0 for any row but a biased Conv, or when not fitted."""
        if self.bandwidth_gbps <= 0:
            return np.zeros(len(x))
        biased = (self.layout.op_types(x) == "Conv") & (self.layout.column(x, "conv_bias") > 0)
        return np.where(biased, 2 * self._bytes(x, "log_output_bytes") / (self.bandwidth_gbps * 1e6), 0.0)

    def without_pass(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """log(ms) of ``y`` less each row's pass (at least a quarter of the row's time is left)."""
        ms = np.exp(y)
        return np.log(np.maximum(ms - self.pass_ms(x), 0.25 * ms))

    def with_pass(self, x: np.ndarray, log_ms: np.ndarray) -> np.ndarray:
        """log(ms) of the trees' ``log_ms`` plus each row's pass."""
        return np.log(np.exp(log_ms) + self.pass_ms(x))


class RecurrentBaseBoosted:
    """XGBoost (or the roofline's XGBoost), with a per-step model for its recurrent rows (LSTM, GRU, RNN).

    A recurrent layer runs its steps one after another, each a small GEMM chain: on the CUDA EP its time is a fixed
    part plus about 10 us a step, nearly the same at batch 1, 16 and 64 (the H100's recurrent probes,
    results/gpu-general/README.md, "Operators and recurrent probes"); on the CPU the step's FLOPs dominate. Trees
    fit on 52 layer shapes neither interpolate that across sequence lengths nor extrapolate past them (31% MAPE on
    shapes held out, results/gpu-general/recurrent-base/report.md). Model, over every recurrent op and load:
    ``ms = (a + steps x (b + c x step GFLOP)) x (1 + u x load / 100)`` with a, b, c > 0 and u fitted on relative
    errors (at least :data:`MIN_CLASS_ROWS` recurrent rows, else none), steps = sequence x directions and a step's
    FLOPs 2 x batch x gates x hidden x (input + hidden). Recurrent rows are predicted by it alone: trees on its
    residual learned the batch-16 timings' scatter (26.5% on shapes held out). Every other row is the ``rest``
    estimator (XGBoost, kind ``xgboost_recurrent_base``; the roofline's, ``roofline_xgboost_recurrent_base``), trained
    without the recurrent rows. With ``bias_pass`` (a GPU EP's regressor), those trees learn convolutions without
    the bias pass and :class:`ConvBiasPass` adds it back. Trained only when asked for by name (not in :data:`KINDS`).
    """

    def __init__(self, layout: FeatureLayout, rest: Estimator | None = None, bias_pass: bool = False) -> None:
        self.layout = layout
        self.pooled = np.zeros(3)  # a (ms), b (ms a step), c (ms a step per step GFLOP)
        self.load_slope = 0.0  # under load the base runs (1 + slope x load / 100) times longer
        self.trees: Estimator = rest if rest is not None else Boosted()
        self.kind = f"{self.trees.kind}_recurrent_base"
        self.bias_pass = ConvBiasPass(layout) if bias_pass else None

    def _ops(self, x: np.ndarray) -> np.ndarray:
        """Each row's recurrent op (LSTM, GRU, RNN), or "" for any other kernel."""
        ops = self.layout.op_types(x)
        return np.where(np.isin(ops, list(RECURRENT_GATES)), ops, "")

    def _design(self, x: np.ndarray, ops: np.ndarray) -> np.ndarray:
        """(1, steps, steps x step GFLOP) per row, from the input (1, sequence, batch, input) and the first output
        (sequence or 1, directions, batch, hidden) as the features hold them."""
        column = self.layout.column
        steps = np.maximum(column(x, "in_d1"), 1) * np.maximum(column(x, "out_d1"), 1)
        gates = np.array([RECURRENT_GATES.get(op, 1) for op in ops], dtype=float)
        hidden = np.maximum(column(x, "out_d3"), 1)
        step_gflop = 2 * column(x, "in_d2") * gates * hidden * (column(x, "in_d3") + hidden) / 1e9
        return np.column_stack([np.ones(len(x)), steps, steps * step_gflop])

    def _log_ms(self, x: np.ndarray, ops: np.ndarray) -> np.ndarray:
        """log(ms) the fitted model gives recurrent rows ``x`` of ``ops`` under their load."""
        base = self._design(x, ops) @ self.pooled
        slowdown = 1 + self.load_slope * self.layout.max_load(x) / 100
        return np.log(np.maximum(base, 1e-6)) + np.log(np.maximum(slowdown, 1e-3))

    def fit(self, x: np.ndarray, y: np.ndarray) -> RecurrentBaseBoosted:
        from scipy.optimize import least_squares  # fitting only

        ops = self._ops(x)
        recurrent = ops != ""
        if recurrent.sum() >= MIN_CLASS_ROWS:
            design, ms, load = (
                self._design(x[recurrent], ops[recurrent]),
                np.exp(y[recurrent]),
                self.layout.max_load(x[recurrent]),
            )

            def relative_error(p: np.ndarray) -> np.ndarray:
                return (design @ np.exp(p[:3])) * (1 + p[3] * load / 100) / ms - 1

            fit = least_squares(relative_error, x0=[np.log(0.1), np.log(0.01), np.log(0.01), 0.1]).x
            self.pooled, self.load_slope = np.exp(fit[:3]), float(fit[3])
        others = ~recurrent if self.pooled.any() else np.ones(len(x), dtype=bool)
        if self.bias_pass is not None:
            self.bias_pass.fit(x, y)
            self.trees.fit(x[others], self.bias_pass.without_pass(x[others], y[others]))
        else:
            self.trees.fit(x[others], y[others])
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        out = self.trees.predict(x)
        if self.bias_pass is not None:
            out = self.bias_pass.with_pass(x, out)
        if self.pooled.any():
            ops = self._ops(x)
            recurrent = ops != ""
            if recurrent.any():
                out[recurrent] = self._log_ms(x[recurrent], ops[recurrent])
        return out

    def save(self, folder: Path, stem: str) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "pooled": _floats(self.pooled),
            "load_slope": self.load_slope,
            "trees": self.trees.save(folder, f"{stem}.recurrent"),
            **({"bias_pass_gbps": self.bias_pass.bandwidth_gbps} if self.bias_pass is not None else {}),
        }

    @classmethod
    def load(cls, layout: FeatureLayout, entry: dict[str, Any], folder: Path) -> RecurrentBaseBoosted:
        model = cls(layout, load_estimator(layout, entry["trees"], folder), bias_pass="bias_pass_gbps" in entry)
        if model.bias_pass is not None:  # a model saved before the bias pass has none
            model.bias_pass.bandwidth_gbps = float(entry["bias_pass_gbps"])
        model.pooled = np.array(entry["pooled"], dtype=float)
        model.load_slope = float(entry["load_slope"])
        return model


def _medians_by(codes: np.ndarray, values: np.ndarray, rows: np.ndarray) -> dict[int, float]:
    """The median of ``values`` per code among ``rows``, for codes with at least :data:`MIN_PATH_ROWS` rows."""
    medians = {}
    for code in np.unique(codes[rows]):
        mine = rows & (codes == code)
        if mine.sum() >= MIN_PATH_ROWS:
            medians[int(code)] = float(np.median(values[mine]))
    return medians


# Rounds and depth of the CUDA recurrent base's trees (every h100 bundle since 2026-11-28 08:00 UTC). Over the H100
# tables' 56k rows of every op, depth 5 and 800 rounds left rare regimes blended with their neighbours; depth 7 and
# 1,200 rounds read ten unseen GPU sets 9.6% (64.3% within +-10%) where depth 5 read 10.4% (61.4%)
# (results/gpu-general/README.md, "Sets AD and AE blind"). The CPU's smaller tables keep Boosted's defaults.
CUDA_TREES: tuple[int, int] = (1200, 7)
# A path's rate needs this many rows; fewer take the family's.
MIN_PATH_ROWS = 5
# The kinds train_regressor compares when none is asked for.
KINDS: tuple[str, ...] = ("flops_baseline", "random_forest", "xgboost", "roofline_xgboost")
# Every kind there is: the compared ones and those trained only when asked for by name.
# Kinds whose LSTM/GRU/RNN rows a per-step model predicts (RecurrentBaseBoosted), by the kind of the rest.
RECURRENT_BASE_KINDS: dict[str, str] = {
    "xgboost_recurrent_base": "xgboost",
    "roofline_xgboost_recurrent_base": "roofline_xgboost",
}
ALL_KINDS: tuple[str, ...] = (*KINDS, PathRateBoosted.kind, *RECURRENT_BASE_KINDS)


def make_estimator(kind: str, layout: FeatureLayout, ep: str = "cpu") -> Estimator:
    """A fresh estimator of ``kind`` (one of :data:`ALL_KINDS`) for rows of execution provider ``ep`` (a recurrent
    base kind on ``cuda`` also models the CUDA Conv's bias pass, :class:`ConvBiasPass`, and ``xgboost_recurrent_base``
    on ``cuda`` grows :data:`CUDA_TREES`)."""
    if kind == "flops_baseline":
        return FlopsBaseline(layout)
    if kind == "random_forest":
        return Forest()
    if kind == "xgboost":
        return Boosted()
    if kind == "roofline_xgboost":
        return RooflineResidual(layout)
    if kind == PathRateBoosted.kind:
        return PathRateBoosted(layout)
    if kind == "xgboost_recurrent_base" and ep == "cuda":
        return RecurrentBaseBoosted(layout, Boosted(*CUDA_TREES), bias_pass=True)
    if kind in RECURRENT_BASE_KINDS:
        return RecurrentBaseBoosted(layout, make_estimator(RECURRENT_BASE_KINDS[kind], layout), bias_pass=ep == "cuda")
    raise ValueError(f"unknown regressor kind {kind!r}; known: {', '.join(ALL_KINDS)}")


def load_estimator(layout: FeatureLayout, entry: dict[str, Any], folder: Path) -> Estimator:
    """The estimator described by a saved ``entry`` (``kind`` plus its data or file name)."""
    loaders: dict[str, Callable[[FeatureLayout, dict[str, Any], Path], Estimator]] = {
        "flops_baseline": FlopsBaseline.load,
        "random_forest": Forest.load,
        "xgboost": Boosted.load,
        "roofline_xgboost": RooflineResidual.load,
        PathRateBoosted.kind: PathRateBoosted.load,
        **dict.fromkeys(RECURRENT_BASE_KINDS, RecurrentBaseBoosted.load),
    }
    kind = str(entry.get("kind"))
    if kind not in loaders:
        raise ValueError(f"unknown saved estimator kind {kind!r}")
    return loaders[kind](layout, entry, folder)


def _floats(values: Any) -> list[float]:
    return [float(v) for v in np.asarray(values, dtype=float).ravel()]


def dumps(data: dict[str, Any]) -> str:
    """JSON for a predictor file (indentation for diffs, no NaN: it is not JSON)."""
    return json.dumps(data, indent=1, allow_nan=False, default=_floats)
