"""Fixtures of the ir tests: the IR builder (`kb`, `make_kb`) and a seeded random generator (`rng`)."""
import numpy as np
import pytest

from irbuild import KernelBuilder


@pytest.fixture
def kb():
    return KernelBuilder()


@pytest.fixture
def make_kb():
    """The builder class, for tests that build the same kernel twice."""
    return KernelBuilder


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
