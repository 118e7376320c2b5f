"""The backend contract of the CKKS engine: exact RNS primitives over [..., limb, N] arrays.

Two backends implement it: ``numpy_backend.NumpyBackend`` (the exact CPU reference and
CPU engine) and ``cupy_backend.CupyBackend`` (our CUDA kernels in ``kernels/``). They
must agree **bit for bit** on every primitive, so the contract is defined by integer
math only, never by an implementation:

* Every array is ``uint64``, C-contiguous, shaped ``[..., L, N]`` (any leading batch or
  component axes), ``N = context.ring_degree``. Limb ``i`` is a residue modulo
  ``context.moduli[rows[i]]``; ``rows`` is a tuple of prime ids (indices into
  ``context.moduli``, Q primes first, then P primes).
* Inputs and outputs are canonical: every residue in ``[0, q)``. Kernels may be lazy
  inside, never at the boundary.
* "Montgomery form" of x is ``x * 2**64 mod q`` (R = 2**64). Ciphertexts are always
  stored in standard form; plaintexts prepared for multiplication and key-switch keys
  are stored in Montgomery form so ``mul_montgomery(ct, pt_mont) == ct * pt mod q``.
* NTT: negacyclic over Z_q[X]/(X^N + 1) with ``psi = context.psi[row]`` (a primitive
  2N-th root of unity fixed by the context). ``ntt_forward`` takes natural-order
  coefficients and returns evaluations in bit-reversed order: output index ``k`` holds
  ``a(psi ** (2 * bitrev(k) + 1))`` with ``bitrev`` over log2(N) bits. ``ntt_inverse``
  is its exact inverse (including the factor N^-1).
* ``centered(x, q)`` is ``x`` if ``x <= (q - 1) // 2`` else ``x - q`` (q odd).

Key switching (hybrid, ``context.digits`` = the level-0 partition of Q prime ids into
contiguous digits; at a level only the surviving primes of each digit remain and empty
digits are dropped; digit ``d`` of the key always sits at index ``d`` of the key's first
axis):

* ``modup``: for active digit D (prime ids ``D``, product ``Q_D``) and every row ``r``
  of ``rows + p_rows``: ``digit_D[r] = sum_j centered((c_j * inv_j) mod q_j, q_j) *
  (Q_D / q_j)  mod m_r`` over ``j in D``, with ``inv_j = (Q_D / q_j)^-1 mod q_j``,
  ``m_r = context.moduli[r]``, and for rows ``r in D`` the digit is simply ``c_r``
  (exact). The negative centered terms are reduced into ``[0, m_r)``.
* inner product (NTT domain): ``acc_k = sum_D NTT(digit_D) * key[D, k]`` (key in
  Montgomery form, so ``mul_montgomery``), ``k = 0, 1``, over rows ``rows + p_rows``.
  The key rows used are exactly the prime ids ``rows + p_rows`` of the key's full QP
  row axis (which holds all Q then all P primes).
* ``moddown`` (coefficient domain, rounding): with P = prod of P primes, for each Q row
  ``i``: ``y_i = (x_i - e_i) * P^-1 mod q_i`` where ``e_i = sum_j centered((x_pj *
  Pinv_j) mod p_j, p_j) * (P / p_j) mod q_i`` and ``Pinv_j = (P / p_j)^-1 mod p_j``.
  With one P prime this is exact rounding division by P.
* ``rescale`` drops ``rows[0]`` (prime ``q``): ``r = centered(c_0, q)`` then
  ``c'_i = (c_i - (r mod q_i)) * q^-1 mod q_i`` for the remaining rows (coefficient
  domain). In the NTT domain the same result is computed via an inverse NTT of the
  dropped limb and forward NTTs of ``r mod q_i`` (the output is the NTT of the
  coefficient-domain result).

Automorphisms (Galois element ``g`` odd, ``1 <= g < 2N``):

* coefficient domain: ``X^j -> X^(j*g mod 2N)``: coefficient j goes to index
  ``(j*g) mod N`` negated when ``(j*g) mod 2N >= N``.
* NTT domain (bit-reversed storage): output index ``i`` reads input index
  ``bitrev(((2*bitrev(i) + 1) * g mod 2N - 1) // 2)``. Pure permutation.

The context handed to a backend provides only plain Python integers (``RingContext``);
each backend derives its own tables from them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol, cast, runtime_checkable

__all__ = [
    "CkksBackend",
    "Domain",
    "RingContext",
    "active_digits",
    "check_domain",
    "check_keyswitch_add_rescale",
    "check_linear_transform",
    "keyswitch_from_digits_many_by_loop",
    "ntt_forward_and_modup_by_calls",
]

Domain = Literal["coefficient", "ntt"]
Array = Any  # numpy.ndarray or cupy.ndarray of uint64


def check_domain(domain: object, op: str) -> None:
    """Reject anything but ``"coefficient"`` or ``"ntt"`` before a backend enqueues work."""
    if domain not in ("coefficient", "ntt"):
        raise ValueError(f"{op}: domain must be 'coefficient' or 'ntt', got {domain!r}")


@runtime_checkable
class RingContext(Protocol):
    """Plain-integer description of the ring a backend computes in."""

    @property
    def ring_degree(self) -> int: ...  # N, a power of two

    @property
    def moduli(self) -> tuple[int, ...]: ...  # Q primes (ids 0..q_count-1), then P primes

    @property
    def psi(self) -> tuple[int, ...]: ...  # primitive 2N-th root per modulus

    @property
    def q_count(self) -> int: ...

    @property
    def p_count(self) -> int: ...

    @property
    def digits(self) -> tuple[tuple[int, ...], ...]: ...  # level-0 partition of Q ids


class CkksBackend(Protocol):
    """Exact RNS primitives. ``rows`` is always a tuple of prime ids, one per limb.

    Every method allocates its result unless ``out=`` is given (then writes there and
    returns it; ``out`` may alias an input for element-wise methods). Methods never
    synchronize the host (the CuPy backend must stay capturable) and run on the
    current stream of their array module.
    """

    name: str  # "numpy" or "cupy"
    xp: Any  # the array module
    device_id: int | None  # the CUDA device of every array (None: host)

    # --- residency -------------------------------------------------------------
    def asarray(self, host: Array) -> Array: ...  # host uint64 -> backend array (copy)

    def to_numpy(self, array: Array) -> Array: ...  # backend array -> numpy (copy; may sync)

    def centered_crt_to_float(self, a: Array, rows: Sequence[int]) -> Any:
        """Host float64 ``[..., N]``: the centred integer of each coefficient of ``a [..., L, N]``
        over ``rows`` (canonical residues), rounded to float64 exactly as
        ``encoding.CrtReconstructor`` computes it (decoding; the transfer is one float a
        coefficient, not L residues)."""
        ...

    def rns_from_integers(self, coefficients: Any, rows: Sequence[int]) -> Array:
        """Host signed int64 coefficients ``[..., N]`` (``|c| < 2**62``) -> their canonical residues
        ``[..., L, N]`` over ``rows``, on the backend (the upload is of the integers, not of L
        residue rows)."""
        ...

    def is_capturing(self) -> bool: ...  # the current stream records a CUDA graph (host: never)

    def complete_for_other_streams(self) -> None:
        """Wait until the work enqueued on the current stream has finished (not while it
        captures): what it built (a table, a key) is about to be read on other streams, by
        another thread's worker, which nothing else orders after it (host: nothing)."""
        ...

    def run_independent(self, tasks: Sequence[Callable[[], None]]) -> None:
        """Run ``tasks``, which write disjoint memory and read nothing another task writes,
        side by side (the CuPy backend spreads them over streams: parallel branches in a CUDA
        graph); the host calls them in list order. Returns when every task's work is ordered
        before the caller's next work on its current stream. One exception to the
        independence: ``publish_to_branches`` / ``wait_for_published``."""
        ...

    def publish_to_branches(self) -> None:
        """Inside a ``run_independent`` task: what this task has enqueued so far may be read
        by the tasks after it in the list once they call ``wait_for_published()``."""
        ...

    def wait_for_published(self) -> None:
        """Inside a ``run_independent`` task: order this task's next work after what an
        earlier task published (``publish_to_branches``)."""
        ...

    # --- element-wise mod q ----------------------------------------------------
    def add(self, a: Array, b: Array, rows: Sequence[int], *, out: Array | None = None) -> Array: ...

    def sub(self, a: Array, b: Array, rows: Sequence[int], *, out: Array | None = None) -> Array: ...

    def neg(self, a: Array, rows: Sequence[int], *, out: Array | None = None) -> Array: ...

    def mul(self, a: Array, b: Array, rows: Sequence[int], *, out: Array | None = None) -> Array: ...

    def mul_montgomery(self, a: Array, b: Array, rows: Sequence[int], *, out: Array | None = None) -> Array:
        """``a * b * 2**-64 mod q``; with b in Montgomery form this is the plain product."""
        ...

    def to_montgomery(self, a: Array, rows: Sequence[int], *, out: Array | None = None) -> Array: ...

    def from_montgomery(self, a: Array, rows: Sequence[int], *, out: Array | None = None) -> Array: ...

    def mul_scalar(self, a: Array, scalars: Sequence[int], rows: Sequence[int], *, out: Array | None = None) -> Array:
        """``a_i * (scalars[i] mod q_i) mod q_i`` per limb ``i``."""
        ...

    def sum_batch(self, a: Array, axis: int, rows: Sequence[int]) -> Array:
        """Sum over ``axis`` (not one of the last two) modulo q."""
        ...

    def mul_montgomery_sum(self, a: Array, b: Array, rows: Sequence[int]) -> Array:
        """``a [outer, count, L, N]``, ``b [count, L, N]`` -> ``[outer, L, N]``: the sum over
        ``count`` of ``mul_montgomery(a[:, c], b[c])`` mod q (a plaintext-weighted batch sum);
        equal to ``sum_batch(mul_montgomery(a, b broadcast), 1, rows)`` bit for bit."""
        ...

    def tensor_product(self, a: Array, b: Array, rows: Sequence[int]) -> Array:
        """``[2, ..., L, N] x [2, ..., L, N] -> [3, ...]``: (a0 b0, a0 b1 + a1 b0, a1 b1) mod q."""
        ...

    # --- transforms --------------------------------------------------------------
    def ntt_forward(self, a: Array, rows: Sequence[int], *, out: Array | None = None) -> Array: ...

    def ntt_inverse(self, a: Array, rows: Sequence[int], *, out: Array | None = None) -> Array: ...

    def automorphism(self, a: Array, galois_element: int, rows: Sequence[int], *, domain: Domain) -> Array: ...

    def moddown(self, x: Array, rows: Sequence[int]) -> Array:
        """The contract's rounding ``moddown`` of coefficient-domain ``x [..., L + K, N]`` over
        ``rows + p_rows`` -> ``[..., L, N]`` over ``rows`` (encryption's division by P)."""
        ...

    def rescale(self, a: Array, rows: Sequence[int], *, domain: Domain) -> Array:
        """Drop ``rows[0]`` with rounding (see module docstring); returns ``[..., L-1, N]``."""
        ...

    # --- key switching -----------------------------------------------------------
    def modup(self, c: Array, rows: Sequence[int], *, c_ntt: Array | None = None) -> Array:
        """Coefficient-domain ``c [..., L, N]`` over Q rows -> digits ``[D, ..., L+K, N]``
        over ``rows + p_rows`` in the NTT domain (modup followed by ``ntt_forward``).

        ``c_ntt``: ``ntt_forward(c, rows)`` when the caller holds it (a ciphertext kept in the
        NTT domain); each digit's own rows of the result are exactly its rows, so a backend
        takes them from there instead of transforming them again. Must be that transform: the
        result is then the same."""
        ...

    def ntt_forward_and_modup(
        self, c: Array, rows: Sequence[int], *, components: Sequence[int] = (0, 1)
    ) -> tuple[Array, Array]:
        """For a coefficient-domain ciphertext ``c [2, ..., L, N]`` over Q rows:
        ``(ntt_forward(c[components], rows), modup(c[1], rows))``, what a hoisted key switch
        needs of its input (``components``: distinct entries of ``(0, 1)``, in the order
        returned). A backend may compute both in one pass; the NTT may then be a view whose
        rows are contiguous but whose components are not adjacent (``keyswitch_linear_transform``
        takes it as it is)."""
        ...

    def keyswitch_from_digits(
        self,
        digits_ntt: Array,
        key: Array,
        rows: Sequence[int],
        *,
        galois_element: int | None = None,
        domain: Domain = "coefficient",
    ) -> Array:
        """Inner product with ``key [dnum, 2, nQ+nP, N]`` (NTT, Montgomery), inverse NTT and
        rounding ModDown: returns ``[2, ..., L, N]`` (y0, y1) over ``rows`` in ``domain``.
        With ``galois_element`` the digits are first permuted by the NTT-domain automorphism
        (hoisted rotation). ``domain="ntt"`` returns exactly ``ntt_forward`` of the
        coefficient-domain result; a backend computes it without leaving the NTT domain for
        the Q rows (inverse NTT of the K P rows only, the extension ``e_i`` forward-transformed,
        ``(x_i - e_i) * P^-1`` on NTT values: every step is linear mod ``q_i``)."""
        ...

    def keyswitch_from_digits_many(
        self,
        digits_ntt: Array,
        keys: Sequence[Array],
        rows: Sequence[int],
        galois_elements: Sequence[int | None],
        *,
        c0: Array | None = None,
        domain: Domain = "coefficient",
        out: Array | None = None,
    ) -> Array:
        """Optional (batched hoisting): ``keyswitch_from_digits`` of one set of digits with
        several (key, Galois element) pairs, stacked: returns ``[len(keys), 2, ..., L, N]``
        whose entry ``i`` equals ``keyswitch_from_digits(digits_ntt, keys[i], rows,
        galois_element=galois_elements[i], domain=domain)`` bit for bit. With ``c0``
        (``[..., L, N]`` over ``rows`` in ``domain``, the digits' batch shape) component 0 of
        entry ``i`` additionally gets ``automorphism(c0, galois_elements[i], rows,
        domain=domain)`` added mod q (``c0`` itself for ``None``): entry ``i`` is then the
        complete hoisted rotation of ``(c0, c1)``. ``out`` (optional) receives the result and
        is returned: shape ``[len(keys), 2, ..., L, N]``, any strides on the first two axes
        (e.g. a component-major batch viewed with its first axes swapped), each ``out[i, k]``
        C-contiguous. Callers fall back to ``keyswitch_from_digits_many_by_loop`` when a
        backend lacks it."""
        ...

    def rotate_keyswitch(
        self,
        c: Array,
        key: Array,
        rows: Sequence[int],
        galois_element: int,
        *,
        c0: Array | None = None,
        domain: Domain = "coefficient",
        out: Array | None = None,
        before_c0: Callable[[], None] | None = None,
    ) -> Array | None:
        """One rotation's key switch in fewer passes, where a backend has them: ``keyswitch_from_digits_many(
        modup(c, rows), [key], rows, [galois_element], c0=c0, domain=domain, out=out)`` bit for
        bit, for an unbatched coefficient-domain ``c`` ``[L, N]`` (a ciphertext's c1), or
        ``None`` with nothing done where the backend has no such form (the caller makes the two
        calls). ``before_c0()`` is called before anything that reads ``c0`` (inside a
        ``run_independent`` task: ``wait_for_published``)."""
        ...

    def keyswitch_linear_transform(
        self,
        digits_ntt: Array,
        keys: Sequence[Array],
        rows: Sequence[int],
        galois_elements: Sequence[int],
        weights: Array,
        c: Array,
        *,
        rescale: bool = False,
        domain: Domain | None = None,
    ) -> Array:
        """Double hoisting: ``sum_i weights[i] * rot_i(c)`` with one ModUp and one ModDown.

        ``c [2, L, N]``: an NTT-domain ciphertext over ``rows`` whose coefficient-domain c1 was
        ModUp'd into ``digits_ntt [D, L + K, N]`` (unbatched); ``keys[e]`` and
        ``galois_elements[e]`` (``E >= 1`` pairs) define rotation ``rot_{1+e}``, ``rot_0`` is the
        identity; ``weights [1 + E, L + K, N]`` are NTT/Montgomery plaintexts over
        ``rows + p_rows``. Returns ``[2, L, N]`` (NTT domain over ``rows``):
        ``moddown_ntt(acc)`` with ``moddown_ntt`` the NTT-domain rounding ModDown of
        ``keyswitch_from_digits(domain="ntt")`` and, over ``rows + p_rows``,
        ``acc_k = sum_e mul_montgomery(IP_e[k], weights[1 + e])`` (``IP_e`` = that method's inner
        product for ``keys[e]``, ``galois_elements[e]``, before ModDown), plus on the Q rows only
        ``P * (mul_montgomery(c[k], weights[0]) + [k = 0] sum_e mul_montgomery(automorphism(c[0],
        galois_elements[e], ntt), weights[1 + e])) mod q_i`` (``P`` = product of the P primes).
        A multiple of ``P`` on the Q rows passes the rounding division by ``P`` exactly, so the
        result is the weighted sum of the rotations with one rounding in place of one per
        rotation (not bit-identical to summing ``keyswitch_from_digits`` results).

        ``rescale=True`` (``L >= 2``) returns ``[2, L - 1, N]`` in the coefficient domain over
        ``rows[1:]`` instead: the same ``acc`` after its inverse NTT, divided by ``P q_0``
        (``q_0`` = the prime of ``rows[0]``, the one a rescale drops) with the rounding
        ModDown's formula, i.e. ``(x_i - e_i) (P q_0)^-1 mod q_i`` with ``e`` the centered
        fast base conversion of the rows of ``q_0`` and the P primes. ModDown and rescale then
        round once instead of twice (not bit-identical to ``rescale(ntt_inverse(result))``).

        ``domain`` picks the result's domain (``None``: NTT without ``rescale``, coefficient
        with it); the other domain returns exactly the transform of that result, which a
        backend computes without transforming it (coefficient output: the rounding ModDown
        after the inverse NTT of ``acc``; NTT output of the division by ``P q_0``: only the
        rows of ``q_0`` and the P primes are transformed back, as in ``keyswitch_add_rescale``)."""
        ...

    def keyswitch_add_rescale(
        self,
        digits_ntt: Array,
        key: Array,
        rows: Sequence[int],
        c: Array,
        *,
        domain: Domain = "coefficient",
    ) -> Array:
        """A key switch, an addition and a rescale with one rounding (relinearize and rescale).

        ``acc`` = the inner product of ``keyswitch_from_digits(digits_ntt, key, rows)`` before
        its ModDown (``[2, ..., L + K, N]`` over ``rows + p_rows``), plus ``P * c mod q_i`` on
        the Q rows (``c [2, ..., L, N]``: NTT domain over ``rows``, the digits' batch shape;
        ``P`` = product of the P primes). Returns ``[2, ..., L - 1, N]`` over ``rows[1:]`` in
        ``domain`` (``L >= 2``): ``acc`` divided by ``P q_0`` exactly as in
        ``keyswitch_linear_transform(rescale=True)``; ``domain="ntt"`` returns exactly
        ``ntt_forward`` of the coefficient-domain result, which a backend computes with the
        inverse NTT of the divided-out rows only (``q_0`` and the P rows; every step is
        linear mod ``q_i``). It decrypts like ``rescale(c + keyswitch_from_digits(...))``
        with one rounding in place of two, so it is not bit-identical to that."""
        ...


