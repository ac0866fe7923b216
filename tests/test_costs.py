"""FLOPs of the operators the ``operators`` probes brought in (analysis.costs): transposed convolutions counted on
their input, recurrent layers over their steps and directions."""

from __future__ import annotations

from hase_dagster.analysis.costs import estimate_flops
from hase_dagster.analysis.graph import TensorInfo


def test_a_transposed_convolutions_flops_count_each_input_element_against_its_weight_slice() -> None:
    # 64 -> 32 channels, 2x2 kernel, stride 2, on an 8x8 map: each input element meets 32 x 4 weights
    inputs = [TensorInfo("x", "float", (2, 64, 8, 8)), TensorInfo("w", "float", (64, 32, 2, 2))]
    flops = estimate_flops("ConvTranspose", {"strides": [2, 2]}, inputs, [TensorInfo("y", "float", (2, 32, 16, 16))])
    assert flops == 2 * (2 * 64 * 8 * 8) * 32 * 4  # counted on the output, as before, it read 2 * 2x32x16x16 * 32 * 4


def test_a_recurrent_layers_flops_grow_with_its_steps_and_directions() -> None:
    def lstm(steps: int, directions: int) -> int:
        x, w, r = (steps, 4, 80), (directions, 4 * 96, 80), (directions, 4 * 96, 96)
        inputs = [TensorInfo(n, "float", s) for n, s in (("x", x), ("w", w), ("r", r))]
        return estimate_flops("LSTM", {}, inputs, [TensorInfo("y", "float", (steps, directions, 4, 96))])

    assert lstm(100, 1) > 2 * 100 * 4 * (4 * 96) * (80 + 96)  # the products, and the gates beside them
    assert lstm(200, 1) == 2 * lstm(100, 1) and lstm(100, 2) == 2 * lstm(100, 1)
