"""How a row of the call tables receives its call. A row is `row(b, fn, node)` (b the kernel builder, fn the
callee, node the ast.Call); most builtins take visited values, and these adapters visit them for them:
keyword arguments first, then positional ones, in source order within each (the order IR is emitted in)."""


def keyword_values(b, node):
    return {k.arg: b.visit(k.value) for k in node.keywords}


def positional(body):
    """A row from `body(b, args)`: a builtin that takes positional arguments only."""
    def row(b, fn, node):
        kw = keyword_values(b, node)
        args = [b.visit(a) for a in node.args]
        if kw:
            b.error(f"keyword arguments are not supported when calling {callee_name(fn)}")
        return body(b, args)
    row.body = body
    return row


def with_keywords(body):
    """A row from `body(b, args, kw)`: a builtin that takes keyword arguments too."""
    def row(b, fn, node):
        kw = keyword_values(b, node)
        return body(b, [b.visit(a) for a in node.args], kw)
    row.body = body
    return row


def with_callee(body):
    """A row from `body(b, fn, args, kw)`: a kind of callee (a dtype, a @sp.func) rather than one builtin."""
    def row(b, fn, node):
        kw = keyword_values(b, node)
        return body(b, fn, [b.visit(a) for a in node.args], kw)
    row.body = body
    return row


def callee_name(fn):
    return getattr(fn, "__name__", fn)


def one_arg(b, args, what):
    if len(args) != 1:
        b.error(f"{what}() takes exactly one argument")
    return args[0]
