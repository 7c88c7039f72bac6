"""The optimizers' list forms of the shared rules are bitwise the single-tensor forms."""

import torch

from isolab import rules


def test_adam_update_foreach_is_bitwise_adam_update():
    g = torch.Generator().manual_seed(0)
    shapes = [(5, 3), (7,), (2, 2, 2)]
    single = [[torch.randn(s, generator=g) for _ in range(4)] for s in shapes]  # param, grad, m, v
    for t in single:
        t[3].abs_()
    lists = [[t.clone() for t in ts] for ts in single]
    steps = [1, 4, 9]
    for (p, grad, m, v), t in zip(single, steps):
        rules.adam_update_(p, grad, m, v, t, 3e-3, (0.9, 0.95), 1e-8, 0.1)
    rules.adam_update_foreach_([x[0] for x in lists], [x[1] for x in lists], [x[2] for x in lists],
                               [x[3] for x in lists], steps, 3e-3, (0.9, 0.95), 1e-8, 0.1)
    for a, b in zip(single, lists):
        for x, y in zip(a, b):
            assert torch.equal(x, y)
