"""The expression half of the frontend's AST visitor (KernelBuilder adds statements): name lookup through
scopes and globals, attributes, subscripts, operators, short-circuit logic, conditional expressions; calls
go to the tables of calls.py."""
import ast

from .. import types as T
from ..ir import nodes as N
from ..ir.emit import PY_SCALARS, py_dtype
from . import array_reads, calls
from .array_lists import ArrayList, AttributeSite, FixedSite, holds_arrays
from .arrays import captured_array, element_shape, list_item, load_element, subscript_target, user_ndim
from .local_arrays import (constant_items, list_literal, local_group, read_element, read_local_element,
                           repeated_list, tuple_item)
from .matrices import constant_matrix, matrix_attribute
from .methods import METHODS, BoundMethod, UnboundMethod
from .objects import ObjectRef, attribute, is_object, is_root_object
from .operators import ValueEmitter
from .structs import StructValue, struct_attribute
from .values import ENDED, ArrayRead, FieldRef, Lazy, ShapeRef, TemplateValue
from .vectors import (COMPONENTS, MatValue, VecArg, VecSlots, VecValue, constant_vector, is_constant_matrix,
                      is_constant_vector, load_vector_slots, shaped, vector_ifexp)


class ExprVisitor(ValueEmitter, ast.NodeVisitor):
    # ---- names and subscripts ----
    def visit_Name(self, node):
        return self.load_name(node.id)

    def load_name(self, name):
        if name in self.scope.names:
            v = self.scope.names[name]
            if isinstance(v, N.Alloca):
                self.check_same_task(name, v)
                return self.emit(N.LocalLoad(v))
            if isinstance(v, VecSlots):
                return load_vector_slots(self, name, v)
            if isinstance(v, N.ScalarParam):
                return self.emit(N.ScalarArg(v))
            if isinstance(v, VecArg):
                return shaped([self.emit(N.ScalarArg(p)) for p in v.params], v.shape)
            if v is ENDED:
                self.error(f"loop index '{name}' is only defined inside its loop")
            if isinstance(v, ArrayRead):
                return array_reads.value_of(self, v)
            if isinstance(v, Lazy):
                saved, self.scope = self.scope, v.scope
                try:
                    value = self.visit(v.node)
                    return value if v.index is None else self.as_tuple(value)[v.index]
                finally:
                    self.scope = saved
            if isinstance(v, TemplateValue):
                return self.global_object(name, v.value, FixedSite(name, v.value)
                                          if holds_arrays(v.value) or is_object(v.value) else None)
            return v
        obj = self.src.lookup(name, KeyError)
        if obj is KeyError:
            self.error(f"unknown name '{name}'")
        return self.global_object(name, obj)

    def check_same_task(self, name, local):
        if not self.in_this_task(local):
            self.error(f"local '{name}' belongs to another top-level statement (a separate dispatch); "
                       "compute it inside this loop or pass it through an array")

    def global_object(self, name, obj, site=None):
        """What a global name (or `site`: a list item, an attribute, a sp.template() value) refers to, in a
        kernel: an array, constants, or the Python object for attribute access and calls."""
        if getattr(obj, "_spvad_ndarray", False):
            return captured_array(self, name, obj, site)
        if is_root_object(obj) or site is not None and is_object(obj):   # self.x, sim.v: objects.py
            return ObjectRef(obj, site or self.src.site(name))
        if isinstance(obj, (int, float, bool)):
            return obj
        if holds_arrays(obj):   # r[level][i, j]: items picked by compile-time integers (arrays.list_item)
            return ArrayList(site or self.src.site(name), obj)
        if isinstance(obj, (list, tuple)):   # of numbers: constants; else (funcs, ...) for sp.static loops
            return constant_items(obj) or obj
        if is_constant_vector(obj):
            return constant_vector(self, obj) or obj
        if is_constant_matrix(obj):
            return constant_matrix(self, obj) or obj
        return obj   # modules, functions, dtypes: resolved further by attribute access or calls

    def visit_Attribute(self, node):
        base = self.visit(node.value)
        if isinstance(base, ObjectRef):   # a method's self, a data-oriented or dataclass object (objects.py)
            return attribute(self, base, node.attr)
        if isinstance(base, StructValue):   # a dataclass argument (structs.py)
            return struct_attribute(self, base, node.attr)
        if isinstance(base, N.ArrayParam):
            if node.attr == "shape":
                return ShapeRef(base)
            if node.attr in ("grad", "dual"):
                if not (base.needs_grad if node.attr == "grad" else base.needs_dual):
                    self.error(f"array '{base.name}' has no .{node.attr} (create it with needs_{node.attr}=True)")
                return FieldRef(base, node.attr)
            shape = element_shape(self, base)
            if node.attr in ("n", "m") and len(shape) > "nm".index(node.attr):   # Taichi's a.n: a[i]'s width
                return shape["nm".index(node.attr)]
            self.error(f"arrays have no attribute '{node.attr}' in kernels")
        if isinstance(base, VecValue) and node.attr in METHODS:   # v.dot(w), M.transpose(), ...
            return BoundMethod(base, node.attr)
        if isinstance(base, MatValue):
            return matrix_attribute(self, base, node.attr)
        if isinstance(base, VecValue):
            return self.swizzle(base, node.attr)
        if isinstance(base, (N.Stmt,) + PY_SCALARS):
            self.error(f"values have no attribute '{node.attr}'")
        if (base is T.Vector or base is T.Matrix) and node.attr in METHODS and not hasattr(base, node.attr):
            return UnboundMethod(base.__name__, node.attr)   # sp.Vector.normalized(v, eps), Taichi-style
        try:
            obj = getattr(base, node.attr)
        except AttributeError:
            self.error(f"'{getattr(base, '__name__', base)}' has no attribute '{node.attr}'")
        if isinstance(obj, (list, tuple)) or is_constant_vector(obj) or is_constant_matrix(obj):
            # consts.G: a constant, as when read by its global name (a list of ndarrays: read at each launch)
            return self.global_object(node.attr, obj, AttributeSite(base, node.attr))
        return obj

    def visit_Subscript(self, node):
        local = local_group(self, node)
        if local is not None:   # a vector / matrix local: a runtime index reads one element (SlotSelect)
            key = self.visit(node.slice)
            value = read_local_element(self, *local, key)
            return value if value is not None else read_element(self, self.visit(node.value), key)
        base = self.visit(node.value)
        if isinstance(base, ShapeRef):
            k, ndim = self.visit(node.slice), user_ndim(self, base.array)
            if not isinstance(k, int) or not -ndim <= k < ndim:
                self.error(f"shape index must be a constant in range for a {ndim}-d array")
            return self.emit(N.ArrayShape(base.array, k % ndim))
        if isinstance(base, (N.ArrayParam, FieldRef)):
            arr, field, idx = subscript_target(self, node)
            return load_element(self, arr, field, idx)
        if isinstance(base, VecValue):
            return read_element(self, base, self.visit(node.slice))
        if isinstance(base, tuple):
            return tuple_item(self, base, self.visit(node.slice))
        if isinstance(base, ArrayList):
            return list_item(self, base, self.visit(node.slice))
        self.error("only arrays, shapes, vectors, matrices, tuples and lists can be indexed")

    def visit_Slice(self, node):
        """`v[a:b:c]` with compile-time bounds: a Python slice (vectors and tuples take it)."""
        bounds = [None if e is None else self.visit(e) for e in (node.lower, node.upper, node.step)]
        if not all(k is None or (isinstance(k, int) and not isinstance(k, bool)) for k in bounds):
            self.error("slice bounds must be compile-time integers")
        return slice(*bounds)

    def swizzle(self, v, attr):
        if attr == "n":   # Taichi's v.n: the length, a compile-time constant
            return v.n
        if not 1 <= len(attr) <= 4 or any(c not in COMPONENTS for c in attr):
            self.error(f"vectors have no attribute '{attr}' (use .x .y .z .w or v[k])")
        comps = [read_element(self, v, COMPONENTS[c]) for c in attr]
        return comps[0] if len(comps) == 1 else VecValue(comps)

    # ---- expressions ----
    OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
           ast.Pow: "**", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>",
           ast.MatMult: "@", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}

    def visit_Constant(self, node):
        if isinstance(node.value, (bool, int, float)) or node.value is None:
            return node.value
        self.error(f"unsupported constant {node.value!r} in a kernel")

    def visit_Tuple(self, node):
        return tuple(self.visit(e) for e in node.elts)

    def visit_List(self, node):
        return list_literal(self, node)

    def visit_BinOp(self, node):
        def repeats_list(n):
            return isinstance(n.op, ast.Mult) and (isinstance(n.left, ast.List) or isinstance(n.right, ast.List))

        if repeats_list(node):
            return repeated_list(self, node)
        # `a + b + c + ...` nests leftwards, one level per operator: folded in a loop, in Python's order (the
        # left operand, then each right one), since one expression may chain thousands of terms
        chain = []
        while isinstance(node, ast.BinOp) and not repeats_list(node):
            if type(node.op) not in self.OPS:
                self.error("unsupported operator")
            chain.append(node)
            node = node.left
        value = self.visit(node)
        for n in reversed(chain):
            value = self.binop(self.OPS[type(n.op)], value, self.visit(n.right))
        return value

    def visit_UnaryOp(self, node):
        sym = {ast.USub: "-", ast.UAdd: "+", ast.Not: "not", ast.Invert: "~"}[type(node.op)]
        return self.unary(sym, self.visit(node.operand))

    def visit_Compare(self, node):
        result, left = None, self.visit(node.left)
        for op, comp in zip(node.ops, node.comparators):
            if type(op) not in self.OPS:
                self.error("unsupported comparison (is / in)")
            right = self.visit(comp)
            c = self.binop(self.OPS[type(op)], left, right)
            result = c if result is None else self.binop("&", self.to_bool(result), self.to_bool(c))
            left = right
        return result

    def visit_BoolOp(self, node):
        is_and = isinstance(node.op, ast.And)
        return self.short_circuit(node.values, is_and)

    def short_circuit(self, values, is_and):
        first = self.to_bool(self.visit(values[0]))
        if len(values) == 1:
            return first
        if isinstance(first, bool):
            return self.short_circuit(values[1:], is_and) if first == is_and else first
        rest_block = N.Block()
        saved, self.block = self.block, rest_block
        rest = self.to_bool(self.short_circuit(values[1:], is_and))
        self.block = saved
        if isinstance(rest, bool):
            self.block.stmts.extend(rest_block.stmts)
            return first if rest == is_and else rest
        if self.is_pure_block(rest_block):
            self.block.stmts.extend(rest_block.stmts)
            return self.compute(N.Op.AND if is_and else N.Op.OR, first, rest)
        tmp = self.temp_slot(T.u1, first)
        cond = first if is_and else self.compute(N.Op.NOT, first)
        rest_block.append(N.LocalStore(tmp, rest))
        self.emit(N.If(cond, rest_block, N.Block()))
        return self.emit(N.LocalLoad(tmp))

    def is_pure_block(self, block):
        return all(type(s).PURE or isinstance(s, N.LocalLoad) for s in block.stmts)

    def temp_slot(self, dtype, init, first_values=()):
        slot = self.new_slot(dtype, "tmp", first_values)
        self.emit(N.LocalStore(slot, self.cast(init, slot.dtype)))
        return slot

    def visit_IfExp(self, node):
        cond = self.to_bool(self.visit(node.test))
        if isinstance(cond, bool):
            return self.visit(node.body if cond else node.orelse)
        blocks, vals = [N.Block(), N.Block()], []
        for b, n in zip(blocks, (node.body, node.orelse)):
            saved, self.block = self.block, b
            vals.append(self.visit(n))
            self.block = saved
        if all(self.is_pure_block(b) and not _has_partial_domain(b) for b in blocks):
            for b in blocks:
                self.block.stmts.extend(b.stmts)
            return self.select(cond, vals[0], vals[1])
        if any(isinstance(v, VecValue) for v in vals):
            return vector_ifexp(self, cond, blocks, vals)
        a, b = vals
        probe_a, probe_b = self.typed_probe(a), self.typed_probe(b)
        dt = T.promote(probe_a, probe_b) if probe_a != probe_b else probe_a
        tmp = self.temp_slot(dt, 0, (a, b))
        for blk, v in zip(blocks, vals):
            saved, self.block = self.block, blk
            self.emit(N.LocalStore(tmp, self.cast(v, tmp.dtype)))
            self.block = saved
        self.emit(N.If(cond, blocks[0], blocks[1]))
        return self.emit(N.LocalLoad(tmp))

    def typed_probe(self, v):
        if isinstance(v, N.Stmt):
            return v.dtype
        return py_dtype(v)

    def visit_Call(self, node):
        return calls.call(self, node)


# Ops whose value or derivative is infinite or NaN somewhere: `a if c else b` evaluates them only when
# their branch is taken (an If), since a select would compute the untaken one too and its derivative
# (e.g. sqrt'(-1) = NaN) times zero still poisons the gradient.
PARTIAL_DOMAIN = {N.Op.SQRT, N.Op.RSQRT, N.Op.LOG, N.Op.LOG2, N.Op.ASIN, N.Op.ACOS, N.Op.POW, N.Op.DIV, N.Op.TAN,
                  N.Op.MOD, N.Op.FLOORDIV, N.Op.POWI}   # POWI: 1 / x**|n| for n < 0


def _has_partial_domain(block):
    return any(isinstance(s, N.Compute) and s.op in PARTIAL_DOMAIN and s.dtype.is_float for s in block.stmts)
