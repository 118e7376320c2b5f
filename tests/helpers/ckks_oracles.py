"""Python-integer oracles for the CKKS backend contract (fhelium_cupy/ckks/backends/base.py).

Every function here restates one formula of the contract with plain Python ints, so the
tests compare the NumPy backend (and later the CuPy backend) with an independent, slow,
obviously-correct implementation.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "bitrev",
    "centered",
    "naive_negacyclic_ntt",
    "oracle_coefficient_automorphism",
    "oracle_moddown",
    "oracle_moddown_rescale",
    "oracle_modup_digit",
    "oracle_ntt_automorphism",
    "oracle_rescale",
    "random_residues",
    "to_int_rows",
]


def bitrev(k: int, bits: int) -> int:
    return int(format(k, f"0{bits}b")[::-1], 2) if bits else 0


def centered(x: int, q: int) -> int:
    return x if x <= (q - 1) // 2 else x - q


def to_int_rows(a: np.ndarray) -> list[list[int]]:
    return [[int(v) for v in row] for row in a]


def random_residues(rng, moduli: list[int], n: int, lead: tuple[int, ...] = ()) -> np.ndarray:
    """Uniform canonical residues ``[*lead, L, n]`` from a ``random.Random``."""
    size = int(np.prod(lead, dtype=np.int64)) if lead else 1
    rows = [[[rng.randrange(q) for _ in range(n)] for q in moduli] for _ in range(size)]
    return np.array(rows, dtype=np.uint64).reshape(*lead, len(moduli), n)


def naive_negacyclic_ntt(coeffs: list[int], q: int, psi: int) -> list[int]:
    """Output index k = a(psi ** (2 * bitrev(k) + 1)) mod q."""
    n = len(coeffs)
    bits = n.bit_length() - 1
    out = []
    for k in range(n):
        x = pow(psi, 2 * bitrev(k, bits) + 1, q)
        out.append(sum(c * pow(x, j, q) for j, c in enumerate(coeffs)) % q)
    return out


def oracle_coefficient_automorphism(coeffs: list[int], g: int, q: int) -> list[int]:
    n = len(coeffs)
    out = [0] * n
    for j, c in enumerate(coeffs):
        k = j * g % (2 * n)
        out[k % n] = (-c) % q if k >= n else c
    return out


def oracle_ntt_automorphism(values: list[int], g: int) -> list[int]:
    n = len(values)
    bits = n.bit_length() - 1
    return [values[bitrev(((2 * bitrev(i, bits) + 1) * g % (2 * n) - 1) // 2, bits)] for i in range(n)]


def oracle_modup_digit(c_rows: dict[int, int], digit: tuple[int, ...], target_moduli: list[int], moduli) -> list[int]:
    """One coefficient: residues ``c_rows[prime id]`` -> digit value mod each target modulus."""
    QD = 1
    for j in digit:
        QD *= moduli[j]
    total = 0
    for j in digit:
        qj = moduli[j]
        inv = pow(QD // qj, -1, qj)
        total += centered(c_rows[j] * inv % qj, qj) * (QD // qj)
    return [total % m for m in target_moduli]


def oracle_moddown(x_q: list[int], x_p: list[int], q_moduli: list[int], p_moduli: list[int]) -> list[int]:
    """One coefficient: Q residues and P residues -> rounded division by P over Q."""
    P = 1
    for p in p_moduli:
        P *= p
    out = []
    for xi, qi in zip(x_q, q_moduli):
        e = 0
        for xp, pj in zip(x_p, p_moduli):
            e += centered(xp * pow(P // pj, -1, pj) % pj, pj) * (P // pj)
        out.append((xi - e) * pow(P, -1, qi) % qi)
    return out


def oracle_moddown_rescale(column: list[int], moduli: list[int], q_count: int) -> list[int]:
    """One coefficient over ``rows + p_rows`` (``moduli``: ``q_count`` Q primes, ``q_0`` first,
    then the P primes) -> rounded division by ``P q_0`` over the Q primes after ``q_0`` (the
    ModDown and rescale as one division)."""
    return oracle_moddown(column[1:q_count], column[:1] + column[q_count:], moduli[1:q_count],
                          moduli[:1] + moduli[q_count:])


def oracle_rescale(column: list[int], moduli: list[int]) -> list[int]:
    """One coefficient over rows ``moduli`` -> drop the first with centred rounding."""
    q = moduli[0]
    r = centered(column[0], q)
    return [(c - r) * pow(q, -1, m) % m for c, m in zip(column[1:], moduli[1:])]
