"""The runtime's scalar table: the scalar arguments of launches whose push constants would pass Vulkan's
guaranteed 128 bytes (spirv/lower_memory.py moves the last ones here), one entry of u32 words per distinct
list of values, placed at a position the push constants carry.

One storage buffer of SCALAR_RING_WORDS words, a ring kept for the runtime's life, so a recorded launch (a
replay, a Tape's gradient, a planned backward's batch) binds it for good; the shader reads word
`position % SCALAR_RING_WORDS`. Positions only grow: when the ring is full the device syncs (every launch
that reads an entry has then run), the entries are forgotten and placing goes on at the next lap. So push
constants packed before (a replay's, a batch's) never equal those of an entry placed since: whoever compares
push-constant bytes sees the change, and whoever resends them packs them again (launch/replay.py). Within a
lap, equal values share an entry (a Tape replaying the same scalars writes nothing).
"""
import numpy as np

from ..errors import ArgumentError
from ..spirv.lower_memory import SCALAR_RING_WORDS

POSITIONS = 1 << 32   # a position is a u32 push constant


class ScalarTable:
    def __init__(self, rt):
        self.rt, self.device, self.position, self.entries = rt, rt.device, 0, {}
        self.buffer = self.device.create_buffer(4 * SCALAR_RING_WORDS)
        self.words = self.buffer.view(np.uint32)

    def place(self, data):
        """The position of an entry holding `data` (bytes, whole u32 words), written unless this lap has it."""
        if self.rt.capture is not None:   # a later lap would overwrite what the captured launch reads
            raise ArgumentError("sp.capture() cannot record a launch whose scalar arguments pass the push "
                                "constants (they go to the runtime's scalar table, a ring reused as launches "
                                "go on); pass fewer scalars (e.g. in an ndarray) or launch it outside the "
                                "capture")
        position = self.entries.get(data)
        if position is None:
            n = len(data) // 4
            if n > SCALAR_RING_WORDS:
                raise ArgumentError(f"{n} words of scalar arguments past the push constants: the scalar table "
                                    f"holds {SCALAR_RING_WORDS}")
            at = self.position % SCALAR_RING_WORDS
            if at + n > SCALAR_RING_WORDS:   # the next lap: launches still to run may read these words
                self.device.sync()
                self.entries.clear()
                self.position, at = (self.position + SCALAR_RING_WORDS - at) % POSITIONS, 0
            # words no queued launch reads: writing them while earlier launches wait is safe (rhi/base.py)
            self.words[at: at + n] = np.frombuffer(data, np.uint32)
            position = self.entries[data] = self.position
            self.position = (self.position + n) % POSITIONS
        return position


def scalar_table(rt):
    """The runtime's scalar table, made on first use."""
    table = getattr(rt, "scalar_table", None)
    if table is None:
        table = rt.scalar_table = ScalarTable(rt)
    return table
