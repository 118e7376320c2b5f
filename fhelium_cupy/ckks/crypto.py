"""Public-key encryption and decryption (host randomness, backend arithmetic).

Encryption of an RNS plaintext ``m`` (coefficient domain, standard form) at level ``l``
with the public key ``(b, a)`` over QP: ``v`` ternary, ``e0, e1`` discrete Gaussian, all
from the OS CSPRNG; ``u_k = v*pk_k + e_k`` over the active Q rows plus the P rows, then
``c_k = round(u_k / P)`` (the contract's rounding ModDown, on the backend) and
``c0 += m``. Dividing by P shrinks the public-key noise ``v*e + e0 + e1*s`` to rounding
size, so fresh ciphertexts are as precise as secret-key encryptions. Decryption
computes the phase ``c0 + c1*s (+ c2*s**2)`` with backend primitives and returns its
coefficient-domain residues on the backend.
"""

from __future__ import annotations

from ._checks import check_not_capturing
from .keys import PublicKey, SecretKey
from .sampling import sample_gaussian, sample_ternary

__all__ = ["decrypt_phase", "encrypt_rns"]


def encrypt_rns(context, backend, public_key: PublicKey, message, rows: tuple[int, ...]):
    """``[2, *batch, L, N]`` coefficient-domain ciphertext data of ``message [*batch, L, N]``.

    Raises:
        ExecutionError: called while the backend's stream captures a CUDA graph.
    """
    check_not_capturing(backend, "encryption")
    xp = backend.xp
    lead = tuple(message.shape[:-2])
    n = context.ring_degree
    ext = tuple(rows) + context.p_ids
    v = backend.ntt_forward(backend.rns_from_integers(sample_ternary(lead + (n,)), ext), ext)
    e = backend.rns_from_integers(sample_gaussian((2,) + lead + (n,), context.parameters.sigma), ext)
    key = xp.ascontiguousarray(public_key.data[:, list(ext)])
    out = []
    for k in range(2):  # the key's [L + K, N] rows broadcast over the batch (no copy per entry)
        u = backend.ntt_inverse(backend.mul_montgomery(v, key[k], ext), ext)
        out.append(backend.add(u, xp.ascontiguousarray(e[k]), ext))
    c = backend.moddown(xp.stack(out), rows)
    c[0] = backend.add(xp.ascontiguousarray(c[0]), message, rows)
    return c


def decrypt_phase(backend, secret_key: SecretKey, data, rows: tuple[int, ...], domain: str):
    """Coefficient residues of ``c0 + c1*s (+ c2*s**2)``: a ``[*batch, L, N]`` backend array."""
    xp = backend.xp
    if domain == "coefficient":
        data = backend.ntt_forward(data, rows)
    s = xp.ascontiguousarray(secret_key.data[rows[0] : rows[-1] + 1])
    s = xp.ascontiguousarray(xp.broadcast_to(s, data.shape[1:]))
    phase = xp.ascontiguousarray(data[0])
    for k in range(1, data.shape[0]):
        term = xp.ascontiguousarray(data[k])
        for _ in range(k):
            term = backend.mul_montgomery(term, s, rows)
        phase = backend.add(phase, term, rows)
    return backend.ntt_inverse(phase, rows)
