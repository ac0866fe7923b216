"""Leave-one-family-out view of the CUDA kernel-list agreement: rules learned without one
architecture family (and without the held-out variants), scored on that family.

Usage: .venv/bin/python results/static-detection/leave_one_family_out.py
"""

import json
import sys

sys.path.insert(0, "results/static-detection")
import cuda_agreement as ca

files, kernels = ca.load_cases()
files = files[files.variant_id.isin(kernels)]
family = files.family.fillna(
    files.model_name.map(
        lambda n: (
            "residual_cnn"
            if n.startswith("resnet")
            else (
                "mobile"
                if "mobilenet" in n or "efficientnet" in n
                else ("text_transformer" if n.startswith("transformer") else None)
            )
        )
    )
)
files = files.assign(family=family.fillna(files.model_name))
out = {}
for name in sorted(files.family.unique()):
    keep = files[(files.family != name) & ~files.held_out]
    rules = ca.learn_rules(
        ((ca.model_of(r), kernels[r.variant_id]) for r in keep.itertuples()), "cuda", ca.ORT_VERSION, ca.DEVICE
    )
    out[name] = ca.summary(ca.evaluate(rules, files, kernels, files[files.family == name]))
    out[name]["architectures"] = sorted(files[files.family == name].model_name.unique())
    print(name, out[name], flush=True)
json.dump(out, open("results/static-detection/cuda_leave_one_family_out.json", "w"), indent=1)
