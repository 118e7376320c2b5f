"""CupyBackend's real launch sequences, run through Python emulations of the kernels (no GPU).

``test_launch_arguments.py`` checks each launch against its kernel's C signature; this file
checks the values. Each emulated kernel reads and writes the memory its pointer arguments
address (NumPy arrays stand in for CuPy's, so a pointer is a host address) with the index
arithmetic of its CUDA source: entry order ``[E, 2, batch]``, batch and row strides, row
maps, table offsets (and that every Shoup constant belongs to its value). A wrong stride,
row map or table in the host's launch code changes the result, which must equal the NumPy
backend bit for bit. The NTTs are emulated whole: the kernel of a two-kernel transform that
runs second transforms, after checking that the first ran on the same rows, and the first
only moves data.

Covered (``gpu_cases``' own checks, run here on emulated kernels): ``keyswitch_add_rescale``
(relinearize with rescale) and ``rescale`` in both domains, and the key switches (one key and
several, with the rotated c0 and into a strided ``out``) whose ModDown shares the divisions'
kernels; with the build defaults, with the fused combine off, with the batch-fast NTT grid,
and (N=2^14) with launch groups split by a small L2 budget. An NTT-output key switch with
several special primes runs its ModDown's P rows on a side stream: the emulated streams
record where each launch went (kernels still run in host order, a valid order of the fork).
"""

from __future__ import annotations

import ctypes
import functools
import math
from typing import Any

import numpy as np
import pytest

from fhelium_cupy.runtime import kernels
from tests.helpers.base_convert_table import BYTE_S, byte_group, convert_group, target_words
from tests.helpers.launches import record_launches
from tests.helpers.numpy_cupy import MAIN_STREAM, _current_stream, _Stream, install_numpy_cupy
from tests.kernels import gpu_cases

R64 = 1 << 64
NO_SKIP = np.uint64(0)  # a null row-skip table
NO_ROW = R64 - 1  # base-conversion tables: "this target is not one of the group's sources"


def _memory(arg: Any, dtype: Any, count: int | None = None) -> np.ndarray:
    """A flat writable view of the memory a pointer argument addresses: a NumPy array (from
    its element 0 to the end of its base buffer) or a raw address (``count`` elements)."""
    if isinstance(arg, np.ndarray):
        root = arg
        while isinstance(root.base, np.ndarray):
            root = root.base
        start = arg.__array_interface__["data"][0]
        nbytes = root.__array_interface__["data"][0] + root.nbytes - start
    else:
        start = int(arg)
        assert start != 0 and count is not None
        nbytes = count * np.dtype(dtype).itemsize
    return np.frombuffer((ctypes.c_char * nbytes).from_address(start), dtype=dtype)


class _Function:
    """One emulated kernel, with the driver's check of a launch's dynamic shared memory: at most
    48 KiB unless the kernel's ``max_dynamic_shared_size_bytes`` was raised."""

    def __init__(self, method: Any) -> None:
        self.method = method
        self.max_dynamic_shared_size_bytes = 0

    def __call__(self, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0) -> None:
        assert shared_mem <= max(48 * 1024, self.max_dynamic_shared_size_bytes), "shared memory past the limit"
        self.method(grid, args)


