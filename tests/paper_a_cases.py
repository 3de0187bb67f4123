"""The grid of (‖W₁‖, ‖W₂‖, ‖W₂ − W₁‖, 𝓛) on which paper A's right-hand sides are compared with their plain-Python
references (tests/unit/test_smoothness.py, tests/unit/test_descent.py): zero, small, unit and large values of each."""

CASES = [
    (a, b, r, loss)
    for a in (0.0, 0.1, 1.0, 3.7, 20.0)
    for b in (0.0, 0.5, 1.0, 20.0)
    for r in (1e-3, 1.0, 10.0)
    for loss in (0.0, 0.3, 5.0)
]
