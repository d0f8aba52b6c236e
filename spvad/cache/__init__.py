"""The on-disk compile cache: a compiled kernel specialisation stored under a key of everything that can
change it (key.py), as sealed data-only entries (entries.py, format.py) in a private folder (folder.py); the
key includes a stamp of spvad's own sources (source_stamp.py) and the names a kernel reads (variable_names.py).

May import: pipeline (what it stores), frontend, ir, spirv, types, errors. Never imports the runtime, a device,
kernel.py or a Tape: kernel.py calls it with what it needs, and runtime.py reads only folder.py and
source_stamp.py."""
from .entries import evict, load_compiled, store_compiled
from .folder import cache_dir
from .key import Uncacheable, entry_key, fingerprint, global_values

__all__ = ["cache_dir", "entry_key", "evict", "fingerprint", "global_values", "load_compiled", "store_compiled",
           "Uncacheable"]