def active_digits(context: RingContext, rows: Sequence[int]) -> list[tuple[int, tuple[int, ...]]]:
    """(level-0 digit index, surviving prime ids) of each non-empty digit at ``rows`` (see
    "Key switching" above: the digits of a level)."""
    present = set(rows)
    active = []
    for index, digit in enumerate(context.digits):
        kept = tuple(r for r in digit if r in present)
        if kept:
            active.append((index, kept))
    return active


def check_keyswitch_add_rescale(backend: Any, digits_ntt: Array, rows: tuple[int, ...], c: Array,
                                domain: object) -> None:
    """Validate what ``keyswitch_add_rescale`` adds to a key switch's own checks (the domain, a
    prime left after the rescale, ``c``'s dtype and shape) before any work."""
    op = "keyswitch_add_rescale"
    check_domain(domain, op)
    if len(rows) < 2:
        raise ValueError(f"{op}: the rescale needs at least two rows (one is dropped), got {len(rows)}")
    shape = (2,) + tuple(digits_ntt.shape[1:-2]) + (len(rows), backend.context.ring_degree)
    if getattr(c, "dtype", None) != "uint64" or tuple(getattr(c, "shape", ())) != shape:
        raise ValueError(f"{op}: c must be uint64 {shape} (two components, the digits' batch shape), got "
                         f"{getattr(c, 'dtype', None)} {tuple(getattr(c, 'shape', ()))}")


