"""The exception and warning classes of sparse-delta-memory 2.0.0's public surface.

``UnsupportedConfigurationError`` (a ValueError): a configuration sdm refuses before any work
because it cannot run it; the message names what was asked and what is supported. sdm raises it
for a layer call whose batch needs a bank of more rows than the op addresses, and for a layer
whose ``args`` were changed after construction in a field the layer fixes at construction
(docs/layer.md, "Changing the args").

``UntestedHardwareWarning`` (a UserWarning): issued once per process and CUDA device when a
layer first runs on a GPU of another compute capability than the tested one (9.0: H100 / H200).
Silence it with ``warnings.filterwarnings("ignore", category=sdm.UntestedHardwareWarning)``.
"""

from __future__ import annotations

import warnings

import torch


class UnsupportedConfigurationError(ValueError):
    """A configuration sdm refuses up front, before any work (a ValueError)."""


class UntestedHardwareWarning(UserWarning):
    """sdm runs on a GPU class its tests have not run on: the results are unverified."""


TESTED_CAPABILITIES = ((9, 0),)
_checked_devices: set[int] = set()


def warn_if_untested(device: torch.device) -> None:
    """One UntestedHardwareWarning per process and CUDA device whose compute capability is not
    in TESTED_CAPABILITIES; nothing for other devices."""
    if device.type != "cuda":
        return
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index in _checked_devices:
        return
    _checked_devices.add(index)
    capability = tuple(torch.cuda.get_device_capability(index))
    if capability not in TESTED_CAPABILITIES:
        name = torch.cuda.get_device_name(index)
        warnings.warn(f"sdm has not been tested on device {index} ({name}, compute capability "
                      f"{capability[0]}.{capability[1]}); its tests run on compute capability 9.0 (H100 / H200). "
                      "The results are unverified on this GPU.", UntestedHardwareWarning, stacklevel=3)
