"""Python lists and tuples of ndarrays in kernels (Taichi's multigrid `r[level][i, j]`): an item picked by a
compile-time integer is an array, bound at each launch to what the list holds then, as an ndarray read through
a global name is (launch/global_names.py looks each item up through its site; arrays.list_item picks one)."""


class ArrayList:
    """A list or tuple holding ndarrays (or lists of them), read through `site`: a global name, a module's
    attribute, or a sp.template() argument's value."""
    __slots__ = ("site", "items")

    def __init__(self, site, items):
        self.site, self.items = site, items


def holds_arrays(obj):
    return isinstance(obj, (list, tuple)) and any(
        getattr(x, "_spvad_ndarray", False) or holds_arrays(x) for x in obj)


class ItemSite:
    """Item `index` of the list `site` refers to: a launch binds the ndarray the list holds then."""
    __slots__ = ("site", "index", "name", "key")

    def __init__(self, site, index):
        self.site, self.index = site, index
        self.name, self.key = f"{site.name}[{index}]", (site.key, index)

    def get(self, default=None):
        seq = self.site.get(default)
        return seq[self.index] if isinstance(seq, (list, tuple)) and self.index < len(seq) else default


class AttributeSite:
    """Attribute `attr` of `obj` (a module's `consts.levels`): read again at each launch."""
    __slots__ = ("obj", "attr", "name", "key")

    def __init__(self, obj, attr):
        self.obj, self.attr = obj, attr
        self.name, self.key = f"{getattr(obj, '__name__', type(obj).__name__)}.{attr}", (id(obj), attr)

    def get(self, default=None):
        return getattr(self.obj, self.attr, default)


class FixedSite:
    """A value bound once: a sp.template() argument (the kernel is specialised per object it holds)."""
    __slots__ = ("name", "value", "key")

    def __init__(self, name, value):
        self.name, self.value, self.key = name, value, ("template", id(value))

    def get(self, default=None):
        return self.value

