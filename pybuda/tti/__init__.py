"""Device images (TT-Buda's TTI): compile once, offline, and run anywhere from data alone.

- :mod:`pybuda.tti.archive`: the file (a tar with a SHA-256 manifest) and every check made when reading it;
- :mod:`pybuda.tti.image`: :class:`TTDeviceImage`, its fields, ``save_to_disk`` and ``load_from_disk``;
- :mod:`pybuda.tti.capture`: a compiled TTDevice to an image (``TTDevice.compile_to_image``);
- :mod:`pybuda.tti.load`: an image to a running device (``TTDevice.load_image``).
"""

from pybuda.tti.image import IMAGE_VERSION, TTI_VERSION, TTDeviceImage  # noqa: F401

__all__ = ["TTDeviceImage", "IMAGE_VERSION", "TTI_VERSION"]
