"""The runtime's shape table: array extents of launches whose push constants would pass Vulkan's guaranteed
128 bytes (spirv/lower_memory.py moves them here), one entry per distinct list of extents.

Entries are u32 words in pages (storage buffers) that live as long as the runtime, so a recorded launch
(a replay, a Tape's gradient) binds its page for good; the shader reads its extents at the offset the push
constants give. A program's arrays take few shapes: the table stays a page or two.
"""
import numpy as np

PAGE_WORDS = 1 << 14


class ShapeTable:
    def __init__(self, device):
        self.device, self.pages, self.used, self.entries = device, [], PAGE_WORDS, {}

    def place(self, extents):
        """(page buffer, word offset) of the entry holding `extents` (a tuple of ints), written on first use."""
        entry = self.entries.get(extents)
        if entry is None:
            if self.used + len(extents) > PAGE_WORDS:
                self.pages.append(self.device.create_buffer(4 * max(PAGE_WORDS, len(extents))))
                self.used = 0
            page = self.pages[-1]
            # words no launch has read yet: writing them while earlier launches run is safe
            page.view(np.uint32)[self.used: self.used + len(extents)] = extents
            entry = self.entries[extents] = (page, self.used)
            self.used += len(extents)
        return entry


def shape_table(rt):
    """The runtime's shape table, made on first use."""
    table = getattr(rt, "shape_table", None)
    if table is None:
        table = rt.shape_table = ShapeTable(rt.device)
    return table
