"""Vector views: an ndarray of vec2 / vec4 / mat2 elements (IR: a scalar array whose last axes, of static extents,
hold one element) is bound as a runtime array of 2- or 4-component vectors, so a whole element moves in one
OpLoad / OpStore, as a hand-written shader's `vec2 x[]` does, instead of one load, index computation and (on
lavapipe) bounds check per component. A lone component is reached with one more AccessChain index (atomics
too). Found on MPM: its GLSL limit with float arrays and scalar loads was 1.08-1.17x slower than with vec2 ones.

A binding is viewed so when every access of the task names its component with constant indices (a computed
component index keeps the scalar view), the vector is at most 16 bytes (std430 gives vec3 a 16-byte stride,
so widths 3 stay scalar) and neither coarsening (lower_coarse.py) nor an address table (lower_addressed.py)
has it. Which accesses move whole elements is planned per block (`plan_block`): reads of two or more
components of one element (same binding, same index values) become one vector load at the first read,
writes of all its components one vector store at the last write, where nothing in between could observe
the difference (see the two scans). Debug builds view the arrays but keep each access (its bounds check).
"""
import math

from ..ir import nodes as N

MAX_VECTOR_BYTES = 16
SCAN = 256   # statements a group may span: longer scans from every access would make a large block quadratic


def element_width(array):
    """Scalars in one element of `array` (1 for a scalar array)."""
    return math.prod(array.element_shape)


def viewable(array):
    """Whether `array`'s elements fit a vector view (2 or 4 numbers, at most 16 bytes)."""
    w = element_width(array)
    return w in (2, 4) and not array.dtype.is_bool and w * array.dtype.nbytes <= MAX_VECTOR_BYTES


def leading(array):
    """Axes of `array` before its element's: what addresses one element."""
    return array.ndim - len(array.element_shape)


def component(s):
    """The component of its element access `s` names (row-major over the element's shape), or None when an
    index of it is not a constant within the element's extents."""
    k = 0
    for i, n in zip(s.indices[leading(s.array):], s.array.element_shape):
        if not isinstance(i, N.Const) or not 0 <= i.value < n:
            return None
        k = k * n + i.value
    return k


def vector_bindings(task):
    """The (array index, field) bindings of `task` that can be viewed as vectors (see the module docstring;
    the caller leaves out coarsened tasks and addressed bindings)."""
    ok, refused = set(), set()
    for s in list(N.walk(task.header)) + list(N.walk(task.body)):
        if type(s).ACCESSES_ARRAY:
            key = (s.array.index, s.field)
            (ok if viewable(s.array) and component(s) is not None else refused).add(key)
    return frozenset(ok - refused)


def _element(s):
    """What identifies the element `s` accesses: its binding and the identity of its leading index values."""
    return (s.array.index, s.field) + tuple(id(i) for i in s.indices[:leading(s.array)])


def _opaque(t):
    """A statement the scans cannot see past: nested blocks (they may access anything), or a jump."""
    return bool(type(t).BLOCK_FIELDS) or isinstance(t, (N.Break, N.Continue))


def plan_block(stmts, keys):
    """{statement: ("load", members) | ("store", members) | ("done",)} for the statements of one block that
    move whole elements of the vector-viewed bindings `keys`: a load group's first member loads the vector
    and gives every member its component (the others are "done"); a store group's last member stores the
    vector built from every member's value (the others are "done")."""
    plan, spans = {}, {}   # spans: element -> (first index, last index, members) of each of its store groups
    where = {t: k for k, t in enumerate(stmts)}
    for i, s in enumerate(stmts):
        if isinstance(s, N.GlobalStore) and (s.array.index, s.field) in keys and s not in plan:
            members = _store_group(stmts, i)
            if members:
                plan.update({m: ("done",) for m in members})
                plan[members[-1]] = ("store", members)
                spans.setdefault(_element(s), []).append((i, where[members[-1]], members))
    for i, s in enumerate(stmts):
        if isinstance(s, N.GlobalLoad) and (s.array.index, s.field) in keys and s not in plan:
            # a load inside a store group's span must not read the components whose stores wait for its end
            held = {component(m) for a, b, ms in spans.get(_element(s), ()) if a < i < b for m in ms if where[m] < i}
            members = _load_group(stmts, i, held)
            if len({component(m) for m in members}) >= 2:
                plan.update({m: ("done",) for m in members})
                plan[s] = ("load", members)
    return plan


def _load_group(stmts, i, written):
    """The loads of the element stmts[i] reads, from i on, that one vector load at i can serve: same guard,
    components not written since (`written`: components whose value in memory at i is not theirs). Stops at
    a write elsewhere (another binding may alias this one) or at what it cannot see past."""
    first = stmts[i]
    element, members, written = _element(first), [first], set(written)
    if component(first) in written:
        return []
    for t in stmts[i + 1:i + SCAN]:
        if _opaque(t):
            break
        if not type(t).ACCESSES_ARRAY:
            continue
        same = _element(t) == element
        if isinstance(t, N.GlobalLoad):
            if same and t.guard is first.guard and component(t) not in written:
                members.append(t)
        elif same and isinstance(t, N.GlobalStore):
            written.add(component(t))
        else:
            break
    return members


def _store_group(stmts, i):
    """The stores of every component of the element stmts[i] writes, from i on, when one vector store at the
    last of them does the same: in between only statements without memory effects on arrays and loads of
    this element's components not stored yet. None otherwise."""
    first = stmts[i]
    element, width = _element(first), element_width(first.array)
    members, stored = [first], {component(first)}
    for t in stmts[i + 1:i + SCAN]:
        if _opaque(t):
            return None
        if not type(t).ACCESSES_ARRAY:
            continue
        if _element(t) != element:
            return None
        if isinstance(t, N.GlobalLoad) and component(t) not in stored:
            continue
        if not isinstance(t, N.GlobalStore) or component(t) in stored:
            return None
        members.append(t)
        stored.add(component(t))
        if len(stored) == width:
            return members
    return None
