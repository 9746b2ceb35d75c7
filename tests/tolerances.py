"""Bounds for comparing two code paths' float results, worked out from the arithmetic, so that a comparison holds
on AVX2, avx512 and AMX CPUs alike (DESIGN.md, invariant 15).

Two kernels (or one kernel on two shapes: a flattened row against the row alone) that compute the same thing
under bf16 autocast differ by rounding only, and which of their bf16 roundings flip depends on the CPU's
kernels: with an avx512 CPU's kernels (no AMX) a flattened row's logit came out one bf16 step (2^-6, at 2-4) from
the row's alone, where AMX and AVX2 kernels gave them bit for bit. One step of a logit between 4 and 8 is 2^-5 =
0.031, so neither bit-equality nor a fixed bound under that is a property of the arithmetic. What is: each result
lies within bf16's rounding error of the exact numbers, and that error can be measured on the spot by
computing the plain path in float32 too (2^16 times finer). How to check a bound on another CPU kind's
kernels: docs/results/test-suite.md, "Tolerance review"."""

from __future__ import annotations


def assert_within_bf16_rounding(ours, plain, plain_float32, msg: str = "") -> None:
    """`ours` and `plain`, bf16 computations of what `plain_float32` computes in float32, differ by at most twice
    the plain path's largest bf16 rounding error: each lies within that error of the exact numbers (the same
    operations, rounded in another order), so by the triangle inequality they lie within twice it of each other.
    The bound comes from the plain path alone, so a wrong `ours` (a row attending across its boundary: off by the
    numbers' own size) fails it. Use it on tensors of many elements: the bound is a maximum over them, and the
    rounding error of a single scalar (a mean loss) can cancel to near zero by chance."""
    _within_twice_the_rounding(ours, plain, plain_float32, "bf16", "float32", msg)


def assert_within_float32_rounding(ours, plain, plain_float64, msg: str = "") -> None:
    """The same bound one precision up: `ours` and `plain` in float32 against the plain path in float64. For paths
    whose rounding differs by more than a sum's (`float32_sum_atol`): a reordered attention in a network, whose
    layers carry each rounding on and may amplify it."""
    _within_twice_the_rounding(ours, plain, plain_float64, "float32", "float64", msg)


def _within_twice_the_rounding(ours, plain, finer, precision: str, reference: str, msg: str) -> None:
    error = float((plain.double() - finer.double()).abs().max())
    worst = float((ours.double() - plain.double()).abs().max())
    assert error > 0, f"{msg}: the {precision} and {reference} passes agree exactly: the {precision} pass did not compute in {precision}"
    assert worst <= 2 * error, (f"{msg}: {worst:.3g} apart, more than twice the plain path's {precision} rounding error "
                                f"({error:.3g}, against its {reference} pass)")


def float32_sum_atol(reference, terms: int) -> float:
    """Absolute tolerance for a float32 tensor that two paths compute as sums of `terms` terms in another order (a
    gradient entry: a sum over the batch's tokens). An entry that cancels to near zero keeps the rounding of its
    terms, which is about sqrt(terms) float32 roundings (2^-24 relative) of the tensor's scale, its largest entry:
    8 times that, so a random walk of roundings never reaches it while a wrong term (of the scale itself) does."""
    return 8 * terms ** 0.5 * 2.0 ** -24 * float(reference.abs().max())
