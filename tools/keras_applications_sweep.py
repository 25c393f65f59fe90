"""Keras applications (random weights) through pybuda's TensorFlow frontend, each compared with Keras itself.

Each model is built with ``weights=None`` at a small input size, its batch norms given non-trivial statistics,
converted by ``pybuda.TFModule`` (tf2onnx, then the ONNX importer), compiled for a golden Wormhole B0
``TTDevice`` and run once on a random image. One line per model: PCC and largest difference against Keras,
whether any op fell back to the CPU, wall time; or the error (a ``pybuda.errors`` class is a clean refusal,
anything else a crash).

Usage::

    python tools/keras_applications_sweep.py                          # the default list, Float32/HiFi4
    python tools/keras_applications_sweep.py --df default DenseNet121:64 Xception:75
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import torch  # noqa: E402

#: name:input size (each application's minimum or a little above; small keeps the golden run short).
DEFAULT_MODELS = ["MobileNet:64", "MobileNetV2:64", "MobileNetV3Small:96", "MobileNetV3Large:64", "DenseNet121:64",
                  "EfficientNetB0:64", "EfficientNetV2B0:64", "Xception:75", "InceptionV3:75", "InceptionResNetV2:75",
                  "NASNetMobile:96", "VGG16:64", "ResNet50V2:64", "ConvNeXtTiny:64"]


def _randomize_batch_norms(model, layers, seed: int = 1) -> None:
    """Non-trivial moving statistics and affine parameters for every four-weight BatchNormalization."""
    r = np.random.default_rng(seed)
    for layer in model.layers:
        if isinstance(layer, layers.BatchNormalization) and len(layer.get_weights()) == 4:
            c = layer.get_weights()[0].shape
            layer.set_weights([(1 + 0.1 * r.standard_normal(c)).astype(np.float32),
                               (0.1 * r.standard_normal(c)).astype(np.float32),
                               (0.1 * r.standard_normal(c)).astype(np.float32),
                               (0.5 + np.abs(r.standard_normal(c))).astype(np.float32)])


def run_one(name: str, size: int, float32: bool):
    """(PCC, max abs difference, fell back) of application ``name`` at ``size`` px against Keras."""
    import keras

    import pybuda
    from pybuda.verify import calculate_pcc

    keras.utils.set_random_seed(0)
    build = getattr(keras.applications, name)
    try:
        model = build(weights=None, input_shape=(size, size, 3), classifier_activation=None)
    except TypeError:  # applications without a classifier_activation argument
        model = build(weights=None, input_shape=(size, size, 3))
    _randomize_batch_norms(model, keras.layers)
    x = torch.rand(1, size, size, 3)
    want = torch.from_numpy(np.asarray(model(x.numpy(), training=False))).float()
    pybuda.pybuda_reset()
    extra = {}
    if float32:
        pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32,
                                         accumulate_df=pybuda.DataFormat.Float32,
                                         math_fidelity=pybuda.MathFidelity.HiFi4)
        extra["fp32_fallback"] = pybuda.DataFormat.Float32
    tt = pybuda.TTDevice("tt0", module=pybuda.TFModule(name.lower(), model),
                         arch=pybuda.BackendDevice.Wormhole_B0, **extra)
    got = pybuda.run_inference(inputs=[(x,)]).get(timeout=1800)[0].value().float()
    fell_back = tt.cpu_fallback_device_pre is not None or tt.cpu_fallback_device_post is not None
    return calculate_pcc(got, want), (got - want).abs().max().item(), fell_back


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=DEFAULT_MODELS, help="name:size, e.g. DenseNet121:64")
    ap.add_argument("--df", choices=("float32", "default"), default="float32",
                    help="Float32/HiFi4 everywhere, or pybuda's default formats")
    args = ap.parse_args(argv)
    from pybuda.errors import PybudaError

    for spec in args.models:
        name, size = spec.split(":")
        start = time.perf_counter()
        try:
            pcc, diff, fell_back = run_one(name, int(size), args.df == "float32")
            line = f"pcc {pcc:.5f}  max diff {diff:.3g}  fallback {fell_back}"
        except PybudaError as e:
            line = f"ERROR {type(e).__name__}: {str(e)[:300]}"
        except Exception as e:  # anything else is a crash worth reporting, not a reason to stop the sweep
            line = f"CRASH {type(e).__module__}.{type(e).__name__}: {str(e)[:300]}"
        print(f"{name:20s} {size:>4s} {args.df:8s} {line}  ({time.perf_counter() - start:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