def check_linear_transform(
    backend: Any,
    digits_ntt: Array,
    keys: Sequence[Array],
    rows: tuple[int, ...],
    galois_elements: Sequence[int],
    weights: Array,
    c: Array,
    *,
    rescale: bool = False,
    domain: object = None,
) -> tuple[list[Array], list[int], Domain]:
    """Validate the arguments of ``keyswitch_linear_transform`` (shapes, dtypes, odd Galois
    elements, a prime left after ``rescale``, the domain) before any work; returns the keys
    and Galois elements as lists and the result's domain (``None`` resolved)."""
    op = "keyswitch_linear_transform"
    if not isinstance(rescale, bool):
        raise TypeError(f"{op}: rescale must be a bool, got {rescale!r}")
    if domain is None:
        domain = "coefficient" if rescale else "ntt"
    check_domain(domain, op)
    if rescale and len(rows) < 2:
        raise ValueError(f"{op}: rescale needs at least two rows (one is dropped), got {len(rows)}")
    keys, gs = list(keys), list(galois_elements)
    if not keys or len(keys) != len(gs):
        raise ValueError(f"{op}: needs E >= 1 keys and as many galois elements, got {len(keys)} and {len(gs)}")
    for g in gs:
        if isinstance(g, bool) or not isinstance(g, int) or g % 2 == 0:
            raise ValueError(f"{op}: galois elements must be odd ints, got {g!r}")
    context = backend.context
    n, L = context.ring_degree, len(rows)
    R = L + context.p_count
    D = len(active_digits(context, rows))
    expected = {"digits_ntt": (digits_ntt, (D, R, n)), "weights": (weights, (1 + len(keys), R, n)), "c": (c, (2, L, n))}
    for name, (array, shape) in expected.items():
        if getattr(array, "dtype", None) != "uint64" or tuple(array.shape) != shape:
            raise ValueError(f"{op}: {name} must be uint64 {shape}, got {getattr(array, 'dtype', None)} "
                             f"{tuple(getattr(array, 'shape', ()))}")
    return keys, [int(g) for g in gs], cast(Domain, domain)  # checked above


