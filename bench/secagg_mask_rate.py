#!/usr/bin/env python3
"""Throughput of the mask expansion SecAgg+ uses (crypto/secagg/mask_prg.cc:
libsodium's crypto_stream_chacha20_ietf_xor_ic over the mask buffer), on one core, for
docs/scale.md. Calls the same libsodium function through ctypes; memcpy of the same buffer
runs beside it as the baseline.

Usage: python3 bench/secagg_mask_rate.py [MB=40] [REPS=5]
"""
import ctypes
import ctypes.util
import sys
import time

mb = int(sys.argv[1]) if len(sys.argv) > 1 else 40
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
sodium = ctypes.CDLL(ctypes.util.find_library("sodium") or "libsodium.so.23")
libc = ctypes.CDLL(ctypes.util.find_library("c"))
assert sodium.sodium_init() >= 0
n = mb * 1000 * 1000
buf = ctypes.create_string_buffer(n)
dst = ctypes.create_string_buffer(n)
key = ctypes.create_string_buffer(32)
nonce = ctypes.create_string_buffer(12)
xor_ic = sodium.crypto_stream_chacha20_ietf_xor_ic
xor_ic.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_void_p,
                   ctypes.c_uint32, ctypes.c_void_p]
libc.memcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]


def best(fn):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


chacha = best(lambda: xor_ic(buf, buf, n, nonce, 0, key))
copy = best(lambda: libc.memcpy(dst, buf, n))
print(f"chacha20 mask expansion: {n / chacha / 1e9:.3f} GB/s ({chacha * 1e3:.1f} ms per {mb} MB); "
      f"memcpy {n / copy / 1e9:.3f} GB/s; ratio {copy / chacha:.3f}")
