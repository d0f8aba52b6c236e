"""cache_format: object graphs to JSON and back (shared references, cycles, hashed objects), only for the
whitelisted classes, and nothing but BadData from any file, however damaged or hand-made."""
import json
import math
import random

import numpy as np
import pytest

from spvad.cache import format as F
from spvad import types as T
from spvad.ir import nodes as N
from spvad.ir.ops import Op


def sample_graph():
    a = N.Alloca(T.f32, "a")
    block = N.Block([])
    block.stmts.append(block)   # a cycle
    loop = N.RangeFor(N.Const(0, T.i32), N.Const(4, T.i32), 1, N.Block([N.LocalStore(a, N.Const(1.5, T.f32))]))
    return {
        "a": a, "again": a, "block": block, "loop": loop,
        "numbers": (None, True, 0, -7, 2 ** 70, 0.1, -0.0, math.inf, "µ", b"\x00\xff"),
        "nested": ((1, (2, a)), [a, [a]], {3, 4}, frozenset({T.f32, T.i32})),
        "keys": {(0, "grad"): "pre", 2: [a], T.f64: Op.ADD, frozenset({T.vec3}): None},
        "numpy": (np.float32(1.25), np.int32(-3), np.bool_(True)),
    }


def test_a_graph_survives_a_round_trip():
    g = F.loads(F.dumps(sample_graph()))
    assert g["a"] is g["again"] and type(g["a"]) is N.Alloca and g["a"].dtype == T.f32
    assert g["block"].stmts[0] is g["block"]
    assert g["loop"].body.stmts[0].slot is g["a"] and g["loop"].body.stmts[0].value.value == 1.5
    assert g["numbers"] == sample_graph()["numbers"] and math.copysign(1, g["numbers"][6]) == -1
    assert [type(v) for v in g["numbers"]] == [type(v) for v in sample_graph()["numbers"]]
    (one, (two, a)), lst, s, fs = g["nested"]
    assert (one, two, a) == (1, 2, g["a"]) and lst[0] is lst[1][0] is g["a"] and s == {3, 4}
    assert fs == frozenset({T.f32, T.i32})
    assert g["keys"] == {(0, "grad"): "pre", 2: [g["a"]], T.f64: Op.ADD, frozenset({T.vec3}): None}
    assert g["keys"][T.f64] is Op.ADD
    assert [(type(v), v) for v in g["numpy"]] == [(np.float32, 1.25), (np.int32, -3), (np.bool_, True)]
    assert F.dumps(g) == F.dumps(F.loads(F.dumps(g)))


def test_a_deep_chain_needs_no_recursion():
    x = N.Const(1.0, T.f32)
    for _ in range(20000):
        x = N.Compute(Op.ADD, (x, x), T.f32)
    y = F.loads(F.dumps(x))
    for _ in range(20000):
        assert y.args[0] is y.args[1]
        y = y.args[0]
    assert y.value == 1.0


class Local:
    pass


@pytest.mark.parametrize("obj", [Local(), len, Local, lambda: 0, np.zeros(3), bytearray(b"x"), {1: Local()}],
                         ids=["unlisted class", "builtin", "class object", "function", "numpy array",
                              "bytearray", "nested"])
def test_objects_outside_the_whitelist_are_not_stored(obj):
    with pytest.raises(F.NotStorable):
        F.dumps([obj])


def test_every_whitelisted_class_exists():
    assert set(F.WHITELIST) <= set(F.classes())


def test_every_ir_node_kind_is_whitelisted():
    names = F.classes()
    for obj in vars(N).values():
        if isinstance(obj, type) and obj.__module__ == N.__name__:
            assert names[f"{N.__name__}.{obj.__qualname__}"] is obj


def doc(classes, objects, root, order=None):
    order = list(range(len(objects))) if order is None else order
    return json.dumps({"classes": classes, "objects": objects, "order": order, "root": root}).encode()


@pytest.mark.parametrize("data", [
    doc(["builtins.eval"], [["o", 0, {}]], ["r", 0]),
    doc(["os.system"], [], ["e", 0, "x"]),
    doc(["posix.system"], [], None),
    doc(["spvad.ir.ops.Op"], [["o", 0, {}]], ["r", 0]),               # an enum is no object entry
    doc(["spvad.ir.nodes.walk"], [["o", 0, {}]], ["r", 0]),           # a whitelisted module's function,
    doc(["spvad.ir.nodes.Optional"], [["o", 0, {}]], ["r", 0]),       # a name it imports,
    doc(["spvad.ir.nodes.copy"], [["o", 0, {}]], ["r", 0]),           # a module it imports,
    doc(["spvad.ir.nodes.Stmt.operands"], [["o", 0, {}]], ["r", 0]),  # an attribute of a class in it
    doc([["spvad.ir.nodes.Block"]], [["o", 0, {}]], ["r", 0]),        # not a name
    doc(["spvad.ir.nodes.Alloca"], [["o", 0, {"dtype": {"a": 1}}]], ["r", 0]),   # a raw JSON object as value
    doc([], [["l", []]], ["r", 5]),                                    # a reference out of range
    doc([], [["l", []]], ["r", -1]),
    doc([], [["l", []]], ["q", 1]),                                    # an unknown tag
    doc([], [["x", []]], None),
    doc([], [["l", []]], None, order=[0, 0]),                          # not a permutation
    doc([], [], ["n", "O", "00"]),                                     # an object dtype
    doc([], [], ["b", "not base64!"]),
    doc(["spvad.types.DType"], [["o", 0, {"name": "f32"}], ["s", [["r", 0]]]], ["r", 1], order=[1, 0]),
    b"", b"[]", b"{", b"\xff\xfe", b'{"classes": 1}',
])
def test_bad_data_raises_bad_data(data):
    with pytest.raises(F.BadData):
        F.loads(data)


def test_damaged_data_raises_nothing_but_bad_data():
    good = F.dumps(sample_graph())
    rnd = random.Random(7)
    for _ in range(400):
        data = bytearray(good)
        if rnd.random() < 0.3:
            data = data[: rnd.randrange(len(data))]
        for _ in range(rnd.randrange(1, 4)):
            if data:
                data[rnd.randrange(len(data))] = rnd.randrange(256)
        try:
            F.loads(bytes(data))
        except F.BadData:
            pass


def test_edited_structure_raises_nothing_but_bad_data():
    """Edits a writer who knows JSON could make: any node of the document replaced by another value."""
    good = json.loads(F.dumps(sample_graph()))
    rnd = random.Random(11)
    replacements = [0, -1, 1.5, 10 ** 6, True, None, "r", "o", "t", [], {}, ["r", 0], ["t"], ["o", 0, {}],
                    ["e", 0, "ADD"], ["n", "<f4", "00"], {"a": ["r", 0]}]
    outcomes = set()
    for _ in range(1500):
        d = json.loads(json.dumps(good))
        slots = []

        def collect(v):
            for k in (v if isinstance(v, dict) else range(len(v))):
                slots.append((v, k))
                if isinstance(v[k], (list, dict)):
                    collect(v[k])
        collect(d)
        for _ in range(rnd.randrange(1, 3)):
            parent, k = rnd.choice(slots)
            parent[k] = json.loads(json.dumps(rnd.choice(replacements)))
        try:
            F.loads(json.dumps(d).encode())
            outcomes.add("loaded")
        except F.BadData:
            outcomes.add("bad")
    assert outcomes == {"loaded", "bad"}
