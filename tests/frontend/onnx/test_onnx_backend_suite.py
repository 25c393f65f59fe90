"""A fixed sample of ONNX's own backend node tests (onnx.backend.test.BackendTest) through pybuda's backend.

The full run (every node case, pass / fallback-pass / fail) is ``tools/onnx_backend_report.py``.
"""

import warnings

import onnx.backend.test

from pybuda.frontend.onnx.backend import PybudaBackend

SAMPLE = [
    "test_abs", "test_add_bcast", "test_relu", "test_sigmoid", "test_tanh", "test_exp", "test_sqrt",
    "test_leakyrelu", "test_elu", "test_selu", "test_softsign", "test_hardsigmoid", "test_hardswish",
    "test_matmul_3d", "test_matmul_4d", "test_gemm_transposeA",
    "test_maxpool_2d_default",
    "test_averagepool_2d_pads", "test_globalaveragepool", "test_globalmaxpool",
    "test_layer_normalization_2d_axis1", "test_softmax_axis_1", "test_logsoftmax_axis_1",
    "test_reshape_reordered_all_dims", "test_transpose_default", "test_flatten_axis1", "test_squeeze",
    "test_unsqueeze_axis_0", "test_concat_3d_axis_1", "test_split_equal_parts_1d_opset18",
    "test_slice_default_axes", "test_gather_0", "test_expand_dim_changed", "test_tile", "test_shape",
    "test_reduce_mean_keepdims_example", "test_reduce_sum_keepdims_example", "test_reduce_max_keepdims_example",
    "test_where_example", "test_equal", "test_resize_upsample_scales_nearest", "test_floor", "test_ceil",
    "test_argmax_default_axis_example",
]

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    backend_test = onnx.backend.test.BackendTest(PybudaBackend, __name__)
for name in SAMPLE:
    backend_test.include(f"^{name}_cpu$")

globals().update(backend_test.test_cases)