class _Kernels:
    """The emulated kernels of one kernel build (``options``)."""

    def __init__(self, ctx: Any, options: kernels.KernelOptions) -> None:
        from fhelium_cupy.ckks.backends.numpy_backend import NumpyBackend

        self.ctx, self.n = ctx, ctx.ring_degree
        self.ntt = NumpyBackend(ctx)  # one row at a time: the transforms themselves are not under test
        # ntt.cu chunk_coords: batch entries first from FHE_NTT_BATCH_FAST_LOG_N on
        self.batch_fast = self.n.bit_length() - 1 >= int(options.define("FHE_NTT_BATCH_FAST_LOG_N", "16"))
        self.first_pass: tuple | None = None  # the first kernel of a two-kernel NTT, awaiting the second
        self.functions: dict[str, _Function] = {}

    def function(self, name: str) -> Any:
        if name not in self.functions:
            base = name.removesuffix("_v4").removesuffix("_x2")
            for family in ("keyswitch_base_convert", "keyswitch_moddown_convert_combine"):
                if base.startswith(family + "_s"):
                    base = family
            self.functions[name] = _Function(getattr(self, base))
        return self.functions[name]

    # --- helpers ---------------------------------------------------------------------
    def _row(self, arg: Any, offset: int) -> np.ndarray:
        return _memory(arg, np.uint64)[offset:offset + self.n]

    def _prime(self, rowmap: Any, i: int) -> tuple[int, int]:
        prime_id = int(_memory(rowmap, np.int32)[i])
        return prime_id, self.ctx.moduli[prime_id]

    def _transform(self, values: np.ndarray, prime_id: int, inverse: bool) -> np.ndarray:
        row = np.ascontiguousarray(values).reshape(1, self.n)
        return (self.ntt.ntt_inverse if inverse else self.ntt.ntt_forward)(row, (prime_id,))[0]

    def _chunk_grid(self, grid: tuple) -> tuple[int, int]:
        """(entries, rows) of a chunk-stage launch (ntt.cu chunk_coords)."""
        return (grid[0], grid[2]) if self.batch_fast else (grid[2], grid[1])

    def _pass_key(self, data: Any, stride: Any, entries: int, rows: int, rowmap: Any) -> tuple:
        return (_memory(data, np.uint64).ctypes.data, int(stride), entries, rows,
                tuple(_memory(rowmap, np.int32)[:rows]))

    @staticmethod
    def _divide(x: np.ndarray, e: np.ndarray, q: int, table: np.ndarray, kept: int, i: int) -> np.ndarray:
        """(x - e) * D^-1 mod q with the table's [D mod q_i, D^-1 mod q_i, Shoup] layout."""
        inverse, shoup = int(table[kept + i]), int(table[2 * kept + i])
        assert shoup == (inverse << 64) // q
        return ((x.astype(object) - e.astype(object)) % q * inverse % q).astype(np.uint64)

    # --- NTT ----------------------------------------------------------------------------
    @staticmethod
    def _data_rows(skip: Any, entry: int, grid_rows: int) -> list[int]:
        """The data rows a launch transforms for one entry (ntt.cu skipped_row)."""
        if isinstance(skip, np.uint64):
            assert skip == 0
            return list(range(grid_rows))
        start, count, rows = (int(v) for v in _memory(skip, np.int32)[3 * entry:3 * entry + 3])
        mapped = [y + count if y >= start else y for y in range(grid_rows)]
        return [y for y in mapped if y < rows]

    def ntt_inverse_chunk_stages(self, grid, a):
        src, dst, rowmap, _consts, _tw, skip, _m, log_n, log_chunk, in_bs, out_bs = a
        entries, rows = self._chunk_grid(grid)
        out = [(z, i, self._transform(self._row(src, z * int(in_bs) + i * self.n), self._prime(rowmap, i)[0], True))
               for z in range(entries) for i in self._data_rows(skip, z, rows)]
        for z, i, values in out:
            self._row(dst, z * int(out_bs) + i * self.n)[:] = values
        whole = int(log_chunk) == int(log_n)
        self.first_pass = None if whole else (self._pass_key(dst, out_bs, entries, rows, rowmap), skip)

    def ntt_inverse_column_stages(self, grid, a):
        src, dst, rowmap, _consts, _tw, skip, _m, _log_n, _log_chunk, in_bs, out_bs = a
        assert self.first_pass == (self._pass_key(dst, out_bs, grid[2], grid[1], rowmap), skip), \
            "column after its chunks"
        assert _memory(src, np.uint64).ctypes.data == _memory(dst, np.uint64).ctypes.data and in_bs == out_bs
        self.first_pass = None

    def ntt_forward_column_stages(self, grid, a):
        src, dst, rowmap, _consts, _tw, skip, _m, _log_n, _log_chunk, in_bs, out_bs = a
        entries, rows = grid[2], grid[1]
        out = [(z, i, self._row(src, z * int(in_bs) + i * self.n).copy())
               for z in range(entries) for i in self._data_rows(skip, z, rows)]
        for z, i, values in out:
            self._row(dst, z * int(out_bs) + i * self.n)[:] = values
        self.first_pass = (self._pass_key(dst, out_bs, entries, rows, rowmap), skip)

    def _forward_rows(self, grid, src, in_bs, rowmap, log_n, log_chunk, skip: Any = NO_SKIP) -> tuple[int, int]:
        entries, rows = self._chunk_grid(grid)
        if int(log_chunk) != int(log_n):  # (a column kernel that computes its input takes no skip table: None)
            assert self.first_pass is not None and self.first_pass[0] == self._pass_key(src, in_bs, entries, rows,
                                                                                        rowmap), "chunks after their columns"
            col_skip = self.first_pass[1]
            assert col_skip is None or (col_skip == skip if isinstance(skip, np.uint64) else col_skip is skip), \
                "the columns' row-skip table"
        self.first_pass = None
        return entries, rows

    def ntt_forward_chunk_stages(self, grid, a):
        src, dst, rowmap, _consts, _tw, skip, _m, log_n, log_chunk, in_bs, out_bs = a
        entries, rows = self._forward_rows(grid, src, in_bs, rowmap, log_n, log_chunk, skip)
        out = [(z, i, self._transform(self._row(src, z * int(in_bs) + i * self.n), self._prime(rowmap, i)[0], False))
               for z in range(entries) for i in self._data_rows(skip, z, rows)]
        for z, i, values in out:
            self._row(dst, z * int(out_bs) + i * self.n)[:] = values

    def _rotated_c0(self, c0, perms, ent: int, comp: int, b: int, L: int, i: int, q: int, y: np.ndarray) -> np.ndarray:
        """y + c0[b, i, perms[ent]] mod q on component 0 when c0 is given (the hoisted rotation's
        c0 half, NTT domain), else y."""
        if (isinstance(c0, np.uint64) and c0 == 0) or comp != 0:
            return y
        perm = _memory(perms, np.int32)[ent * self.n:(ent + 1) * self.n].astype(np.int64)
        rotated = self._row(c0, (b * L + i) * self.n)[perm]
        return ((y.astype(object) + rotated.astype(object)) % q).astype(np.uint64)

    def _check_f64_chunk(self, grid, a) -> None:
        """The _f64 chunk kernels' contract (ntt.cu FHE_F64_CHUNK_DISPATCH): chunks of 2^11 or
        2^12 words, every launched row's prime below 2^45 (another chunk would do no work, a
        wider prime would be transformed wrong)."""
        _src, _dst, rowmap, _consts, _tw, skip, _m, _log_n, log_chunk, _in_bs, _out_bs = a
        assert int(log_chunk) in (11, 12), f"the _f64 chunk kernels run no 2^{int(log_chunk)}-word chunk"
        entries, rows = self._chunk_grid(grid)
        for z in range(entries):
            for i in self._data_rows(skip, z, rows):
                assert self._prime(rowmap, i)[1] < 1 << 45, "a prime of 2^45 or more in an _f64 chunk launch"

    def ntt_forward_chunk_stages_f64(self, grid, a):
        self._check_f64_chunk(grid, a)
        self.ntt_forward_chunk_stages(grid, a)

    def ntt_inverse_chunk_stages_f64(self, grid, a):
        self._check_f64_chunk(grid, a)
        self.ntt_inverse_chunk_stages(grid, a)

    def ntt_forward_chunk_stages_moddown_combine(self, grid, a):
        e, x, out, rowmap, _consts, _tw, pinv, c0, perms, _m, log_n, log_chunk, L, batch, in_bs, x_bs, out_es, \
            out_cs = a
        L, batch, n = int(L), int(batch), self.n
        entries, rows = self._forward_rows(grid, e, in_bs, rowmap, log_n, log_chunk)
        assert rows == L
        table = _memory(pinv, np.uint64)
        results = []
        for z in range(entries):
            for i in range(L):
                prime_id, q = self._prime(rowmap, i)
                ntt_e = self._transform(self._row(e, z * int(in_bs) + i * n), prime_id, False)
                results.append((z, i, self._divide(self._row(x, z * int(x_bs) + i * n), ntt_e, q, table, L, i)))
        for z, i, y in results:  # every block reads its chunk before it writes (out may be e)
            ent, comp, b = z // (2 * batch), (z // batch) % 2, z % batch
            y = self._rotated_c0(c0, perms, ent, comp, b, L, i, self._prime(rowmap, i)[1], y)
            self._row(out, ent * int(out_es) + comp * int(out_cs) + (b * L + i) * n)[:] = y

    def ntt_forward_chunk_stages_key_inner_product(self, grid, a):
        """Every digit's chunk stages (after the ModUp's column kernel) summed against one key:
        out[k, r] = sum_d NTT(in[d, r]) * key[keydig[d], k, rowmap[r]] * 2^-64 mod q_r."""
        src, key, out, rowmap, _consts, _tw, keydig, _m, log_n, log_chunk, D, key_rows, in_bs = a
        n, D, key_rows, R = self.n, int(D), int(key_rows), grid[1]
        assert grid[0] == n >> int(log_chunk) and grid[2] == 1
        assert self.first_pass is not None and self.first_pass[0] == self._pass_key(src, in_bs, D, R, rowmap), \
            "chunks after their columns"
        self.first_pass = None
        key_digit = _memory(keydig, np.int32)[:D]
        for r in range(R):
            prime_id, q = self._prime(rowmap, r)
            digits = [self._transform(self._row(src, d * int(in_bs) + r * n), prime_id, False).astype(object)
                      for d in range(D)]
            for comp in range(2):
                total = sum(digits[d] * self._row(key, ((int(key_digit[d]) * 2 + comp) * key_rows + prime_id) * n)
                            .astype(object) for d in range(D))
                self._row(out, (comp * R + r) * n)[:] = (total * pow(R64, -1, q) % q).astype(np.uint64)

    # --- key switching ----------------------------------------------------------------
    def keyswitch_inner_product_many(self, grid, a):
        digits, key_ptrs, out, rowmap, _consts, keydig, perms, _m, n, R, batch, D, key_rows = a
        assert grid[0] == -(-int(n) // 256)
        self._inner_products(grid, digits, key_ptrs, out, rowmap, keydig, perms, n, R, batch, D, key_rows)

    def keyswitch_inner_product_many_strided(self, grid, a):
        """Any grid x: the kernel's threads stride over the row (a smaller grid covers it all)."""
        digits, key_ptrs, out, rowmap, _consts, keydig, perms, _m, n, R, batch, D, key_rows = a
        assert 1 <= grid[0] < -(-int(n) // 256)
        self._inner_products(grid, digits, key_ptrs, out, rowmap, keydig, perms, n, R, batch, D, key_rows)

    def keyswitch_inner_product_add_scaled(self, grid, a):
        digits, key_ptrs, out, rowmap, _consts, keydig, perms, c, c_scal, _m, n, R, batch, D, key_rows, c_rows = a
        assert grid[2] == int(batch), "one key"
        self._inner_products(grid, digits, key_ptrs, out, rowmap, keydig, perms, n, R, batch, D, key_rows,
                             (c, _memory(c_scal, np.uint64), int(c_rows)))

    def _inner_products(self, grid, digits, key_ptrs, out, rowmap, keydig, perms, n, R, batch, D, key_rows,
                        add=None) -> None:
        n, R, batch, D, key_rows = int(n), int(R), int(batch), int(D), int(key_rows)
        assert grid[1] <= R  # rows r < grid y of views whose rows are R apart (a row range: pointers past row 0)
        key_digit = _memory(keydig, np.int32)[:D]
        plane = batch * R * n
        for ent in range(grid[2] // batch):
            key = _memory(int(_memory(key_ptrs, np.uint64)[ent]), np.uint64,
                          (int(key_digit.max()) + 1) * 2 * key_rows * n)
            perm = _memory(perms, np.int32)[ent * n:(ent + 1) * n].astype(np.int64)
            for b in range(batch):
                for r in range(grid[1]):
                    prime_id, q = self._prime(rowmap, r)
                    for comp in range(2):
                        total = np.zeros(n, dtype=object)
                        for d in range(D):
                            digit = self._row(digits, d * plane + (b * R + r) * n)[perm].astype(object)
                            k = self._row(key, ((int(key_digit[d]) * 2 + comp) * key_rows + prime_id) * n)
                            total = total + digit * k.astype(object)
                        y = total * pow(R64, -1, q) % q  # Montgomery products
                        if add is not None and r < add[2]:  # + c * w_r (one Shoup constant a row)
                            c, scalars, c_rows = add
                            w, w_shoup = int(scalars[r]), int(scalars[c_rows + r])
                            assert w < q and w_shoup == (w << 64) // q
                            y = (y + self._row(c, ((comp * batch + b) * c_rows + r) * n).astype(object) * w) % q
                        self._row(out, ent * 2 * plane + comp * plane + (b * R + r) * n)[:] = y.astype(np.uint64)

    def keyswitch_linear_transform_accumulate(self, grid, a):
        """Part z of the double-hoisted accumulator: sum over its rotations e of w[1 + e] IP_e,
        plus on the Q rows P (w[0] c + [k = 0] sum_e w[1 + e] c0[perm_e]) (part 0 has the
        unrotated entry); c's components c_cs words apart."""
        digits, key_ptrs, w, c, out, rowmap, _consts, keydig, perms, pinv, _m, n, R, L, E, D, key_rows, c_cs = a
        n, R, L, E, D, key_rows, c_cs = (int(v) for v in (n, R, L, E, D, key_rows, c_cs))
        assert grid[1] == R
        key_digit = _memory(keydig, np.int32)[:D]
        big_p = _memory(pinv, np.uint64)
        plane = R * n
        for part in range(grid[2]):
            for r in range(R):
                prime_id, q = self._prime(rowmap, r)
                rinv = pow(R64, -1, q)
                sums = [np.zeros(n, dtype=object), np.zeros(n, dtype=object)]
                c_sum = np.zeros(n, dtype=object)
                for e in range(part, E, grid[2]):
                    key = _memory(int(_memory(key_ptrs, np.uint64)[e]), np.uint64,
                                  (int(key_digit.max()) + 1) * 2 * key_rows * n)
                    perm = _memory(perms, np.int32)[e * n:(e + 1) * n].astype(np.int64)
                    we = self._row(w, (1 + e) * plane + r * n).astype(object)  # Montgomery form
                    for comp in range(2):
                        total = np.zeros(n, dtype=object)
                        for d in range(D):
                            digit = self._row(digits, d * plane + r * n)[perm].astype(object)
                            k = self._row(key, ((int(key_digit[d]) * 2 + comp) * key_rows + prime_id) * n)
                            total = total + digit * k.astype(object)
                        sums[comp] = sums[comp] + total * rinv % q * we * rinv
                    if r < L:
                        c_sum = c_sum + self._row(c, r * n)[perm].astype(object) * we * rinv
                if r < L:
                    assert int(big_p[r]) == math.prod(self.ctx.moduli[self.ctx.q_count:]) % q
                    unrotated = [np.zeros(n, dtype=object), np.zeros(n, dtype=object)]
                    if part == 0:
                        w0 = self._row(w, r * n).astype(object) * rinv
                        unrotated = [self._row(c, comp * c_cs + r * n).astype(object) * w0 for comp in range(2)]
                    sums[0] = sums[0] + (c_sum + unrotated[0]) * int(big_p[r])
                    sums[1] = sums[1] + unrotated[1] * int(big_p[r])
                for comp in range(2):
                    self._row(out, (part * 2 + comp) * plane + r * n)[:] = (sums[comp] % q).astype(np.uint64)

    def _converted(self, c, table, S: int, T: int, entries: int, batch: int, in_bs,
                   c_self: Any = NO_SKIP) -> list[tuple[int, int, Any]]:
        """(z, t, values) of keyswitch_base_convert_s* over ``entries`` = groups x batch (a
        target that is a source of its group copied from ``c_self`` when given: the NTT hint)."""
        words = _memory(table, np.uint64)
        target_q = target_words(words, entries // batch, S, T)
        results = []
        for z in range(entries):
            g, b = z // batch, z % batch
            group = convert_group(words, g, S, T)
            W, negc, self_row, count = group.W, group.negc, group.self_rows, group.count
            w, w_shoup, s, s_row = group.w, group.w_shoup, group.s, group.s_rows
            ys = []
            for j in range(count):
                assert w_shoup[j] == (w[j] << 64) // s[j]
                ys.append(self._row(c, b * int(in_bs) + s_row[j] * self.n).astype(object) * w[j] % s[j])
            negatives = sum((y > s[j] >> 1).astype(object) for j, y in enumerate(ys))
            for t in range(T):
                if self_row[t] != NO_ROW:
                    own = c if isinstance(c_self, np.uint64) else c_self
                    value = self._row(own, b * int(in_bs) + self_row[t] * self.n).copy()
                else:
                    m = target_q[t]
                    total = sum(y * W[j * T + t] for j, y in enumerate(ys)) + negatives * negc[t]
                    value = (total * pow(R64, -1, m) % m).astype(np.uint64)  # W, negc in Montgomery form
                results.append((z, t, value))
        return results

    def keyswitch_base_convert(self, grid, a):
        c, c_self, out, table, S, T, tile, n, batch, in_bs, out_bs = a
        assert int(n) == self.n and grid[1] == -(-int(T) // int(tile)), "grid y: the target tiles"
        assert not isinstance(c_self, np.uint64) or c_self == 0
        for z, t, value in self._converted(c, table, int(S), int(T), grid[2], int(batch), in_bs, c_self):
            self._row(out, z * int(out_bs) + t * self.n)[:] = value

    def keyswitch_base_convert_bytes_mma(self, grid, a):
        """The ModUp conversion on tensor cores, emulated at the level of its mma fragments: each
        lane's 128-bit slot word (y_c + y_(c+4) 2^48 + e_c 2^96) spread over A as
        mma.m16n8k32 expects it, B rebuilt from the table's per-lane words, the 13 byte-offset
        products C_s summed in int64 (asserting the s32 bound and X < 2^64 q), then X 2^-64 mod q."""
        assert grid[:2] == (-(-self.n // 512), 1)
        self._bytes_convert(grid[2], a)

    def keyswitch_base_convert_bytes_mma_columns(self, grid, a):
        """The conversion of keyswitch_base_convert_bytes_mma, then the first pass of the rows'
        forward NTT (which, as ntt_forward_column_stages here, only moves data: the chunk kernel
        after it transforms, after checking it follows this launch on the same rows). The grid
        covers the chunk's columns in blocks of 256 >> K; the own rows are copied from c_self when
        given, and the chunk kernel then skips each group's own rows (its grid's rows are R less
        the fewest of them), else transformed like the targets (R rows)."""
        *convert, rowmap, consts, _tw, m, log_n, log_chunk = a
        log_n, log_chunk = int(log_n), int(log_chunk)
        K = log_n - log_chunk
        assert log_n == self.n.bit_length() - 1 and 1 <= K <= 4 and int(m) == len(self.ctx.moduli)
        assert _memory(consts, np.uint64)[0] == self.ctx.moduli[0]
        assert grid[:2] == ((1 << log_chunk) // (256 >> K), 1)
        groups = self._bytes_convert(grid[2], convert)
        c_self, out, out_bs = convert[1], convert[2], convert[8]
        R = 1 + max(int(r) for g in groups for r in [*g.out_rows, *g.s_out_rows[:g.count]] if r != NO_ROW)
        hinted = not (isinstance(c_self, np.uint64) and c_self == 0)
        launched = R - min(g.count for g in groups) if hinted else R
        self.first_pass = (self._pass_key(out, out_bs, grid[2], launched, rowmap), None)

    def _bytes_convert(self, entries: int, a) -> list:
        """keyswitch_base_convert_bytes_mma's conversion of ``entries`` = groups x batch; returns
        the groups' tables (byte_group)."""
        c, c_self, out, table, tg, n, batch, in_bs, out_bs = a
        tg, n, batch, S = int(tg), int(n), int(batch), BYTE_S
        assert n == self.n and n % 16 == 0
        words = _memory(table, np.uint64)
        groups = []
        sin = c if isinstance(c_self, np.uint64) else c_self
        for z in range(entries):
            g, b = z // batch, z % batch
            group = byte_group(words, g, tg)
            groups.append(group)
            frag, trow = group.frag, group.out_rows
            w, wp, sq, srow, orow, count = group.w, group.w_shoup, group.s, group.s_rows, group.s_out_rows, group.count
            group_tgs = group.group_tgs
            assert 1 <= group_tgs <= tg and group.pad == 0 and all(r == NO_ROW for r in trow[8 * group_tgs:])
            assert 1 <= count <= 9
            y = [np.zeros(n, dtype=object) for _ in range(9)]
            for j in range(count):
                assert wp[j] == (w[j] << 64) // sq[j] and sq[j] < 1 << 48
                y[j] = self._row(c, b * int(in_bs) + srow[j] * n).astype(object) * w[j] % sq[j]
            cnt = sum((y[j] > sq[j] >> 1).astype(object) for j in range(count))
            # A [n, 2 k-steps, 32 k]: lane c's slot word, byte p = 8 ks + 4 r + i -> k = 4 c + 16 r + i
            A = np.zeros((n, 2, 32), dtype=np.int64)
            for lane_c in range(4):
                e = cnt if lane_c == 3 else (y[8] >> (16 * lane_c)) & 0xFFFF
                slot_word = y[lane_c] + (y[lane_c + 4] << 48) + (e << 96)
                for p in range(16):
                    ks, r, i = p >> 3, (p >> 2) & 1, p & 3
                    A[:, ks, 4 * lane_c + 16 * r + i] = ((slot_word >> (8 * p)) & 0xFF).astype(np.int64)
            # B [tg, S, 2, 32 k, 8 columns]: lane 4 g + c's word, byte 4 r + i -> k = 4 c + 16 r + i, column g
            B = np.zeros((tg, S, 2, 32, 8), dtype=np.int64)
            for lane in range(32):
                col, lane_c = lane >> 2, lane & 3
                for byte in range(8):
                    r, i = byte >> 2, byte & 3
                    B[:, :, :, 4 * lane_c + 16 * r + i, col] = ((frag[:, :, :, lane] >> np.uint64(8 * byte))
                                                                 & np.uint64(0xFF)).astype(np.int64)
            C = np.einsum("nqk,tsqkc->ntsc", A, B)  # [n, tg, S, 8]
            assert C.max() < 1 << 22
            for col in range(8 * group_tgs):  # the kernel's loop: the group's own target groups
                if trow[col] == NO_ROW:
                    continue
                q = group.q[col]
                assert group.qinv[col] == pow(q, -1, R64)
                total = sum(C[:, col // 8, s_, col % 8].astype(object) << (8 * s_) for s_ in range(S))
                assert max(total) >> 64 < q, "one REDC, no reduction of the high word"
                self._row(out, z * int(out_bs) + trow[col] * n)[:] = (total * pow(R64, -1, q) % q).astype(np.uint64)
            for j in range(count):
                self._row(out, z * int(out_bs) + orow[j] * n)[:] = self._row(sin, b * int(in_bs) + srow[j] * n)
        return groups

    def keyswitch_moddown_convert_combine(self, grid, a):
        """The conversion of each entry's divided-out rows and the combine (x - e) * D^-1 into
        keyswitch_moddown_combine's output layout, in one launch (one group)."""
        c, x, out, table, pinv, S, T, tile, n, batch, in_bs, x_bs, out_es, out_cs = a
        T, batch = int(T), int(batch)
        assert int(n) == self.n and grid[1] == -(-T // int(tile)), "grid y: the target tiles"
        divisor = _memory(pinv, np.uint64)
        target_q = target_words(_memory(table, np.uint64), 1, int(S), T)
        converted = self._converted(c, table, int(S), T, grid[2], grid[2], in_bs)  # one group: b = z
        for z, t, e in converted:
            ent, comp, b = z // (2 * batch), (z // batch) % 2, z % batch
            y = self._divide(self._row(x, z * int(x_bs) + t * self.n), e, target_q[t], divisor, T, t)
            self._row(out, ent * int(out_es) + comp * int(out_cs) + (b * T + t) * self.n)[:] = y

    def keyswitch_moddown_combine(self, grid, a):
        x, e, out, rowmap, _consts, pinv, c0, perms, _m, n, L, K, batch, out_es, out_cs = a
        n, L, K, batch = int(n), int(L), int(K), int(batch)
        assert grid[1] == L
        table = _memory(pinv, np.uint64)
        for z in range(grid[2]):
            ent, comp, b = z // (2 * batch), (z // batch) % 2, z % batch
            for i in range(L):
                q = self._prime(rowmap, i)[1]
                y = self._divide(self._row(x, z * (L + K) * n + i * n), self._row(e, z * L * n + i * n), q, table, L, i)
                y = self._rotated_c0(c0, perms, ent, comp, b, L, i, q, y)
                self._row(out, ent * int(out_es) + comp * int(out_cs) + b * L * n + i * n)[:] = y

    # --- automorphism -----------------------------------------------------------------
    def automorphism_coefficient_signed(self, grid, a):
        src, out, srcmap, rowmap, _consts, _m, n, in_bs, out_bs = a
        n = int(n)
        assert n == self.n
        m = _memory(srcmap, np.uint32)[:n].astype(np.int64)
        source, negate = m & 0x7FFFFFFF, (m >> 31) == 1
        for z in range(grid[2]):
            for y in range(grid[1]):
                q = self._prime(rowmap, y)[1]
                v = self._row(src, z * int(in_bs) + y * n)[source].astype(object)
                self._row(out, z * int(out_bs) + y * n)[:] = (np.where(negate, -v, v) % q).astype(np.uint64)

    def automorphism_coefficient_add_many(self, grid, a):
        c0, out, maps, rowmap, _consts, _m, n, batch, in_bs, out_es, out_bs = a
        n, batch = int(n), int(batch)
        assert n == self.n
        for z in range(grid[2]):
            e, b = z // batch, z % batch
            m = _memory(maps, np.uint32)[e * n:(e + 1) * n].astype(np.int64)
            source, negate = m & 0x7FFFFFFF, (m >> 31) == 1
            for y in range(grid[1]):
                q = self._prime(rowmap, y)[1]
                v = self._row(c0, b * int(in_bs) + y * n)[source].astype(object)
                row = self._row(out, e * int(out_es) + b * int(out_bs) + y * n)
                row[:] = ((row.astype(object) + np.where(negate, -v, v)) % q).astype(np.uint64)

    # --- element-wise -------------------------------------------------------------------
    def rns_mul_montgomery_sum(self, grid, a):
        """out[o, y] = sum_c src[o, c, y] * weights[c, y] * 2^-64 mod q_y (weights' entries
        weights_plane words apart)."""
        src, weights, out, rowmap, _consts, _m, n, limbs, count, weights_plane = a
        plane, count, weights_plane = int(limbs) * self.n, int(count), int(weights_plane)
        assert int(n) == self.n and grid[1] == int(limbs)
        for o in range(grid[2]):
            for y in range(grid[1]):
                q = self._prime(rowmap, y)[1]
                total = sum(self._row(src, (o * count + c) * plane + y * self.n).astype(object)
                            * self._row(weights, c * weights_plane + y * self.n).astype(object)
                            for c in range(count))
                self._row(out, o * plane + y * self.n)[:] = (total * pow(R64, -1, q) % q).astype(np.uint64)

    def rns_sum_batch(self, grid, a):
        """out[o, i, y] = sum_c src[o, c, i, y] mod q_y."""
        src, out, rowmap, _consts, _m, n, limbs, count, inner = a
        plane, count, inner = int(limbs) * self.n, int(count), int(inner)
        assert int(n) == self.n and grid[1] == int(limbs)
        for z in range(grid[2]):
            o, i = divmod(z, inner)
            for y in range(grid[1]):
                q = self._prime(rowmap, y)[1]
                total = sum(self._row(src, ((o * count + c) * inner + i) * plane + y * self.n).astype(object)
                            for c in range(count))
                self._row(out, z * plane + y * self.n)[:] = (total % q).astype(np.uint64)

    def _rescale_correction(self, c0: np.ndarray, q0: int, q: int, q0_mod_q: int) -> np.ndarray:
        """centered(c0, q0) mod q."""
        c = c0.astype(object)
        return np.where(c > q0 >> 1, (c % q - q0_mod_q) % q, c % q)

    def _spread(self, grid, c0, out, rowmap, tab, dropped_id, c0_bs, out_bs) -> None:
        """out[z, y] = centered(c0[z], q0) mod q_y over the grid's (entries, rows)."""
        q0, table = self.ctx.moduli[int(dropped_id)], _memory(tab, np.uint64)
        for z in range(grid[2]):
            for y in range(grid[1]):
                q = self._prime(rowmap, y)[1]
                assert int(table[y]) == q0 % q
                r = self._rescale_correction(self._row(c0, z * int(c0_bs)), q0, q, int(table[y]))
                self._row(out, z * int(out_bs) + y * self.n)[:] = r.astype(np.uint64)

    def rescale_spread_dropped(self, grid, a):
        c0, out, rowmap, _consts, tab, _m, n, dropped_id, c0_bs, out_bs = a
        assert int(n) == self.n
        self._spread(grid, c0, out, rowmap, tab, dropped_id, c0_bs, out_bs)

    def ntt_forward_column_stages_rescale_spread(self, grid, a):
        """The column kernel that computes the rescale's correction as it loads it (only data
        moves here, as in ntt_forward_column_stages: the chunk kernel transforms)."""
        c0, out, rowmap, _consts, _tw, tab, _m, log_n, log_chunk, dropped_id, c0_bs, out_bs = a
        assert int(log_chunk) < int(log_n) == self.n.bit_length() - 1
        self._spread(grid, c0, out, rowmap, tab, dropped_id, c0_bs, out_bs)
        self.first_pass = (self._pass_key(out, out_bs, grid[2], grid[1], rowmap), NO_SKIP)

    def ntt_inverse_column_stages_rescale_spread(self, grid, a):
        """The column kernel that finishes the inverse NTT of the divided-out row c0 (its chunk
        stages ran just before, on that row alone) and computes the correction from it; the
        emulated chunk stages transformed c0 whole, so only the spread remains."""
        c0, out, rowmap, _consts, _tw, _itw, tab, _m, log_n, log_chunk, dropped_id, c0_bs, out_bs = a
        assert int(log_chunk) < int(log_n) == self.n.bit_length() - 1
        assert self.first_pass == (self._pass_key(c0, c0_bs, grid[2], 1, rowmap)[:4] + ((int(dropped_id),),),
                                   NO_SKIP), "the divided-out row's chunk stages, just before"
        self._spread(grid, c0, out, rowmap, tab, dropped_id, c0_bs, out_bs)
        self.first_pass = (self._pass_key(out, out_bs, grid[2], grid[1], rowmap), NO_SKIP)

    def ntt_forward_column_stages_modup_spread(self, grid, a):
        """The column kernel that computes a ModUp's conversion for digits of one prime as it
        loads it: entry z = g * batch + b of digit group g, row y = centered(c[k, b, src_g], q_g)
        mod q_y; a component group (q word 0) copies component k's rows and leaves the rows
        marked ~0 (past them) to the chunk kernel's row-skip table."""
        c, out, rowmap, _consts, _tw, tab, _m, log_n, log_chunk, batch, rows, c_cs, c_bs, out_bs = a
        assert int(log_chunk) < int(log_n) == self.n.bit_length() - 1
        table, batch, rows = _memory(tab, np.uint64), int(batch), int(rows)
        assert grid[1] == rows
        for z in range(grid[2]):
            g, b = divmod(z, batch)
            group = [int(v) for v in table[g * (rows + 2):(g + 1) * (rows + 2)]]
            k = group[1] >> 32
            for y in range(rows):
                q = self._prime(rowmap, y)[1]
                if group[0] == 0 and group[2 + y] == NO_ROW:
                    continue
                q0, src = (group[0], group[1] & 0xFFFFFFFF) if group[0] else (q, y)
                assert group[2 + y] == q0 % q
                source = self._row(c, k * int(c_cs) + b * int(c_bs) + src * self.n)
                r = self._rescale_correction(source, q0, q, q0 % q)
                self._row(out, z * int(out_bs) + y * self.n)[:] = r.astype(np.uint64)
        self.first_pass = (self._pass_key(out, out_bs, grid[2], grid[1], rowmap), None)

    def rescale_drop_first_coefficient(self, grid, a):
        src, out, rowmap, _consts, tab, _m, n, remaining, dropped_id, in_bs, out_bs = a
        n, remaining, q0 = int(n), int(remaining), self.ctx.moduli[int(dropped_id)]
        table = _memory(tab, np.uint64)
        for z in range(grid[2]):
            for y in range(grid[1]):
                q = self._prime(rowmap, y)[1]
                r = self._rescale_correction(self._row(src, z * int(in_bs)), q0, q, int(table[y]))
                c = self._row(src, z * int(in_bs) + (y + 1) * n)
                self._row(out, z * int(out_bs) + y * n)[:] = self._divide(c, r.astype(np.uint64), q, table,
                                                                           remaining, y)

    def rns_centered_crt_to_double(self, grid, a):
        """Garner's digits with Python integers from the table's constants, then the kernel's
        Horner sums in float64 (one rounding a product and a sum)."""
        x, out, tab, limbs, n = a
        L, n = int(limbs), int(n)
        table = [int(w) for w in _memory(tab, np.uint64)[: 5 * L + L * (L - 1)]]
        src, dst = _memory(x, np.uint64), _memory(out, np.float64)
        for z in range(grid[2]):
            digits: list[list[int]] = []
            for i in range(L):
                q, h_mod, _, inv, _ = table[5 * i : 5 * i + 5]
                pairs = table[5 * L + i * (i - 1) : 5 * L + i * (i + 1)]
                v = [(int(w) + h_mod) % q for w in src[(z * L + i) * n : (z * L + i + 1) * n]]
                for j in range(i):
                    v = [(vk - d * pairs[2 * j]) % q for vk, d in zip(v, digits[j])]
                digits.append([vk * inv % q for vk in v] if i else v)
            acc = np.zeros(n)
            for i in range(L - 1, -1, -1):
                h_digit = table[5 * i + 2] - (1 << 64 if table[5 * i + 2] >> 63 else 0)
                d = np.array([float(dk - h_digit) for dk in digits[i]])
                acc = d if i == L - 1 else acc * float(table[5 * i]) + d
            dst[z * n : (z + 1) * n] = acc


CONFIGS = {
    "defaults": {},
    "fused combine off": {"kernel_options": kernels.KernelOptions(extra=("-DFHE_MODDOWN_FUSED_COMBINE=0",))},
    "batch-fast NTT grid": {"kernel_options": kernels.KernelOptions(extra=("-DFHE_NTT_BATCH_FAST_LOG_N=0",))},
    "base conversions in tiles of 2 targets": {"base_convert_tile": 2},
}


@pytest.fixture
def emulated(monkeypatch):
    """``emulated(ctx, **backend_options)`` -> (CupyBackend with emulated kernels, NumpyBackend)."""
    def make(ctx: Any, **options: Any) -> tuple[Any, Any]:
        backend_class = install_numpy_cupy(monkeypatch, lambda build: _Kernels(ctx, build).function)
        return backend_class(ctx, **options), gpu_cases.reference(ctx)
    return make


# gpu_cases' checks whose kernels are all emulated above: the divisions (every batch shape,
# both domains, levels from prime 0 and prime 1; encryption's ModDown and its residues of
# sampled integers) and the key switches that share them (one key and several, with the
# rotated c0 and a strided out)
EMULATED_CASES = tuple(name for name in gpu_cases.CASES
                       if name.startswith(("keyswitch_add_rescale", "rescale_", "keyswitch_from_digits_galois",
                                           "keyswitch_from_digits_many", "moddown", "rns_from_integers",
                                           "centered_crt")))


def test_inputs_at_an_odd_word_are_copied_and_such_outputs_refused(emulated):
    """The NTT and key kernels move word pairs with 16-byte loads and stores: a contiguous view
    that starts at an odd word (a flat buffer sliced by one) would fault on the GPU. Such an
    input is copied to a fresh (aligned) allocation; such an ``out`` is refused (audit,
    session 30)."""
    from fhelium_cupy.interop.arrays import data_pointer

    gpu, ref = emulated(gpu_cases.context("n4096"))
    rows = tuple(range(gpu.context.q_count))
    L, n = len(rows), gpu.n
    rng = np.random.default_rng(3)
    flat = np.zeros(L * n + 1, dtype=np.uint64)
    view = flat[1:].reshape(L, n)
    view[...] = np.stack([rng.integers(0, gpu.context.moduli[r], n, dtype=np.uint64) for r in rows])
    assert view.flags.c_contiguous and data_pointer(view) % 16 == 8
    checked = gpu._check(view, rows, "test")
    assert checked is not view and data_pointer(checked) % 16 == 0
    np.testing.assert_array_equal(checked, view)
    np.testing.assert_array_equal(gpu.ntt_forward(view, rows), ref.ntt_forward(view.copy(), rows))
    aligned = np.zeros(L * n + 2, dtype=np.uint64)[2:].reshape(L, n)
    assert gpu._check(aligned, rows, "test") is aligned  # already fine: no copy
    with pytest.raises(ValueError, match="16-byte boundary"):
        gpu.ntt_forward(view.copy(), rows, out=view)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_division_and_key_switch_launches_compute_the_numpy_results(emulated, config):
    gpu, ref = emulated(gpu_cases.context("n4096"), **CONFIGS[config])
    assert len(EMULATED_CASES) >= 19
    for name in EMULATED_CASES:
        assert gpu_cases.run_case(name, gpu, ref, "n4096") is None, name


OVERLAP_CASES = ("keyswitch_from_digits_ntt", "keyswitch_from_digits_galois_ntt",
                 "keyswitch_from_digits_galois_ntt_rescaled_level", "keyswitch_from_digits_many_ntt")


def _launches_with_streams(backend: Any, grids: list | None = None) -> list[tuple[str, int, Any]]:
    """Every launch from now on as (kernel name, grid y, the stream it was enqueued on); the
    whole grids appended to ``grids`` when given."""
    log: list[tuple[str, int, Any]] = []
    launch = backend._launch

    def recorded(name: str, grid: Any, block: Any, args: Any, shared_mem: int = 0) -> None:
        log.append((name, grid[1], _current_stream()))
        if grids is not None:
            grids.append(grid)
        launch(name, grid, block, args, shared_mem=shared_mem)

    backend._launch = recorded
    return log


@pytest.mark.parametrize("kip_blocks", [0, 4])
def test_ntt_output_key_switch_overlaps_its_moddown_with_the_q_rows_inner_product(emulated, kip_blocks):
    """Two special primes (n4096): an NTT-output key switch computes the inner product of its K P
    rows, forks, and a side stream takes them through the ModDown's inverse NTT and conversion
    while the caller's stream computes the L Q rows (by default in a grid of about 4 blocks per
    SM, whose threads stride over the rows; FHE_MODDOWN_KIP_BLOCKS=0: the full grid); the
    caller's stream joins before the forward NTT and combine. Every case as NumPy computes it."""
    ctx = gpu_cases.context("n4096")
    gpu, ref = emulated(ctx, kernel_options=kernels.KernelOptions(extra=(f"-DFHE_MODDOWN_KIP_BLOCKS={kip_blocks}",)))
    gpu._sm_count = 2  # (a small GPU: 8 blocks are fewer than a 4096-coefficient row's 16)
    L, K = ctx.q_count, ctx.p_count
    assert K > 1 and gpu._overlaps_moddown("ntt", 2, L) and not gpu._overlaps_moddown("coefficient", 2, L)
    all_grids: list = []
    log = _launches_with_streams(gpu, all_grids)
    for name in OVERLAP_CASES:
        waited, first = len(MAIN_STREAM.waited), len(log)
        assert gpu_cases.run_case(name, gpu, ref, "n4096") is None, name
        launched, grids = log[first:], all_grids[first:]
        ips = [i for i, (k, _, _) in enumerate(launched) if k.startswith("keyswitch_inner_product_many")]
        assert ips and len(ips) % 2 == 0, name  # two launches a key switch (a case may run several)
        assert all(launched[i][0] == "keyswitch_inner_product_many" for i in ips[::2]), name
        assert all(launched[j][0].endswith("_strided") == (kip_blocks > 0) for j in ips[1::2]), name
        side, fork, join = gpu._moddown_stream()
        assert side not in gpu._side_streams(1)[0]  # its own stream, not run_independent's
        for i, j in zip(ips[::2], ips[1::2]):
            (_, p_rows, p_stream), (_, q_rows, q_stream) = launched[i], launched[j]
            assert p_stream is MAIN_STREAM and q_stream is MAIN_STREAM and p_rows == K and 1 <= q_rows <= L, name
            between = launched[i + 1:j]
            assert between and all(stream is side for _, _, stream in between), name
            assert between[-1][0].startswith("keyswitch_base_convert_s"), name
            full = ctx.ring_degree // 256
            bounded = max(1, min(full, -(-8 // (grids[j][1] * grids[j][2]))))  # about 4 x 2 SMs blocks in all
            assert grids[i][0] == full and grids[j][0] == (full if kip_blocks == 0 else bounded) and bounded < full, name
        assert fork.recorded_on is MAIN_STREAM and side.waited[-1] is fork
        assert join.recorded_on is side and MAIN_STREAM.waited[waited:] == [join] * (len(ips) // 2), name
        on_side = {i for i, (_, _, stream) in enumerate(launched) if stream is side}
        assert on_side == {i for a, b in zip(ips[::2], ips[1::2]) for i in range(a + 1, b)} and not _Stream.current


@pytest.mark.parametrize("define, digits, blocks", [(None, 2, 4 * 132), (None, 3, 0), (0, 2, 0), (2, 1, 2 * 132)])
def test_q_rows_inner_product_is_bounded_only_with_no_more_digits_than_special_primes(emulated, define, digits,
                                                                                       blocks):
    """The bounded grid (FHE_MODDOWN_KIP_BLOCKS per SM, default 4) where D <= K (the side chain is
    as long as the inner product); the full grid with more digits, or with the define at 0."""
    extra = () if define is None else (f"-DFHE_MODDOWN_KIP_BLOCKS={define}",)
    gpu, _ = emulated(gpu_cases.context("n4096"), kernel_options=kernels.KernelOptions(extra=extra))
    assert len(gpu.p_rows) == 2 and gpu._sm_count == 132
    assert gpu._q_rows_kip_blocks(digits) == blocks


@pytest.mark.parametrize("ctx_name", ["n16384", "n4096"])
def test_moddown_runs_work_given_beside_it_in_turn_where_it_has_nothing_to_overlap(emulated, monkeypatch, ctx_name):
    """``_moddown_launch(beside=)`` with one special prime (n16384) or coefficient output (n4096):
    the caller's work runs first, on the caller's stream, and the results are NumPy's (a key
    switch forced down the split inner product, whose Q rows only ``beside`` computes)."""
    gpu, ref = emulated(gpu_cases.context(ctx_name))
    monkeypatch.setattr(gpu, "_overlaps_moddown", lambda domain, entries, L: True)
    launched = _launches_with_streams(gpu)
    cases = ("keyswitch_from_digits_ntt", "keyswitch_from_digits_many_ntt") if ctx_name == "n16384" else (
        "keyswitch_from_digits_galois", "keyswitch_from_digits_many")
    for name in cases:
        assert gpu_cases.run_case(name, gpu, ref, ctx_name) is None, name
    assert [k for k, _, _ in launched].count("keyswitch_inner_product_many") >= 2 * len(cases)
    assert all(stream is MAIN_STREAM for _, _, stream in launched)


@pytest.mark.parametrize("off", ["define", "one_stream", "in_branches"])
def test_key_switch_keeps_one_stream_where_the_moddown_does_not_overlap(emulated, off):
    """FHE_MODDOWN_OVERLAP=0, branch_streams=1, or a key switch inside run_independent's branches:
    one inner-product launch and every launch on the caller's stream, the same values."""
    options = {"define": {"kernel_options": kernels.KernelOptions(extra=("-DFHE_MODDOWN_OVERLAP=0",))},
               "one_stream": {"branch_streams": 1}, "in_branches": {}}[off]
    gpu, ref = emulated(gpu_cases.context("n4096"), **options)
    launched = _launches_with_streams(gpu)

    def run() -> None:
        for name in OVERLAP_CASES:
            assert gpu_cases.run_case(name, gpu, ref, "n4096") is None, name

    if off == "in_branches":
        gpu.run_independent([run, lambda: None])  # task 0 on the caller's stream, the branches open
    else:
        run()
    rows = [y for k, y, _ in launched if k == "keyswitch_inner_product_many"]
    assert rows and all(y > gpu.context.p_count for y in rows)  # each launch: a level's Q rows and the P rows
    assert all(stream is MAIN_STREAM for _, _, stream in launched)


def test_launch_groups_split_by_a_small_l2_budget_compute_the_numpy_results(emulated):
    """N=2^14 with 128 KiB launch groups: every transform in several groups, so the divisions
    take the separate combine kernel."""
    ctx = gpu_cases.context("n16384")
    gpu, ref = emulated(ctx, l2_group_bytes=1 << 17)
    assert len(gpu._groups(2, ctx.q_count - 1)) > 1
    for name in ("keyswitch_add_rescale", "keyswitch_add_rescale_ntt", "rescale_ntt_key_switch_level"):
        assert gpu_cases.run_case(name, gpu, ref, "n16384") is None, name


MODUP_CASES = tuple(name for name in gpu_cases.CASES if name.startswith("modup"))


_BYTES_SETUPS = {  # name: (context, backend options, column stages of the fused conversion or 0: not fused)
    "n4096w": ("n4096w", {}, 2),  # (1024-word chunks: a launch of few rows)
    "n8192": ("n8192", {}, 3),
    "n8192, 4096-word chunks": ("n8192", {"ntt_fill_blocks": 1}, 1),  # one lane a column
    "n8192, FHE_BYTES_COLUMNS=0": ("n8192", {"extra": ("-DFHE_BYTES_COLUMNS=0",)}, 0),
}


@pytest.mark.parametrize("setup", list(_BYTES_SETUPS))
def test_modup_on_tensor_cores_computes_the_numpy_results(emulated, setup):
    """keyswitch_base_convert_bytes_mma in every ModUp case (with and without the NTT hint,
    batched): digits of 9 and 8 sources of 40 to 47 bits (n4096w, the default threshold), and
    one-prime digits with the threshold at 1; with column stages its ..._columns form, which
    also runs the forward NTT's first pass (K = 1 to 3 stages here; 4 on the GPU at N=2^16),
    unless FHE_BYTES_COLUMNS=0."""
    ctx_name, options, stages = _BYTES_SETUPS[setup]
    extra = options.get("extra", ())
    backend_options = {k: v for k, v in options.items() if k != "extra"}
    if ctx_name != "n4096w":
        extra = ("-DFHE_BC_BYTES_MIN_SOURCES=1", *extra)
    gpu, ref = emulated(gpu_cases.context(ctx_name), kernel_options=kernels.KernelOptions(extra=extra),
                        **backend_options)
    launched = record_launches(gpu)
    assert len(MODUP_CASES) >= 5
    for name in MODUP_CASES:
        launches = gpu.launch_count
        assert gpu_cases.run_case(name, gpu, ref, ctx_name) is None, name
        assert gpu.launch_count > launches
    fused = launched.count("keyswitch_base_convert_bytes_mma_columns")
    assert fused == (len(MODUP_CASES) if stages else 0)
    assert launched.count("keyswitch_base_convert_bytes_mma") == (0 if stages else len(MODUP_CASES))
    if stages:
        t = gpu._keyswitch_device(tuple(range(gpu.context.q_count)))  # the first case: "modup", 2 entries
        assert gpu.log_n - gpu._chunk_log(t["num_digits"] * 2 * len(t["out_rows"])) == stages
        assert not [k for k in launched if k.startswith("ntt_forward_column_stages")]
    words, tg, _ = gpu._keyswitch_device(tuple(range(gpu.context.q_count)))["up_bytes"]
    if ctx_name == "n4096w":  # each digit loops over its own target groups, not the widest digit's
        host = gpu.to_numpy(words)
        assert tg == 3 and [byte_group(host, g, tg).group_tgs for g in range(2)] == [2, 3]


def test_fused_modup_opts_in_to_the_shared_memory_it_needs(emulated, monkeypatch):
    """keyswitch_base_convert_bytes_mma_columns needs its table block and 8 target slots: past
    48 KiB (N=2^16 dnum 4: 5 target groups, 51.1 KiB) the backend raises the kernel's limit
    when it builds the tables, up to the device's opt-in limit; past that (or on a device
    without the opt-in), or with no tensor-core table, the separate launches run."""
    from tests.helpers import numpy_cupy

    gpu, _ = emulated(gpu_cases.context("n4096w"))
    slots = 8 * 258 * 8
    assert gpu._bytes_columns_smem(None) is None
    function = gpu._library.function("keyswitch_base_convert_bytes_mma_columns")
    assert gpu._bytes_columns_smem((None, np.int32(1), 7000)) == 7000 + slots  # below 48 KiB: no opt-in
    assert function.max_dynamic_shared_size_bytes == 0
    assert gpu._bytes_columns_smem((None, np.int32(5), 34624)) == 34624 + slots
    assert function.max_dynamic_shared_size_bytes == 34624 + slots
    assert gpu._bytes_columns_smem((None, np.int32(3), 20000)) == 20000 + slots  # never lowered
    assert function.max_dynamic_shared_size_bytes == 34624 + slots
    assert gpu._bytes_columns_smem((None, np.int32(99), 227 * 1024)) is None
    off, _ = emulated(gpu_cases.context("n4096w"), kernel_options=kernels.KernelOptions(
        extra=("-DFHE_BYTES_COLUMNS=0",)))
    assert off._bytes_columns_smem((None, np.int32(3), 20000)) is None
    monkeypatch.setattr(numpy_cupy._Device, "attributes", {})  # no opt-in reported: 48 KiB
    small, _ = emulated(gpu_cases.context("n4096w"))
    assert small._bytes_columns_smem((None, np.int32(3), 20000)) == 20000 + slots
    assert small._bytes_columns_smem((None, np.int32(5), 34624)) is None


@pytest.mark.parametrize("inverse_spread", [True, False])
def test_one_prime_digits_convert_in_the_ntt_column_kernel(emulated, inverse_spread):
    """N=2^14 (8 digits of one prime, one special prime): ModUp's conversion is the NTT column
    kernel's load (ntt_forward_column_stages_modup_spread), and so is the NTT-output ModDown's
    (with the special prime: ntt_forward_column_stages_rescale_spread, or for a small launch
    ntt_inverse_column_stages_rescale_spread_x2, which also finishes the special-prime rows'
    inverse NTT; FHE_INVERSE_SPREAD=0 never takes that form): no base-conversion launch in either, and
    every ModUp and NTT-output key-switch case as NumPy computes it."""
    ctx = gpu_cases.context("n16384")
    options = {} if inverse_spread else {"kernel_options": kernels.KernelOptions(extra=("-DFHE_INVERSE_SPREAD=0",))}
    gpu, ref = emulated(ctx, **options)
    assert gpu._keyswitch_device(tuple(range(ctx.q_count)))["up_spread"] is not None
    launched = record_launches(gpu)
    names = MODUP_CASES + ("keyswitch_from_digits_ntt", "keyswitch_from_digits_galois_ntt",
                           "keyswitch_from_digits_galois_ntt_rescaled_level", "keyswitch_from_digits_many_ntt")
    for name in names:
        assert name in gpu_cases.CASES, name
        assert gpu_cases.run_case(name, gpu, ref, "n16384") is None, name
    assert not [k for k in launched if k.startswith("keyswitch_base_convert")]
    assert {"ntt_forward_column_stages_modup_spread_x2", "ntt_forward_column_stages_rescale_spread_x2"} <= set(launched)
    # one key's ModDown folds its inverse column stages into the column input by default; three
    # keys' (48 rows) do not (more threads than the FHE_INVERSE_SPREAD=2 limit)
    assert ("ntt_inverse_column_stages_rescale_spread_x2" in launched) is inverse_spread


def test_one_prime_digits_and_the_ciphertext_transform_in_one_ntt(emulated):
    """N=2^14: ntt_forward_and_modup transforms the digits' conversions and the ciphertext's own
    rows in one forward NTT (2 launches; the chunk kernel skips the rows past L of the component
    entries), and its NTT view (components L + K rows apart) is the ``c`` of a linear transform
    as it is; every choice of components as NumPy computes it, at two levels."""
    ctx = gpu_cases.context("n16384")
    gpu, ref = emulated(ctx)
    rows = tuple(range(ctx.q_count))
    c = gpu_cases.rand(ctx, rows, (2,), np.random.default_rng(4))
    before = gpu.launch_count
    ntt, digits = gpu.ntt_forward_and_modup(c, rows)
    assert gpu.launch_count - before == 2
    R = len(rows) + ctx.p_count
    assert ntt.shape == (2, len(rows), ctx.ring_degree) and ntt.strides[0] == 8 * R * ctx.ring_degree
    assert ntt.base is not None and ntt.base is digits.base  # views of one storage
    for name in ("ntt_forward_and_modup", "ntt_forward_and_modup_rescaled_level"):
        assert gpu_cases.run_case(name, gpu, ref, "n16384") is None, name


@pytest.mark.parametrize("case", ["rotate_keyswitch", "rotate_keyswitch_ntt", "rotate_keyswitch_ntt_rescaled_level"])
@pytest.mark.parametrize("ctx_name", ["n8192", "n4096"])
def test_a_rotation_runs_its_modup_and_inner_product_in_one_pass(emulated, case, ctx_name):
    """``rotate_keyswitch`` on one-prime digits (n8192): the automorphism, the ModUp's column
    kernel and one chunk kernel that sums the digits against the key, then the ModDown; digits of
    several primes (n4096): declined, nothing launched. Both the NumPy reference bit for bit."""
    gpu, ref = emulated(gpu_cases.context(ctx_name))
    launched = record_launches(gpu)
    assert gpu_cases.run_case(case, gpu, ref, ctx_name) is None
    fused = "ntt_forward_chunk_stages_key_inner_product" in launched
    assert fused == (ctx_name == "n8192")
    if fused:
        assert launched[:2] == ["automorphism_coefficient_signed", "ntt_forward_column_stages_modup_spread_x2"] or \
            launched[:2] == ["automorphism_coefficient_signed", "ntt_forward_column_stages_modup_spread"]
        assert "keyswitch_inner_product_many" not in launched


def test_ntt_forward_and_modup_falls_back_to_two_calls(emulated):
    """Digits of several primes (N=2^12 here) or a batched ciphertext: the NTT, then the ModUp
    with it as the hint (2 + 3 launches, or 2 + 2 for one-prime digits); the same values."""
    for ctx_name, lead, launches in (("n4096", (2,), 5), ("n16384", (2, 3), 4)):
        ctx = gpu_cases.context(ctx_name)
        gpu, ref = emulated(ctx)
        rows = tuple(range(ctx.q_count))
        c = gpu_cases.rand(ctx, rows, lead, np.random.default_rng(5))
        before = gpu.launch_count
        ntt, digits = gpu.ntt_forward_and_modup(c, rows, components=(1,))
        assert gpu.launch_count - before == launches, ctx_name
        assert np.array_equal(ntt, ref.ntt_forward(c[[1]], rows))
        assert np.array_equal(digits, ref.modup(c[1], rows))
    with pytest.raises(ValueError, match="components"):
        gpu.ntt_forward_and_modup(c, rows, components=(1, 1))


def test_modup_below_the_source_threshold_keeps_the_scalar_conversion(emulated):
    gpu, _ = emulated(gpu_cases.context("n16384"))
    assert gpu._keyswitch_device(tuple(range(gpu.context.q_count)))["up_bytes"] is None


def test_modup_before_sm80_keeps_the_scalar_conversion(emulated, monkeypatch):
    """No integer mma.m16n8k32 before compute capability 8.0: digits of 9 convert on CUDA cores."""
    from tests.helpers import numpy_cupy

    monkeypatch.setattr(numpy_cupy._Device, "compute_capability", "75")
    gpu, _ = emulated(gpu_cases.context("n4096w"))
    assert gpu._keyswitch_device(tuple(range(gpu.context.q_count)))["up_bytes"] is None


def test_byte_table_takes_only_the_digits_its_kernel_serves():
    """At most 9 sources a digit, each below 2^48, whole 16-coefficient tiles; anything else is
    refused by the table builder (the backend then keeps keyswitch_base_convert_s*)."""
    from fhelium_cupy.ckks.backends import _cupy_tables as tables
    from tests.helpers import ring_oracle as ro

    ctx = gpu_cases.context("n4096w")
    rows = tuple(range(ctx.q_count))
    groups = tables.modup_tables(ctx, rows)["groups"]
    assert tables.byte_table_fits(ctx, groups)
    assert not tables.byte_table_fits(ctx, [tuple(range(10))])  # ten sources
    wide = gpu_cases.context("n4096")  # its first Q primes have 61, 55 and 50 bits
    assert not tables.byte_table_fits(wide, [(0,)]) and tables.byte_table_fits(wide, [(3,)])
    tiny = ro.make_context(8, ro.ntt_primes(40, 4, 8), ro.ntt_primes(60, 1, 8), dnum=1)
    assert not tables.byte_table_fits(tiny, [(0, 1, 2, 3)])  # N = 8: no whole m-tile
    with pytest.raises(ValueError, match="at most 9 sources"):
        tables.modup_byte_table(ctx, [tuple(range(10))], rows, rows)


@pytest.mark.parametrize("streams", [1, 3, 8])
def test_independent_tasks_run_forked_onto_side_streams_and_joined(emulated, streams):
    """run_independent: task i on stream i % B, B = min(branch_streams, tasks), stream 0
    the caller's; every side stream waits on a fork event the caller's stream recorded, and the
    caller's stream waits on each side stream's join event, also when a task raises. A table
    built inside the branches, or outside them, is complete before the cache publishes it."""
    gpu, _ = emulated(gpu_cases.context("n4096"), branch_streams=streams)
    ran: list[tuple[int, Any]] = []
    synced = MAIN_STREAM.synchronized

    def task(i: int):
        def run() -> None:
            ran.append((i, _current_stream()))
            if i == 2:  # a table built and published inside the branches
                gpu._cached(("test_table", 0), lambda: gpu._upload(np.arange(3, dtype=np.int32)))
        return run

    gpu.run_independent([task(i) for i in range(7)])
    B = min(streams, 7)
    assert [i for i, _ in ran] == list(range(7))
    if B == 1:
        assert all(stream is MAIN_STREAM for _, stream in ran)
        return
    side, fork, joins = gpu._side_streams(B - 1)
    assert [stream for _, stream in ran] == [MAIN_STREAM if i % B == 0 else side[i % B - 1] for i in range(7)]
    assert fork.recorded_on is MAIN_STREAM
    assert all(stream.waited[-1] is fork for stream in side)
    assert [join.recorded_on for join in joins] == side
    assert MAIN_STREAM.waited[-(B - 1):] == joins
    assert ran[2][1].synchronized == 1 and MAIN_STREAM.synchronized == synced
    gpu._cached(("test_table", 1), lambda: gpu._upload(np.arange(3, dtype=np.int32)))  # outside them too
    assert MAIN_STREAM.synchronized == synced + 1

    def fails() -> None:
        raise RuntimeError("task failed")

    waited = len(MAIN_STREAM.waited)
    with pytest.raises(RuntimeError, match="task failed"):
        gpu.run_independent([task(0), fails, task(2)])
    assert len(MAIN_STREAM.waited) == waited + min(B, 3) - 1  # joined all the same
    assert not _Stream.current


@pytest.mark.parametrize("streams", [1, 3])
def test_a_captured_fork_launches_nothing_of_its_own(emulated, monkeypatch, streams):
    """In a capture (the caller's stream capturing) run_independent forks as it does eagerly:
    the fork event on the caller's stream, every side stream waiting on it, and no launch of
    its own (a graph whose roots are the branches gets its single root from the graph runtime,
    ``runtime._graph_execs.RootedGraph``); one stream (no fork) runs the tasks in order."""
    gpu, _ = emulated(gpu_cases.context("n4096"), branch_streams=streams)
    seen: list[int] = []
    monkeypatch.setattr(MAIN_STREAM, "capturing", True)
    side_before = [len(s.waited) for s in gpu._side_streams(max(streams - 1, 1))[0]] if streams > 1 else []
    gpu.run_independent([functools.partial(seen.append, i) for i in range(3)])
    assert seen == [0, 1, 2] and gpu.launch_count == 0
    if streams == 1:
        return
    side, fork, _ = gpu._side_streams(streams - 1)
    assert fork.recorded_on is MAIN_STREAM
    assert [len(s.waited) for s in side] == [n + 1 for n in side_before]


def test_a_task_publishes_to_the_tasks_after_it(emulated):
    """publish_to_branches records an event on the publishing task's stream and
    wait_for_published makes a later task's stream wait on it; a wait with nothing published
    is refused (RuntimeError) and the branches still join; outside run_independent (and on one
    stream) both do nothing."""
    gpu, _ = emulated(gpu_cases.context("n4096"), branch_streams=3)
    gpu.publish_to_branches()  # outside: stream order, nothing to record
    gpu.wait_for_published()
    waits: dict[int, Any] = {}

    def publisher() -> None:
        gpu.publish_to_branches()

    def reader(i: int):
        def run() -> None:
            gpu.wait_for_published()
            waits[i] = _current_stream().waited[-1]
        return run

    gpu.run_independent([publisher, reader(1), reader(2)])
    event = gpu._branches.publish_events[0]
    assert event.recorded_on is MAIN_STREAM and waits == {1: event, 2: event}
    assert gpu._branches.published == []  # a later call does not see this call's mark

    # two publishers on two streams: a later task waits for both (one re-recorded event kept
    # only the last: the reader was not ordered after the first publisher's work)
    seen: list[Any] = []

    def reader_of_all() -> None:
        stream = _current_stream()
        before = len(stream.waited)
        gpu.wait_for_published()
        seen.extend(stream.waited[before:])

    gpu.run_independent([publisher, publisher, lambda: None, reader_of_all])
    first, second = gpu._branches.publish_events[:2]
    assert first.recorded_on is MAIN_STREAM and second.recorded_on is not MAIN_STREAM
    assert seen == [first, second]

    joined = len(MAIN_STREAM.waited)
    with pytest.raises(RuntimeError, match="no earlier task"):
        gpu.run_independent([lambda: None, reader(1)])
    assert len(MAIN_STREAM.waited) == joined + 1 and not _Stream.current

    one, _ = emulated(gpu_cases.context("n4096"), branch_streams=1)
    waited = len(MAIN_STREAM.waited)
    one.run_independent([lambda: one.publish_to_branches(), lambda: one.wait_for_published()])
    assert len(MAIN_STREAM.waited) == waited  # one stream: in order, no events


def test_independent_rotations_on_side_streams_compute_the_numpy_batch(emulated, monkeypatch):
    """FHElium's independent schedule (a ModUp per rotation) through the CuPy backend's host
    code with its rotations on three streams: the NumPy engine's batch, bit for bit."""
    from fhelium_cupy.ckks import CkksEngine

    engine = CkksEngine("test-n4096-scale40", insecure=True)
    engine.generate_keys()
    ct = engine.encrypt_message(np.random.default_rng(9).uniform(-1, 1, engine.num_slots))
    keys = list(engine.rotation_keys([1, 2, 5, 7]).values())
    want = engine._rotations_batch(ct, keys, "matrix_vector")
    options = {"kernel_options": kernels.KernelOptions(extra=("-DFHE_BRANCH_STREAMS=3",))}
    gpu, _ = emulated(engine.context, **options)
    monkeypatch.setattr(engine, "backend", gpu)  # (its checks would reject host values: the unchecked form)
    launched = record_launches(gpu)
    got = engine._rotation_batch(ct, keys, "ntt", hoisted=False)
    assert np.array_equal(got.data, want.data)
    # rotations 2.. (one-prime digits) in one pass each; the first publishes the source's transform
    assert launched.count("ntt_forward_chunk_stages_key_inner_product") == len(keys) - 1
    assert launched.count("keyswitch_inner_product_many") == 1
    side, _, _ = gpu._side_streams(2)
    assert [stream.entered for stream in side] == [1, 1]  # rotations 1 and 2 (0 and 3: the caller's stream)


def test_bsgs_giant_steps_on_side_streams_compute_the_numpy_sum(emulated, monkeypatch):
    """A BSGS matvec's giant steps (each its own product, ModUp and key switch) through the CuPy
    backend's host code on three streams: the NumPy engine's sum, bit for bit."""
    from fhelium_cupy.ckks import CkksEngine, encode_bsgs_diagonals, required_rotation_steps_bsgs

    engine = CkksEngine("test-n4096-scale40", insecure=True)
    engine.generate_keys()
    rng = np.random.default_rng(10)
    n, b = 16, 4
    ct = engine.encrypt_message(np.resize(rng.uniform(-1, 1, n), engine.num_slots))
    keys = engine.rotation_keys(required_rotation_steps_bsgs(n))
    stacked = engine.rotate_hoisted_batch(ct, [keys[k] for k in range(1, b)], output_domain="ntt")
    diagonals = encode_bsgs_diagonals(engine, rng.uniform(-1, 1, (n, n)))
    giant = [keys[i * b] for i in range(1, n // b)]
    want = engine._giant_step_sum(stacked, diagonals, giant)
    gpu, _ = emulated(engine.context, branch_streams=3)
    monkeypatch.setattr(engine, "backend", gpu)
    monkeypatch.setattr(gpu, "device_id", None)  # (the emulation's arrays are host arrays)
    got = engine._giant_step_sum(stacked, diagonals, giant)
    assert np.array_equal(got.data, want.data)
    side, _, _ = gpu._side_streams(2)
    assert [stream.entered for stream in side] == [1, 1]  # terms 1 and 2 (0 and 3: the caller's stream)


def test_branch_streams_default_to_the_define_and_are_checked_before_any_task(emulated):
    """branch_streams: the FHE_BRANCH_STREAMS define when not given (else 8); an int >= 1 at
    construction and whenever it is set, so no run_independent call and no task runs on a
    bad count."""
    ctx = gpu_cases.context("n4096")
    assert emulated(ctx)[0].branch_streams == 8
    options = {"kernel_options": kernels.KernelOptions(extra=("-DFHE_BRANCH_STREAMS=5",))}
    assert emulated(ctx, **options)[0].branch_streams == 5
    assert emulated(ctx, branch_streams=2, **options)[0].branch_streams == 2
    for bad in (0, -1, 2.0, True, "4"):
        with pytest.raises(ValueError, match="branch_streams"):
            emulated(ctx, branch_streams=bad)
    gpu, _ = emulated(ctx)
    ran: list[int] = []
    with pytest.raises(ValueError, match="branch_streams"):
        gpu.branch_streams = 0  # refused where it is set: no call ever reads an invalid count
    assert ran == [] and not _Stream.current
    assert gpu.branch_streams == 8
    gpu.run_independent([lambda: ran.append(0), lambda: ran.append(1)])  # on the unchanged count
    assert ran == [0, 1] and not _Stream.current


def test_weighted_batch_sums_read_strided_weights_in_place(emulated):
    """mul_montgomery_sum with contiguous weights and with weights that are the leading rows of
    a taller array (a QP plaintext's Q limbs): NumPy's values, and the view is not copied."""
    ctx = gpu_cases.context("n4096")
    gpu, ref = emulated(ctx)
    for name in ("mul_montgomery_sum", "mul_montgomery_sum_strided_weights"):
        assert gpu_cases.run_case(name, gpu, ref, "n4096") is None, name
    rows = tuple(range(ctx.q_count))
    tall = gpu_cases.rand(ctx, rows + (0,), (3,), np.random.default_rng(12))
    view = tall[:, :len(rows)]
    b, plane = gpu._check_entries(view, rows, "test")
    assert b is view and plane == (len(rows) + 1) * ctx.ring_degree
