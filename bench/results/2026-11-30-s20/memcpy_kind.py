"""Host cost of one ``cudaMemcpyAsync`` (CuPy's ``runtime.memcpyAsync``) by kind, Default (4:
what the input copy plan issues) against DeviceToDevice (3), for 256 bytes and 2 MiB (example
18's ciphertext), issued back to back (``time_host_pipelined``, drained every 8, 1024 runs
after 64 warmups, three rounds), and ``cupy.copyto`` of the same arrays beside them.

Usage, from the repository root (pinned, as the other probes):
    taskset -c "$(python3 bench/quiet_cpu.py --count 2)" python3 bench/results/2026-11-30-s20/memcpy_kind.py
(It ran from a snapshot with the tree under ``new/``; the measurement is the same.)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import cupy  # noqa: E402

from bench._timing import host_loop_us, time_host_pipelined  # noqa: E402


def main() -> None:
    rt = cupy.cuda.runtime
    s = cupy.cuda.Stream(non_blocking=True)
    for nbytes in (256, 2 << 20):
        a = cupy.zeros(nbytes // 8, dtype=cupy.uint64)
        b = cupy.zeros_like(a)
        for rnd in range(3):
            for kind in (4, 3):
                r = time_host_pipelined(lambda: rt.memcpyAsync(b.data.ptr, a.data.ptr, nbytes, kind, s.ptr),  # noqa: B023
                                        runs=1024, warmup=64, drain=s.synchronize, every=8)
                print(f"bytes {nbytes} kind {kind} round {rnd}: {r['median_us']:.2f} us", flush=True)
        r = time_host_pipelined(lambda: cupy.copyto(b, a), runs=1024, warmup=64,  # noqa: B023
                                drain=cupy.cuda.get_current_stream().synchronize, every=8)
        print(f"bytes {nbytes} cupy.copyto: {r['median_us']:.2f} us")
    print("host loop", host_loop_us())


if __name__ == "__main__":
    main()