def ntt_forward_and_modup_by_calls(backend: Any, c: Array, rows: Sequence[int],
                                   components: Sequence[int] = (0, 1)) -> tuple[Array, Array]:
    """The documented default of ``CkksBackend.ntt_forward_and_modup`` (checked first):
    ``ntt_forward`` of the components, then ``modup`` of c1 with its NTT as the hint when it
    is among them."""
    components = check_ntt_components(c, components, "ntt_forward_and_modup")
    # basic slices only: an index list would be uploaded (a host transfer, refused in a capture)
    picked = c[components[0]:components[0] + 1] if len(components) == 1 else c if components == (0, 1) else c[::-1]
    ntt = backend.ntt_forward(picked, rows)
    hint = ntt[components.index(1)] if 1 in components else None
    return ntt, backend.modup(backend.xp.ascontiguousarray(c[1]), rows, c_ntt=hint)


def check_ntt_components(c: Array, components: Sequence[int], op: str) -> tuple[int, ...]:
    """``components`` as a tuple of ints, checked to be distinct entries of ``(0, 1)`` of a
    ciphertext ``c [2, ..., L, N]``, before any work."""
    picked = tuple(int(k) for k in components)
    if not picked or len(set(picked)) != len(picked) or not set(picked) <= {0, 1}:
        raise ValueError(f"{op}: components must be distinct entries of (0, 1), got {picked}")
    if len(c.shape) < 3 or c.shape[0] != 2:
        raise ValueError(f"{op}: expected a ciphertext [2, ..., L, N], got {tuple(c.shape)}")
    return picked


