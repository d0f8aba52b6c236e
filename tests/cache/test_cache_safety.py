"""The on-disk compile cache can neither lie nor be abused: edited, corrupt or planted entries are never used
(recompiled instead, nothing in them runs), an edited spvad never loads what the old one compiled, a kernel
reading a user class sees its current attributes, the folder is private, other users' files are left alone,
and the folder stays within SPVAD_CACHE_MAX_MB."""
import base64
import enum
import json
import os
import pickle
import shutil
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

import spvad as sp
from spvad import cache
from spvad.cache import entries as cache_entries

kernel_module = sys.modules["spvad.kernel"]   # `spvad.kernel` the attribute is the decorator
MAGIC = b"\x03\x02\x23\x07"                   # the first word of a SPIR-V module, little-endian
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(sp.__file__)))   # the spvad under test, for children
AS_ROOT = hasattr(os, "getuid") and os.getuid() == 0
OTHER_UID = 4242


@sp.kernel
def affine(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = x[i] * 1.2345 + 0.5


@sp.kernel
def shifted(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = x[i] - 0.75


def run(kernel, x_np):
    x, y = sp.from_numpy(x_np), sp.ndarray(sp.f32, x_np.shape)
    kernel(x, y)
    return y.to_numpy()


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A fresh cache folder, and kernels that start as in a fresh process."""
    d = tmp_path / "cache"
    monkeypatch.setenv("SPVAD_CACHE_DIR", str(d))
    monkeypatch.delenv("SPVAD_CACHE_MAX_MB", raising=False)
    affine._cache.clear()
    shifted._cache.clear()
    yield d
    affine._cache.clear()
    shifted._cache.clear()


@pytest.fixture
def compiles(monkeypatch):
    """How many times the compiler ran."""
    count = []
    real = kernel_module.compile_kernel
    monkeypatch.setattr(kernel_module, "compile_kernel", lambda *a, **k: count.append(1) or real(*a, **k))
    return count


def entries(d):
    return sorted(p for p in d.iterdir() if p.suffix in (".spvad", ".pkl"))


def the_entry(d):
    found = entries(d)
    assert len(found) == 1, found
    return found[0]


def edit_spirv(path, edit, reseal=False):
    """Apply `edit` (bytes -> bytes) to the SPIR-V modules of the entry at `path`. The header (format and
    checksum) stays as it was unless `reseal`: then it is recomputed, as by a writer who knows the format."""
    data = path.read_bytes()
    if path.suffix == ".pkl":   # the format before sealed JSON: modules are raw bytes inside the pickle
        start = data.index(MAGIC)
        path.write_bytes(data[:start] + edit(data[start:]))
        return
    header, _, body = data.partition(b"\n")
    doc, edited = json.loads(body), []

    def walk(v):
        if isinstance(v, list) and len(v) == 2 and v[0] == "b":
            raw = base64.b64decode(v[1])
            if raw[:4] == MAGIC:
                v[1] = base64.b64encode(edit(raw)).decode()
                edited.append(v)
        elif isinstance(v, (list, dict)):
            for x in (v.values() if isinstance(v, dict) else v):
                walk(x)
    walk(doc)
    assert edited, "no SPIR-V module found in the entry"
    body = json.dumps(doc).encode()
    if reseal:
        header = cache_entries._header(path.stem, body)[:-1]
    path.write_bytes(header + b"\n" + body)


F32 = struct.Struct("<f")


def change_constant(module):
    old, new = F32.pack(1.2345), F32.pack(2.5)
    assert old in module
    return module.replace(old, new)


def flip_first_instruction(module):
    return module[:20] + bytes(b ^ 0xFF for b in module[20:24]) + module[24:]


# ---- entries that were edited, corrupted or planted --------------------------------------------------------
def test_entries_are_sealed_json_with_no_pickle_left(folder, rng):
    (folder).mkdir(mode=0o700)
    (folder / ("0" * 64 + ".pkl")).write_bytes(pickle.dumps(1))   # an entry of the old format
    run(affine, rng.uniform(0.5, 1.5, 8).astype(np.float32))
    entry = the_entry(folder)
    header, _, body = entry.read_bytes().partition(b"\n")
    assert entry.suffix == ".spvad" and header.startswith(b"spvad-cache 2 ")
    json.loads(body)


def test_a_changed_constant_under_a_stale_checksum_is_recompiled(folder, rng, compiles):
    x = rng.uniform(0.5, 1.5, 8).astype(np.float32)
    run(affine, x)
    edit_spirv(the_entry(folder), change_constant)
    affine._cache.clear()
    np.testing.assert_allclose(run(affine, x), x * np.float32(1.2345) + 0.5, rtol=1e-6)
    assert len(compiles) == 2
    affine._cache.clear()   # the bad entry was replaced by a good one
    np.testing.assert_allclose(run(affine, x), x * np.float32(1.2345) + 0.5, rtol=1e-6)
    assert len(compiles) == 2


@pytest.mark.parametrize("reseal", [False, True], ids=["stale-checksum", "resealed"])
def test_flipped_spirv_bits_are_recompiled(folder, rng, compiles, reseal):
    """Resealed: the checksum matches, so spirv-val (on in tests) must catch it before the driver sees it."""
    x = rng.uniform(0.5, 1.5, 8).astype(np.float32)
    run(affine, x)
    edit_spirv(the_entry(folder), flip_first_instruction, reseal=reseal)
    affine._cache.clear()
    np.testing.assert_allclose(run(affine, x), x * np.float32(1.2345) + 0.5, rtol=1e-6)
    assert len(compiles) == 2


@pytest.mark.parametrize("damage", ["truncated", "other key"])
def test_a_damaged_entry_is_deleted_and_recompiled(folder, rng, compiles, damage):
    x = rng.uniform(0.5, 1.5, 8).astype(np.float32)
    run(affine, x)
    entry = the_entry(folder)
    data = entry.read_bytes()
    if damage == "other key":   # a valid entry of another kernel, copied under this one's name
        run(shifted, x)
        other = [p for p in entries(folder) if p != entry][0]
        data = other.read_bytes()
    entry.write_bytes(data[: len(data) // 2] if damage == "truncated" else data)
    affine._cache.clear()
    np.testing.assert_allclose(run(affine, x), x * np.float32(1.2345) + 0.5, rtol=1e-6)
    assert len(compiles) == 2 + (damage == "other key")


def _planted_payload(marker):
    class Payload:   # what a writer of the folder could plant: code that runs when unpickled
        def __reduce__(self):
            return (open, (str(marker), "w"))
    return pickle.dumps(Payload())


def test_a_planted_pickle_payload_never_runs(folder, rng, tmp_path):
    x = rng.uniform(0.5, 1.5, 8).astype(np.float32)
    run(affine, x)
    marker = tmp_path / "payload-ran"
    entry = the_entry(folder)
    for path in (entry, entry.with_suffix(".pkl"), entry.with_suffix(".spvad")):
        path.write_bytes(_planted_payload(marker))
    affine._cache.clear()
    np.testing.assert_allclose(run(affine, x), x * np.float32(1.2345) + 0.5, rtol=1e-6)
    assert not marker.exists()


# ---- children: a fresh process each, the same cache folder ---------------------------------------------------
CHILD = '''
import sys
import numpy as np
import spvad as sp
kernel_module = sys.modules["spvad.kernel"]
compiled = []
_compile = kernel_module.compile_kernel
kernel_module.compile_kernel = lambda *a, **k: compiled.append(1) or _compile(*a, **k)

class Base:
    offset = 0.5

class Params(Base):
    dt = 0.1

@sp.kernel
def step(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = x[i] * 1.2345 + Params.dt + Params.offset

x = sp.from_numpy(np.ones(4, np.float32))
y = sp.ndarray(sp.f32, (4,))
step(x, y)
print("RESULT", round(float(y.to_numpy()[0]), 5), "compiled" if compiled else "cached")
'''


def run_child(script, cache_dir, root=ROOT, **env):
    """(the value, "compiled" or "cached") a child printed; `root`: the folder holding the spvad it imports."""
    env = dict(os.environ, SPVAD_CACHE_DIR=str(cache_dir), PYTHONPATH=str(root), **env)
    env.pop("SPVAD_CACHE", None)
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert p.returncode == 0 and lines, f"child failed ({p.returncode}):\n{p.stdout}\n{p.stderr[-3000:]}"
    _, value, how = lines[-1].split()
    return float(value), how


def test_a_class_attribute_edited_between_processes_is_seen(tmp_path):
    script, d = tmp_path / "child.py", tmp_path / "cache"
    script.write_text(CHILD)
    assert run_child(script, d) == (pytest.approx(1.2345 + 0.6), "compiled")
    script.write_text(CHILD.replace("dt = 0.1", "dt = 0.25"))                 # the class's source changed
    assert run_child(script, d) == (pytest.approx(1.2345 + 0.75), "compiled")
    assert run_child(script, d) == (pytest.approx(1.2345 + 0.75), "cached")    # a warm process skips the compiler
    script.write_text(CHILD.replace("offset = 0.5", "offset = 1.5").replace("dt = 0.1", "dt = 0.25"))
    assert run_child(script, d) == (pytest.approx(1.2345 + 1.75), "compiled")  # ... and so is a base class's


EDITED_COMPILER_CHILD = '''
import sys
import numpy as np
import spvad as sp
from spvad.cache import source_stamp
source_stamp.source_hash.__defaults__ = (0.0,)   # stats decide even right after the copy (no racy window)
kernel_module = sys.modules["spvad.kernel"]
compiled = []
_compile = kernel_module.compile_kernel
kernel_module.compile_kernel = lambda *a, **k: compiled.append(1) or _compile(*a, **k)

@sp.kernel
def affine(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = x[i] * 2.5 + 0.25

sp.init()
assert source_stamp._worker is not None, "sp.init took no source hash meanwhile"
x, y = sp.from_numpy(np.arange(4, dtype=np.float32)), sp.ndarray(sp.f32, (4,))
affine(x, y)
print("RESULT", float(y.to_numpy()[3]), "compiled" if compiled else "cached")
'''


def test_an_edited_compiler_never_loads_the_old_compilers_entry(tmp_path):
    """A copy of spvad, run in fresh processes sharing a cache folder: a warm process loads the entry (the
    hash sp.init takes in a thread is the same in every process); after an edit of the copy's lowering
    (multiplication emitted as addition) the next process compiles with it and gets its result."""
    tree, d, script = tmp_path / "tree", tmp_path / "cache", tmp_path / "child.py"
    shutil.copytree(os.path.dirname(sp.__file__), tree / "spvad", ignore=shutil.ignore_patterns("__pycache__"))
    script.write_text(EDITED_COMPILER_CHILD)
    assert run_child(script, d, tree) == (3 * 2.5 + 0.25, "compiled")
    assert run_child(script, d, tree) == (3 * 2.5 + 0.25, "cached")
    ops = tree / "spvad" / "spirv" / "lower_ops.py"
    text = ops.read_text()
    assert text.count("IROp.MUL: _kinds(f=_op(Op.OpFMul)") == 1
    ops.write_text(text.replace("IROp.MUL: _kinds(f=_op(Op.OpFMul)", "IROp.MUL: _kinds(f=_op(Op.OpFAdd)"))
    assert run_child(script, d, tree) == (3 + 2.5 + 0.25, "compiled")


def test_flipped_spirv_bits_never_reach_the_driver(tmp_path):
    """Without validation (the default outside tests) only the checksum stands between the file and the driver."""
    script, d = tmp_path / "child.py", tmp_path / "cache"
    script.write_text(CHILD)
    run_child(script, d, SPVAD_VALIDATION="0")
    edit_spirv(the_entry(d), flip_first_instruction)
    assert run_child(script, d, SPVAD_VALIDATION="0") == (pytest.approx(1.2345 + 0.6), "compiled")


# ---- what the key describes: every global a kernel reads, by value ---------------------------------------------
G = None


@sp.kernel
def reads_g(x: sp.Array):
    for i in range(x.shape[0]):
        x[i] = x[i] + G.value


class Plain:
    value = 0.1


class Child(Plain):
    pass


class Outer:
    class Inner:
        value = 0.1


class WithProperty:
    @property
    def value(self):
        return 0.1


class Color(enum.IntEnum):
    RED = 1


def helper():
    pass


def _set(obj, name, v):
    setattr(obj, name, v)


# (global G, change made to it): the key changes, or the kernel is never cached
DESCRIBED = {
    "class attribute": (lambda: Plain, lambda g: _set(Plain, "value", 0.2)),
    "inherited attribute": (lambda: Child, lambda g: _set(Plain, "value", 0.3)),
    "nested class": (lambda: Outer, lambda g: _set(Outer.Inner, "value", 0.2)),
    "instance attribute": (lambda: Plain(), lambda g: _set(g, "value", 0.5)),
    "instance's class": (lambda: Plain(), lambda g: _set(Plain, "other", 1)),
    "function attribute": (lambda: helper, lambda g: _set(helper, "value", 7)),
    "enum member value": (lambda: Color, lambda g: _set(sys.modules[__name__], "Color",
                                                        enum.IntEnum("Color", {"RED": 2}))),
}
UNCACHEABLE = {
    "property": lambda: WithProperty(),
    "list": lambda: [0.1],
    "dict": lambda: {"value": 0.1},
    "big numpy array": lambda: np.zeros(1000, np.float32),
    "numpy object array": lambda: np.array([None, 1], dtype=object),
}


@pytest.fixture
def restore_globals():
    saved = (Plain.__dict__.copy(), Outer.Inner.value, helper.__dict__.copy(), Color)
    yield
    global G
    G = None
    for k in set(Plain.__dict__) - set(saved[0]):
        delattr(Plain, k)
    Plain.value, Outer.Inner.value = saved[0]["value"], saved[1]
    helper.__dict__.clear()
    helper.__dict__.update(saved[2])
    sys.modules[__name__].Color = saved[3]


@pytest.mark.parametrize("case", sorted(DESCRIBED))
def test_a_change_to_what_a_kernel_reads_changes_its_key(case, restore_globals):
    global G
    make, change = DESCRIBED[case]
    G = make()
    before = cache.fingerprint(reads_g.fn)
    change(G)
    if case == "enum member value":
        G = sys.modules[__name__].Color
    assert cache.fingerprint(reads_g.fn) != before


@pytest.mark.parametrize("case", sorted(UNCACHEABLE))
def test_a_global_that_cannot_be_described_is_never_cached(case, restore_globals):
    global G
    G = UNCACHEABLE[case]()
    assert cache.entry_key(reads_g, (), ()) is None


# ---- the folder -----------------------------------------------------------------------------------------------
def test_a_new_cache_folder_is_private(folder, rng):
    run(affine, rng.uniform(0.5, 1.5, 8).astype(np.float32))
    assert folder.stat().st_mode & 0o777 == 0o700
    assert all(p.stat().st_mode & 0o077 == 0 for p in entries(folder))


def _unsafe(d, how):
    d.mkdir(mode=0o700)
    if how == "another user's":
        os.chown(d, OTHER_UID, -1)
    else:
        d.chmod({"group-writable": 0o770, "world-writable": 0o777}[how])


@pytest.mark.parametrize("how", ["group-writable", "world-writable",
                                 pytest.param("another user's", marks=pytest.mark.skipif(
                                     not AS_ROOT, reason="needs root to chown"))])
def test_an_unsafe_folder_turns_the_cache_off(folder, rng, compiles, how):
    _unsafe(folder, how)
    assert cache.cache_dir() is None
    x = rng.uniform(0.5, 1.5, 8).astype(np.float32)
    np.testing.assert_allclose(run(affine, x), x * np.float32(1.2345) + 0.5, rtol=1e-6)
    assert entries(folder) == []
    assert folder.stat().st_mode & 0o777 == (0o700 if how == "another user's" else
                                            {"group-writable": 0o770, "world-writable": 0o777}[how])


def test_the_default_folder_is_made_private(tmp_path, monkeypatch):
    """Older versions created ~/.cache/spvad 0755 (0775 under umask 002): this user's own folder is fixed."""
    monkeypatch.delenv("SPVAD_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    d = tmp_path / ".cache" / "spvad"
    d.mkdir(parents=True)
    d.chmod(0o775)
    assert cache.cache_dir() == str(d)
    assert d.stat().st_mode & 0o777 == 0o700


@pytest.mark.skipif(not AS_ROOT, reason="needs root to chown")
def test_an_entry_of_another_user_is_ignored_and_left_alone(folder, rng, compiles):
    x = rng.uniform(0.5, 1.5, 8).astype(np.float32)
    run(affine, x)
    entry = the_entry(folder)
    edit_spirv(entry, change_constant, reseal=True)   # well-formed, but not ours: must not be used
    os.chown(entry, OTHER_UID, -1)
    data = entry.read_bytes()
    affine._cache.clear()
    np.testing.assert_allclose(run(affine, x), x * np.float32(1.2345) + 0.5, rtol=1e-6)
    assert len(compiles) == 2
    assert entry.read_bytes() == data and entry.stat().st_uid == OTHER_UID


# ---- the size bound -------------------------------------------------------------------------------------------
def _plant(d, name, size, age, uid=None):
    p = d / name
    p.write_bytes(b"x" * size)
    t = time.time() - age
    os.utime(p, (t, t))
    if uid is not None:
        os.chown(p, uid, -1)
    return p


def test_eviction_drops_the_least_recently_used_entries(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    old = [_plant(d, f"{k:064x}.spvad", 1000, age=500 - k) for k in range(4)]   # old[0] the least recent
    pipelines = _plant(d, "vk-pipelines-1-2-ab.bin", 1000, age=10)   # the VkPipelineCache: an entry too
    other = _plant(d, "notes.txt", 5000, age=9999)                   # not the cache's: never touched
    pkl = _plant(d, "f" * 64 + ".pkl", 10, age=1)                     # the old format: always removed
    dead_tmp, live_tmp = _plant(d, "tmpa.tmp", 10, age=99999), _plant(d, "tmpb.tmp", 10, age=1)
    foreign = _plant(d, "e" * 64 + ".spvad", 1000, age=9999, uid=OTHER_UID) if AS_ROOT else None
    monkeypatch.setenv("SPVAD_CACHE_MAX_MB", str(3400 / (1 << 20)))   # 5000 bytes: trimmed to 3060 (90%)
    cache.evict(str(d))
    left = set(d.iterdir())
    assert left >= {old[2], old[3], pipelines, other, live_tmp}
    assert not left & {old[0], old[1], pkl, dead_tmp}
    assert foreign is None or foreign in left


def test_loading_marks_an_entry_used_and_storing_evicts(folder, rng, monkeypatch):
    x = rng.uniform(0.5, 1.5, 8).astype(np.float32)
    run(affine, x)
    entry = the_entry(folder)
    os.utime(entry, (1, 1))
    affine._cache.clear()
    run(affine, x)   # a hit touches the entry
    assert entry.stat().st_mtime > time.time() - 60
    os.utime(entry, (1, 1))
    monkeypatch.setenv("SPVAD_CACHE_MAX_MB", str(entry.stat().st_size * 1.5 / (1 << 20)))
    run(shifted, x)   # a second entry passes the bound: the least recently used goes
    assert not entry.exists() and len(entries(folder)) == 1


# ---- every kind of compiled kernel is stored (an object outside cache_format.WHITELIST would silently not be) --
@sp.kernel
def powers(x: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for _ in range(n):   # adstack sized at launch
            v = v * 0.5 + sp.sin(v)
        while v < 4.0:       # adstack sized by the depth probe
            v = v * 1.25 + 0.1
        y[i] = v


@sp.kernel
def winner(x: sp.Array, m: sp.Array):
    for i in range(x.shape[0]):
        sp.atomic_max(m[None], x[i] * 2.0)   # derivative kernels get scratch arrays (extremum ties)


KINDS = {
    "primal": (powers, "primal"), "reverse": (powers, "reverse"), "dual": (powers, "dual"),
    "checked": (powers, "checked"), "extremum reverse": (winner, "reverse"), "extremum dual": (winner, "dual"),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_of_compiled_kernel_is_stored_and_loaded(folder, rng, compiles, kind):
    kernel, mode = KINDS[kind]
    x = sp.from_numpy(rng.uniform(0.5, 1.5, 8).astype(np.float32), needs_grad=True, needs_dual=True)
    if kernel is powers:
        args = (x, sp.ndarray(sp.f32, (8,), needs_grad=True, needs_dual=True), 3)
    else:
        args = (x, sp.ndarray(sp.f32, (), needs_grad=True, needs_dual=True))
    specs = kernel._bind(args)[0]
    kernel._cache.clear()
    first = kernel._compiled(specs, mode)
    assert len(entries(folder)) == 1, "not stored: does it hold a class outside cache_format.WHITELIST?"
    kernel._cache.clear()
    again = kernel._compiled(specs, mode)
    assert len(compiles) == 1
    assert [ct.lowered.spirv for ct in again.tasks] == [ct.lowered.spirv for ct in first.tasks]
    assert type(again.facts) is type(first.facts) and again.ir.scratch == first.ir.scratch
