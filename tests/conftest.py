"""Fixtures shared by the test modules."""

import pytest
import torch


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for the module, as the chapters run (their matrices are small, and
    two threads on a busy machine are slower than one); the setting is restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def book_figures(one_thread):
    """The book's figure style (``isolab.book.figures.style.use``) and one thread."""
    from isolab.book.figures import style

    style.use()
    yield
