"""Helpers shared by the NaN/infinity tests and the comparison tests on the golden device."""

import pybuda

ARCHS = {"wh": pybuda.BackendDevice.Wormhole_B0, "gs": pybuda.BackendDevice.Grayskull}


def configure(df) -> None:
    """Make ``df`` (a DataFormat, or None for the default) the compile's default data format."""
    if df is not None:
        pybuda.set_configuration_options(default_df_override=df)


def run_on_device(module, inputs, arch):
    """Run ``module`` on ``inputs`` on the golden device of ``arch`` ("wh" or "gs"); every op must run there."""
    tt = pybuda.TTDevice("tt0", module=module, arch=ARCHS[arch])
    got = [t.value() for t in pybuda.run_inference(inputs=[inputs]).get()]
    assert tt.cpu_fallback_device_pre is None and tt.cpu_fallback_device_post is None  # all on the device
    return got