def keyswitch_from_digits_many_by_loop(
    backend: Any,
    digits_ntt: Array,
    keys: Sequence[Array],
    rows: Sequence[int],
    galois_elements: Sequence[int | None],
    *,
    c0: Array | None = None,
    domain: Domain = "coefficient",
    out: Array | None = None,
) -> Array:
    """The documented default of ``CkksBackend.keyswitch_from_digits_many``: one
    ``keyswitch_from_digits`` per key, stacked on a new first axis (into ``out`` if given)."""
    check_domain(domain, "keyswitch_from_digits_many")
    if len(keys) != len(galois_elements):
        raise ValueError(f"keyswitch_from_digits_many: {len(keys)} keys for {len(galois_elements)} galois elements")
    if not keys:
        raise ValueError("keyswitch_from_digits_many: needs at least one key")
    parts = [
        backend.keyswitch_from_digits(digits_ntt, key, rows, galois_element=g, domain=domain)
        for key, g in zip(keys, galois_elements)
    ]
    if out is None:
        out = backend.xp.stack(parts)
    else:
        for i, part in enumerate(parts):
            out[i] = part
    if c0 is not None:
        for i, g in enumerate(galois_elements):
            rotated = c0 if g is None else backend.automorphism(c0, g, rows, domain=domain)
            backend.add(rotated, out[i, 0], rows, out=out[i, 0])
    return out
