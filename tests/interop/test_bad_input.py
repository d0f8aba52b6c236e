"""Bad input at the bridges: each a clear sp.SpvadError naming the problem, raised before any ndarray is
made (nothing changes on the device)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import spvad as sp

BAD_TENSORS = [
    (lambda: torch.ones(3, dtype=torch.complex64), "torch.complex64 tensor.*t.real and t.imag"),
    (lambda: torch.ones(3, dtype=torch.float16), "torch.float16 tensor.*t.float()"),
    (lambda: torch.ones(3, dtype=torch.bfloat16), "torch.bfloat16 tensor.*t.float()"),
    (lambda: torch.tensor([1, 2**31]), r"int64 values in \[1, 2147483648\] do not fit in i32"),
    (lambda: torch.tensor([-2**31 - 1]), "do not fit in i32"),
    (lambda: torch.ones(2, 2).to_sparse(), "sparse_coo tensor.*to_dense"),
    (lambda: torch.ones(3, device="meta"), "meta device"),
    (lambda: np.ones(3), "expected a torch.Tensor, got ndarray"),
]
BAD_JAX = [
    (lambda: jnp.ones(3, jnp.bfloat16), "bfloat16 jax array"),
    (lambda: jnp.ones(3, jnp.float16), "float16 jax array"),
    (lambda: jnp.ones(3, jnp.complex64), "complex64 data is not supported.*real and imaginary"),
    (lambda: [1.0, 2.0], "expected a jax.Array, got list"),
]


@pytest.mark.parametrize("make, message", BAD_TENSORS, ids=[m for _, m in BAD_TENSORS])
def test_from_torch_refuses(make, message, no_ndarray_made):
    with pytest.raises(sp.ArgumentError, match=message):
        sp.from_torch(make())


@pytest.mark.parametrize("make, message", BAD_JAX, ids=[m for _, m in BAD_JAX])
def test_from_jax_refuses(make, message, no_ndarray_made):
    with pytest.raises(sp.ArgumentError, match=message):
        sp.from_jax(make())


@pytest.mark.parametrize("bad, message", [(object(), "expected an object with __dlpack__"),
                                          (np.ones(3, np.complex128), "complex128 data is not supported"),
                                          (np.ones(3, np.float16), "float16 data is not supported")])
def test_from_dlpack_refuses(bad, message, no_ndarray_made):
    with pytest.raises(sp.ArgumentError, match=message):
        sp.from_dlpack(bad)


def test_needs_grad_on_integers_is_refused(no_ndarray_made):
    with pytest.raises(sp.ArgumentError, match="needs_grad=True needs float data"):
        sp.from_torch(torch.arange(3), needs_grad=True)


@sp.torch_function
def returns_nothing(x):
    pass


@sp.jax_function
def returns_a_list_of_numbers(x):
    return [1, 2]


def test_functions_returning_no_ndarray_are_named():
    with pytest.raises(sp.SpvadError, match="sp.torch_function returns_nothing must return an sp.ndarray.*NoneType"):
        returns_nothing(torch.ones(2, requires_grad=True))
    with pytest.raises(sp.SpvadError, match="sp.jax_function returns_a_list_of_numbers must return.*list of int, int"):
        returns_a_list_of_numbers(jnp.ones(2))
    with pytest.raises(sp.SpvadError, match="returns_a_list_of_numbers must return"):
        jax.jit(returns_a_list_of_numbers)(jnp.ones(2))


def test_decorating_something_else_is_refused():
    with pytest.raises(sp.ArgumentError, match="decorates a function"):
        sp.torch_function(3)
    with pytest.raises(sp.ArgumentError, match="decorates a function"):
        sp.jax_function("f")


def test_a_five_dimensional_tensor_crosses():
    """Arrays have any number of dimensions: a 5-d tensor comes back with its values and shape."""
    t = torch.arange(32, dtype=torch.float32).reshape(2, 2, 2, 2, 2)
    a = sp.from_torch(t)
    assert a.shape == (2, 2, 2, 2, 2)
    assert torch.equal(a.to_torch(), t)
