"""A pipeline refusal on every Vulkan driver, for the tests of what follows one: the error names the kernel,
the backend and the driver's result, and the device stays usable.

lavapipe (Mesa) refuses a module whose first OpCapability is unknown, in vkCreateComputePipelines, and
says why ("Unhandled capability"): the real refusal. Other drivers need not refuse it (NVIDIA's accepted
it, and the validation layer reported the module), so there vkCreateComputePipelines itself is replaced,
inside the block, by one that fails with VK_ERROR_UNKNOWN, as a driver does for a module it cannot compile.
"""
import contextlib
import struct

import pytest

from spvad.rhi.vulkan.vkapi import vk


def poison_capability(code, cap=0x7777):
    """The module with its first OpCapability operand replaced by an unknown capability."""
    words = list(struct.unpack(f"<{len(code) // 4}I", code))
    i = 5
    while i < len(words):
        if words[i] & 0xFFFF == 17:  # OpCapability
            words[i + 1] = cap
            return struct.pack(f"<{len(words)}I", *words)
        i += words[i] >> 16
    raise ValueError("no OpCapability")


def is_lavapipe(device):
    return "llvmpipe" in device.info["name"].lower()


@contextlib.contextmanager
def driver_refuses(device):
    """Inside the block, a module passed through the yielded `poison` is refused by `device`'s driver.
    `poison.reason` is a regex the PipelineCreationError's text matches (the driver's reason or result)."""
    if is_lavapipe(device):
        poison = poison_capability
        poison.reason = "(?i)unhandled capability"
        yield poison
        return

    def refuse(*args, **kwargs):
        raise vk.VkErrorUnknown()

    def poison(code):
        return code
    poison.reason = "VK_ERROR_UNKNOWN"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(vk, "vkCreateComputePipelines", refuse)
        yield poison
