"""The IR printer: one statement per line, `%id = op dtype operands`, nested blocks indented."""
from spvad import types as T
from spvad.ir import nodes as N
from spvad.ir.ops import Op
from spvad.ir.printer import format_kernel, format_stmt


def test_format_kernel(kb):
    x, y = kb.array("x", ndim=2, needs_grad=True), kb.array("y")
    m = kb.scalar("m")
    i = kb.parallel(y)
    n = kb.task.num_threads
    arg = kb.arg(m)
    with kb.range_for(kb.const(0), arg) as j:
        v = kb.load(x, i, j)
        s = kb.op(Op.SIN, v)
        with kb.if_(kb.op(Op.GT, s, kb.const(0.5))) as br:
            kb.brk()
        with kb.else_(br):
            kb.atomic(Op.ATOMIC_ADD, x, (i, j), s, field="grad")
    st = kb.adstack(T.f32, 8, "v")
    kb.push(st, v)
    kb.store(y, i, kb.top(st))
    text = format_kernel(kb.kernel)
    lines = text.splitlines()
    assert lines[0] == "kernel k arrays[x(f32,2d)+grad, y(f32,1d)] scalars[m(i32)]"
    assert f"  task t0 parallel num_threads=%{n.id}" in lines
    assert f"      %{n.id} = shape i32 y 0" in lines
    assert f"      %{i.id} = thread_index i32" in lines
    assert f"      %{arg.id} = arg i32 m" in lines
    loop = j.loop
    assert f"      %{loop.id} = for range(%{loop.begin.id}, %{arg.id}, 1):" in lines
    assert f"        %{j.id} = loop_index i32 %{loop.id}" in lines
    assert f"        %{v.id} = load f32 x[%{i.id}, %{j.id}]" in lines
    assert f"        %{s.id} = sin f32 %{v.id}" in lines
    assert "          break" in lines
    assert "        else:" in lines
    assert any(line.startswith("          %") and f"= atomic_add f32 x.grad[%{i.id}, %{j.id}] %{s.id}" in line
               for line in lines)
    assert f'      %{st.id} = adstack f32 capacity=8 "v"' in lines
    assert f"      adstack_push %{st.id} %{v.id}" in lines
    assert any(line.startswith(f"      store y[%{i.id}] %") for line in lines)
    assert len(lines) == 1 + len(kb.kernel.tasks) * 3 + sum(
        1 for t in kb.kernel.tasks for b in (t.header, t.body) for _ in N.walk(b)) + 1   # + the "else:" line


def test_format_stmt_of_each_kind(kb):
    kb.serial()
    c = kb.const(1.5)
    a = kb.alloca(T.f32, "acc")
    ld = kb.lload(a)
    cast = kb.cast(c, T.i32)
    st = kb.adstack(T.f32, None)
    assert format_stmt(c) == f"%{c.id} = const f32 1.5"
    assert format_stmt(a) == f'%{a.id} = alloca f32 "acc"'
    assert format_stmt(ld) == f"%{ld.id} = local_load f32 %{a.id}"
    assert format_stmt(kb.lstore(a, c)) == f"local_store %{a.id} %{c.id}"
    assert format_stmt(cast) == f"%{cast.id} = cast i32 %{c.id}"
    assert format_stmt(kb.pop(st)) == f"adstack_pop %{st.id}"
    top_adj = kb.top_adj(st)
    assert format_stmt(top_adj) == f"%{top_adj.id} = adstack_load_top_adj f32 %{st.id}"
    assert format_stmt(kb.acc_adj(st, c)) == f"adstack_acc_adjoint %{st.id} %{c.id}"
    with kb.while_() as w:
        kb.cont()
    assert format_stmt(w, 1) == f"  %{w.id} = while:\n    continue"
